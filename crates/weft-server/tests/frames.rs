//! Bad input gets a clear error and the socket stays usable; oversize closes with 1009;
//! auth refuses bad keys and closes revoked sessions with 4001.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::{text_of, TestServer};
use weft_server::config::ApiKeyEntry;

fn ok_script() -> serde_json::Value {
    json!({"conversations": [{"match": "*", "steps": [{"text": "fine", "repeat": true}]}]})
}

#[tokio::test]
async fn every_bad_frame_gets_its_code_and_the_socket_stays_open() {
    let server = TestServer::start(ok_script()).await;
    let mut c = server.client().await;
    let cases = [
        ("{not json", "invalid_json", None),
        ("[1,2]", "invalid_json", None),
        (
            r#"{"command":"fly","request_id":"r7"}"#,
            "unknown_command",
            Some("r7"),
        ),
        (r#"{"type":"teleport"}"#, "unknown_command", None),
        (r#"{"hello":"world"}"#, "unknown_command", None),
        (
            r#"{"command":"stop","request_id":"r8","data":{}}"#,
            "invalid_field",
            Some("r8"),
        ),
        (
            r#"{"command":"set_permission_mode","data":{"thread_id":"t","permission_mode":"yolo"}}"#,
            "invalid_field",
            None,
        ),
        (
            r#"{"type":"tool_approval_response","tool_call_id":"c","decision":"maybe"}"#,
            "invalid_field",
            None,
        ),
        (
            r#"{"type":"tool_approval_response","tool_call_id":"nobody","decision":"allow"}"#,
            "invalid_field",
            None,
        ),
        (
            r#"{"type":"tool_result","tool_call_id":"nobody","ok":true}"#,
            "invalid_field",
            None,
        ),
        (
            r#"{"command":"chat_message","data":{"content":""}}"#,
            "invalid_field",
            None,
        ),
        (
            r#"{"command":"chat_message","data":{"content":"x","provider":"nope"}}"#,
            "invalid_field",
            None,
        ),
        (
            r#"{"command":"stop","data":{"thread_id":"missing"}}"#,
            "thread_not_found",
            None,
        ),
        (
            r#"{"command":"resume_chat","data":{"thread_id":"missing","last_seq":0}}"#,
            "thread_not_found",
            None,
        ),
    ];
    for (frame, code, request_id) in cases {
        c.send_text(frame).await;
        let reply = c.recv().await;
        assert_eq!(reply["type"], "error", "{frame}");
        assert_eq!(reply["code"], code, "{frame}: {reply}");
        assert_eq!(reply["request_id"].as_str(), request_id, "{frame}");
        assert!(!reply["message"].as_str().unwrap().is_empty());
    }
    c.send(json!({"type": "ping"})).await;
    assert_eq!(c.recv().await, json!({"type": "pong"}));
    c.chat(None, "still works", json!({})).await;
    assert_eq!(text_of(&c.turn().await), "fine");
    let (_, metrics) = server.get("/metrics", None).await;
    assert!(
        metrics
            .as_str()
            .unwrap()
            .contains("weft_errors_total{code=\"invalid_json\"} 2"),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_frame_closes_with_1009() {
    let server = TestServer::start_with(ok_script(), |c| c.server.max_frame_bytes = 1024).await;
    let mut c = server.client().await;
    c.send_text(&format!(
        "{{\"command\":\"chat_message\",\"data\":{{\"content\":\"{}\"}}}}",
        "x".repeat(2000)
    ))
    .await;
    let closed = c.recv().await;
    assert_eq!(closed["type"], "__closed");
    assert_eq!(closed["code"], 1009);
    // Far over tungstenite's own cap too.
    let mut c = server.client().await;
    c.send_text(&"y".repeat(200_000)).await;
    let closed = c.recv().await;
    assert_eq!(
        (closed["type"].as_str(), closed["code"].as_u64()),
        (Some("__closed"), Some(1009))
    );
    server.stop().await;
}

#[tokio::test]
async fn keys_are_required_when_configured_and_revocation_closes_with_4001() {
    let server = TestServer::start_with(ok_script(), |c| {
        c.auth.api_keys = vec![ApiKeyEntry {
            key: "k-alice".into(),
            user: "alice".into(),
        }];
        c.server.auth_recheck_ms = 50;
    })
    .await;
    assert_eq!(server.client_with_key(None).await.err(), Some(401));
    assert_eq!(server.client_with_key(Some("wrong")).await.err(), Some(401));
    let (status, _) = server.get("/threads", None).await;
    assert_eq!(status, 401);
    let (status, _) = server.get("/threads?api_key=k-alice", None).await;
    assert_eq!(status, 200);

    let mut c = server.client_with_key(Some("k-alice")).await.unwrap();
    c.chat(None, "hello", json!({})).await;
    assert_eq!(text_of(&c.turn().await), "fine");
    server.store().revoke_api_key("k-alice").await.unwrap();
    let closed = c.recv_until(|f| f["type"] == "__closed").await;
    assert_eq!(closed.last().unwrap()["code"], 4001);
    server.stop().await;
}

#[tokio::test]
async fn no_keys_on_a_loopback_bind_is_the_local_user() {
    let server = TestServer::start(ok_script()).await;
    let mut c = server.client().await;
    c.chat(None, "hi", json!({})).await;
    let thread = support::thread_of(&c.turn().await);
    assert_eq!(
        server.store().thread(&thread).await.unwrap().unwrap().owner,
        "local"
    );
    server.stop().await;
}
