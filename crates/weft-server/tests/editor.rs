//! The editor context over a real socket: `build_workflow` (only in the editor, only with a
//! registry; planned against the catalogue, repaired while invalid) and the client's own
//! `ui_*` tools (through the gate, `tool_call` out, `tool_result` back, timeout, disconnect).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use support::{of_type, text_of, thread_of, Client, TestServer};
use weft_server::config::ApiKeyEntry;

/// A graph with a dangling edge (no node `nowhere`): the first plan.
fn broken_graph() -> Value {
    json!({"nodes": [
        {"id": "who", "type": "input.text", "inputs": {"name": "name"}},
        {"id": "out", "type": "output", "inputs": {"name": "greeting"}}
    ], "edges": [{"from": "nowhere", "output": "text", "to": "out", "input": "value"}]})
}

fn good_graph() -> Value {
    json!({"nodes": [
        {"id": "who", "type": "input.text", "inputs": {"name": "name"}},
        {"id": "greet", "type": "text.template", "inputs": {"template": "Hello {{ who }}"}},
        {"id": "out", "type": "output", "inputs": {"name": "greeting"}}
    ], "edges": [
        {"from": "who", "output": "value", "to": "greet", "input": "who"},
        {"from": "greet", "output": "text", "to": "out", "input": "value"}
    ]})
}

