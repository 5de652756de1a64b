//! Workflows over real HTTP and a real socket: node types, saved graphs (validated on save),
//! REST runs, route 1 (a run as a turn of its thread, gated by the thread's mode, stoppable),
//! and the workflow tools inside a chat turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use reqwest::Method;
use serde_json::{json, Value};
use support::{of_type, text_of, thread_of, Client, TestServer};
use weft_server::config::ApiKeyEntry;

const ALICE: Option<&str> = Some("k-alice");
const BOB: Option<&str> = Some("k-bob");

fn script() -> Value {
    json!({"conversations": [
        {"match": "slow model", "steps": [{"text": "late", "delay_ms": 3000}]},
        {"match": "run the greeter", "steps": [
            {"tool_calls": [{"id": "rw", "name": "run_workflow", "arguments": {"workflow_id": "WF", "params": {"name": "Ada"}}}]},
            {"text": "ran it", "repeat": true}]},
        {"match": "one node", "steps": [
            {"tool_calls": [{"id": "rn", "name": "run_node", "arguments": {"node_type": "text.template", "inputs": {"template": "{{ a }}+{{ b }}", "a": 1, "b": 2}}}]},
            {"text": "done", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

async fn server() -> TestServer {
    server_with(|_| {}).await
}

async fn server_with(configure: impl FnOnce(&mut weft_server::Config)) -> TestServer {
    TestServer::start_with(script(), |c| {
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
        configure(c);
    })
    .await
}

/// input.text `name` → a greeting → written to `greeting.md` → outputs.
fn greeter() -> Value {
    json!({"name": "greeter", "description": "greets", "graph": {
    "nodes": [
        {"id": "who", "type": "input.text", "inputs": {"name": "name"}},
        {"id": "greet", "type": "text.template", "inputs": {"template": "Hello {{ who }}"}},
        {"id": "save", "type": "write_file", "inputs": {"path": "greeting.md"}},
        {"id": "said", "type": "output", "inputs": {"name": "greeting"}},
        {"id": "saved", "type": "output", "inputs": {"name": "saved"}}
    ],
    "edges": [
        {"from": "who", "output": "value", "to": "greet", "input": "who"},
        {"from": "greet", "output": "text", "to": "save", "input": "content"},
        {"from": "greet", "output": "text", "to": "said", "input": "value"},
        {"from": "save", "output": "result", "to": "saved", "input": "value"}
    ]}})
}

async fn save(server: &TestServer, body: Value) -> String {
    let (status, created) = server
        .call(Method::POST, "/workflows", ALICE, Some(body))
        .await;
    assert_eq!(status, 201, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn node_types_saved_graphs_and_rest_runs() {
    let server = server().await;
    let (status, types) = server.get("/node-types", ALICE).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = types
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    for expected in [
        "input.text",
        "output",
        "text.template",
        "llm.prompt",
        "json.extract",
        "control.if",
        "list.map",
        "read_file",
        "write_file",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    assert!(!names.contains(&"run_workflow") && !names.contains(&"run_subtask"));
    let write = types
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "write_file")
        .unwrap();
    assert_eq!(
        (
            write["category"].as_str(),
            write["inputs"]["required"].clone()
        ),
        (Some("write"), json!(["path", "content"]))
    );
    let (_, found) = server.get("/node-types?query=template", ALICE).await;
    assert_eq!(found.as_array().unwrap().len(), 1);

    // An invalid graph is refused, naming node and port.
    let mut bad = greeter();
    bad["graph"]["edges"][0]["output"] = json!("nope");
    let (status, body) = server
        .call(Method::POST, "/workflows", ALICE, Some(bad))
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["code"], "invalid_graph");
    assert_eq!(
        (
            body["error"]["node"].as_str(),
            body["error"]["port"].as_str()
        ),
        (Some("who"), Some("nope"))
    );

    let id = save(&server, greeter()).await;
    let (status, fetched) = server.get(&format!("/workflows/{id}"), ALICE).await;
    assert_eq!((status, fetched["name"].as_str()), (200, Some("greeter")));
    assert_eq!(server.get(&format!("/workflows/{id}"), BOB).await.0, 404);
    let (_, listed) = server.get("/workflows", ALICE).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(server.get("/workflows", BOB).await.1, json!([]));

    // A REST run: Auto for the caller's own run.
    let (status, run) = server
        .call(
            Method::POST,
            &format!("/workflows/{id}/runs"),
            ALICE,
            Some(json!({"params": {"name": "Ada"}})),
        )
        .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "completed");
    assert_eq!(run["outputs"]["greeting"], "Hello Ada");
    assert_eq!(
        std::fs::read_to_string(server.workspace_of("alice").join("greeting.md")).unwrap(),
        "Hello Ada"
    );
    assert_eq!(run["nodes"].as_array().unwrap().len(), 5);
    // A missing parameter fails the run and skips what depends on it.
    let (_, run) = server
        .call(
            Method::POST,
            &format!("/workflows/{id}/runs"),
            ALICE,
            Some(json!({})),
        )
        .await;
    assert_eq!(run["status"], "failed");
    assert_eq!(run["error"], "node `who` failed: missing parameter `name`");
    let skipped = run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["status"] == "skipped")
        .count();
    assert_eq!(skipped, 4);

    let mut renamed = greeter();
    renamed["name"] = json!("hello");
    let (status, body) = server
        .call(
            Method::PUT,
            &format!("/workflows/{id}"),
            ALICE,
            Some(renamed),
        )
        .await;
    assert_eq!((status, body["name"].as_str()), (200, Some("hello")));
    assert_eq!(
        server
            .call(Method::DELETE, &format!("/workflows/{id}"), BOB, None)
            .await
            .0,
        404
    );
    assert_eq!(
        server
            .call(Method::DELETE, &format!("/workflows/{id}"), ALICE, None)
            .await
            .0,
        204
    );
    server.stop().await;
}

/// Run workflow `id` through route 1 on `client`.
async fn route_one(c: &mut Client, id: &str, extra: Value) {
    let mut data =
        json!({"workflow_target": "workflow", "workflow_id": id, "params": {"name": "Grace"}});
    for (k, v) in extra.as_object().unwrap() {
        data[k] = v.clone();
    }
    c.chat(None, "run it", data).await;
}

fn lines(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|f| match f["type"].as_str()? {
            "job_update" => Some(format!("job {}", f["status"].as_str()?)),
            "node_update" => Some(format!(
                "{} {}",
                f["node_id"].as_str()?,
                f["status"].as_str()?
            )),
            other => Some(other.to_owned()),
        })
        .collect()
}

#[tokio::test]
async fn route_one_runs_a_workflow_as_a_turn_gated_by_the_threads_mode() {
    let server = server().await;
    let id = save(&server, greeter()).await;
    let mut c = server.client_with_key(ALICE).await.unwrap();

    // Default mode: the write node asks first.
    route_one(&mut c, &id, json!({})).await;
    let frames = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let request = frames.last().unwrap().clone();
    assert_eq!(
        (request["name"].as_str(), request["depth"].as_u64()),
        (Some("write_file"), Some(0))
    );
    c.send(json!({"type": "tool_approval_response", "tool_call_id": request["tool_call_id"], "decision": "allow"}))
        .await;
    let mut frames = [frames, c.turn().await].concat();
    let all = lines(&frames);
    assert_eq!(&all[..3], ["turn_started", "job running", "who running"]);
    let tail: Vec<&str> = all.iter().rev().take(5).rev().map(String::as_str).collect();
    // The summary streams as text, then the turn ends as any turn does.
    assert_eq!(
        tail,
        ["job completed", "chunk", "cost_summary", "message", "chunk"]
    );
    assert!(all.contains(&"save completed".to_owned()));
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["status"], "completed");
    assert!(
        message["content"]
            .as_str()
            .unwrap()
            .contains("greeting: Hello Grace"),
        "{message}"
    );
    assert_eq!(
        std::fs::read_to_string(server.workspace_of("alice").join("greeting.md")).unwrap(),
        "Hello Grace"
    );
    // The thread keeps the run like any turn.
    let thread = thread_of(&frames);
    let (_, messages) = server
        .get(&format!("/threads/{thread}/messages"), ALICE)
        .await;
    assert_eq!(messages.as_array().unwrap().len(), 2);
    let runs = server.store().workflow_runs("alice", &id).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].thread_id.as_deref(), Some(thread.as_str()));

    // Plan mode: the write node is refused; what depends on it is skipped.
    route_one(&mut c, &id, json!({"permission_mode": "plan"})).await;
    frames = c.turn().await;
    let all = lines(&frames);
    assert!(all.contains(&"save failed".to_owned()), "{all:?}");
    assert!(all.contains(&"saved skipped".to_owned()));
    assert!(all.contains(&"job failed".to_owned()));
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["status"], "failed");
    assert!(of_type(&frames, "tool_approval_request").is_empty());

    // A workflow that does not exist, or is someone else's.
    c.chat(
        None,
        "x",
        json!({"workflow_target": "workflow", "workflow_id": "wf_nope"}),
    )
    .await;
    assert_eq!(c.recv().await["code"], "workflow_not_found");
    let mut bob = server.client_with_key(BOB).await.unwrap();
    route_one(&mut bob, &id, json!({})).await;
    assert_eq!(bob.recv().await["code"], "workflow_not_found");
    server.stop().await;
}

#[tokio::test]
async fn stop_cancels_a_running_workflow() {
    let server = server().await;
    let id = save(
        &server,
        json!({"name": "slow", "graph": {
        "nodes": [
            {"id": "ask", "type": "llm.prompt", "inputs": {"prompt": "slow model please"}},
            {"id": "out", "type": "output", "inputs": {"name": "answer"}}],
        "edges": [{"from": "ask", "output": "text", "to": "out", "input": "value"}]}}),
    )
    .await;
    let mut c = server.client_with_key(ALICE).await.unwrap();
    c.chat(
        None,
        "slow model",
        json!({"workflow_target": "workflow", "workflow_id": id}),
    )
    .await;
    let frames = c
        .recv_until(|f| f["type"] == "node_update" && f["status"] == "running")
        .await;
    let thread = thread_of(&frames);
    c.send(json!({"command": "stop", "data": {"thread_id": thread}}))
        .await;
    let frames = c.turn().await;
    let all = lines(&frames);
    assert!(all.contains(&"job cancelled".to_owned()), "{all:?}");
    assert_eq!(
        of_type(&frames, "message")[0]["message"]["status"],
        "cancelled"
    );
    server.stop().await;
}

#[tokio::test]
async fn workflow_tools_ask_in_default_are_refused_in_plan_and_nest_their_nodes() {
    let server = server().await;
    let id = save(&server, greeter()).await;
    let mut script = script();
    let text = script.to_string().replace("\"WF\"", &format!("\"{id}\""));
    script = serde_json::from_str(&text).unwrap();
    server.provider.set_script(script);
    let mut c = server.client_with_key(ALICE).await.unwrap();

    // Plan: run_workflow is an execute tool, refused.
    c.chat(None, "run the greeter", json!({"permission_mode": "plan"}))
        .await;
    let frames = c.turn().await;
    let end = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["status"] == "end")
        .unwrap();
    assert_eq!(end["is_error"], true);
    assert!(end["result"].as_str().unwrap().contains("plan mode"));
    assert!(of_type(&frames, "node_update").is_empty());

    // Default: it asks; then its write node asks too, nested under it.
    c.chat(None, "run the greeter", json!({})).await;
    let frames = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let ask = frames.last().unwrap().clone();
    assert_eq!(ask["name"], "run_workflow");
    let call = ask["tool_call_id"].as_str().unwrap().to_owned();
    c.send(json!({"type": "tool_approval_response", "tool_call_id": call, "decision": "allow"}))
        .await;
    let frames = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let inner = frames.last().unwrap().clone();
    assert_eq!(
        (
            inner["name"].as_str(),
            inner["parent_id"].as_str(),
            inner["depth"].as_u64()
        ),
        (Some("write_file"), Some(call.as_str()), Some(1))
    );
    // The nodes that ran before the write asked are reported under the tool call.
    let nodes = of_type(&frames, "node_update");
    let who: Vec<&str> = nodes
        .iter()
        .filter(|f| f["node_id"] == "who")
        .map(|f| f["status"].as_str().unwrap())
        .collect();
    assert_eq!(who, ["running", "completed"], "{nodes:?}");
    assert!(nodes
        .iter()
        .all(|f| f["parent_id"] == call.as_str() && f["depth"] == 1));
    c.send(json!({"type": "tool_approval_response", "tool_call_id": inner["tool_call_id"], "decision": "allow"})).await;
    let frames = c.turn().await;
    assert_eq!(text_of(&frames), "ran it");
    let end = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["status"] == "end" && f["name"] == "run_workflow")
        .unwrap();
    let result: Value = serde_json::from_str(end["result"].as_str().unwrap()).unwrap();
    assert_eq!(
        (
            result["status"].as_str(),
            result["outputs"]["greeting"].as_str()
        ),
        (Some("completed"), Some("Hello Ada"))
    );
    assert_eq!(
        server
            .store()
            .workflow_runs("alice", &id)
            .await
            .unwrap()
            .len(),
        1
    );

    // run_node: one node, in Auto.
    c.chat(None, "one node", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let end = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["status"] == "end")
        .unwrap();
    assert_eq!(end["result"], json!({"text": "1+2"}).to_string());
    server.stop().await;
}

