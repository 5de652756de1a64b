//! Memory under clients that stop reading: the release `weft` server as its own process, and
//! (1) a client on a socket with a tiny receive buffer that asks for a turn streaming 210 MB
//! and never reads; (2) a client that sends 400 unknown commands of 500 KB each and never
//! reads the errors. Prints `peer,metric,value,unit` lines: the server's peak RSS above its
//! idle RSS in each case, and whether the streamed turn still finished (detached) and was
//! saved.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::SinkExt;
use serde_json::json;
use tokio::net::TcpSocket;
use tokio_tungstenite::tungstenite::Message;

#[derive(Parser)]
#[command(about = "Weft memory with clients that stop reading")]
struct Args {
    #[arg(long, default_value = "target/release/weft")]
    server_bin: PathBuf,
    /// Megabytes the model tries to stream in one answer.
    #[arg(long, default_value_t = 210)]
    megabytes: u64,
    #[arg(long, default_value = "sqlite")]
    db: String,
}

fn fail(message: &str) -> ! {
    eprintln!("stall: {message}");
    std::process::exit(1);
}

async fn stalled(addr: &str) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let socket = TcpSocket::new_v4().unwrap_or_else(|e| fail(&e.to_string()));
    socket
        .set_recv_buffer_size(4096)
        .unwrap_or_else(|e| fail(&e.to_string()));
    let addr = addr.parse().unwrap_or_else(|_| fail("bad address"));
    let stream = socket
        .connect(addr)
        .await
        .unwrap_or_else(|e| fail(&e.to_string()));
    let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/ws"), stream)
        .await
        .unwrap_or_else(|e| fail(&e.to_string()));
    ws
}

/// Sample the server's RSS until `done` says so (or the deadline); returns the peak in KiB.
async fn peak_rss_while(pid: u32, deadline: Duration, mut done: impl AsyncFnMut() -> bool) -> u64 {
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < deadline {
        let (_, now) = weft_bench::rss_kib_of(&pid.to_string());
        peak = peak.max(now);
        if done().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    peak
}

async fn saved_status(server: &weft_bench::server::ServerProcess, thread: &str) -> Option<String> {
    let messages = server.get(&format!("/threads/{thread}/messages")).await?;
    let status = messages.split("\"status\":\"").nth(1)?.split('"').next()?;
    (status != "running").then(|| status.to_owned())
}

async fn threads(server: &weft_bench::server::ServerProcess) -> Vec<String> {
    server
        .get("/threads")
        .await
        .unwrap_or_default()
        .split("\"id\":\"")
        .skip(1)
        .filter_map(|s| s.split('"').next().map(str::to_owned))
        .collect()
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    // The model tries to stream `megabytes` MB in one answer; the server runs on its
    // defaults (1 MiB of output per turn, 16 turns at once per user, 8 MiB per socket queue).
    let chunks = args.megabytes * 1000;
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["x".repeat(1000)], "repeat_chunks": chunks}]}]});
    let server = weft_bench::server::start(&args.server_bin, &script, "", &args.db)
        .await
        .unwrap_or_else(|e| fail(&e));
    let peer = format!("weft-stall-{}", args.db);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, idle) = weft_bench::rss_kib_of(&server.pid.to_string());
    println!("{peer},idle_server_rss,{:.1},MB", idle as f64 / 1024.0);

    // 1. One huge answer to a client that never reads.
    let mut ws = stalled(&server.addr).await;
    let frame = json!({"command": "chat_message", "data": {"content": "stream a lot"}});
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .unwrap_or_else(|e| fail(&e.to_string()));
    let mut status = None;
    let peak = peak_rss_while(server.pid, Duration::from_secs(120), async || {
        let Some(thread) = threads(&server).await.into_iter().next() else {
            return false;
        };
        status = saved_status(&server, &thread).await;
        status.is_some()
    })
    .await;
    println!(
        "{peer},one_{}mb_answer_stalled_peak_rss_above_idle,{:.1},MB",
        args.megabytes,
        peak.saturating_sub(idle) as f64 / 1024.0
    );
    println!(
        "{peer},one_{}mb_answer_stalled_saved_as,{},status",
        args.megabytes,
        status.unwrap_or_else(|| "never".into())
    );
    drop(ws);

    // 2. As many such turns as one user may run at once (16), all to one stalled socket:
    // 16 MiB of frames against its 8 MiB queue, so the server drops the socket and the turns
    // finish detached.
    let mut ws = stalled(&server.addr).await;
    let (_, before) = weft_bench::rss_kib_of(&server.pid.to_string());
    for i in 0..16 {
        let frame = json!({"command": "chat_message", "data": {"content": format!("stream {i}")}});
        if ws
            .send(Message::Text(frame.to_string().into()))
            .await
            .is_err()
        {
            break;
        }
    }
    let started = Instant::now();
    let mut finished = 0;
    let peak = peak_rss_while(server.pid, Duration::from_secs(120), async || {
        let all = threads(&server).await;
        let mut done = 0usize;
        for t in &all {
            if saved_status(&server, t).await.is_some() {
                done += 1;
            }
        }
        finished = done.saturating_sub(1);
        all.len() >= 17 && done >= 17
    })
    .await;
    println!(
        "{peer},sixteen_answers_one_stalled_socket_peak_rss_above_before,{:.1},MB",
        peak.saturating_sub(before) as f64 / 1024.0
    );
    println!("{peer},sixteen_answers_finished_detached,{finished},turns");
    println!(
        "{peer},sixteen_answers_seconds,{:.1},s",
        started.elapsed().as_secs_f64()
    );
    drop(ws);

    // 3. Huge unknown commands, errors never read.
    let mut ws = stalled(&server.addr).await;
    let (_, before) = weft_bench::rss_kib_of(&server.pid.to_string());
    let junk = json!({"command": "x".repeat(500_000)}).to_string();
    let mut sent = 0;
    for _ in 0..400 {
        if ws.send(Message::Text(junk.clone().into())).await.is_err() {
            break;
        }
        sent += 1;
    }
    let peak = peak_rss_while(server.pid, Duration::from_secs(3), async || false).await;
    println!("{peer},unknown_commands_sent,{sent},frames");
    println!(
        "{peer},unknown_commands_peak_rss_above_before,{:.1},MB",
        peak.saturating_sub(before) as f64 / 1024.0
    );
    drop(ws);
    server.stop().await;
}
