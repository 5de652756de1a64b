//! Websocket load generator: starts `weft serve` (release build) as its own process with a
//! W1-shaped script (10 rounds × 4 parallel `memory_write` calls, then 20 text chunks), drives
//! it over real sockets and prints `peer,metric,value,unit` lines:
//!
//! * M idle connections (first, on the fresh server) → server memory per idle connection;
//! * sequential turns on one socket → per-turn and per-round overhead;
//! * N concurrent turns (one socket each) → turns/s, p50/p99 time to first frame and to first
//!   text chunk, the server's peak RSS.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

#[derive(Parser)]
#[command(about = "Weft websocket load generator (W1 turns against the scripted provider)")]
struct Args {
    /// The weft binary to run.
    #[arg(long, default_value = "target/release/weft")]
    server_bin: PathBuf,
    /// Concurrent turns, one socket each.
    #[arg(long, default_value_t = 1000)]
    concurrent: usize,
    /// Idle connections for the per-connection memory figure.
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    /// Sequential turns timed on one socket (after 20 warm-up turns).
    #[arg(long, default_value_t = 100)]
    sequential: usize,
    /// Database: `postgres` (a fresh database on the local server) or `sqlite`.
    #[arg(long, default_value = "postgres")]
    db: String,
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const K: usize = 10;
const P: usize = 4;

fn w1_script() -> Value {
    let mut steps: Vec<Value> = (0..K)
        .map(|r| {
            let calls: Vec<Value> = (0..P)
                .map(|j| json!({"id": format!("call_{r}_{j}"), "name": "memory_write", "arguments": {"key": format!("k{j}"), "value": "r".repeat(100)}}))
                .collect();
            json!({"tool_calls": calls, "usage": {"input_tokens": 10, "output_tokens": 10}})
        })
        .collect();
    let chunks: Vec<String> = (0..20).map(|j| format!("w{j:03} ")).collect();
    steps.push(json!({"chunks": chunks, "usage": {"input_tokens": 10, "output_tokens": 10}, "repeat": true}));
    // The first response carries one text chunk too, so "time to first chunk" measures the
    // first model response rather than the end of the turn.
    steps[0]["chunks"] = json!(["w1: "]);
    json!({"conversations": [{"match": "*", "steps": steps}]})
}

fn rss_of(pid: u32) -> (u64, u64) {
    weft_bench::rss_kib_of(&pid.to_string())
}

async fn connect(addr: &str) -> Ws {
    let mut tries = 0;
    loop {
        match tokio_tungstenite::connect_async_with_config(format!("ws://{addr}/ws"), None, true)
            .await
        {
            Ok((ws, _)) => return ws,
            Err(_) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => fail(&format!("cannot connect: {e}")),
        }
    }
}

fn fail(message: &str) -> ! {
    eprintln!("ws_load: {message}");
    std::process::exit(1);
}

#[derive(serde::Deserialize, Default)]
struct Frame<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: &'a str,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    depth: u32,
    #[serde(borrow, default)]
    content: std::borrow::Cow<'a, str>,
}

/// One W1 turn on `ws`: (time to first frame, time to first text chunk, whole turn, text).
async fn turn(ws: &mut Ws) -> (Duration, Duration, Duration, String) {
    let frame = json!({"command": "chat_message", "data": {"content": "Run workload W1."}});
    let started = Instant::now();
    if ws
        .send(Message::Text(frame.to_string().into()))
        .await
        .is_err()
    {
        fail("send failed");
    }
    let (mut first_frame, mut first_chunk) = (None, None);
    let mut text = String::new();
    loop {
        let message = match tokio::time::timeout(Duration::from_secs(120), ws.next()).await {
            Ok(Some(Ok(m))) => m,
            _ => fail("the server stopped answering"),
        };
        let Message::Text(body) = message else {
            continue;
        };
        // Only the fields the generator needs, borrowed: its own CPU stays small.
        let frame: Frame<'_> = serde_json::from_str(&body).unwrap_or_default();
        first_frame.get_or_insert_with(|| started.elapsed());
        match frame.kind {
            "chunk" if frame.done => break,
            "chunk" => {
                first_chunk.get_or_insert_with(|| started.elapsed());
                if frame.depth == 0 {
                    text.push_str(&frame.content);
                }
            }
            "error" => fail(&format!("server error: {}", body.as_str())),
            _ => {}
        }
    }
    let total = started.elapsed();
    (
        first_frame.unwrap_or(total),
        first_chunk.unwrap_or(total),
        total,
        text,
    )
}

