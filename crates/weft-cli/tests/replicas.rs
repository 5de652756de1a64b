//! Real `weft serve` replicas on one PostgreSQL database: a replica that starts leaves
//! another's live turn alone; a replica killed mid-turn has its turn closed by another once
//! the lease expires; a replica stopped (`SIGSTOP`) past its lease finds, when it resumes,
//! that its turn was closed, and runs and writes nothing more for it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{chat, is_done, send, until, Db, Server, NO_USER_LIMITS};
use weft_store::{MessageRow, Store};

/// A replica named `id` with short leases, so tests see them expire; it closes the turns
/// dead replicas left (`recovery = "interrupt"`; `tests/resume.rs` takes them up).
async fn replica(db: &Db, script: &Value, id: &str) -> Server {
    let config = format!(
        "{NO_USER_LIMITS}[cluster]\nreplica_id = \"{id}\"\nlease_ms = 1500\nheartbeat_ms = 250\nrecovery = \"interrupt\"\n"
    );
    Server::start_with(db, script, &config).await
}

async fn assistant(store: &Store, thread: &str) -> MessageRow {
    let messages = store.messages(thread).await.unwrap();
    messages
        .into_iter()
        .rev()
        .find(|m| m.role == "assistant")
        .unwrap()
}

/// Wait (up to 15 s) until the thread's newest assistant message has `status`.
async fn until_status(store: &Store, thread: &str, status: &str) -> MessageRow {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let message = assistant(store, thread).await;
        if message.status == status {
            return message;
        }
        assert!(
            Instant::now() < deadline,
            "still {} after 15 s",
            message.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn files_named(dir: &Path, name: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                files_named(&path, name)
            } else {
                usize::from(path.file_name().is_some_and(|n| n == name))
            }
        })
        .sum()
}

/// Each turn of the thread writes a file (asking first in Default mode), then says so.
fn write_script() -> Value {
    let write = json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}]});
    json!({"conversations": [{"match": "*", "steps": [
        write, {"text": "written"}, write, {"text": "written", "repeat": true}]}]})
}

#[tokio::test]
async fn a_new_replica_leaves_a_live_turn_alone_and_closes_a_dead_replicas() {
    let db = Db::new(true).await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = write_script();
    let a = replica(&db, &script, "a").await;
    let mut ws = a.connect().await;
    send(&mut ws, chat("write it", None)).await;
    let frames = until(&mut ws, |f| f["type"] == "tool_approval_request").await;
    let thread = frames[0]["thread_id"].as_str().unwrap().to_owned();
    let call = frames.last().unwrap()["tool_call_id"].clone();
    let health = a.get("/healthz").await;
    assert_eq!(
        (health["replica"].as_str(), health["turns"].as_u64()),
        (Some("a"), Some(1)),
        "{health}"
    );

    // B starts while A's turn waits for a person, and sweeps for two leases' time: A's turn
    // and its approval are untouched.
    let b = replica(&db, &script, "b").await;
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(assistant(&store, &thread).await.status, "running");
    assert_eq!(store.approvals(&thread).await.unwrap()[0].status, "pending");
    assert_eq!(
        store
            .lease(&assistant(&store, &thread).await.id)
            .await
            .unwrap()
            .unwrap()
            .owner,
        "a"
    );

    // A's turn goes on when the person answers.
    send(
        &mut ws,
        json!({"type": "tool_approval_response", "tool_call_id": call, "decision": "allow"}),
    )
    .await;
    let frames = until(&mut ws, is_done).await;
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "message" && f["message"]["status"] == "completed"),
        "{frames:?}"
    );
    assert_eq!(
        store
            .lease(&assistant(&store, &thread).await.id)
            .await
            .unwrap(),
        None
    );

    // A dies with a turn waiting: B closes it once A's lease expires.
    send(&mut ws, chat("write it again", Some(&thread))).await;
    until(&mut ws, |f| f["type"] == "tool_approval_request").await;
    let killed = Instant::now();
    a.kill().await;
    let closed = until_status(&store, &thread, "interrupted").await;
    eprintln!(
        "a dead replica's turn closed {} ms after the kill",
        killed.elapsed().as_millis()
    );
    assert_eq!(store.lease(&closed.id).await.unwrap(), None);
    let approvals = store.approvals(&thread).await.unwrap();
    assert_eq!(approvals.last().unwrap().status, "expired");

    // Through B the thread goes on.
    let mut ws = b.connect().await;
    send(&mut ws, json!({"command": "chat_message", "data": {"content": "and again", "thread_id": thread, "permission_mode": "auto"}})).await;
    let frames = until(&mut ws, is_done).await;
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "message" && f["message"]["status"] == "completed"),
        "{frames:?}"
    );
    b.stop().await;
    store.close().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_replica_stopped_past_its_lease_runs_and_writes_nothing_more_for_its_turn() {
    let db = Db::new(true).await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"delay_ms": 2_500, "tool_calls": [
            {"name": "write_file", "arguments": {"path": "side-effect.txt", "content": "once"}}]},
        {"text": "written"}]}]});
    let a = replica(&db, &script, "a").await;
    let b = replica(&db, &script, "b").await;
    let mut ws = a.connect().await;
    send(
        &mut ws,
        json!({"command": "chat_message", "data": {"content": "write", "permission_mode": "auto"}}),
    )
    .await;
    let started = until(&mut ws, |f| f["type"] == "turn_started").await;
    let thread = started[0]["thread_id"].as_str().unwrap().to_owned();

    // A stops (a long GC pause, a frozen VM) longer than its lease: B closes its turn.
    a.signal("STOP");
    let closed = until_status(&store, &thread, "interrupted").await;
    let items = store.turn_items(&thread, &closed.id).await.unwrap().len();
    tokio::time::sleep(Duration::from_millis(3_000)).await;

    // A resumes past the model's delay: the call it was about to make never runs, the
    // client is told, and nothing more is written.
    a.signal("CONT");
    let frames = until(&mut ws, is_done).await;
    let error = frames
        .iter()
        .find(|f| f["type"] == "error")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("lost the turn's lease"),
        "{error}"
    );
    assert!(
        !frames.iter().any(|f| f["type"] == "tool_call_update"
            && f["status"] == "end"
            && f["is_error"] == false),
        "{frames:?}"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        files_named(db.dir.path(), "side-effect.txt"),
        0,
        "the call ran"
    );
    let after = assistant(&store, &thread).await;
    assert_eq!(after.status, "interrupted");
    assert_eq!(after.content, closed.content);
    assert_eq!(
        store.turn_items(&thread, &closed.id).await.unwrap().len(),
        items
    );
    assert!(store.model_calls(&thread).await.unwrap().is_empty());
    let metrics = reqwest::get(format!("http://{}/metrics", a.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("weft_leases_lost_total 1"), "{metrics}");
    a.stop().await;
    b.stop().await;
    store.close().await;
    db.drop_database().await;
}
