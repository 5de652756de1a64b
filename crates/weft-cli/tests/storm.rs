//! Many long turns, a server `kill -9`ed at a random point, repeated: two replicas on
//! PostgreSQL and a real `nats-server` (the survivor takes the dead one's turns up), and one
//! process restarted on the same database (SQLite and PostgreSQL). Each turn streams six
//! rounds, writes a file in five of them, runs a subtask that writes one more, and a quarter of
//! the turns ask before each write (their clients allow it, a re-asked approval included).
//!
//! Every client reconnects wherever a server still runs and sends `resume_chat` with the last
//! `seq` it saw; every turn must end `completed` with its whole text, each round's text once
//! (what the client assembled equals the stored answer), `seq` only increasing, each call
//! settled once, each file written by at most one call, and every call that said it wrote its
//! file having written it.
//!
//! `WEFT_STORM_TURNS` (16) and `WEFT_STORM_REPS` (2) scale it; `WEFT_STORM_SEED` replays a run
//! (each run prints its seed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::sync::Mutex;
use support::{results_named, Db, Nats, Server, NO_USER_LIMITS};
use tokio_tungstenite::tungstenite::Message;

/// Where clients may connect: the servers that still run.
type Live = Arc<Mutex<Vec<String>>>;

/// The rounds' text every turn streams, then its answer.
const WHOLE_TEXT: &str = "r0 r1 r2 r3 r4 r5 done";

fn tag(turn: usize) -> String {
    format!("<t{turn:02}>")
}

/// Each turn's script: six rounds (a file written in each but the third, which runs a subtask
/// that writes one of its own), then the answer. Subtasks are matched first: their
/// instructions hold their turn's tag.
fn script(turns: usize) -> Value {
    let mut conversations = Vec::new();
    for t in 0..turns {
        conversations.push(json!({"match": format!("sub{}", tag(t)), "steps": [
            {"delay_ms": 80, "tool_calls": [{"name": "write_file", "arguments": {"path": format!("t{t:02}-sub.md"), "content": "s"}}]},
            {"delay_ms": 80, "text": "sub done"}]}));
    }
    for t in 0..turns {
        let mut steps: Vec<Value> = (0..6)
            .map(|r| {
                let call = if r == 2 {
                    json!({"name": "run_subtask", "arguments": {"title": "sub", "instructions": format!("sub{}", tag(t))}})
                } else {
                    json!({"name": "write_file", "arguments": {"path": format!("t{t:02}-f{r}.md"), "content": format!("round {r}")}})
                };
                json!({"chunks": [format!("r{r} ")], "delay_ms": 300, "tool_calls": [call]})
            })
            .collect();
        steps.push(json!({"text": "done", "repeat": true}));
        conversations.push(json!({"match": tag(t), "steps": steps}));
    }
    json!({"conversations": conversations})
}

/// What one client saw of its turn.
#[derive(Default, Debug)]
struct Seen {
    thread: Option<String>,
    last_seq: u64,
    /// The root text, as the client shows it (`turn_resumed` replaces it).
    text: String,
    message: Option<Value>,
    /// Frames whose `seq` did not go up.
    out_of_order: Vec<(u64, u64)>,
    reconnects: u32,
    resumed: u32,
}