fn script() -> Value {
    json!({"conversations": [
        // build_workflow's own model calls: a broken plan, then the repair.
        {"match": "Objective: greet people", "steps": [
            {"text": broken_graph().to_string()},
            {"text": format!("```json\n{}\n```", good_graph())}]},
        {"match": "build a greeter", "steps": [
            {"tool_calls": [{"id": "bw", "name": "build_workflow", "arguments": {"objective": "greet people"}}]},
            {"tool_calls": [{"id": "up", "name": "ui_paste_graph", "arguments": {"graph": good_graph()}}]},
            {"text": "built and shown", "repeat": true}]},
        {"match": "add a node", "steps": [
            {"tool_calls": [{"id": "an", "name": "ui_add_node", "arguments": {"type": "output"}}]},
            {"text": "added", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

fn manifest() -> Value {
    json!({"type": "client_tools_manifest", "tools": [
        {"name": "ui_add_node", "description": "Add a node to the open graph",
         "parameters": {"type": "object", "properties": {"type": {"type": "string"}}, "required": ["type"]}},
        {"name": "ui_paste_graph", "description": "Replace the open graph",
         "parameters": {"type": "object", "properties": {"graph": {"type": "object"}}, "required": ["graph"]}},
        {"name": "ui_get_graph", "description": "The open graph", "category": "read"}
    ]})
}

fn editor(mode: &str) -> Value {
    json!({"chat_context": {"kind": "editor", "workflow_id": null}, "permission_mode": mode})
}

fn tool_names(server: &TestServer) -> Vec<String> {
    let request = server.provider.requests().pop().unwrap();
    request.tools.iter().map(|t| t.name.clone()).collect()
}

async fn server_with(configure: impl FnOnce(&mut weft_server::config::Config)) -> TestServer {
    TestServer::start_with(script(), configure).await
}

/// Answer every `tool_call` with `result` until the turn ends.
async fn answer_calls(c: &mut Client, result: Value) -> Vec<Value> {
    let mut frames = Vec::new();
    loop {
        let frame = c.recv().await;
        if frame["type"] == "tool_call" {
            c.send(json!({"type": "tool_result", "tool_call_id": frame["tool_call_id"], "ok": true, "result": result}))
                .await;
        }
        let done = frame["type"] == "chunk" && frame["done"] == true;
        frames.push(frame);
        if done {
            return frames;
        }
    }
}

#[tokio::test]
async fn build_workflow_and_ui_tools_exist_only_in_the_editor() {
    let server = server_with(|_| {}).await;
    let mut c = server.client().await;
    c.send(manifest()).await;
    c.chat(None, "hello", json!({})).await;
    c.turn().await;
    let thread = tool_names(&server);
    assert!(thread.contains(&"run_workflow".to_owned()));
    assert!(!thread
        .iter()
        .any(|n| n == "build_workflow" || n.starts_with("ui_")));

    c.chat(None, "hello", editor("default")).await;
    c.turn().await;
    let editor = tool_names(&server);
    for name in [
        "build_workflow",
        "ui_add_node",
        "ui_paste_graph",
        "ui_get_graph",
    ] {
        assert!(editor.contains(&name.to_owned()), "{name} in {editor:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn without_a_registry_the_editor_tools_and_workflows_are_omitted() {
    let (_logs_guard, logs) = support::capture_logs();
    let server = server_with(|c| c.workflow.enabled = false).await;
    let mut c = server.client().await;
    c.send(manifest()).await;
    c.chat(None, "hello", editor("auto")).await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");
    let names = tool_names(&server);
    assert!(!names
        .iter()
        .any(|n| n == "build_workflow" || n.starts_with("ui_") || n == "run_workflow"));
    assert!(names.contains(&"read_file".to_owned()));
    // The operator hears why the editor's tools are missing.
    assert!(
        logs.text()
            .contains("an editor chat on a server without a node registry"),
        "{}",
        logs.text()
    );

    c.chat(
        None,
        "run it",
        json!({"workflow_target": "workflow", "workflow_id": "wf_x"}),
    )
    .await;
    let error = c.recv_until(|f| f["type"] == "error").await.pop().unwrap();
    assert_eq!(error["code"], "unsupported_route");
    let (status, body) = server.get("/node-types", None).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (404, json!("workflows_disabled"))
    );
    server.stop().await;
}

#[tokio::test]
async fn build_workflow_repairs_an_invalid_plan_and_the_page_gets_the_graph() {
    let server = server_with(|_| {}).await;
    let mut c = server.client().await;
    c.send(manifest()).await;
    c.chat(None, "build a greeter", editor("auto")).await;
    let frames = answer_calls(&mut c, json!("pasted")).await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");

    // Two plans (the first invalid), each asked for JSON matching the graph schema.
    let requests = server.provider.requests();
    let plans: Vec<_> = requests
        .iter()
        .filter(|r| r.messages[0].text().starts_with("Objective: greet people"))
        .collect();
    assert_eq!(plans.len(), 2);
    assert!(plans.iter().all(|r| r.response_schema.is_some()));
    assert!(
        plans[0].system.contains("text.template"),
        "the catalogue is in the prompt"
    );
    let repair = plans[1].messages.last().unwrap().text();
    assert!(repair.contains("nowhere"), "{repair}");

    // The builder's planning frames sit under its call, apart from a planner's.
    let results = of_type(&frames, "tool_call_update");
    let built = results
        .iter()
        .find(|f| f["name"] == "build_workflow" && f["status"] == "end")
        .expect("build_workflow completed");
    let updates: Vec<(&str, &Value)> = of_type(&frames, "planning_update")
        .iter()
        .map(|f| (f["status"].as_str().unwrap(), &f["parent_id"]))
        .collect();
    let call_id = &built["tool_call_id"];
    assert_eq!(
        updates,
        [
            ("started", call_id),
            ("started", call_id),
            ("done", call_id)
        ]
    );

    // The built graph is the tool's result; the page was asked to paste it.
    let graph: Value = serde_json::from_str(built["result"].as_str().unwrap()).unwrap();
    assert_eq!(graph["graph"], good_graph());
    let call = of_type(&frames, "tool_call")[0].clone();
    assert_eq!(
        (call["name"].clone(), call["args"]["graph"].clone()),
        (json!("ui_paste_graph"), good_graph())
    );
    assert_eq!(call["depth"], 0);
    assert!(text_of(&frames).contains("built and shown"));
    server.stop().await;
}

#[tokio::test]
async fn a_client_tool_asks_in_default_mode_then_round_trips() {
    let server = server_with(|_| {}).await;
    let mut c = server.client().await;
    c.send(manifest()).await;
    c.chat(None, "add a node", editor("default")).await;
    let asked = c
        .recv_until(|f| f["type"] == "tool_approval_request" || f["type"] == "tool_call")
        .await
        .pop()
        .unwrap();
    assert_eq!(
        asked["type"], "tool_approval_request",
        "write tools ask first"
    );
    c.send(json!({"type": "tool_approval_response", "tool_call_id": asked["tool_call_id"], "decision": "allow"}))
        .await;
    let call = c
        .recv_until(|f| f["type"] == "tool_call")
        .await
        .pop()
        .unwrap();
    assert_eq!(call["args"], json!({"type": "output"}));
    assert_eq!(call["tool_call_id"], asked["tool_call_id"]);
    c.send(json!({"type": "tool_result", "tool_call_id": call["tool_call_id"], "ok": true, "result": {"node_id": "n7"}}))
        .await;
    let frames = c.turn().await;
    assert!(text_of(&frames).contains("added"));
    let last = server.provider.requests().pop().unwrap();
    let result = last.messages.last().unwrap().text();
    assert_eq!(result, r#"{"node_id":"n7"}"#);

    // An answer nobody waits for is refused with a clear error.
    c.send(json!({"type": "tool_result", "tool_call_id": call["tool_call_id"], "ok": true}))
        .await;
    let error = c.recv_until(|f| f["type"] == "error").await.pop().unwrap();
    assert_eq!(error["code"], "invalid_field");
    server.stop().await;
}

#[tokio::test]
async fn a_client_error_a_silent_client_and_a_bad_manifest_each_end_clearly() {
    let server = server_with(|c| c.agent.client_tool_timeout_ms = 300).await;
    let mut c = server.client().await;
    c.send(json!({"type": "client_tools_manifest", "tools": [{"name": "add_node"}]}))
        .await;
    let error = c.recv_until(|f| f["type"] == "error").await.pop().unwrap();
    assert_eq!(error["code"], "invalid_field");
    assert!(error["message"].as_str().unwrap().contains("ui_"));

    c.send(manifest()).await;
    c.chat(None, "add a node", editor("auto")).await;
    let call = c
        .recv_until(|f| f["type"] == "tool_call")
        .await
        .pop()
        .unwrap();
    c.send(json!({"type": "tool_result", "tool_call_id": call["tool_call_id"], "ok": false, "error": "no such node type"}))
        .await;
    c.turn().await;
    let result = server.provider.requests().pop().unwrap();
    assert!(result
        .messages
        .last()
        .unwrap()
        .text()
        .contains("no such node type"));

    // Nobody answers: the call ends with an error after the timeout, the turn goes on.
    c.chat(None, "add a node", editor("auto")).await;
    let frames = c.turn().await;
    assert_eq!(of_type(&frames, "tool_call").len(), 1);
    let result = server.provider.requests().pop().unwrap();
    assert!(result
        .messages
        .last()
        .unwrap()
        .text()
        .contains("did not answer `ui_add_node` within 300 ms"));
    assert!(server.state.runtime.client_calls.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_disconnects_fails_its_call_and_the_turn_is_kept() {
    let server = server_with(|c| c.server.detach_grace_ms = 10_000).await;
    let mut c = server.client().await;
    c.send(manifest()).await;
    c.chat(None, "add a node", editor("auto")).await;
    let frames = c.recv_until(|f| f["type"] == "tool_call").await;
    let thread = thread_of(&frames);
    c.close().await;

    // The call fails at once with "disconnected"; the model answers; the turn is stored.
    let mut items = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        items = server
            .get(&format!("/threads/{thread}/items"), None)
            .await
            .1;
        if items.to_string().contains("added") {
            break;
        }
    }
    let text = items.to_string();
    assert!(
        text.contains("disconnected before answering `ui_add_node`"),
        "{text}"
    );
    assert!(text.contains("added"), "{text}");
    assert!(server.state.runtime.client_calls.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn another_user_cannot_answer_a_client_call() {
    let server = server_with(|c| {
        c.agent.client_tool_timeout_ms = 2_000;
        c.auth.api_keys = vec![
            ApiKeyEntry {
                key: "k-alice".into(),
                user: "alice".into(),
            },
            ApiKeyEntry {
                key: "k-bob".into(),
                user: "bob".into(),
            },
        ];
    })
    .await;
    let mut alice = server.client_with_key(Some("k-alice")).await.unwrap();
    let mut bob = server.client_with_key(Some("k-bob")).await.unwrap();
    alice.send(manifest()).await;
    alice.chat(None, "add a node", editor("auto")).await;
    let call = alice
        .recv_until(|f| f["type"] == "tool_call")
        .await
        .pop()
        .unwrap();
    bob.send(json!({"type": "tool_result", "tool_call_id": call["tool_call_id"], "ok": true, "result": "hijacked"}))
        .await;
    let error = bob
        .recv_until(|f| f["type"] == "error")
        .await
        .pop()
        .unwrap();
    assert_eq!(error["code"], "invalid_field");
    alice
        .send(json!({"type": "tool_result", "tool_call_id": call["tool_call_id"], "ok": true, "result": "mine"}))
        .await;
    alice.turn().await;
    let result = server.provider.requests().pop().unwrap();
    assert_eq!(result.messages.last().unwrap().text(), "mine");
    server.stop().await;
}

#[tokio::test]
async fn the_model_is_told_it_is_in_the_editor_and_which_workflow_is_open() {
    let server = server_with(|c| {
        c.auth.api_keys = vec![
            ApiKeyEntry {
                key: "k-alice".into(),
                user: "alice".into(),
            },
            ApiKeyEntry {
                key: "k-bob".into(),
                user: "bob".into(),
            },
        ];
    })
    .await;
    let body = json!({"name": "greeter", "description": "Greets people", "graph": good_graph()});
    let (status, created) = server
        .call(
            reqwest::Method::POST,
            "/workflows",
            Some("k-alice"),
            Some(body),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let mut alice = server.client_with_key(Some("k-alice")).await.unwrap();

    let open = json!({"chat_context": {"kind": "editor", "workflow_id": id}});
    alice.chat(None, "hello", open.clone()).await;
    alice.turn().await;
    let system = server.provider.requests().pop().unwrap().system;
    assert!(
        system.contains("build_workflow") && system.contains("ui_get_graph"),
        "{system}"
    );
    assert!(
        system.contains(&format!("\"greeter\" (workflow_id `{id}`): Greets people")),
        "{system}"
    );
    let shown = system
        .split("```json\n")
        .nth(1)
        .unwrap()
        .split("\n```")
        .next()
        .unwrap();
    let shown: Value = serde_json::from_str(shown).unwrap();
    let (_, saved) = server
        .get(&format!("/workflows/{id}"), Some("k-alice"))
        .await;
    assert_eq!(shown, saved["graph"], "the graph as saved");

    // No workflow open: the guidance alone; outside the editor: none of it.
    alice.chat(None, "hello", editor("default")).await;
    alice.turn().await;
    let system = server.provider.requests().pop().unwrap().system;
    assert!(system.contains("No saved workflow is open"), "{system}");
    alice.chat(None, "hello", json!({})).await;
    alice.turn().await;
    let system = server.provider.requests().pop().unwrap().system;
    assert!(!system.contains("workflow editor"), "{system}");

    // Someone else's workflow, or none by that id, is not opened: the turn is refused.
    let mut bob = server.client_with_key(Some("k-bob")).await.unwrap();
    for (client, workflow_id) in [(&mut bob, id), (&mut alice, "wf_missing")] {
        let context = json!({"chat_context": {"kind": "editor", "workflow_id": workflow_id}});
        client.chat(None, "hello", context).await;
        let reply = client.recv_until(|f| f["type"] == "error").await;
        assert_eq!(
            reply.last().unwrap()["code"],
            "workflow_not_found",
            "{reply:?}"
        );
        assert!(of_type(&reply, "turn_started").is_empty());
    }
    server.stop().await;
}
