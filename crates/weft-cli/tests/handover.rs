//! Deploys hand turns over: a replica told to stop (`SIGTERM`) lets short turns finish
//! within `shutdown_timeout_ms`, then gives up the leases of the turns still running (a long
//! one, and one waiting for an approval) instead of cancelling them. Another replica takes
//! them up within a heartbeat or two (not after `lease_ms`), and the clients, reconnecting
//! there with `resume_chat`, see both finish; each file is written once. With one process
//! (SQLite), its next start goes on with them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{chat, is_done, send, until, Db, Nats, Server, Ws, NO_USER_LIMITS};
use weft_store::Store;

/// A long turn (a file written, then a slow answer) and one that asks before writing.
fn script() -> Value {
    json!({"conversations": [
        {"match": "long", "steps": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "long.md", "content": "once"}}]},
            {"delay_ms": 4_000, "text": "long done", "repeat": true}]},
        {"match": "ask", "steps": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "asked.md", "content": "once"}}]},
            {"text": "asked done", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

/// `lease_ms` long enough that only a hand-over explains a quick takeover.
fn config(id: &str, nats: Option<&Nats>) -> String {
    let bus = nats.map_or(String::new(), |n| format!("nats_url = \"{}\"\n", n.url));
    format!(
        "{NO_USER_LIMITS}shutdown_timeout_ms = 1000\n[cluster]\nreplica_id = \"{id}\"\n{bus}\
         lease_ms = 30000\nheartbeat_ms = 250\n"
    )
}

/// The long turn (in Auto) past its write, and the asking turn waiting: each socket, its
/// thread and the last `seq` it saw; and the approval's id.
async fn two_turns(server: &Server) -> ([(Ws, String, u64); 2], Value) {
    let mut long = server.connect().await;
    let mut start = chat("long", None);
    start["data"]["permission_mode"] = json!("auto");
    send(&mut long, start).await;
    let long_frames = until(&mut long, |f| {
        f["type"] == "tool_call_update" && f["status"] == "end"
    })
    .await;
    let mut ask = server.connect().await;
    send(&mut ask, chat("ask", None)).await;
    let ask_frames = until(&mut ask, |f| f["type"] == "tool_approval_request").await;
    let seen = |frames: &[Value]| {
        (
            frames[0]["thread_id"].as_str().unwrap().to_owned(),
            frames
                .iter()
                .filter_map(|f| f["seq"].as_u64())
                .max()
                .unwrap(),
        )
    };
    let (long_thread, long_seq) = seen(&long_frames);
    let (ask_thread, ask_seq) = seen(&ask_frames);
    let approval = ask_frames.last().unwrap()["tool_call_id"].clone();
    (
        [(long, long_thread, long_seq), (ask, ask_thread, ask_seq)],
        approval,
    )
}

/// SIGTERM, and wait for the process to end.
async fn terminate(mut server: Server) {
    server.signal("TERM");
    tokio::time::timeout(Duration::from_secs(30), server.child.wait())
        .await
        .expect("the replica did not end")
        .unwrap();
}

/// Resume both turns on `server` and see them through: the long one to its end, the other
/// asked again (the same approval), allowed, and ended.
async fn finish_both(server: &Server, turns: &[(Ws, String, u64); 2], approval: &Value) {
    let resume = |thread: &str, last_seq: u64| json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": last_seq}});
    let (_, long_thread, long_seq) = &turns[0];
    let mut long = server.connect().await;
    send(&mut long, resume(long_thread, *long_seq)).await;
    let frames = until(&mut long, is_done).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed", "{frames:?}");
    assert_eq!(message["message"]["content"], "long done");
    assert!(
        frames
            .iter()
            .filter_map(|f| f["seq"].as_u64())
            .all(|s| s > *long_seq),
        "frames again below what the client saw: {frames:?}"
    );

    let (_, ask_thread, ask_seq) = &turns[1];
    let mut ask = server.connect().await;
    send(&mut ask, resume(ask_thread, *ask_seq)).await;
    let frames = until(&mut ask, |f| f["type"] == "tool_approval_request").await;
    assert_eq!(&frames.last().unwrap()["tool_call_id"], approval);
    send(
        &mut ask,
        json!({"type": "tool_approval_response", "tool_call_id": approval, "decision": "allow"}),
    )
    .await;
    let frames = until(&mut ask, is_done).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed", "{frames:?}");
    assert_eq!(message["message"]["content"], "asked done");
}

/// Each file was written once: one `write_file` result in each turn's record.
async fn written_once(server: &Server, turns: &[(Ws, String, u64); 2], db: &Db) {
    for ((_, thread, _), file) in turns.iter().zip(["long.md", "asked.md"]) {
        let messages = server.get(&format!("/threads/{thread}/messages")).await;
        let answer = messages.as_array().unwrap().last().unwrap().clone();
        let trace = server.trace(thread, &json!({"message": answer})).await;
        let writes = support::results_named(&trace, "write_file");
        assert_eq!(writes.len(), 1, "{file}: {writes:?}");
        let on_disk = db.dir.path().join("workspace/local").join(file);
        assert_eq!(std::fs::read_to_string(on_disk).unwrap(), "once");
    }
}

#[tokio::test]
async fn sigterm_hands_a_long_turn_and_a_waiting_one_to_the_other_replica() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    let a = Server::start_with(&db, &script(), &config("a", Some(&nats))).await;
    let b = Server::start_with(&db, &script(), &config("b", Some(&nats))).await;
    let (turns, approval) = two_turns(&a).await;

    let asked = Instant::now();
    terminate(a).await;
    // B holds both leases long before A's (30 s) would have expired.
    for (_, thread, _) in &turns {
        loop {
            if store
                .turn_owner(thread, weft_store::now_ms())
                .await
                .unwrap()
                .as_deref()
                == Some("b")
            {
                break;
            }
            assert!(
                asked.elapsed() < Duration::from_secs(15),
                "B did not take the turn up"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eprintln!("both turns on B {:?} after SIGTERM", asked.elapsed());
    finish_both(&b, &turns, &approval).await;
    written_once(&b, &turns, &db).await;
    for (_, thread, _) in &turns {
        let messages = store.messages(thread).await.unwrap();
        assert!(
            messages.iter().all(|m| m.status != "cancelled"),
            "a turn was cancelled: {messages:?}"
        );
    }
    b.stop().await;
    nats.stop().await;
    store.close().await;
    db.drop_database().await;
}

#[tokio::test]
async fn sigterm_leaves_one_process_s_turns_for_its_next_start() {
    let db = Db::new(false).await;
    let a = Server::start_with(&db, &script(), &config("one", None)).await;
    let (turns, approval) = two_turns(&a).await;
    terminate(a).await;
    let again = Server::start_with(&db, &script(), &config("one", None)).await;
    finish_both(&again, &turns, &approval).await;
    written_once(&again, &turns, &db).await;
    again.stop().await;
    db.drop_database().await;
}
