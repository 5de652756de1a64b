//! Websocket load generator: starts `weft serve` (release build) as its own process with a
//! scripted model, drives it over real sockets and prints `peer,metric,value,unit` lines.
//!
//! `--workload w1` (the default): 10 rounds × 4 parallel `memory_write` calls, then 20 text
//! chunks, measured three ways:
//!
//! * M idle connections (first, on the fresh server) → server memory per idle connection;
//! * sequential turns on one socket → per-turn and per-round overhead;
//! * N concurrent turns (one socket each) → turns/s, p50/p99 time to first frame and to first
//!   text chunk, the server's peak RSS.
//!
//! `--workload w2`: realistic streaming ([`w2`]): N concurrent turns (default 10,000) each
//! streaming 400 chunks 20 ms apart after one round of two calls; memory per running turn, CPU
//! per chunk, overrun. The generator raises its open-file limit to the hard limit, and the
//! server it starts inherits it.
//!
//! `--replicas N` runs N replicas on one PostgreSQL database with a `nats-server`: the
//! concurrent sockets are spread over them (CPU and memory summed), and turns run by one are
//! followed from another, counting what crosses the bus per frame a follower gets.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

mod w2;

#[derive(Parser)]
#[command(about = "Weft websocket load generator (W1 turns against the scripted provider)")]
struct Args {
    /// `w1` (bursts of instant tool rounds) or `w2` (long streaming turns at model speed).
    #[arg(long, default_value = "w1")]
    workload: String,
    /// W2: chunks per turn, and milliseconds between them.
    #[arg(long, default_value_t = 400)]
    chunks: usize,
    #[arg(long, default_value_t = 20)]
    chunk_ms: u64,
    /// The weft binary to run.
    #[arg(long, default_value = "target/release/weft")]
    server_bin: PathBuf,
    /// Concurrent turns, one socket each (default: 1,000 for W1, 10,000 for W2).
    #[arg(long)]
    concurrent: Option<usize>,
    /// Idle connections for the per-connection memory figure.
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    /// Sequential turns timed on one socket (after 20 warm-up turns).
    #[arg(long, default_value_t = 100)]
    sequential: usize,
    /// Database: `postgres` (a fresh database on the local server) or `sqlite`.
    #[arg(long, default_value = "postgres")]
    db: String,
    /// Replicas on one PostgreSQL database with a `nats-server` of their own; the concurrent
    /// sockets are spread over them.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// With replicas: turns run by the first and followed (`resume_chat`) from the second.
    #[arg(long, default_value_t = 100)]
    followed: usize,
    /// Run the replica(s) with a `nats-server` even when there is one (what the bus costs).
    #[arg(long)]
    bus: bool,
    /// The concurrent turns' messages spread evenly over this many milliseconds (arrivals at
    /// a steady rate, as a population of users sends them) instead of all sent at once; the
    /// figures are then printed under `<peer>-spread<ms>ms`.
    #[arg(long, default_value_t = 0)]
    spread_ms: u64,
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
    // Followed turns wait 100 ms for their first response: the follower joins a live turn.
    let mut slow = steps.clone();
    slow[0]["delay_ms"] = json!(100);
    json!({"conversations": [{"match": "Follow", "steps": slow}, {"match": "*", "steps": steps}]})
}

fn rss_of(pid: u32) -> (u64, u64) {
    weft_bench::rss_kib_of(&pid.to_string())
}

