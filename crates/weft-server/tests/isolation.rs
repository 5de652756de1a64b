//! Two users can never see or drive each other's threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::{thread_of, TestServer};
use weft_server::config::ApiKeyEntry;

#[tokio::test]
async fn users_cannot_see_or_drive_each_others_threads() {
    let server = TestServer::start_with(
        json!({"conversations": [{"match": "*", "steps": [
            {"tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "a.md", "content": "A"}}]},
            {"text": "done", "repeat": true}]}]}),
        |c| {
            c.auth.api_keys = vec![
                ApiKeyEntry { key: "k-alice".into(), user: "alice".into() },
                ApiKeyEntry { key: "k-bob".into(), user: "bob".into() },
            ]
        },
    )
    .await;
    let mut alice = server.client_with_key(Some("k-alice")).await.unwrap();
    let mut bob = server.client_with_key(Some("k-bob")).await.unwrap();

    alice.chat(None, "alice's secret plan", json!({})).await;
    let frames = alice
        .recv_until(|f| f["type"] == "tool_approval_request")
        .await;
    let thread = thread_of(&frames);
    let approval = frames.last().unwrap()["tool_call_id"].clone();

    // Bob cannot answer Alice's approval, stop her turn, change her mode, resume or post.
    bob.send(
        json!({"type": "tool_approval_response", "tool_call_id": approval, "decision": "allow"}),
    )
    .await;
    assert_eq!(bob.recv().await["code"], "forbidden");
    for command in [
        json!({"command": "stop", "data": {"thread_id": thread}}),
        json!({"command": "set_permission_mode", "data": {"thread_id": thread, "permission_mode": "auto"}}),
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}}),
        json!({"command": "chat_message", "data": {"thread_id": thread, "content": "hijack"}}),
    ] {
        bob.send(command.clone()).await;
        let reply = bob.recv().await;
        assert_eq!(reply["code"], "forbidden", "{command}");
    }
    // Bob saw none of Alice's frames.
    bob.send(json!({"type": "ping"})).await;
    assert_eq!(bob.recv().await["type"], "pong");

    // REST: Bob's list is empty and Alice's messages are refused to him.
    let (_, bobs) = server.get("/threads", Some("k-bob")).await;
    assert_eq!(bobs, json!([]));
    let (status, _) = server
        .get(&format!("/threads/{thread}/messages"), Some("k-bob"))
        .await;
    assert_eq!(status, 403);
    let resp = reqwest::Client::new()
        .delete(server.url(&format!("/threads/{thread}")))
        .bearer_auth("k-bob")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);

    // Alice's turn is untouched: she approves and it finishes.
    alice
        .send(json!({"type": "tool_approval_response", "tool_call_id": approval, "decision": "allow"}))
        .await;
    alice.turn().await;
    assert!(server.workspace_of("alice").join("a.md").exists());
    assert!(!server.workspace_of("bob").join("a.md").exists());
    let (_, alices) = server.get("/threads", Some("k-alice")).await;
    assert_eq!(alices[0]["id"], thread.as_str());
    let (status, messages) = server
        .get(&format!("/threads/{thread}/messages"), Some("k-alice"))
        .await;
    assert_eq!((status, messages.as_array().unwrap().len()), (200, 2));
    assert_eq!(
        server
            .store()
            .thread(&thread)
            .await
            .unwrap()
            .unwrap()
            .permission_mode,
        "default"
    );
    server.stop().await;
}