/// Run turn `turn` to its end through whichever server lives, reconnecting as a client would.
async fn drive(turn: usize, live: Live, started: tokio::sync::mpsc::Sender<()>) -> Seen {
    let mode = if turn.is_multiple_of(4) {
        "default"
    } else {
        "auto"
    };
    let mut seen = Seen::default();
    let mut started = Some(started);
    for attempt in 0..200 {
        let addr = {
            let live = live.lock().unwrap();
            (!live.is_empty()).then(|| live[turn % live.len()].clone())
        };
        let Some(addr) = addr else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok((mut ws, _)) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws")).await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if attempt > 0 {
            seen.reconnects += 1;
        }
        let first = match &seen.thread {
            None => {
                json!({"command": "chat_message", "data": {"content": format!("{} go", tag(turn)), "permission_mode": mode}})
            }
            Some(thread) => {
                json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": seen.last_seq}})
            }
        };
        if ws
            .send(Message::Text(first.to_string().into()))
            .await
            .is_err()
        {
            continue;
        }
        while let Ok(Some(Ok(message))) =
            tokio::time::timeout(Duration::from_secs(30), ws.next()).await
        {
            let Message::Text(body) = message else {
                continue;
            };
            let f: Value = serde_json::from_str(&body).unwrap();
            if let Some(seq) = f["seq"].as_u64() {
                if seq <= seen.last_seq {
                    seen.out_of_order.push((seen.last_seq, seq));
                }
                seen.last_seq = seen.last_seq.max(seq);
            }
            let root = f["depth"].as_u64().unwrap_or(0) == 0;
            match f["type"].as_str().unwrap_or_default() {
                "turn_started" => {
                    seen.thread = f["thread_id"].as_str().map(str::to_owned);
                    if let Some(started) = started.take() {
                        started.send(()).await.unwrap();
                    }
                }
                "turn_resumed" => {
                    seen.resumed += 1;
                    seen.text = f["content"].as_str().unwrap().to_owned();
                }
                "chunk" if f["done"] == true && root => return seen,
                "chunk" if root => seen
                    .text
                    .push_str(f["content"].as_str().unwrap_or_default()),
                "message" => seen.message = Some(f.clone()),
                "tool_approval_request" => {
                    let allow = json!({"type": "tool_approval_response", "tool_call_id": f["tool_call_id"], "decision": "allow"});
                    // A socket that died meanwhile: the approval is asked again after the resume.
                    let _ = ws.send(Message::Text(allow.to_string().into())).await;
                }
                "error" => panic!("turn {turn}: {f}"),
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("turn {turn} never ended: {seen:?}");
}

/// A client's turn, checked against its record: `completed` with the whole text (as the
/// client assembled it, too), `seq` only up, each call settled once, each file written by at
/// most one call, and written when its call says so.
async fn check(turn: usize, seen: &Seen, server: &Server, db: &Db) {
    assert!(
        seen.out_of_order.is_empty(),
        "turn {turn}: seq went back: {seen:?}"
    );
    let message = seen
        .message
        .as_ref()
        .unwrap_or_else(|| panic!("turn {turn}: {seen:?}"));
    assert_eq!(
        message["message"]["status"], "completed",
        "turn {turn}: {message}"
    );
    assert_eq!(message["message"]["content"], WHOLE_TEXT, "turn {turn}");
    assert_eq!(
        seen.text, WHOLE_TEXT,
        "turn {turn}: the client's text: {seen:?}"
    );
    let thread = seen.thread.as_deref().unwrap();
    let trace = server.trace(thread, message).await;
    let writes = results_named(&trace, "write_file");
    let mut calls: HashMap<&str, u32> = HashMap::new();
    let mut written: HashMap<String, u32> = HashMap::new();
    for (call, result) in &writes {
        *calls.entry(call).or_default() += 1;
        if let Some(path) = result
            .strip_prefix("wrote ")
            .and_then(|r| r.split(" to ").nth(1))
        {
            *written.entry(path.to_owned()).or_default() += 1;
            let file = db.dir.path().join("workspace/local").join(path);
            assert!(file.exists(), "turn {turn}: {path} said written, not there");
        } else {
            assert!(result.starts_with("interrupted"), "turn {turn}: {result}");
        }
    }
    assert_eq!(
        writes.len(),
        6,
        "turn {turn}: five writes and the subtask's: {trace}"
    );
    assert!(
        calls.values().all(|n| *n == 1),
        "turn {turn}: a call settled twice: {writes:?}"
    );
    assert!(
        written.values().all(|n| *n == 1),
        "turn {turn}: a file written twice: {writes:?}"
    );
}

/// A seed from the clock, or `WEFT_STORM_SEED`.
fn seed() -> u64 {
    let seed = std::env::var("WEFT_STORM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("WEFT_STORM_SEED={seed}");
    seed
}

/// The next of a xorshift sequence.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn scale(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How the servers of a storm run: two replicas on a bus (one dies), or one process that
/// dies and starts again.
#[derive(Clone, Copy)]
enum Setup {
    TwoReplicas,
    Restarted { postgres: bool },
}

async fn storm(setup: Setup) {
    let turns = scale("WEFT_STORM_TURNS", 16);
    let mut rng = seed() | 1;
    for rep in 0..scale("WEFT_STORM_REPS", 2) {
        // A turn lasts about two seconds.
        let kill_after = Duration::from_millis(50 + next(&mut rng) % 1_500);
        eprintln!(
            "repetition {rep}: kill {} ms after every turn started",
            kill_after.as_millis()
        );
        one_storm(setup, turns, kill_after).await;
    }
}

async fn one_storm(setup: Setup, turns: usize, kill_after: Duration) {
    let postgres = matches!(
        setup,
        Setup::TwoReplicas | Setup::Restarted { postgres: true }
    );
    let db = Db::new(postgres).await;
    let script = script(turns);
    let nats = match setup {
        Setup::TwoReplicas => Some(Nats::start().await),
        Setup::Restarted { .. } => None,
    };
    let config = |id: &str| {
        match &nats {
        Some(nats) => format!(
            "{NO_USER_LIMITS}[cluster]\nreplica_id = \"{id}\"\nnats_url = \"{}\"\nlease_ms = 1500\nheartbeat_ms = 250\n",
            nats.url
        ),
        None => format!("{NO_USER_LIMITS}[cluster]\nreplica_id = \"{id}\"\n"),
    }
    };
    let doomed = Server::start_with(&db, &script, &config("a")).await;
    let survivor = match setup {
        Setup::TwoReplicas => Some(Server::start_with(&db, &script, &config("b")).await),
        Setup::Restarted { .. } => None,
    };
    let live: Live = Arc::new(Mutex::new(
        std::iter::once(doomed.addr.clone())
            .chain(survivor.iter().map(|s| s.addr.clone()))
            .collect(),
    ));
    let (started_tx, mut started) = tokio::sync::mpsc::channel(turns);
    let clients: Vec<_> = (0..turns)
        .map(|t| tokio::spawn(drive(t, live.clone(), started_tx.clone())))
        .collect();
    for _ in 0..turns {
        started.recv().await.unwrap();
    }
    tokio::time::sleep(kill_after).await;
    live.lock().unwrap().retain(|a| *a != doomed.addr);
    doomed.kill().await;
    let survivor = match survivor {
        Some(survivor) => survivor,
        None => {
            let restarted = Server::start_with(&db, &script, &config("a")).await;
            live.lock().unwrap().push(restarted.addr.clone());
            restarted
        }
    };
    let mut resumed = 0;
    for (t, client) in clients.into_iter().enumerate() {
        let seen = client.await.unwrap();
        resumed += u32::from(seen.resumed > 0);
        check(t, &seen, &survivor, &db).await;
    }
    eprintln!("{resumed} of {turns} turns were taken up after the kill");
    survivor.stop().await;
    if let Some(nats) = nats {
        nats.stop().await;
    }
    db.drop_database().await;
}

#[tokio::test]
async fn turns_of_a_replica_killed_at_random_points_finish_on_the_survivor() {
    storm(Setup::TwoReplicas).await;
}

#[tokio::test]
async fn turns_of_a_process_killed_at_random_points_finish_after_its_restart_on_sqlite() {
    storm(Setup::Restarted { postgres: false }).await;
}

#[tokio::test]
async fn turns_of_a_process_killed_at_random_points_finish_after_its_restart_on_postgres() {
    storm(Setup::Restarted { postgres: true }).await;
}