async fn connect(addr: &str) -> Ws {
    let mut tries = 0;
    loop {
        match tokio_tungstenite::connect_async_with_config(
            format!("ws://{addr}/ws"),
            Some(weft_bench::client_config()),
            true,
        )
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

/// The servers this run started: `fail` exits without running their destructors, so it stops
/// them itself rather than leave them running (and loading the next run).
/// Their logs are left in place, and named.
static SERVERS: std::sync::Mutex<Vec<(u32, PathBuf)>> = std::sync::Mutex::new(Vec::new());

fn fail(message: &str) -> ! {
    eprintln!("ws_load: {message}");
    for (pid, log) in SERVERS
        .lock()
        .map(|servers| servers.clone())
        .unwrap_or_default()
    {
        eprintln!("ws_load: the log of server {pid}: {}", log.display());
        if let Ok(pid) = i32::try_from(pid) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
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

/// What one turn took, from the moment its message was sent.
struct Timed {
    first_frame: Duration,
    first_chunk: Duration,
    /// The last text chunk (before the turn's end was saved and `done` came).
    last_chunk: Duration,
    total: Duration,
    /// The root-level text streamed.
    text: String,
    /// Text chunk frames received (at every depth).
    chunk_frames: usize,
}

/// The longest a turn may go without a frame before the run fails.
const SILENCE_LIMIT: Duration = Duration::from_secs(120);

/// One turn on `ws`, timed.
async fn turn(ws: &mut Ws) -> Timed {
    let frame = json!({"command": "chat_message", "data": {"content": "Run workload W1."}});
    let started = Instant::now();
    if ws
        .send(Message::Text(frame.to_string().into()))
        .await
        .is_err()
    {
        fail("send failed");
    }
    let (mut first_frame, mut first_chunk, mut last_chunk) = (None, None, None);
    let mut text = String::new();
    let mut chunk_frames = 0;
    // One timer for the turn, not one registered and removed for every frame: when it fires
    // after a frame came, it is moved to that frame's limit.
    let mut last_frame = tokio::time::Instant::now();
    let deadline = tokio::time::sleep_until(last_frame + SILENCE_LIMIT);
    tokio::pin!(deadline);
    loop {
        let next = tokio::select! {
            biased;
            next = ws.next() => next,
            () = &mut deadline => {
                let limit = last_frame + SILENCE_LIMIT;
                if tokio::time::Instant::now() < limit {
                    deadline.as_mut().reset(limit);
                    continue;
                }
                None
            }
        };
        let Some(Ok(message)) = next else {
            fail("the server stopped answering")
        };
        last_frame = tokio::time::Instant::now();
        let Message::Text(body) = message else {
            continue;
        };
        // Only the fields the generator needs, borrowed: its own CPU stays small.
        let frame: Frame<'_> = serde_json::from_str(&body).unwrap_or_default();
        first_frame.get_or_insert_with(|| started.elapsed());
        match frame.kind {
            "chunk" if frame.done => break,
            "chunk" => {
                let now = started.elapsed();
                chunk_frames += 1;
                first_chunk.get_or_insert(now);
                last_chunk = Some(now);
                if frame.depth == 0 {
                    text.push_str(&frame.content);
                }
            }
            "error" => fail(&format!("server error: {}", body.as_str())),
            _ => {}
        }
    }
    let total = started.elapsed();
    Timed {
        first_frame: first_frame.unwrap_or(total),
        first_chunk: first_chunk.unwrap_or(total),
        last_chunk: last_chunk.unwrap_or(total),
        total,
        text,
        chunk_frames,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// The server(s) under load: one process, or replicas sharing a database and a bus.
enum Target {
    One(weft_bench::server::ServerProcess),
    Cluster(weft_bench::server::Cluster),
}

impl Target {
    fn servers(&self) -> Vec<&weft_bench::server::ServerProcess> {
        match self {
            Target::One(server) => vec![server],
            Target::Cluster(cluster) => cluster.replicas.iter().collect(),
        }
    }

    fn cpu_seconds(&self) -> f64 {
        self.servers()
            .iter()
            .map(|s| weft_bench::cpu_seconds_of(&s.pid.to_string()))
            .sum()
    }

    /// Bytes the servers have written to files (SQLite's database and WAL; PostgreSQL's
    /// writes are its own processes').
    fn disk_write_bytes(&self) -> u64 {
        self.servers()
            .iter()
            .map(|s| weft_bench::disk_write_bytes_of(&s.pid.to_string()))
            .sum()
    }

    /// Summed over the servers: (peak RSS, current RSS), KiB.
    fn rss(&self) -> (u64, u64) {
        self.servers()
            .iter()
            .map(|s| rss_of(s.pid))
            .fold((0, 0), |(p, c), (sp, sc)| (p + sp, c + sc))
    }

    /// A counter summed over the servers' `/metrics`.
    async fn metric(&self, prefix: &str) -> f64 {
        let mut total = 0.0;
        for server in self.servers() {
            if let Some(body) = server.get("/metrics").await {
                total += body
                    .lines()
                    .filter(|l| l.starts_with(prefix))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum::<f64>();
            }
        }
        total
    }

    async fn stop(self) {
        match self {
            Target::One(server) => server.stop().await,
            Target::Cluster(cluster) => cluster.stop().await,
        }
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let files = w2::raise_file_limit();
    let w2 = match args.workload.as_str() {
        "w1" => false,
        "w2" => true,
        other => fail(&format!("no workload {other}: w1 or w2")),
    };
    let turns = args.concurrent.unwrap_or(if w2 { 10_000 } else { 1000 });
    if (turns as u64) + 1000 > files {
        fail(&format!(
            "{turns} sockets need a higher open-file limit than {files} (ulimit -n)"
        ));
    }
    let script = if w2 {
        w2::script(args.chunks, args.chunk_ms)
    } else {
        w1_script()
    };
    let target = if args.replicas > 1 || args.bus {
        if args.db != "postgres" {
            fail("--replicas and --bus need --db postgres");
        }
        Target::Cluster(
            weft_bench::server::start_cluster(
                &args.server_bin,
                &script,
                weft_bench::server::NO_USER_LIMITS,
                args.replicas.max(1),
            )
            .await
            .unwrap_or_else(|e| fail(&e)),
        )
    } else {
        Target::One(
            weft_bench::server::start(
                &args.server_bin,
                &script,
                weft_bench::server::NO_USER_LIMITS,
                &args.db,
            )
            .await
            .unwrap_or_else(|e| fail(&e)),
        )
    };
    if let Ok(mut servers) = SERVERS.lock() {
        servers.extend(target.servers().iter().map(|s| (s.pid, s.log.clone())));
    }
    let peer = match (args.replicas, args.bus) {
        (0 | 1, false) => format!("weft-ws-{}", args.db),
        (n, _) => format!(
            "weft-ws-{}-x{}{}",
            args.db,
            n.max(1),
            if args.bus { "-bus" } else { "" }
        ),
    };
    let spread = Duration::from_millis(args.spread_ms);
    let peer = match args.spread_ms {
        0 => peer,
        ms => format!("{peer}-spread{ms}ms"),
    };
    if w2 {
        w2::run(&target, &peer, turns, spread, (args.chunks, args.chunk_ms)).await;
        target.stop().await;
        return;
    }
    if args.idle > 0 {
        idle(&target, &peer, args.idle).await;
    }
    sequential(&target, &peer, args.sequential).await;
    concurrent(&target, &peer, turns, spread).await;
    if args.replicas > 1 && args.followed > 0 {
        followed(&target, &peer, args.followed).await;
    }
    let commits = target.metric("weft_store_commits_total").await;
    let ops = target.metric("weft_store_batch_ops_sum").await;
    let seconds = target.metric("weft_store_commit_seconds_sum").await;
    println!("{peer},commits_total,{commits},commits");
    println!("{peer},ops_per_commit,{:.1},ops", ops / commits.max(1.0));
    println!(
        "{peer},commit_ms_mean,{:.2},ms",
        seconds * 1000.0 / commits.max(1.0)
    );
    target.stop().await;
}

fn expected_text() -> String {
    (0..20).map(|j| format!("w{j:03} ")).collect()
}

/// Idle connections, measured first on a fresh server so freed memory is not reused.
async fn idle(target: &Target, peer: &str, count: usize) {
    let server = target.servers()[0];
    let (_, before) = rss_of(server.pid);
    let mut idle = Vec::with_capacity(count);
    for _ in 0..count {
        idle.push(connect(&server.addr).await);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, after) = rss_of(server.pid);
    println!(
        "{peer},idle{count}_server_rss,{:.1},MB",
        after as f64 / 1024.0
    );
    println!(
        "{peer},idle_kib_per_connection,{:.2},KB",
        after.saturating_sub(before) as f64 / count.max(1) as f64
    );
    drop(idle);
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Sequential turns on one socket (to the first server), after 20 warm-up turns.
async fn sequential(target: &Target, peer: &str, count: usize) {
    let expected = expected_text();
    let mut ws = connect(&target.servers()[0].addr).await;
    for _ in 0..20 {
        turn(&mut ws).await;
    }
    let started = Instant::now();
    for _ in 0..count {
        let text = turn(&mut ws).await.text;
        if !text.ends_with(&expected) {
            fail(&format!("unexpected text {text:?}"));
        }
    }
    let per_turn = started.elapsed().as_secs_f64() / count.max(1) as f64;
    println!("{peer},sequential_turn,{:.3},ms", per_turn * 1000.0);
    println!(
        "{peer},overhead_per_round,{:.1},us",
        per_turn * 1e6 / K as f64
    );
}

/// Concurrent turns, one socket each (spread over the servers in turn), all sent together or
/// spread evenly over `spread`.
async fn concurrent(target: &Target, peer: &str, n: usize, spread: Duration) {
    let expected = expected_text();
    let (_, rss_before) = target.rss();
    let sockets = connect_all(target, n).await;
    let server_cpu_before = target.cpu_seconds();
    let disk_before = target.disk_write_bytes();
    let own_cpu_before = weft_bench::cpu_seconds_of("self");
    let started = Instant::now();
    let tasks = together(sockets, spread);
    let mut first_frames = Vec::new();
    let mut first_chunks = Vec::new();
    let mut keep = Vec::new();
    for (timed, ws) in tasks.await {
        if !timed.text.ends_with(&expected) {
            fail("a concurrent turn returned the wrong text");
        }
        first_frames.push(timed.first_frame);
        first_chunks.push(timed.first_chunk);
        keep.push(ws);
    }
    let wall = started.elapsed().as_secs_f64();
    let server_cpu = target.cpu_seconds() - server_cpu_before;
    let disk = target.disk_write_bytes().saturating_sub(disk_before);
    let own_cpu = weft_bench::cpu_seconds_of("self") - own_cpu_before;
    let (peak, _) = target.rss();
    first_frames.sort();
    first_chunks.sort();
    println!("{peer},conc{n}_wall,{wall:.3},s");
    println!("{peer},conc{n}_turns_per_s,{:.1},turns/s", n as f64 / wall);
    for (name, sorted) in [
        ("first_frame", &first_frames),
        ("first_chunk", &first_chunks),
    ] {
        println!(
            "{peer},conc{n}_{name}_p50,{:.2},ms",
            percentile(sorted, 0.5)
        );
        println!(
            "{peer},conc{n}_{name}_p99,{:.2},ms",
            percentile(sorted, 0.99)
        );
    }
    println!(
        "{peer},conc{n}_server_cpu_per_turn,{:.0},us",
        server_cpu * 1e6 / n as f64
    );
    println!(
        "{peer},conc{n}_server_disk_write_per_turn,{:.1},KB",
        disk as f64 / 1024.0 / n as f64
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
}

/// `n` sockets, spread over the servers in turn.
async fn connect_all(target: &Target, n: usize) -> Vec<Ws> {
    let servers = target.servers();
    let mut sockets = Vec::with_capacity(n);
    for i in 0..n {
        sockets.push(connect(&servers[i % servers.len()].addr).await);
    }
    sockets
}

/// One turn on each socket, all sent together (or the i-th of n `spread × i / n` after the
/// first): each turn's result, timed from its own message, with its socket (kept open until
/// the caller drops it).
async fn together(sockets: Vec<Ws>, spread: Duration) -> Vec<(Timed, Ws)> {
    let n = sockets.len().max(1);
    let gate = Arc::new(tokio::sync::Barrier::new(sockets.len()));
    let tasks: Vec<_> = sockets
        .into_iter()
        .enumerate()
        .map(|(i, mut ws)| {
            let gate = gate.clone();
            let offset = spread.mul_f64(i as f64 / n as f64);
            tokio::spawn(async move {
                gate.wait().await;
                if !offset.is_zero() {
                    tokio::time::sleep(offset).await;
                }
                let result = turn(&mut ws).await;
                (result, ws)
            })
        })
        .collect();
    let mut done = Vec::with_capacity(tasks.len());
    for task in tasks {
        done.push(task.await.unwrap_or_else(|e| fail(&e.to_string())));
    }
    done
}

/// Turns run by the first replica and followed from the second (`resume_chat` through it):
/// frames the follower got, and what crossed the bus for them.
async fn followed(target: &Target, peer: &str, count: usize) {
    let servers = target.servers();
    let mut owner = connect(&servers[0].addr).await;
    let mut follower = connect(&servers[1].addr).await;
    let published_before = target.metric("weft_bus_published_total").await;
    let mut frames = 0usize;
    for _ in 0..count {
        let chat = json!({"command": "chat_message", "data": {"content": "Follow workload W1."}});
        send(&mut owner, &chat).await;
        let thread = loop {
            let body = next_text(&mut owner).await;
            let frame: Value = serde_json::from_str(&body).unwrap_or_default();
            if frame["type"] == "turn_started" {
                break frame["thread_id"].as_str().unwrap_or_default().to_owned();
            }
        };
        let resume =
            json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}});
        send(&mut follower, &resume).await;
        loop {
            let body = next_text(&mut follower).await;
            frames += 1;
            let frame: Frame<'_> = serde_json::from_str(&body).unwrap_or_default();
            if frame.kind == "error" {
                fail(&format!("follower: {body}"));
            }
            if frame.kind == "chunk" && frame.done && frame.depth == 0 {
                break;
            }
        }
        loop {
            let body = next_text(&mut owner).await;
            let frame: Frame<'_> = serde_json::from_str(&body).unwrap_or_default();
            if frame.kind == "chunk" && frame.done && frame.depth == 0 {
                break;
            }
        }
    }
    let published = target.metric("weft_bus_published_total").await - published_before;
    println!(
        "{peer},followed_frames_per_turn,{:.1},frames",
        frames as f64 / count as f64
    );
    println!(
        "{peer},bus_publishes_per_followed_turn,{:.1},messages",
        published / count as f64
    );
    println!(
        "{peer},bus_publishes_per_follower_frame,{:.2},messages",
        published / frames.max(1) as f64
    );
}

async fn send(ws: &mut Ws, frame: &Value) {
    if ws
        .send(Message::Text(frame.to_string().into()))
        .await
        .is_err()
    {
        fail("send failed");
    }
}

async fn next_text(ws: &mut Ws) -> String {
    loop {
        match tokio::time::timeout(Duration::from_secs(60), ws.next()).await {
            Ok(Some(Ok(Message::Text(body)))) => return body.to_string(),
            Ok(Some(Ok(_))) => continue,
            _ => fail("the server stopped answering"),
        }
    }
}