#[tokio::test]
async fn deleting_a_thread_removes_it_and_its_records() {
    let server =
        TestServer::start(json!({"conversations": [{"match": "*", "steps": [{"text": "hi"}]}]}))
            .await;
    let mut c = server.client().await;
    c.chat(None, "hello", json!({})).await;
    let thread = thread_of(&c.turn().await);
    let resp = reqwest::Client::new()
        .delete(server.url(&format!("/threads/{thread}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let (status, _) = server
        .get(&format!("/threads/{thread}/messages"), None)
        .await;
    assert_eq!(status, 404);
    assert!(server
        .store()
        .model_calls(&thread)
        .await
        .unwrap()
        .is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_thread_is_renamed_by_its_owner_only() {
    let server = TestServer::start_with(
        json!({"conversations": [{"match": "*", "steps": [{"text": "hi", "repeat": true}]}]}),
        |c| {
            c.auth.api_keys = vec![
                ApiKeyEntry {
                    key: "k-alice".into(),
                    user: "alice".into(),
                },
                ApiKeyEntry {
                    key: "k-bob".into(),
                    user: "bob".into(),
                },
            ]
        },
    )
    .await;
    let mut alice = server.client_with_key(Some("k-alice")).await.unwrap();
    alice.chat(None, "hello there", json!({})).await;
    let thread = thread_of(&alice.turn().await);
    let path = format!("/threads/{thread}");
    let patch = reqwest::Method::PATCH;

    let (status, body) = server
        .call(
            patch.clone(),
            &path,
            Some("k-alice"),
            Some(json!({"title": "  Trip plans "})),
        )
        .await;
    assert_eq!(
        (status, &body["title"], &body["id"]),
        (200, &json!("Trip plans"), &json!(thread))
    );
    let (_, listed) = server.get("/threads", Some("k-alice")).await;
    assert_eq!(listed[0]["title"], "Trip plans");

    for bad in [
        json!({"title": "   "}),
        json!({"title": "x".repeat(201)}),
        json!({"name": "x"}),
    ] {
        let (status, body) = server
            .call(patch.clone(), &path, Some("k-alice"), Some(bad))
            .await;
        assert_eq!(status, 422, "{body}");
    }
    let (status, _) = server
        .call(
            patch.clone(),
            &path,
            Some("k-bob"),
            Some(json!({"title": "mine now"})),
        )
        .await;
    assert!(status == 403 || status == 404, "{status}");
    let (status, _) = server
        .call(
            patch,
            "/threads/nope",
            Some("k-alice"),
            Some(json!({"title": "x"})),
        )
        .await;
    assert_eq!(status, 404);
    let (_, listed) = server.get("/threads", Some("k-alice")).await;
    assert_eq!(listed[0]["title"], "Trip plans");
    server.stop().await;
}

#[tokio::test]
async fn health_and_metrics() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "memory_list", "arguments": {}}], "usage": {"input_tokens": 10, "output_tokens": 2}},
        {"text": "hi", "usage": {"input_tokens": 12, "output_tokens": 1}}]}]}))
    .await;
    let (status, body) = server.get("/healthz", None).await;
    let (_, needed) = server.store().schema_versions().await.unwrap();
    let replica = body["replica"]
        .as_str()
        .expect("healthz names its replica")
        .to_string();
    assert!(!replica.is_empty());
    assert_eq!(
        (status, body),
        (
            200,
            json!({"status": "ok", "provider": "scripted", "demo": false, "schema": needed,
                   "mcp": {}, "replica": replica, "turns": 0, "bus": null})
        )
    );
    let mut c = server.client().await;
    c.chat(None, "hello", json!({})).await;
    c.turn().await;
    let (_, metrics) = server.get("/metrics", None).await;
    let text = metrics.as_str().unwrap();
    for line in [
        "weft_turns_total{end=\"completed\"} 1",
        "weft_tool_calls_total 1",
        "weft_model_calls_total 2",
        "weft_tokens_total{direction=\"input\"} 22",
        "weft_tokens_total{direction=\"output\"} 3",
        "weft_open_sockets 1",
        "weft_leases_taken_total 0",
        "weft_leases_held 0",
        "weft_leases_lost_total 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    server.stop().await;
}

#[tokio::test]
async fn health_fails_on_a_database_without_the_current_schema() {
    let server = TestServer::start(json!({"conversations": []})).await;
    assert_eq!(server.get("/healthz", None).await.0, 200);
    weft_store::testing::forget_latest_migration(server.store())
        .await
        .unwrap();
    let (status, body) = server.get("/healthz", None).await;
    assert_eq!(status, 503);
    assert_eq!(body["status"], "database schema out of date");
    let needed = body["needed"].as_i64().unwrap();
    assert_eq!(body["schema"].as_i64(), Some(needed - 1));
    server.stop().await;
}
