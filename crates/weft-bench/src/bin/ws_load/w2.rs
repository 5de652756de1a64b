//! Workload W2, realistic streaming: N concurrent turns over N sockets, each one tool round
//! with two parallel calls, then 400 chunks of 4 characters streamed 20 ms apart (8 s, model
//! speed). What it measures is what a waiting turn costs: server memory per running turn, CPU
//! per delivered chunk, and how far the streams fall behind the scripted pace.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{connect_all, fail, percentile, together, Target};

/// A chunk's text (4 characters).
const CHUNK: &str = "w2x ";

/// The scripted model of W2: `chunks` chunks `chunk_ms` apart after a round of two calls.
pub fn script(chunks: usize, chunk_ms: u64) -> Value {
    let calls: Vec<Value> = (0..2)
        .map(|j| json!({"id": format!("call_{j}"), "name": "memory_write", "arguments": {"key": format!("k{j}"), "value": "v"}}))
        .collect();
    json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": calls, "usage": {"input_tokens": 10, "output_tokens": 10}},
        {"chunks": vec![CHUNK; chunks], "chunk_delay_ms": chunk_ms,
         "usage": {"input_tokens": 10, "output_tokens": 400}, "repeat": true}
    ]}]})
}

/// Runs `n` W2 turns on `target`, at once or spread evenly over `spread`, each `chunks`
/// chunks `chunk_ms` apart, and prints the W2 figures.
pub async fn run(
    target: &Target,
    peer: &str,
    n: usize,
    spread: Duration,
    (chunks, chunk_ms): (usize, u64),
) {
    let (_, rss_before) = target.rss();
    let commits_before = target.metric("weft_store_commits_total").await;
    let writing_before = target.metric("weft_store_commit_seconds_sum").await;
    let sockets = connect_all(target, n).await;
    let server_cpu_before = target.cpu_seconds();
    let own_cpu_before = weft_bench::cpu_seconds_of("self");
    let started = Instant::now();
    let tasks = together(sockets, spread);
    let scripted = Duration::from_millis(chunk_ms * chunks as u64);
    // From a turn's first chunk to its last, as the model paced them.
    let paced = Duration::from_millis(chunk_ms * (chunks as u64).saturating_sub(1));
    let expected = CHUNK.repeat(chunks);
    let (mut first_chunks, mut overruns, mut keep) = (Vec::new(), Vec::new(), Vec::new());
    let (mut end_waits, mut stream_lags) = (Vec::new(), Vec::new());
    let (mut delivered, mut frames) = (0usize, 0usize);
    for (timed, ws) in tasks.await {
        if timed.text != expected {
            fail(&format!(
                "a W2 turn streamed {} characters, not {}",
                timed.text.len(),
                expected.len()
            ));
        }
        delivered += timed.text.len() / CHUNK.len();
        frames += timed.chunk_frames;
        first_chunks.push(timed.first_chunk);
        overruns.push(timed.total.saturating_sub(scripted));
        end_waits.push(timed.total - timed.last_chunk);
        stream_lags.push((timed.last_chunk - timed.first_chunk).saturating_sub(paced));
        keep.push(ws);
    }
    let wall = started.elapsed().as_secs_f64();
    let server_cpu = target.cpu_seconds() - server_cpu_before;
    let own_cpu = weft_bench::cpu_seconds_of("self") - own_cpu_before;
    let (peak, _) = target.rss();
    let commits = target.metric("weft_store_commits_total").await - commits_before;
    let writing = target.metric("weft_store_commit_seconds_sum").await - writing_before;
    first_chunks.sort();
    overruns.sort();
    end_waits.sort();
    stream_lags.sort();
    println!("{peer},w2_turns,{n},turns");
    println!("{peer},w2_wall,{wall:.2},s");
    println!(
        "{peer},w2_kib_per_turn,{:.1},KB",
        peak.saturating_sub(rss_before) as f64 / n as f64
    );
    println!("{peer},w2_server_peak_rss,{:.1},MB", peak as f64 / 1024.0);
    println!(
        "{peer},w2_cpu_us_per_chunk,{:.2},us",
        server_cpu * 1e6 / delivered.max(1) as f64
    );
    println!(
        "{peer},w2_load_generator_cpu_us_per_chunk,{:.2},us",
        own_cpu * 1e6 / delivered.max(1) as f64
    );
    // Above 1, the server fell behind its model and sent what had arrived together.
    println!(
        "{peer},w2_chunks_per_frame,{:.2},chunks",
        delivered as f64 / frames.max(1) as f64
    );
    println!("{peer},w2_overrun_p50,{:.0},ms", percentile(&overruns, 0.5));
    println!(
        "{peer},w2_overrun_p99,{:.0},ms",
        percentile(&overruns, 0.99)
    );
    println!(
        "{peer},w2_first_chunk_p50,{:.0},ms",
        percentile(&first_chunks, 0.5)
    );
    println!(
        "{peer},w2_first_chunk_p99,{:.0},ms",
        percentile(&first_chunks, 0.99)
    );
    // How far the stream itself fell behind the model, apart from the start and the end.
    println!(
        "{peer},w2_stream_lag_p50,{:.0},ms",
        percentile(&stream_lags, 0.5)
    );
    println!(
        "{peer},w2_stream_lag_p99,{:.0},ms",
        percentile(&stream_lags, 0.99)
    );
    println!(
        "{peer},w2_end_wait_p50,{:.0},ms",
        percentile(&end_waits, 0.5)
    );
    println!(
        "{peer},w2_end_wait_p99,{:.0},ms",
        percentile(&end_waits, 0.99)
    );
    println!("{peer},w2_commits,{commits},commits");
    println!("{peer},w2_writer_busy,{writing:.2},s");
    drop(keep);
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Raises this process's open-file limit to its hard limit (a socket is a file; the server,
/// started from here, inherits it).
pub fn raise_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    limit.rlim_cur
}
