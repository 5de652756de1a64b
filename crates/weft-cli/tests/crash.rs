//! Crash consistency of the real `weft` process under `[cluster] recovery = "interrupt"`:
//! `kill -9` mid-stream, while an approval is pending, and with 200 turns running; then a
//! restart on the same database must close every
//! unfinished turn as `interrupted` with its partial text, answer every unanswered call with
//! "interrupted", expire pending approvals, answer `resume_chat` from the store, and take the
//! next turn. A kill the moment `turn_started` arrives keeps the message that started it. On
//! SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{chat, is_done, recv, send, until, Db, Server, NO_USER_LIMITS};

/// One replica, restarted under the same id: it closes what its former life left at once
/// (`tests/resume.rs` has it take those turns up instead).
async fn start(db: &Db, script: &Value) -> Server {
    Server::start_with(
        db,
        script,
        &format!("{NO_USER_LIMITS}[cluster]\nreplica_id = \"one\"\nrecovery = \"interrupt\"\n"),
    )
    .await
}

/// The record of a thread is consistent: every call has exactly one result, no two user
/// messages follow each other without an assistant message between them.
fn assert_consistent(items: &Value) {
    let items = items.as_array().unwrap();
    let mut calls = HashSet::new();
    let mut results = Vec::new();
    let mut last_kind = "";
    for item in items {
        let kind = item["kind"].as_str().unwrap();
        assert!(
            !(kind == "user" && last_kind == "user"),
            "two user messages in a row: {items:?}"
        );
        last_kind = kind;
        for call in item["tool_calls"].as_array().into_iter().flatten() {
            calls.insert(call["id"].as_str().unwrap().to_owned());
        }
        if kind == "tool_result" {
            results.push(item["tool_call_id"].as_str().unwrap().to_owned());
        }
    }
    let unique: HashSet<_> = results.iter().cloned().collect();
    assert_eq!(
        unique.len(),
        results.len(),
        "a call answered twice: {items:?}"
    );
    assert_eq!(unique, calls, "calls and results do not pair up: {items:?}");
}

async fn mid_stream(postgres: bool) {
    let db = Db::new(postgres).await;
    let chunks: Vec<String> = (0..30).map(|i| format!("w{i:02} ")).collect();
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": chunks, "chunk_delay_ms": 150},
        {"text": "back again"}]}]});
    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    send(&mut ws, chat("tell me a long story", None)).await;
    let mut seen: Vec<(Instant, Value)> = Vec::new();
    // Sixteen chunks' worth of text (a busy server may send several in one frame).
    let streamed_len = |seen: &[(Instant, Value)]| -> usize {
        seen.iter()
            .filter(|(_, f)| f["type"] == "chunk")
            .filter_map(|(_, f)| f["content"].as_str())
            .map(str::len)
            .sum()
    };
    while streamed_len(&seen) < 16 * 4 {
        let f = recv(&mut ws).await;
        seen.push((Instant::now(), f));
    }
    let thread = seen[0].1["thread_id"].as_str().unwrap().to_owned();
    let killed_at = Instant::now();
    server.kill().await;
    // What the client had more than a flush period (plus scheduling slack) before the kill
    // must be stored.
    let old_enough: String = seen
        .iter()
        .filter(|(at, f)| {
            f["type"] == "chunk" && killed_at.duration_since(*at) > Duration::from_millis(1500)
        })
        .map(|(_, f)| f["content"].as_str().unwrap())
        .collect();
    let streamed: String = seen
        .iter()
        .filter(|(_, f)| f["type"] == "chunk")
        .map(|(_, f)| f["content"].as_str().unwrap())
        .collect();
    assert!(!old_enough.is_empty());

    let server = start(&db, &script).await;
    let messages = server.get(&format!("/threads/{thread}/messages")).await;
    let assistant = &messages[1];
    assert_eq!(assistant["status"], "interrupted");
    let stored = assistant["content"].as_str().unwrap();
    assert!(
        stored.starts_with(&old_enough),
        "stored {stored:?}, expected at least {old_enough:?}"
    );
    assert!(
        streamed.starts_with(stored),
        "stored {stored:?} was never streamed"
    );

    // resume_chat answers from the store.
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 17}}),
    )
    .await;
    let frames = until(&mut ws, is_done).await;
    assert_eq!(frames[0]["type"], "message");
    assert_eq!(frames[0]["message"]["status"], "interrupted");
    assert_eq!(frames[0]["message"]["content"], stored);

    // The next turn works, after the interrupted answer in the record.
    send(&mut ws, chat("go on", Some(&thread))).await;
    let frames = until(&mut ws, is_done).await;
    let text: String = frames
        .iter()
        .filter(|f| f["type"] == "chunk")
        .filter_map(|f| f["content"].as_str())
        .collect();
    assert_eq!(text, "back again");
    let items = server.get(&format!("/threads/{thread}/items")).await;
    let kinds: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["user", "assistant", "user", "assistant"]);
    assert_eq!(items[1]["partial"], true);
    assert_consistent(&items);
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn kill_mid_stream_then_restart_on_sqlite() {
    mid_stream(false).await;
}

