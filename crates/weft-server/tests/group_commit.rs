//! Group commit over the real server: 200 concurrent turns of 5 tool rounds each take a
//! handful of commits, not one per round. Deterministic: the writer is held until every
//! turn has queued all it will write, then released.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{of_type, TestServer};

const TURNS: usize = 200;
const ROUNDS: usize = 5;

fn commits(server: &TestServer) -> u64 {
    let text = server.state.runtime.metrics.render();
    text.lines()
        .filter(|l| l.starts_with("weft_store_commits_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_turns_share_commits() {
    let mut steps: Vec<Value> = (0..ROUNDS)
        .map(|r| {
            json!({"tool_calls": [
                {"name": "memory_write", "arguments": {"key": "a", "value": format!("{r}")}},
                {"name": "memory_write", "arguments": {"key": "b", "value": format!("{r}")}}]})
        })
        .collect();
    steps.push(json!({"text": "done", "repeat": true}));
    let server =
        TestServer::start(json!({"conversations": [{"match": "*", "steps": steps}]})).await;
    let before = commits(&server);

    let hold = server.store().hold_writes().await;
    let mut clients = Vec::new();
    for _ in 0..TURNS {
        let mut c = server.client().await;
        c.chat(None, "work", json!({})).await;
        clients.push(c);
    }
    // Each turn queues its first round (with its start), holds the rest while that one is
    // in flight, and queues its end: two writes per turn, then it waits for the commit.
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.store().queued_writes() < 2 * TURNS {
        assert!(
            Instant::now() < deadline,
            "only {} writes queued",
            server.store().queued_writes()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.store().queued_writes(), 2 * TURNS);
    drop(hold);

    for c in &mut clients {
        let frames = c.turn().await;
        assert_eq!(
            of_type(&frames, "message").len(),
            1,
            "every turn is reported saved"
        );
    }
    let taken = commits(&server) - before;
    assert!(
        (1..=5).contains(&taken),
        "{TURNS} turns of {ROUNDS} rounds took {taken} commits (one per round would be {})",
        TURNS * (ROUNDS + 1)
    );
    // And everything is there.
    let threads = server.store().threads_of("local").await.unwrap();
    assert_eq!(threads.len(), TURNS);
    let items = server.store().root_items(&threads[0].id).await.unwrap();
    assert_eq!(items.len(), 2 * ROUNDS + 1);
    server.stop().await;
}
