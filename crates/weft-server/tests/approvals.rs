//! Permission modes and live approvals over the socket, with the workspace on disk.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use support::{of_type, thread_of, Client, TestServer};

fn two_writes() -> Value {
    json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.md", "content": "A"}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "b.md", "content": "B"}}]},
        {"text": "done"}
    ]}]})
}

/// Run a turn, answering each approval request with the next decision.
async fn answering(c: &mut Client, decisions: &[&str]) -> Vec<Value> {
    let mut decisions = decisions.iter();
    let mut frames = Vec::new();
    loop {
        let f = c.recv().await;
        if f["type"] == "tool_approval_request" {
            let decision = decisions.next().expect("an unexpected approval request");
            c.send(json!({"type": "tool_approval_response", "tool_call_id": f["tool_call_id"], "decision": decision})).await;
        }
        let done = f["type"] == "chunk" && f["done"] == true;
        frames.push(f);
        if done {
            return frames;
        }
    }
}

fn results(frames: &[Value]) -> Vec<(bool, String)> {
    of_type(frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["status"] == "end")
        .map(|f| {
            (
                f["is_error"].as_bool().unwrap(),
                f["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn allow_runs_the_call_and_records_the_outcome() {
    let server = TestServer::start(two_writes()).await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({})).await;
    let frames = answering(&mut c, &["allow", "allow", "allow"]).await;
    assert_eq!(of_type(&frames, "tool_approval_request").len(), 2);
    let request = of_type(&frames, "tool_approval_request")[0];
    assert_eq!(
        (
            request["name"].as_str(),
            request["category"].as_str(),
            request["args"]["path"].as_str()
        ),
        (Some("write_file"), Some("write"), Some("a.md"))
    );
    assert_eq!(
        std::fs::read_to_string(server.workspace.join("a.md")).unwrap(),
        "A"
    );
    assert_eq!(
        std::fs::read_to_string(server.workspace.join("b.md")).unwrap(),
        "B"
    );
    let thread = thread_of(&frames);
    let approvals = server.store().approvals(&thread).await.unwrap();
    assert_eq!(
        approvals
            .iter()
            .map(|a| a.status.as_str())
            .collect::<Vec<_>>(),
        vec!["approved", "approved"]
    );
    let audit = weft_record::audit::tool_calls(server.store(), &thread)
        .await
        .unwrap();
    assert!(audit
        .iter()
        .all(|r| r.approval_status == "approved" && r.status == "success"));
    server.stop().await;
}

#[tokio::test]
async fn allow_for_this_chat_lasts_for_that_thread_only() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.md", "content": "A"}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "b.md", "content": "B"}}]},
        {"text": "done", "repeat": true}
    ]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({})).await;
    let frames = answering(&mut c, &["allow_for_chat"]).await;
    assert_eq!(
        of_type(&frames, "tool_approval_request").len(),
        1,
        "the second write did not ask"
    );
    assert!(server.workspace.join("b.md").exists());
    // A different thread asks again.
    c.chat(None, "write elsewhere", json!({})).await;
    let frames = answering(&mut c, &["deny", "deny"]).await;
    assert_eq!(of_type(&frames, "tool_approval_request").len(), 2);
    server.stop().await;
}

#[tokio::test]
async fn deny_is_an_error_result_and_nothing_is_written() {
    let server = TestServer::start(two_writes()).await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({})).await;
    let frames = answering(&mut c, &["deny", "deny"]).await;
    let r = results(&frames);
    assert!(
        r.iter()
            .all(|(err, text)| *err && text.starts_with("denied:")),
        "{r:?}"
    );
    assert!(!server.workspace.join("a.md").exists());
    let approvals = server.store().approvals(&thread_of(&frames)).await.unwrap();
    assert_eq!(approvals.len(), 2, "both were asked and recorded");
    assert!(approvals.iter().all(|a| a.status == "rejected"));
    server.stop().await;
}

#[tokio::test]
async fn a_denials_reason_reaches_the_model_and_the_record() {
    let server = TestServer::start(two_writes()).await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({})).await;
    let request = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let id = request.last().unwrap()["tool_call_id"].clone();
    c.send(
        json!({"type": "tool_approval_response", "tool_call_id": id, "decision": "deny",
        "reason": "not on Fridays"}),
    )
    .await;
    let frames = answering(&mut c, &["deny"]).await;
    let seen = server.provider.requests()[1]
        .messages
        .last()
        .unwrap()
        .text();
    assert!(seen.contains("Their reason: not on Fridays"), "{seen}");
    let (_, items) = server
        .get(&format!("/threads/{}/items", thread_of(&frames)), None)
        .await;
    let recorded = items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "tool_result")
        .unwrap();
    assert!(recorded["result"]
        .as_str()
        .unwrap()
        .contains("not on Fridays"));
    server.stop().await;
}

