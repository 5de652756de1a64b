//! Turn lifecycle: stop, one turn per thread, resume after a dropped socket, the detach
//! grace period, and shutdown that persists what running turns produced.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;
use support::{kinds, of_type, text_of, thread_of, Client, TestServer};

fn slow_script() -> serde_json::Value {
    json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["one ", "two ", "three ", "four ", "five "], "chunk_delay_ms": 150}
    ]}]})
}

/// Wait (at most 20 s) for the thread's first answer to end on its own.
async fn wait_until_completed(server: &TestServer, thread: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server
        .store()
        .messages(thread)
        .await
        .unwrap()
        .get(1)
        .map(|m| m.status.as_str())
        != Some("completed")
    {
        assert!(Instant::now() < deadline, "the turn did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The client leaves after seeing up to `last_seq`; once the turn has ended on its own, a new
/// client resumes from there: the frames it gets.
async fn resume_after_the_end(
    server: &TestServer,
    client: Client,
    thread: &str,
    last_seq: u64,
) -> Vec<serde_json::Value> {
    client.close().await;
    wait_until_completed(server, thread).await;
    let mut c = server.client().await;
    c.send(json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": last_seq}}))
        .await;
    c.turn().await
}

#[tokio::test]
async fn stop_ends_a_turn_within_a_second_and_keeps_partial_text() {
    let server = TestServer::start(json!({"conversations": [
        {"match": "slow", "steps": [{"text": "late", "delay_ms": 30000}]},
        {"match": "*", "steps": [
            {"chunks": ["thinking... "], "tool_calls": [{"name": "run_subtask", "arguments": {"title": "long", "instructions": "slow work"}}]},
            {"text": "never"}]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "do it", json!({})).await;
    let first = c.recv_until(|f| f["type"] == "tool_call_update").await;
    let thread = thread_of(&first);
    let asked = Instant::now();
    c.send(json!({"command": "stop", "data": {"thread_id": thread}}))
        .await;
    let rest = c.turn().await;
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "stopped in {:?}",
        asked.elapsed()
    );
    let end = of_type(&rest, "tool_call_update")
        .into_iter()
        .find(|f| f["status"] == "end" && f["depth"] == 0)
        .unwrap();
    assert_eq!(end["is_error"], true);
    let stored = server.store().messages(&thread).await.unwrap();
    assert_eq!(
        (stored[1].status.as_str(), stored[1].content.clone()),
        ("cancelled", json!("thinking... "))
    );
    server.stop().await;
}

#[tokio::test]
async fn one_turn_per_thread() {
    let server = TestServer::start(slow_script()).await;
    let mut c = server.client().await;
    c.chat(None, "first", json!({})).await;
    let first = c.recv_until(|f| f["type"] == "chunk").await;
    let thread = thread_of(&first);
    c.chat(Some(&thread), "second", json!({})).await;
    let frames = c.recv_until(|f| f["type"] == "error").await;
    assert_eq!(frames.last().unwrap()["code"], "turn_in_progress");
    c.turn().await;
    c.chat(Some(&thread), "third", json!({})).await;
    assert!(
        !of_type(&c.turn().await, "message").is_empty(),
        "after the turn ends the thread takes a new one"
    );
    server.stop().await;
}

#[tokio::test]
async fn resume_after_a_dropped_socket_replays_then_continues_live() {
    let server = TestServer::start(slow_script()).await;
    let mut c = server.client().await;
    c.chat(None, "go", json!({})).await;
    let seen = c.recv_until(|f| f["type"] == "chunk").await;
    let thread = thread_of(&seen);
    let last_seq = seen.last().unwrap()["seq"].as_u64().unwrap();
    c.close().await;
    tokio::time::sleep(Duration::from_millis(400)).await;

    let mut c = server.client().await;
    c.send(json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": last_seq}}))
        .await;
    let rest = c.turn().await;
    let seqs: Vec<u64> = rest.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs[0] > last_seq,
        "replay starts after what the client saw"
    );
    // Replayed text chunks are coalesced, so seqs may skip, but never go back.
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "increasing: {seqs:?}");
    let mut all = seen.clone();
    all.extend(rest.clone());
    assert_eq!(text_of(&all), "one two three four five ");
    let stored = server.store().messages(&thread).await.unwrap();
    assert_eq!(stored[1].status, "completed");
    server.stop().await;
}

#[tokio::test]
async fn resuming_a_tool_heavy_turn_replays_every_card_in_order() {
    // Ten rounds of four cards: 80 frames, all but the newest kept packed (compressed).
    let mut steps: Vec<serde_json::Value> = (0..10)
        .map(|r| {
            let calls: Vec<serde_json::Value> = (0..4)
                .map(|j| {
                    json!({"id": format!("c{r}_{j}"), "name": "memory_write",
                    "arguments": {"key": format!("k{j}"), "value": format!("v{r}")}})
                })
                .collect();
            json!({"tool_calls": calls})
        })
        .collect();
    // The client leaves before the first round, while the turn runs.
    steps[0]["delay_ms"] = json!(300);
    steps.push(json!({"chunks": ["done"]}));
    let server =
        TestServer::start(json!({"conversations": [{"match": "*", "steps": steps}]})).await;
    let mut c = server.client().await;
    c.chat(None, "cards", json!({})).await;
    let seen = c.recv_until(|f| f["type"] == "turn_started").await;
    let thread = thread_of(&seen);
    let started = seen.last().unwrap()["seq"].as_u64().unwrap();
    let rest = resume_after_the_end(&server, c, &thread, started).await;
    // Every card, in order, none missing, from memory (no stored snapshot first).
    let cards = &rest[..80];
    assert!(
        cards.iter().all(|f| f["type"] == "tool_call_update"),
        "{:?}",
        kinds(&rest)
    );
    let seqs: Vec<u64> = cards.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (started + 1..=started + 80).collect::<Vec<_>>());
    for (r, round) in cards.chunks(8).enumerate() {
        let starts: Vec<&serde_json::Value> =
            round.iter().filter(|f| f["status"] == "start").collect();
        assert_eq!(starts.len(), 4);
        for start in starts {
            let id = start["tool_call_id"].as_str().unwrap();
            let j = &id[format!("c{r}_").len()..][..1];
            assert!(id.starts_with(&format!("c{r}_")), "{id} in round {r}");
            assert_eq!(
                start["args"],
                json!({"key": format!("k{j}"), "value": format!("v{r}")})
            );
        }
        assert!(round
            .iter()
            .filter(|f| f["status"] == "end")
            .all(|f| f["is_error"] == false));
    }
    assert_eq!(of_type(&rest, "message").len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn with_no_grace_a_dropped_socket_aborts_the_turn() {
    let server = TestServer::start_with(slow_script(), |c| c.server.detach_grace_ms = 0).await;
    let mut c = server.client().await;
    c.chat(None, "go", json!({})).await;
    let seen = c.recv_until(|f| f["type"] == "chunk").await;
    let thread = thread_of(&seen);
    c.close().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stored = server.store().messages(&thread).await.unwrap();
        if stored[1].status != "running" {
            assert_eq!(stored[1].status, "cancelled");
            assert_eq!(stored[1].content, json!("one "));
            break;
        }
        assert!(Instant::now() < deadline, "the turn was not aborted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn shutdown_lets_running_turns_finish_and_persists_them() {
    let mut server = TestServer::start(slow_script()).await;
    let mut c = server.client().await;
    c.chat(None, "go", json!({})).await;
    let seen = c.recv_until(|f| f["type"] == "chunk").await;
    let thread = thread_of(&seen);
    server.shutdown_and_wait().await;
    let closed = c.recv_until(|f| f["type"] == "__closed").await;
    assert_eq!(
        closed.last().unwrap()["code"],
        1012,
        "service restart: reconnect"
    );
    let stored = server
        .reopened_store()
        .await
        .messages(&thread)
        .await
        .unwrap();
    assert_eq!(
        (stored[1].status.as_str(), stored[1].content.clone()),
        ("completed", json!("one two three four five "))
    );
    server.stop().await;
}

#[tokio::test]
async fn shutdown_past_its_timeout_hands_turns_over_with_what_they_streamed() {
    let mut server =
        TestServer::start_with(slow_script(), |c| c.server.shutdown_timeout_ms = 100).await;
    let mut c = server.client().await;
    c.chat(None, "go", json!({})).await;
    let thread = thread_of(&c.recv_until(|f| f["type"] == "chunk").await);
    server.shutdown_and_wait().await;
    let stored = server
        .reopened_store()
        .await
        .messages(&thread)
        .await
        .unwrap();
    // Left as a crash leaves it, for the next start (or another replica) to take up: still
    // running on record, what it streamed kept as its draft.
    assert_eq!(stored[1].status, "running");
    let items = server
        .reopened_store()
        .await
        .turn_items(&thread, &stored[1].id)
        .await
        .unwrap();
    assert!(items.iter().any(|i| i.body.contains("one ")), "{items:?}");
    server.stop().await;
}

#[tokio::test]
async fn frames_carry_an_increasing_seq_across_turns() {
    let server = TestServer::start(
        json!({"conversations": [{"match": "*", "steps": [{"text": "a"}, {"text": "b"}]}]}),
    )
    .await;
    let mut c = server.client().await;
    c.chat(None, "x", json!({})).await;
    let first = c.turn().await;
    let thread = thread_of(&first);
    c.chat(Some(&thread), "y", json!({})).await;
    let second = c.turn().await;
    assert_eq!(kinds(&second)[0], "turn_started");
    assert!(second[0]["seq"].as_u64().unwrap() > first.last().unwrap()["seq"].as_u64().unwrap());
    server.stop().await;
}

#[tokio::test]
async fn resuming_a_big_turn_after_it_ended_gets_the_whole_answer() {
    // 900 KB of text in 4 KB chunks; the replay buffer keeps 256 KB of it.
    let chunk = "x".repeat(4096);
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": [chunk], "repeat_chunks": 225, "chunk_delay_ms": 2}
    ]}]});
    let server = TestServer::start_with(script, |c| c.server.replay_max_bytes = 256 << 10).await;
    let mut c = server.client().await;
    c.chat(None, "big", json!({})).await;
    let mut seen = Vec::new();
    let mut bytes = 0;
    while bytes < 128 << 10 {
        let frame = c.recv().await;
        bytes += frame["content"].as_str().map_or(0, str::len);
        seen.push(frame);
    }
    let thread = thread_of(&seen);
    let last_seq = seen.last().unwrap()["seq"].as_u64().unwrap();
    let rest = resume_after_the_end(&server, c, &thread, last_seq).await;
    let message = &of_type(&rest, "message")[0]["message"];
    assert_eq!(message["content"].as_str().unwrap().len(), 225 * 4096);
    assert!(rest.iter().all(|f| f["seq"].as_u64().unwrap() > last_seq));
    server.stop().await;
}