#[tokio::test]
async fn rest_runs_count_against_the_users_limits() {
    let server = server_with(|c| {
        c.limits.turns_per_user = 16;
        c.limits.messages_per_minute = 1_000;
    })
    .await;
    let id = save(
        &server,
        json!({"name": "slow", "graph": {"nodes": [
            {"id": "ask", "type": "llm.prompt", "inputs": {"prompt": "slow model"}}
        ]}}),
    )
    .await;
    let path = format!("/workflows/{id}/runs");
    let runs = (0..40).map(|_| server.call(Method::POST, &path, ALICE, Some(json!({}))));
    let answers = futures::future::join_all(runs).await;
    let count = |status: u16| answers.iter().filter(|(s, _)| *s == status).count();
    assert_eq!((count(200), count(429)), (16, 24), "{answers:?}");
    let refused = answers.iter().find(|(s, _)| *s == 429).unwrap();
    assert_eq!(refused.1["error"]["code"], "rate_limited");
    // Another user has their own share.
    let (status, _) = server.call(Method::POST, &path, BOB, Some(json!({}))).await;
    assert_eq!(
        status, 404,
        "not bob's workflow, and not refused for alice's runs"
    );
    server.stop().await;
}

/// Each tool's result in a turn's frames, by tool name.
fn results_by_name(frames: &[Value]) -> std::collections::BTreeMap<String, (bool, String)> {
    of_type(frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["status"] == "end")
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_owned(),
                (
                    f["is_error"].as_bool().unwrap(),
                    f["result"].as_str().unwrap().to_owned(),
                ),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_read_tools_list_read_and_describe_workflows_of_their_owner_only() {
    let server = server().await;
    let id = save(&server, greeter()).await;
    server
        .provider
        .set_script(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [
            {"id": "lw", "name": "list_workflows", "arguments": {}},
            {"id": "gw", "name": "get_workflow", "arguments": {"workflow_id": id}},
            {"id": "nt", "name": "list_node_types", "arguments": {"query": "template"}}]},
        {"text": "looked", "repeat": true}]}]}));

    // Read tools: no approval in Default mode.
    let mut alice = server.client_with_key(ALICE).await.unwrap();
    alice.chat(None, "look", json!({})).await;
    let frames = alice.turn().await;
    assert!(of_type(&frames, "tool_approval_request").is_empty());
    let results = results_by_name(&frames);
    let listed: Value = serde_json::from_str(&results["list_workflows"].1).unwrap();
    assert_eq!(
        listed,
        json!([{"id": id, "name": "greeter", "description": "greets"}])
    );
    let read: Value = serde_json::from_str(&results["get_workflow"].1).unwrap();
    let (_, saved) = server.get(&format!("/workflows/{id}"), ALICE).await;
    assert_eq!(
        (&read["name"], &read["graph"]),
        (&json!("greeter"), &saved["graph"])
    );
    let types: Value = serde_json::from_str(&results["list_node_types"].1).unwrap();
    let names: Vec<&str> = types
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"text.template"), "{names:?}");
    assert!(names.iter().all(|n| n.contains("template")), "{names:?}");
    assert!(
        types[0]["inputs"]["properties"].is_object(),
        "ports as JSON Schemas"
    );

    // Another user sees none of it.
    let mut bob = server.client_with_key(BOB).await.unwrap();
    bob.chat(None, "look", json!({})).await;
    let results = results_by_name(&bob.turn().await);
    assert_eq!(results["list_workflows"], (false, "[]".to_owned()));
    let (is_error, text) = &results["get_workflow"];
    assert!(*is_error && text.contains("no workflow"), "{text}");
    server.stop().await;
}