#[tokio::test]
async fn a_person_deciding_does_not_spend_the_wall_clock_and_an_approval_times_out() {
    // The turn may run half a second; the user takes a second and a half to allow.
    let server = TestServer::start_with(two_writes(), |c| c.agent.max_wall_clock_ms = 500).await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({})).await;
    let mut frames = Vec::new();
    loop {
        let f = c.recv().await;
        if f["type"] == "tool_approval_request" {
            tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
            c.send(json!({"type": "tool_approval_response", "tool_call_id": f["tool_call_id"], "decision": "allow"}))
                .await;
        }
        let done = f["type"] == "chunk" && f["done"] == true;
        frames.push(f);
        if done {
            break;
        }
    }
    assert!(of_type(&frames, "budget_exceeded").is_empty(), "{frames:?}");
    assert!(server.workspace.join("a.md").exists() && server.workspace.join("b.md").exists());
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["status"], "completed");
    server.stop().await;

    // Nobody answers: the approval times out after approval_timeout_ms.
    let server =
        TestServer::start_with(two_writes(), |c| c.agent.approval_timeout_ms = Some(200)).await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({})).await;
    let frames = c.turn().await;
    let resolved = of_type(&frames, "tool_approval_resolved");
    assert_eq!(resolved[0]["decision"], "timed_out");
    let end = support::tool_end(&frames);
    assert_eq!(end["metadata"]["approval_status"], "timed_out");
    server.stop().await;
}

#[tokio::test]
async fn an_approval_waits_its_full_timeout_when_its_client_leaves_not_the_detach_grace() {
    // The grace is 200 ms; the approval may wait a minute. The client leaves for a second.
    let server = TestServer::start_with(two_writes(), |c| c.server.detach_grace_ms = 200).await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({})).await;
    let asked = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let thread = thread_of(&asked);
    c.close().await;
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    let stored = server.store().messages(&thread).await.unwrap();
    assert_eq!(stored[1].status, "running", "stopped at the grace");

    // Back: the same approval is asked again, answered, and the turn goes on.
    let mut c = server.client().await;
    c.send(json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}}))
        .await;
    let frames = answering(&mut c, &["allow", "allow", "allow"]).await;
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["status"], "completed", "{frames:?}");
    assert!(server.workspace.join("b.md").exists());

    server.stop().await;
}

#[tokio::test]
async fn plan_never_writes_and_auto_never_asks() {
    let server = TestServer::start(two_writes()).await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({"permission_mode": "plan"}))
        .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "tool_approval_request").is_empty());
    assert!(results(&frames)
        .iter()
        .all(|(err, text)| *err && text.contains("unavailable in plan mode")));
    assert!(!server.workspace.join("a.md").exists());
    let thread = thread_of(&frames);
    assert_eq!(
        server
            .store()
            .thread(&thread)
            .await
            .unwrap()
            .unwrap()
            .permission_mode,
        "plan"
    );
    assert_eq!(
        of_type(&frames, "message")[0]["message"]["permission_mode"],
        "plan"
    );

    c.chat(None, "write", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "tool_approval_request").is_empty());
    assert!(server.workspace.join("a.md").exists() && server.workspace.join("b.md").exists());
    server.stop().await;
}

#[tokio::test]
async fn set_permission_mode_applies_to_the_next_call_and_auto_releases_pending() {
    let server = TestServer::start(two_writes()).await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({})).await;
    let frames = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let thread = thread_of(&frames);
    c.send(json!({"command": "set_permission_mode", "data": {"thread_id": thread, "permission_mode": "auto"}})).await;
    let frames = c.turn().await;
    assert!(
        of_type(&frames, "tool_approval_request").is_empty(),
        "the second write ran without asking"
    );
    assert!(server.workspace.join("a.md").exists() && server.workspace.join("b.md").exists());
    assert_eq!(
        server
            .store()
            .thread(&thread)
            .await
            .unwrap()
            .unwrap()
            .permission_mode,
        "auto"
    );
    server.stop().await;
}

#[tokio::test]
async fn workspace_escapes_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [
            {"name": "write_file", "arguments": {"path": "../escape.txt", "content": "x"}},
            {"name": "write_file", "arguments": {"path": format!("{}/abs.txt", outside.path().display()), "content": "x"}},
            {"name": "write_file", "arguments": {"path": "link/linked.txt", "content": "x"}},
            {"name": "read_file", "arguments": {"path": "link/secret.txt"}}]},
        {"text": "refused"}
    ]}]}))
    .await;
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), server.workspace.join("link")).unwrap();
    let mut c = server.client().await;
    c.chat(None, "escape", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    // The calls run concurrently: match results by what they say, not their order.
    let r = results(&frames);
    assert_eq!(r.len(), 4);
    assert!(r.iter().all(|(is_error, _)| *is_error), "{r:?}");
    for says in ["`..`", "absolute", "outside the workspace"] {
        assert!(
            r.iter().any(|(_, text)| text.contains(says)),
            "{says}: {r:?}"
        );
    }
    assert!(
        r.iter().all(|(_, text)| !text.contains("top secret")),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        1,
        "nothing was written outside"
    );
    assert!(!server
        .workspace
        .parent()
        .unwrap()
        .join("escape.txt")
        .exists());
    server.stop().await;
}

#[tokio::test]
async fn a_model_call_is_on_record_while_its_turn_waits_for_a_person() {
    let server = TestServer::start(two_writes()).await;
    let mut c = server.client().await;
    c.chat(None, "write", json!({})).await;
    let frames = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let thread = thread_of(&frames);
    // The write that stores the approval carries the call before it; it lands while the
    // turn waits (the request does not wait for it).
    let mut calls = Vec::new();
    for _ in 0..100 {
        calls = server.store().model_calls(&thread).await.unwrap();
        if !calls.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        calls
            .iter()
            .map(|c| (c.model.as_str(), c.tool_calls, c.error.is_none()))
            .collect::<Vec<_>>(),
        [("scripted", 1, true)]
    );
    c.send(json!({"command": "stop", "data": {"thread_id": thread}}))
        .await;
    c.recv_until(|f| f["type"] == "chunk" && f["done"] == true)
        .await;
    server.stop().await;
}
