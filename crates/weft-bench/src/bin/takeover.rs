//! Takeover benchmark: two `weft serve` replicas (release build) on one PostgreSQL database
//! with a `nats-server`; N turns run on the first, each past a tool round and waiting on a slow
//! model call, when it is killed (`kill -9`). Prints `takeover,metric,value,unit` lines:
//!
//! * how long after the kill each turn's lease was taken by the survivor (which takes the turn
//!   up in the same step): p50, p99 and the last, against `lease_ms`;
//! * the survivor's CPU time from the kill until a second after it holds every turn;
//! * how many turns then run on the survivor (all of them, or the run fails).
//!
//! The turns wait on a 60 s model call once taken up, so the CPU figure is the takeover's.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use weft_bench::server::{start_cluster_with, NO_USER_LIMITS};
use weft_store::Store;

#[derive(Parser)]
#[command(about = "How fast a replica takes up the turns of one that died")]
struct Args {
    /// The weft binary to run.
    #[arg(long, default_value = "target/release/weft")]
    server_bin: PathBuf,
    /// Turns running on the replica that dies.
    #[arg(long, default_value_t = 100)]
    turns: usize,
    /// `[cluster] lease_ms` of both replicas.
    #[arg(long, default_value_t = 2000)]
    lease_ms: u64,
    /// `[cluster] heartbeat_ms` of both replicas.
    #[arg(long, default_value_t = 250)]
    heartbeat_ms: u64,
}

fn fail(message: &str) -> ! {
    eprintln!("takeover: {message}");
    std::process::exit(1);
}

/// A tool round, then a model call slow enough to be cut (and to keep the taken-up turn
/// waiting while the CPU is read).
fn script() -> Value {
    json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["working "], "tool_calls": [{"name": "memory_write", "arguments": {"key": "k", "value": "v"}}]},
        {"chunks": ["done"], "delay_ms": 60000}]}]})
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let cluster = format!(
        "lease_ms = {}\nheartbeat_ms = {}\n",
        args.lease_ms, args.heartbeat_ms
    );
    let mut cluster = start_cluster_with(&args.server_bin, &script(), NO_USER_LIMITS, &cluster, 2)
        .await
        .unwrap_or_else(|e| fail(&e));
    let store = Store::connect(cluster.database_url())
        .await
        .unwrap_or_else(|e| fail(&e.to_string()));
    let dying = cluster.replicas[0].addr.clone();
    let mut sockets = Vec::with_capacity(args.turns);
    for _ in 0..args.turns {
        let (ws, _) = tokio_tungstenite::connect_async_with_config(
            format!("ws://{dying}/ws"),
            Some(weft_bench::client_config()),
            false,
        )
        .await
        .unwrap_or_else(|e| fail(&format!("cannot connect: {e}")));
        sockets.push(ws);
    }
    let chat = json!({"command": "chat_message", "data": {"content": "work"}}).to_string();
    for ws in &mut sockets {
        ws.send(Message::text(chat.clone()))
            .await
            .unwrap_or_else(|e| fail(&e.to_string()));
    }
    // Every turn is past its tool round (its result on record) and in its slow model call.
    let mut threads = Vec::with_capacity(args.turns);
    for ws in &mut sockets {
        loop {
            let Some(Ok(Message::Text(body))) = ws.next().await else {
                fail("a socket closed before its turn's tool round");
            };
            let f: Value = serde_json::from_str(&body).unwrap_or_default();
            if f["type"] == "tool_call_update" && f["status"] == "end" {
                threads.push(f["thread_id"].as_str().unwrap_or_default().to_owned());
                break;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let survivor = cluster.replicas[1].pid.to_string();
    let cpu_before = weft_bench::cpu_seconds_of(&survivor);
    let killed = Instant::now();
    let _ = cluster.replicas[0].child.start_kill();
    drop(sockets);
    let mut taken: HashMap<String, Duration> = HashMap::new();
    while taken.len() < args.turns {
        if killed.elapsed() > Duration::from_millis(args.lease_ms) + Duration::from_secs(60) {
            fail(&format!(
                "only {} of {} turns were taken up",
                taken.len(),
                args.turns
            ));
        }
        let held = store.leases_of("r1").await.unwrap_or_default();
        let now = killed.elapsed();
        for id in held {
            taken.entry(id).or_insert(now);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // What follows each take (reading the record, starting the turn) has ended a second
    // later: the taken-up turns wait on their model call by then.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu = weft_bench::cpu_seconds_of(&survivor) - cpu_before;
    let mut running = 0;
    for thread in &threads {
        let owner = store.turn_owner(thread, weft_store::now_ms()).await;
        running += usize::from(matches!(owner, Ok(Some(owner)) if owner == "r1"));
    }
    if running != args.turns {
        fail(&format!(
            "{running} of {} turns run on the survivor",
            args.turns
        ));
    }
    let mut times: Vec<Duration> = taken.into_values().collect();
    times.sort();
    println!("takeover,turns,{},count", args.turns);
    println!("takeover,lease,{},ms", args.lease_ms);
    println!("takeover,taken_p50,{:.0},ms", percentile(&times, 0.5));
    println!("takeover,taken_p99,{:.0},ms", percentile(&times, 0.99));
    println!("takeover,taken_last,{:.0},ms", percentile(&times, 1.0));
    println!(
        "takeover,taken_last_past_lease,{:.0},ms",
        percentile(&times, 1.0) - args.lease_ms as f64
    );
    println!("takeover,survivor_cpu,{:.3},s", cpu);
    println!("takeover,running_on_survivor,{running},count");
    store.close().await;
    cluster.stop().await;
}
