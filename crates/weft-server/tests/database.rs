//! The server when its database misbehaves under it: every connection terminated during a
//! turn (a PostgreSQL restart, a failover, an idle-connection killer), and a thread deleted
//! while its turn is still streaming.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::{of_type, thread_of, use_sqlite, TestServer};

/// A turn that streams for a while, calls a tool, then answers.
fn slow_turn() -> Value {
    json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["one ", "two ", "three ", "four ", "five ", "six "], "chunk_delay_ms": 40,
         "tool_calls": [{"name": "memory_write", "arguments": {"key": "k", "value": "v"}}]},
        {"chunks": ["done ", "now"], "chunk_delay_ms": 40}
    ]}]})
}

#[tokio::test]
async fn connections_terminated_mid_turn_lose_nothing() {
    if use_sqlite() {
        return; // SQLite's connections are files; nothing terminates them.
    }
    let server = TestServer::start(slow_turn()).await;
    let url = server.database_url();
    let mut c = server.client().await;
    for round in 0..5 {
        c.chat(None, &format!("round {round}"), json!({})).await;
        let mut frames = c
            .recv_until(|f| {
                f["type"] == "chunk" && f["content"].as_str().is_some_and(|c| c.contains("two"))
            })
            .await;
        let ended = weft_store::testing::terminate_connections(&url)
            .await
            .unwrap();
        assert!(ended > 0, "the server had connections to end");
        frames.extend(c.turn().await);
        assert!(
            of_type(&frames, "error").is_empty(),
            "round {round}: {frames:?}"
        );
        let message = &of_type(&frames, "message")[0]["message"];
        assert_eq!(message["status"], "completed");
        assert_eq!(message["content"], "one two three four five six done now");
        let thread = thread_of(&frames);
        let stored = server.store().messages(&thread).await.unwrap();
        assert_eq!(stored.len(), 2, "round {round}");
        assert_eq!(stored[1].status, "completed");
        let items = server.store().root_items(&thread).await.unwrap();
        assert_eq!(items.len(), 3, "response, result, answer");

        // Pooled connections that died while idle are replaced, not handed to a request.
        weft_store::testing::terminate_connections(&url)
            .await
            .unwrap();
        for path in ["/threads".to_owned(), format!("/threads/{thread}/messages")] {
            let (status, body) = server.get(&path, None).await;
            assert_eq!(status, 200, "round {round} {path}: {body}");
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn a_thread_deleted_while_its_turn_streams_stays_deleted() {
    let server = TestServer::start(slow_turn()).await;
    let mut c = server.client().await;
    for round in 0..6 {
        c.chat(None, &format!("round {round}"), json!({})).await;
        let frames = c
            .recv_until(|f| {
                f["type"] == "chunk" && f["content"].as_str().is_some_and(|c| c.contains("three"))
            })
            .await;
        let thread = thread_of(&frames);
        let (status, _) = server
            .call(
                reqwest::Method::DELETE,
                &format!("/threads/{thread}"),
                None,
                None,
            )
            .await;
        assert_eq!(status, 204);
        // Whatever the turn still had to say, it is over and nothing of it is kept.
        c.turn().await;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(
            server.store().thread(&thread).await.unwrap().is_none(),
            "round {round}"
        );
        assert!(server.store().messages(&thread).await.unwrap().is_empty());
        assert!(server.store().root_items(&thread).await.unwrap().is_empty());
        let (status, _) = server
            .get(&format!("/threads/{thread}/messages"), None)
            .await;
        assert_eq!(status, 404);
    }
    server.stop().await;
}