/// The writer's commits, ops and commit time so far, from the server's `/metrics`.
async fn writer_figures(server: &weft_bench::server::ServerProcess) -> Option<(f64, f64, f64)> {
    let body = server.get("/metrics").await?;
    let sum = |prefix: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Some((
        sum("weft_store_commits_total"),
        sum("weft_store_batch_ops_sum"),
        sum("weft_store_commit_seconds_sum"),
    ))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let server = weft_bench::server::start(
        &args.server_bin,
        &w1_script(),
        weft_bench::server::NO_USER_LIMITS,
        &args.db,
    )
    .await
    .unwrap_or_else(|e| fail(&e));
    let (pid, addr) = (server.pid, server.addr.clone());
    let expected: String = (0..20).map(|j| format!("w{j:03} ")).collect::<String>();
    let peer = format!("weft-ws-{}", args.db);

    // 1. Idle connections, measured first on a fresh server so freed memory is not reused.
    let (_, idle_before) = rss_of(pid);
    let mut idle = Vec::with_capacity(args.idle);
    for _ in 0..args.idle {
        idle.push(connect(&addr).await);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, idle_after) = rss_of(pid);
    println!(
        "{peer},idle{}_server_rss,{:.1},MB",
        args.idle,
        idle_after as f64 / 1024.0
    );
    println!(
        "{peer},idle_kib_per_connection,{:.2},KB",
        idle_after.saturating_sub(idle_before) as f64 / args.idle.max(1) as f64
    );
    drop(idle);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 2. Sequential turns on one socket.
    let mut ws = connect(&addr).await;
    for _ in 0..20 {
        turn(&mut ws).await;
    }
    let started = Instant::now();
    for _ in 0..args.sequential {
        let (_, _, _, text) = turn(&mut ws).await;
        if !text.ends_with(&expected) {
            fail(&format!("unexpected text {text:?}"));
        }
    }
    let per_turn = started.elapsed().as_secs_f64() / args.sequential as f64;
    println!("{peer},sequential_turn,{:.3},ms", per_turn * 1000.0);
    println!(
        "{peer},overhead_per_round,{:.1},us",
        per_turn * 1e6 / K as f64
    );
    drop(ws);

    // 3. Concurrent turns, one socket each, all sent together.
    let (_, rss_before) = rss_of(pid);
    let mut sockets = Vec::with_capacity(args.concurrent);
    for _ in 0..args.concurrent {
        sockets.push(connect(&addr).await);
    }
    let gate = Arc::new(tokio::sync::Barrier::new(args.concurrent));
    let server_cpu_before = weft_bench::cpu_seconds_of(&pid.to_string());
    let own_cpu_before = weft_bench::cpu_seconds_of("self");
    let started = Instant::now();
    let tasks: Vec<_> = sockets
        .into_iter()
        .map(|mut ws| {
            let gate = gate.clone();
            tokio::spawn(async move {
                gate.wait().await;
                let result = turn(&mut ws).await;
                (result, ws)
            })
        })
        .collect();
    let mut first_frames = Vec::new();
    let mut first_chunks = Vec::new();
    let mut keep = Vec::new();
    for task in tasks {
        let ((ff, fc, _, text), ws) = task.await.unwrap_or_else(|e| fail(&e.to_string()));
        if !text.ends_with(&expected) {
            fail("a concurrent turn returned the wrong text");
        }
        first_frames.push(ff);
        first_chunks.push(fc);
        keep.push(ws);
    }
    let wall = started.elapsed().as_secs_f64();
    let server_cpu = weft_bench::cpu_seconds_of(&pid.to_string()) - server_cpu_before;
    let own_cpu = weft_bench::cpu_seconds_of("self") - own_cpu_before;
    let (peak, _) = rss_of(pid);
    first_frames.sort();
    first_chunks.sort();
    let n = args.concurrent;
    println!("{peer},conc{n}_wall,{wall:.3},s");
    println!("{peer},conc{n}_turns_per_s,{:.1},turns/s", n as f64 / wall);
    println!(
        "{peer},conc{n}_first_frame_p50,{:.2},ms",
        percentile(&first_frames, 0.5)
    );
    println!(
        "{peer},conc{n}_first_frame_p99,{:.2},ms",
        percentile(&first_frames, 0.99)
    );
    println!(
        "{peer},conc{n}_first_chunk_p50,{:.2},ms",
        percentile(&first_chunks, 0.5)
    );
    println!(
        "{peer},conc{n}_first_chunk_p99,{:.2},ms",
        percentile(&first_chunks, 0.99)
    );
    println!(
        "{peer},conc{n}_server_cpu_per_turn,{:.0},us",
        server_cpu * 1e6 / n as f64
    );
    println!(
        "{peer},conc{n}_load_generator_cpu_per_turn,{:.0},us",
        own_cpu * 1e6 / n as f64
    );
    println!(
        "{peer},conc{n}_server_peak_rss,{:.1},MB",
        peak as f64 / 1024.0
    );
    println!(
        "{peer},conc{n}_server_kib_per_turn,{:.1},KB",
        peak.saturating_sub(rss_before) as f64 / n as f64
    );
    drop(keep);
    tokio::time::sleep(Duration::from_millis(500)).await;
    if let Some((commits, ops, seconds)) = writer_figures(&server).await {
        println!("{peer},commits_total,{commits},commits");
        println!("{peer},ops_per_commit,{:.1},ops", ops / commits.max(1.0));
        println!(
            "{peer},commit_ms_mean,{:.2},ms",
            seconds * 1000.0 / commits.max(1.0)
        );
    }

    server.stop().await;
}