#[tokio::test]
async fn kill_mid_stream_then_restart_on_postgres() {
    mid_stream(true).await;
}

async fn pending_approval(postgres: bool) {
    let db = Db::new(postgres).await;
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["Saving your notes. "], "tool_calls": [
            {"id": "w", "name": "write_file", "arguments": {"path": "notes.md", "content": "hi"}},
            {"id": "m", "name": "memory_write", "arguments": {"key": "k", "value": "v"}}]},
        {"text": "All good now."}]}]});
    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    send(&mut ws, chat("save my notes", None)).await;
    let frames = until(&mut ws, |f| f["type"] == "tool_approval_request").await;
    let thread = frames[0]["thread_id"].as_str().unwrap().to_owned();
    // Killed the moment the approval is asked: what was announced is on record.
    server.kill().await;

    let server = start(&db, &script).await;
    let messages = server.get(&format!("/threads/{thread}/messages")).await;
    assert_eq!(messages[1]["status"], "interrupted");
    assert_eq!(messages[1]["content"], "Saving your notes. ");
    let nodes = messages[1]["execution_tree"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert!(nodes
        .iter()
        .all(|n| n["is_error"] == true && n["result_preview"] == "interrupted"));

    let items = server.get(&format!("/threads/{thread}/items")).await;
    assert_consistent(&items);
    let results: Vec<(&str, &str)> = items
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "tool_result")
        .map(|i| (i["name"].as_str().unwrap(), i["result"].as_str().unwrap()))
        .collect();
    assert_eq!(
        results,
        vec![
            ("write_file", "interrupted"),
            ("memory_write", "interrupted")
        ]
    );
    // The call that waited for its approval says the approval expired; the other does not.
    let statuses: Vec<Value> = items
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "tool_result")
        .map(|i| i["metadata"]["approval_status"].clone())
        .collect();
    assert_eq!(statuses, vec![json!("expired"), Value::Null]);

    // The approval expired in the store.
    let store = weft_store::Store::connect(&db.url).await.unwrap();
    let approvals = store.approvals(&thread).await.unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0].status, "expired");
    store.close().await;

    // The next turn works: its history has the calls with their interrupted results.
    let mut ws = server.connect().await;
    send(&mut ws, chat("try again", Some(&thread))).await;
    let frames = until(&mut ws, is_done).await;
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "chunk" && f["content"] == "All good now."),
        "{frames:?}"
    );
    assert_consistent(&server.get(&format!("/threads/{thread}/items")).await);
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn kill_with_an_approval_pending_then_restart_on_sqlite() {
    pending_approval(false).await;
}

#[tokio::test]
async fn kill_with_an_approval_pending_then_restart_on_postgres() {
    pending_approval(true).await;
}

