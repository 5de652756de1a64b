//! Websocket load generator: starts `weft serve` (release build) as its own process with a
//! W1-shaped script (10 rounds × 4 parallel `memory_write` calls, then 20 text chunks), drives
//! it over real sockets and prints `peer,metric,value,unit` lines:
//!
//! * M idle connections (first, on the fresh server) → server memory per idle connection;
//! * sequential turns on one socket → per-turn and per-round overhead;
//! * N concurrent turns (one socket each) → turns/s, p50/p99 time to first frame and to first
//!   text chunk, the server's peak RSS.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use weft_store::testing::TestDb;

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
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        first_frame.get_or_insert_with(|| started.elapsed());
        match v["type"].as_str() {
            Some("chunk") if v["done"] == true => break,
            Some("chunk") => {
                first_chunk.get_or_insert_with(|| started.elapsed());
                if v["depth"] == 0 {
                    text.push_str(v["content"].as_str().unwrap_or_default());
                }
            }
            Some("error") => fail(&format!("server error: {v}")),
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

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().unwrap_or_else(|e| fail(&e.to_string()));
    let script = dir.path().join("w1.json");
    std::fs::write(&script, w1_script().to_string()).unwrap_or_else(|e| fail(&e.to_string()));
    let (db_url, pg) = if args.db == "sqlite" {
        (format!("sqlite://{}/bench.db", dir.path().display()), None)
    } else {
        let db = TestDb::postgres()
            .await
            .unwrap_or_else(|e| fail(&format!("PostgreSQL: {e}")));
        (db.url.clone(), Some(db))
    };
    let workspace = dir.path().join("workspace");

    let mut server = tokio::process::Command::new(&args.server_bin)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("WEFT_SCRIPT", &script)
        .env("WEFT_DATABASE_URL", &db_url)
        .env("WEFT_WORKSPACE", &workspace)
        .env("RUST_LOG", "warn,weft_server=info")
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| fail(&format!("cannot start {}: {e}", args.server_bin.display())));
    let pid = server.id().unwrap_or(0);
    let stdout = server
        .stdout
        .take()
        .unwrap_or_else(|| fail("no server stdout"));
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        match tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await {
            Ok(Ok(Some(line))) => {
                if let Some(at) = line.find("listening on ") {
                    // The log may be coloured: the address ends at whitespace or an escape.
                    let rest = &line[at + "listening on ".len()..];
                    break rest
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != '\u{1b}')
                        .collect::<String>();
                }
            }
            _ => fail("the server never said `listening on`"),
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
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
        "{peer},conc{n}_server_peak_rss,{:.1},MB",
        peak as f64 / 1024.0
    );
    println!(
        "{peer},conc{n}_server_kib_per_turn,{:.1},KB",
        peak.saturating_sub(rss_before) as f64 / n as f64
    );
    drop(keep);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let _ = server.kill().await;
    if let Some(db) = pg {
        let _ = db.drop_database().await;
    }
}