async fn under_load(postgres: bool) {
    let db = Db::new(postgres).await;
    // Each turn: 6 rounds of 3 parallel calls, then text; slow enough to be mid-flight.
    let mut steps: Vec<Value> = (0..6)
        .map(|r| {
            json!({"chunks": [format!("r{r} ")], "delay_ms": 100, "tool_calls": (0..3)
                .map(|j| json!({"name": "memory_write", "arguments": {"key": format!("k{j}"), "value": format!("v{r}")}}))
                .collect::<Vec<_>>()})
        })
        .collect();
    steps.push(json!({"text": "finished", "repeat": true}));
    // And one turn whose model takes a minute: whatever the timing, the kill catches it.
    let script = json!({"conversations": [
        {"match": "slow work", "steps": [{"delay_ms": 60_000, "text": "late"}]},
        {"match": "*", "steps": steps}]});
    let server = start(&db, &script).await;
    let mut sockets = Vec::new();
    for _ in 0..201 {
        sockets.push(server.connect().await);
    }
    for (i, ws) in sockets.iter_mut().enumerate() {
        send(ws, chat(if i == 0 { "slow work" } else { "work" }, None)).await;
    }
    let mut threads = Vec::new();
    for ws in &mut sockets {
        let f = until(ws, |f| f["type"] == "turn_started").await;
        threads.push(f[0]["thread_id"].as_str().unwrap().to_owned());
    }
    // The newest turn is past its first round (five more to go) when the process dies, so
    // the kill catches turns mid-flight however slowly this test read the others' starts.
    let newest = sockets.last_mut().unwrap();
    until(newest, |f| {
        f["type"] == "tool_call_update" && f["status"] == "end"
    })
    .await;
    server.kill().await;
    drop(sockets);

    let server = start(&db, &script).await;
    let mut interrupted = 0;
    for thread in &threads {
        // Every turn a client saw start is on record.
        let messages = server.get(&format!("/threads/{thread}/messages")).await;
        let messages = messages.as_array().unwrap_or_else(|| panic!("{messages}"));
        assert_eq!(messages.len(), 2, "{messages:?}");
        let status = messages[1]["status"].as_str().unwrap();
        assert!(status == "interrupted" || status == "completed", "{status}");
        interrupted += usize::from(status == "interrupted");
        assert_consistent(&server.get(&format!("/threads/{thread}/items")).await);
    }
    assert!(interrupted > 0, "the kill should catch turns mid-flight");
    // Every thread takes a new turn.
    let mut ws = server.connect().await;
    send(&mut ws, chat("again", Some(&threads[1]))).await;
    let frames = until(&mut ws, is_done).await;
    assert!(frames.iter().any(|f| f["type"] == "message"), "{frames:?}");
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn kill_with_200_turns_running_then_restart_on_sqlite() {
    under_load(false).await;
}

#[tokio::test]
async fn kill_with_200_turns_running_then_restart_on_postgres() {
    under_load(true).await;
}

async fn kill_at_turn_started(postgres: bool) {
    let db = Db::new(postgres).await;
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["slowly "], "delay_ms": 2000}, {"text": "again"}]}]});
    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    send(&mut ws, chat("keep this message", None)).await;
    let started = until(&mut ws, |f| f["type"] == "turn_started").await;
    server.kill().await;
    let thread = started[0]["thread_id"].as_str().unwrap().to_owned();

    let server = start(&db, &script).await;
    let messages = server.get(&format!("/threads/{thread}/messages")).await;
    let messages = messages.as_array().unwrap_or_else(|| panic!("{messages}"));
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(messages[1]["status"], "interrupted");
    assert_eq!(messages[0]["content"], "keep this message");
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn kill_the_moment_a_turn_starts_then_restart_on_sqlite() {
    kill_at_turn_started(false).await;
}

#[tokio::test]
async fn kill_the_moment_a_turn_starts_then_restart_on_postgres() {
    kill_at_turn_started(true).await;
}
