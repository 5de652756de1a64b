//! Stored agents over the real socket and REST: CRUD and validation, what an
//! agent changes in the model's requests, the planner, budget awareness, parallel
//! sub-agents, offloaded results, injected arguments in approvals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use reqwest::Method;
use serde_json::{json, Value};
use support::{of_type, text_of, thread_of, TestServer};
use weft_core::{prompts, Role};
use weft_server::config::ApiKeyEntry;

const ALICE: Option<&str> = Some("k-alice");
const BOB: Option<&str> = Some("k-bob");

async fn two_users(script: Value, configure: impl FnOnce(&mut weft_server::Config)) -> TestServer {
    TestServer::start_with(script, |c| {
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

fn seed_example() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../web-fixtures/agents/ops-supervisor.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Store an agent for the local user.
async fn create(server: &TestServer, agent: Value) {
    let (status, body) = server
        .call(Method::POST, "/agents", None, Some(agent))
        .await;
    assert_eq!(status, 201, "{body}");
}

fn echo_script() -> Value {
    json!({"conversations": [{"match": "*", "steps": [{"text": "ok", "repeat": true}]}]})
}

#[tokio::test]
async fn agents_round_trip_through_rest_and_invalid_ones_get_422_naming_the_field() {
    let server = two_users(echo_script(), |_| {}).await;

    // Seed 004's example as written names approval tools this server does not have.
    let (status, body) = server
        .call(Method::POST, "/agents", ALICE, Some(seed_example()))
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["code"], "invalid_field");
    assert_eq!(body["error"]["field"], "hitl_tools");

    let mut example = seed_example();
    example["hitl_tools"] = json!(["write_file"]);
    example["planning_model"] = json!("scripted:planner");
    example["model"] = json!("scripted:executor");
    let (status, created) = server
        .call(Method::POST, "/agents", ALICE, Some(example.clone()))
        .await;
    assert_eq!(status, 201, "{created}");
    // Every field written comes back as written, the rest at their defaults.
    for (key, value) in example.as_object().unwrap() {
        assert_eq!(&created[key], value, "{key}");
    }
    assert_eq!(created["max_depth"], 3);
    assert_eq!(created["max_turn_tokens"], Value::Null);
    let (status, fetched) = server.get("/agents/ops-supervisor", ALICE).await;
    assert_eq!((status, &fetched), (200, &created));
    let (_, listed) = server.get("/agents", ALICE).await;
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["default", "ops-supervisor"]);
    // Another user sees only the default.
    assert_eq!(server.get("/agents/ops-supervisor", BOB).await.0, 404);
    let (status, _) = server
        .call(Method::POST, "/agents", ALICE, Some(example.clone()))
        .await;
    assert_eq!(status, 409);

    let mut changed = example.clone();
    changed["temperature"] = json!(0.7);
    let (status, body) = server
        .call(Method::PUT, "/agents/ops-supervisor", ALICE, Some(changed))
        .await;
    assert_eq!((status, &body["temperature"]), (200, &json!(0.7)));
    assert_eq!(
        server.get("/agents/ops-supervisor", ALICE).await.1["temperature"],
        0.7
    );
    // A body naming another agent, or naming it with something not a name, is refused.
    for name in [json!("other"), json!({}), json!(null)] {
        let mut renamed = example.clone();
        renamed["name"] = name;
        let (status, body) = server
            .call(Method::PUT, "/agents/ops-supervisor", ALICE, Some(renamed))
            .await;
        assert_eq!((status, &body["error"]["field"]), (422, &json!("name")));
    }

    let invalid = [
        (
            json!({"name": "a", "max_parallel_subagents": 8}),
            "max_parallel_subagents",
        ),
        (
            json!({"name": "a", "max_parallel_subagents": 0}),
            "max_parallel_subagents",
        ),
        (
            json!({"name": "a", "budget_awareness": "sometimes"}),
            "budget_awareness",
        ),
        (
            json!({"name": "a", "budget_awareness": "limit:101"}),
            "budget_awareness",
        ),
        (
            json!({"name": "a", "planning_model": "gpt-4o"}),
            "planning_model",
        ),
        (json!({"name": "a", "model": ":gpt-4o"}), "model"),
        (
            json!({"name": "a", "hitl_tools": ["deploy_service"]}),
            "hitl_tools",
        ),
        (
            json!({"name": "a", "tools": ["read_file"], "hitl_tools": ["write_file"]}),
            "hitl_tools",
        ),
        (json!({"name": "a", "tools": ["rm_rf"]}), "tools"),
        (json!({"name": "a", "temperature": 3.5}), "temperature"),
        (json!({"name": "a", "max_steps": 0}), "max_steps"),
        (
            json!({"name": "a", "injected_tool_args": {"bad key": "x"}}),
            "injected_tool_args",
        ),
        (json!({"name": "a b"}), "name"),
        (json!({"name": "default"}), "name"),
        (json!({"name": "a", "colour": "blue"}), "colour"),
    ];
    for (body, field) in invalid {
        let (status, answer) = server
            .call(Method::POST, "/agents", ALICE, Some(body.clone()))
            .await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_field", "{body}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
        assert!(!answer["error"]["message"].as_str().unwrap().is_empty());
    }

    let (status, _) = server
        .call(Method::DELETE, "/agents/ops-supervisor", ALICE, None)
        .await;
    assert_eq!(status, 204);
    let (status, body) = server.get("/agents/ops-supervisor", ALICE).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("agent_not_found"))
    );
    server.stop().await;
}

#[tokio::test]
async fn an_agent_shapes_the_model_request_and_the_thread_remembers_it() {
    let server = TestServer::start(json!({"conversations": [
        {"match": "spin", "steps": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "missing.md"}}], "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]}))
    .await;
    let agent = json!({
        "name": "terse",
        "model": "scripted:tiny-model",
        "instructions": "Answer in one word.",
        "temperature": 0.3,
        "max_tokens": 77,
        "max_steps": 2,
        "tools": ["read_file"]
    });
    let (status, body) = server
        .call(Method::POST, "/agents", None, Some(agent))
        .await;
    assert_eq!(status, 201, "{body}");

    let mut c = server.client().await;
    c.chat(None, "hello", json!({"agent": "terse"})).await;
    let frames = c.turn().await;
    let thread = thread_of(&frames);
    assert_eq!(text_of(&frames), "ok");
    let request = server.provider.requests().pop().unwrap();
    assert_eq!(request.model, "tiny-model");
    assert!(
        request.system.ends_with("Answer in one word."),
        "{}",
        request.system
    );
    assert_eq!(request.temperature, Some(0.3));
    assert_eq!(request.max_tokens, Some(77));
    let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, vec!["read_file"]);
    let message = of_type(&frames, "message")[0];
    assert_eq!(message["message"]["metadata"]["agent"], "terse");

    // The next message names no agent: the thread's is used.
    c.chat(Some(&thread), "again", json!({})).await;
    c.turn().await;
    let request = server.provider.requests().pop().unwrap();
    assert_eq!(request.model, "tiny-model");
    assert!(request.system.ends_with("Answer in one word."));
    assert_eq!(
        server
            .store()
            .thread(&thread)
            .await
            .unwrap()
            .unwrap()
            .agent
            .as_deref(),
        Some("terse")
    );

    // max_steps is the iteration limit per level.
    c.chat(None, "spin forever", json!({"agent": "terse"}))
        .await;
    let frames = c.turn().await;
    let budget = of_type(&frames, "budget_exceeded")[0];
    assert_eq!(
        (budget["reason"].as_str(), budget["limit"].as_u64()),
        (Some("iterations"), Some(2))
    );

    // An unknown agent is refused before anything runs.
    c.chat(None, "hello", json!({"agent": "nobody"})).await;
    let error = c.recv().await;
    assert_eq!(error["code"], "agent_not_found");
    server.stop().await;
}

#[tokio::test]
async fn injected_arguments_reach_the_approval_frame_and_row_but_not_the_tool() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.md", "content": "A", "ui_request_id": "req-42"}}]},
        {"text": "written"}]}]}))
    .await;
    let agent = json!({"name": "injector", "injected_tool_args": {"ui_request_id": "Opaque UI correlation id."}});
    create(&server, agent).await;
    let mut c = server.client().await;
    c.chat(None, "write it", json!({"agent": "injector"})).await;
    let frames = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let request = frames.last().unwrap().clone();
    assert_eq!(request["injected_args"], json!({"ui_request_id": "req-42"}));
    assert_eq!(request["args"]["path"], "a.md");
    c.send(json!({"type": "tool_approval_response", "tool_call_id": request["tool_call_id"], "decision": "allow"}))
        .await;
    let frames = c.turn().await;
    assert_eq!(text_of(&frames), "written");
    assert_eq!(
        std::fs::read_to_string(server.workspace.join("a.md")).unwrap(),
        "A"
    );
    let approvals = server.store().approvals(&thread_of(&frames)).await.unwrap();
    assert_eq!(approvals.len(), 1);
    let injected: Value =
        serde_json::from_str(approvals[0].injected_args.as_deref().unwrap()).unwrap();
    assert_eq!(injected, json!({"ui_request_id": "req-42"}));
    // The schema the model saw offered the field.
    let requests = server.provider.requests();
    let schema = &requests[0]
        .tools
        .iter()
        .find(|t| t.name == "write_file")
        .unwrap()
        .parameters;
    assert_eq!(schema["properties"]["ui_request_id"]["type"], "string");
    server.stop().await;
}

#[tokio::test]
async fn the_planner_runs_first_and_stays_out_of_the_record_and_history() {
    let server = TestServer::start(json!({"conversations": [
        {"match": prompts::PLANNER_REQUEST, "steps": [
            {"tool_calls": [{"id": "peek", "name": "read_file", "arguments": {"path": "notes.md"}}]},
            {"text": "1. read notes\n2. answer", "repeat": true}]},
        {"match": "*", "steps": [{"text": "the answer", "repeat": true}]}
    ]}))
    .await;
    std::fs::write(server.workspace.join("notes.md"), "planner-only notes").unwrap();
    // The planner runs on a model of its own.
    let agent = json!({"name": "planner", "planning_enabled": true, "planning_instructions": "Plan briefly.",
        "model": "scripted:big", "planning_model": "scripted:small"});
    create(&server, agent).await;
    let mut c = server.client().await;
    c.chat(None, "what do my notes say?", json!({"agent": "planner"}))
        .await;
    let frames = c.turn().await;
    let thread = thread_of(&frames);

    let kinds: Vec<String> = frames
        .iter()
        .filter(|f| {
            matches!(
                f["type"].as_str(),
                Some("planning_update" | "chunk" | "tool_call_update")
            )
        })
        .map(|f| {
            format!(
                "{} {}",
                f["type"].as_str().unwrap(),
                f["status"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "planning_update started",
            "planning_update done",
            "chunk ",
            "chunk "
        ]
    );
    assert_eq!(
        of_type(&frames, "planning_update")[1]["content"],
        "1. read notes\n2. answer"
    );
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["metadata"]["plan"], "1. read notes\n2. answer");

    let requests = server.provider.requests();
    assert_eq!(requests.len(), 3);
    let models: Vec<&str> = requests.iter().map(|r| r.model.as_str()).collect();
    assert_eq!(models, ["small", "small", "big"]);
    assert_eq!(&*requests[0].system, "Plan briefly.");
    // Each provider call is accounted to the model that made it, with its tool calls.
    let calls: Vec<(String, i64)> = server
        .store()
        .model_calls(&thread)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.model, c.tool_calls))
        .collect();
    assert_eq!(
        calls,
        [("small".into(), 1), ("small".into(), 0), ("big".into(), 0)]
    );
    let executor = &requests[2];
    assert!(executor.system.contains("1. read notes\n2. answer"));
    assert_eq!(executor.messages.len(), 1);
    assert!(!format!("{:?}", executor.messages).contains("planner-only notes"));

    // The record holds the user's message, the plan (kept for a turn taken up after a crash)
    // and the executor's answer: none of the planner's own messages or calls.
    let (_, items) = server.get(&format!("/threads/{thread}/items"), None).await;
    let kinds: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["user", "plan", "assistant"]);
    assert_eq!(items[1]["plan"], "1. read notes\n2. answer");
    assert!(!items.to_string().contains("planner-only notes"), "{items}");

    // The next turn's history: the first exchange, no planner messages.
    c.chat(Some(&thread), "and now?", json!({})).await;
    c.turn().await;
    let executor = server.provider.requests().pop().unwrap();
    let texts: Vec<String> = executor.messages.iter().map(|m| m.text()).collect();
    assert_eq!(
        texts,
        vec!["what do my notes say?", "the answer", "and now?"]
    );
    server.stop().await;
}

#[tokio::test]
async fn per_message_awareness_reaches_the_model_and_not_the_record() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"id": "r", "name": "read_file", "arguments": {"path": "a.md"}}]},
        {"text": "done"}]}]}))
    .await;
    std::fs::write(server.workspace.join("a.md"), "alpha").unwrap();
    let agent = json!({"name": "aware", "budget_awareness": "per-message"});
    create(&server, agent).await;
    let mut c = server.client().await;
    c.chat(None, "read", json!({"agent": "aware"})).await;
    let frames = c.turn().await;
    let second = &server.provider.requests()[1];
    let result = second
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .unwrap()
        .text();
    assert!(result.starts_with("alpha\n\n[budget: context "), "{result}");
    assert!(result.contains("tokens ("), "{result}");
    assert!(result.contains("model calls and"), "{result}");
    let end = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["status"] == "end")
        .unwrap();
    assert_eq!(end["result"], "alpha");
    let (_, items) = server
        .get(&format!("/threads/{}/items", thread_of(&frames)), None)
        .await;
    assert!(!items.to_string().contains("[budget:"));
    server.stop().await;
}

fn long_text(label: &str) -> String {
    format!("{label} ") + &"lorem ipsum dolor sit amet ".repeat(25)
}

#[tokio::test]
async fn compaction_summarizes_a_long_history_for_this_turn_and_the_next() {
    let server = TestServer::start_with(
        json!({"conversations": [
            {"match": prompts::COMPACT_REQUEST, "steps": [{"text": "SUMMARY: eight questions about lorem ipsum.", "repeat": true}]},
            {"match": "*", "steps": [{"text": long_text("answer"), "repeat": true}]}
        ]}),
        |c| c.context_windows.set("scripted", 3_000),
    )
    .await;
    // One small tool keeps the fixed part of the prompt (system + tool schemas) well under
    // half the limit, whatever the default toolbelt grows to.
    let agent = json!({"name": "compact", "budget_awareness": "limit:50", "tools": ["read_file"]});
    create(&server, agent).await;
    let mut c = server.client().await;
    c.chat(None, &long_text("question 0"), json!({})).await;
    let thread = thread_of(&c.turn().await);
    for i in 1..8 {
        c.chat(
            Some(&thread),
            &long_text(&format!("question {i}")),
            json!({}),
        )
        .await;
        c.turn().await;
    }
    let before = server.provider.requests().len();
    c.chat(
        Some(&thread),
        "question 8, short",
        json!({"agent": "compact"}),
    )
    .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");
    let requests = server.provider.requests()[before..].to_vec();
    assert_eq!(requests.len(), 2, "the summary, then the answer");
    assert_eq!(&*requests[0].system, prompts::COMPACT_PROMPT);
    assert!(requests[0].messages[0].text().contains("User: question 0"));
    let executor = &requests[1].messages;
    let summary = prompts::summary_message("SUMMARY: eight questions about lorem ipsum.");
    assert_eq!(executor[0].text(), summary);
    assert_eq!(executor.last().unwrap().text(), "question 8, short");
    assert!(!executor.iter().any(|m| m.text().starts_with("question 0")));

    // The record keeps the summary; the next turn's history starts from it.
    let (_, items) = server.get(&format!("/threads/{thread}/items"), None).await;
    assert!(items
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["kind"] == "summary"
            && i["summary"] == "SUMMARY: eight questions about lorem ipsum."));
    c.chat(Some(&thread), "question 9", json!({})).await;
    c.turn().await;
    let next = server.provider.requests().pop().unwrap();
    assert_eq!(next.messages[0].text(), summary);
    assert!(!next
        .messages
        .iter()
        .any(|m| m.text().starts_with("question 0")));
    assert_eq!(next.messages.last().unwrap().text(), "question 9");
    server.stop().await;
}

#[tokio::test]
async fn a_prompt_that_cannot_fit_ends_the_turn_with_a_deterministic_answer() {
    let server =
        TestServer::start_with(echo_script(), |c| c.context_windows.set("scripted", 1_000)).await;
    // One small tool keeps the fixed part of the prompt (system + tool schemas) well under
    // half the limit, whatever the default toolbelt grows to.
    let agent = json!({"name": "compact", "budget_awareness": "limit:50", "tools": ["read_file"]});
    create(&server, agent).await;
    let mut c = server.client().await;
    c.chat(
        None,
        &long_text("huge").repeat(4),
        json!({"agent": "compact"}),
    )
    .await;
    let frames = c.turn().await;
    assert!(server.provider.requests().is_empty(), "no model call");
    let budget = of_type(&frames, "budget_exceeded")[0];
    assert_eq!(
        (
            budget["reason"].as_str(),
            budget["limit"].as_u64(),
            budget["ends_turn"].as_bool()
        ),
        (Some("context"), Some(500), Some(true))
    );
    let observed = budget["observed"].as_u64().unwrap();
    let expected = prompts::context_limit_reached(500, observed, 1_000);
    assert_eq!(text_of(&frames), expected);
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["status"], "budget_exceeded");
    assert_eq!(message["content"], expected);
    server.stop().await;
}

#[tokio::test]
async fn parallel_sub_agents_return_one_entry_per_job_and_respect_the_cap() {
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let eight: Vec<Value> = (0..8)
        .map(|i| json!({"task": format!("job {i}")}))
        .collect();
    let server = TestServer::start(json!({"conversations": [
        {"match": "job alpha", "steps": [{"text": "alpha done"}]},
        {"match": "job beta", "steps": [
            {"tool_calls": [{"name": "finish_subtask", "arguments": {"wrong": true}}], "repeat": true}]},
        {"match": "job gamma", "steps": [
            {"tool_calls": [{"name": "finish_subtask", "arguments": {"n": 3}}]}]},
        {"match": "too many", "steps": [
            {"tool_calls": [{"id": "many", "name": "run_parallel_subagents", "arguments": {"jobs": eight}}]},
            {"text": "refused"}]},
        {"match": "*", "steps": [
            {"tool_calls": [{"id": "par", "name": "run_parallel_subagents", "arguments": {"jobs": [
                {"task": "job alpha"},
                {"task": "job beta", "output_schema": schema},
                {"task": "job gamma", "output_schema": schema}]}}]},
            {"text": "combined"}]}
    ]}))
    .await;
    let agent = json!({"name": "fanout", "allow_parallel_subagents": true, "max_parallel_subagents": 7, "max_schema_retries": 1});
    create(&server, agent).await;
    let mut c = server.client().await;
    c.chat(
        None,
        "three jobs",
        json!({"agent": "fanout", "permission_mode": "auto"}),
    )
    .await;
    let frames = c.turn().await;
    let updates = of_type(&frames, "tool_call_update");
    let end = updates
        .iter()
        .find(|f| f["status"] == "end" && f["name"] == "run_parallel_subagents")
        .unwrap();
    let call_id = end["tool_call_id"].as_str().unwrap();
    assert_eq!(end["is_error"], false);
    let result: Value = serde_json::from_str(end["result"].as_str().unwrap()).unwrap();
    let statuses: Vec<(u64, &str)> = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["job"].as_u64().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    assert_eq!(statuses, vec![(0, "success"), (1, "error"), (2, "success")]);
    assert_eq!(result["results"][0]["output"], "alpha done");
    assert_eq!(result["results"][2]["output"], json!({"n": 3}));
    // The jobs' own calls are nested under the call.
    let nested: Vec<&&Value> = updates
        .iter()
        .filter(|f| f["parent_id"] == call_id && f["depth"] == 1)
        .collect();
    assert!(nested.iter().any(|f| f["name"] == "finish_subtask"));
    let chunks = of_type(&frames, "chunk");
    assert!(chunks
        .iter()
        .any(|f| f["parent_id"] == call_id && f["content"] == "alpha done"));

    c.chat(None, "too many jobs", json!({"agent": "fanout"}))
        .await;
    let frames = c.turn().await;
    let end = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["status"] == "end")
        .unwrap();
    assert_eq!(end["is_error"], true);
    assert_eq!(end["result"], prompts::too_many_jobs(8, 7));

    // An agent that does not allow it never sees the tool.
    c.chat(None, "plain", json!({})).await;
    c.turn().await;
    let request = server.provider.requests().pop().unwrap();
    assert!(!request
        .tools
        .iter()
        .any(|t| t.name == "run_parallel_subagents"));
    server.stop().await;
}

/// 200 KB whose every line names its position, so pages out of order would show.
fn big_text() -> String {
    (0..5_800)
        .map(|i| format!("line {i:05} of the big result......\n"))
        .collect()
}

#[tokio::test]
async fn a_large_result_is_offloaded_and_paged_back_by_its_owner_only() {
    let big = big_text();
    assert!(big.len() >= 200_000);
    let server = two_users(
        json!({"conversations": [{"match": "*", "steps": [
            {"tool_calls": [{"name": "memory_write", "arguments": {"key": "big", "value": big}}]},
            {"tool_calls": [{"id": "read", "name": "memory_read", "arguments": {"key": "big"}}]},
            {"text": "kept"}]}]}),
        |_| {},
    )
    .await;
    let mut alice = server.client_with_key(ALICE).await.unwrap();
    alice
        .chat(None, "remember", json!({"permission_mode": "auto"}))
        .await;
    let frames = alice.turn().await;
    let thread = thread_of(&frames);
    let end = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["status"] == "end" && f["name"] == "memory_read")
        .unwrap();
    let id = end["metadata"]["offloaded_artifact_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = end["result"].as_str().unwrap();
    assert!(shown.len() <= 50_000);
    assert!(shown.ends_with(&prompts::offloaded_marker(big.len(), &id)));
    // The record keeps the metadata too.
    let (_, items) = server.get(&format!("/threads/{thread}/items"), ALICE).await;
    assert!(items.to_string().contains(&id));

    // Page it back through read_artifact: one page per call, every offset from the headers.
    let page = 50_000 - 160;
    let offsets: Vec<usize> = (0..big.len()).step_by(page).collect();
    let calls: Vec<Value> = offsets
        .iter()
        .map(|o| json!({"name": "read_artifact", "arguments": {"id": id, "offset": o}}))
        .collect();
    server.provider.set_script(json!({"conversations": [
        {"match": "steal", "steps": [
            {"tool_calls": [{"name": "read_artifact", "arguments": {"id": id}}]},
            {"text": "nothing"}]},
        {"match": "read it back", "steps": [{"tool_calls": calls}, {"text": "read"}]}]}));
    // Any thread of the owner's can read it.
    alice.chat(None, "read it back", json!({})).await;
    let frames = alice.turn().await;
    // Results arrive as the calls finish: order them by the offset each header names.
    let mut pages: Vec<(usize, String)> = of_type(&frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["status"] == "end")
        .map(|f| {
            let page = f["result"].as_str().unwrap().to_owned();
            let start = page
                .strip_prefix(&format!("[artifact {id}: bytes "))
                .and_then(|rest| rest.split("..").next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{}", &page[..100.min(page.len())]));
            (start, page)
        })
        .collect();
    pages.sort();
    let starts: Vec<usize> = pages.iter().map(|(start, _)| *start).collect();
    assert_eq!(starts, offsets);
    let whole: String = pages
        .iter()
        .map(|(_, page)| page.split_once('\n').unwrap().1)
        .collect();
    assert_eq!(whole, big);
    assert!(pages.last().unwrap().1.contains("end of artifact"));

    // Served to its owner over REST; nobody else can read it either way.
    let response = reqwest::Client::new()
        .get(server.url(&format!("/assets/{id}")))
        .bearer_auth("k-alice")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.text().await.unwrap(), big);
    let (status, body) = server.get(&format!("/assets/{id}"), BOB).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("asset_not_found"))
    );
    let mut bob = server.client_with_key(BOB).await.unwrap();
    bob.chat(None, "steal it", json!({})).await;
    let frames = bob.turn().await;
    let end = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["status"] == "end")
        .unwrap();
    assert_eq!(end["is_error"], true);
    assert_eq!(end["result"], format!("error: no artifact `{id}`"));
    server.stop().await;
}

/// Tool calls that ran (ended without an error).
fn ran(frames: &[Value]) -> usize {
    of_type(frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["status"] == "end" && f["is_error"] == false)
        .count()
}

/// A script that calls a tool every round, for ever.
fn tool_loop() -> Value {
    let steps: Vec<_> = (0..200)
        .map(|i| json!({"tool_calls": [{"name": "memory_write", "arguments": {"key": format!("k{i}"), "value": "v"}}]}))
        .collect();
    json!({"conversations": [{"match": "*", "steps": steps}]})
}

#[tokio::test]
async fn the_operators_agent_table_is_the_ceiling_of_every_stored_agent() {
    let server = TestServer::start_with(tool_loop(), |c| {
        c.agent.max_wall_clock_ms = 4_000;
        c.agent.max_total_tool_calls = 20;
        c.agent.max_iterations_per_level = 200;
        c.agent.max_output_bytes = 1 << 20;
        c.agent.max_cost_usd = Some(5.0);
    })
    .await;

    // A limit above the operator's is refused, naming the field.
    for (field, value) in [
        ("max_total_tool_calls", json!(1000)),
        ("max_wall_clock_ms", json!(60_000)),
        ("max_output_bytes", json!(100 << 20)),
        ("max_cost_usd", Value::Null),
        ("max_steps", json!(500)),
    ] {
        let mut agent = json!({"name": "greedy"});
        agent[field] = value;
        let (status, body) = server
            .call(Method::POST, "/agents", None, Some(agent))
            .await;
        assert_eq!(status, 422, "{field}: {body}");
        assert_eq!(body["error"]["field"], field, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("above this server's limit"),
            "{body}"
        );
    }
    let (status, _) = server.get("/agents/greedy", None).await;
    assert_eq!(status, 404, "nothing was stored");

    // One that names no limit has the operator's, and a turn with it stops at them.
    create(&server, json!({"name": "nolimits"})).await;
    let (_, stored) = server.get("/agents/nolimits", None).await;
    assert_eq!(stored["max_total_tool_calls"], 20);
    assert_eq!(stored["max_wall_clock_ms"], 4_000);
    assert_eq!(stored["max_iterations_per_level"], 200);
    let mut c = server.client().await;
    c.chat(None, "loop", json!({"agent": "nolimits"})).await;
    let frames = c.turn().await;
    let trips = of_type(&frames, "budget_exceeded");
    assert_eq!(trips.len(), 1, "{frames:?}");
    assert_eq!(trips[0]["reason"], "tool_calls");
    assert_eq!(ran(&frames), 20);

    // An agent stored before the operator lowered the ceiling is clamped when it runs.
    let old = json!({"name": "old", "max_total_tool_calls": 100_000, "max_iterations_per_level": 1000, "max_wall_clock_ms": 3_600_000});
    server
        .store()
        .create_agent("local", "old", &old.to_string())
        .await
        .unwrap();
    c.chat(None, "loop", json!({"agent": "old"})).await;
    let frames = c.turn().await;
    assert_eq!(
        of_type(&frames, "budget_exceeded")[0]["reason"],
        "tool_calls"
    );
    assert_eq!(ran(&frames), 20);
    server.stop().await;
}

#[tokio::test]
async fn a_stored_agents_history_budget_and_modes_are_its_own() {
    let server = TestServer::start(echo_script()).await;
    // Its own max_history_tokens prunes the history, not the server's.
    create(&server, json!({"name": "short", "max_history_tokens": 40})).await;
    let mut c = server.client().await;
    c.chat(None, &"long words ".repeat(40), json!({})).await;
    let thread = thread_of(&c.turn().await);
    c.chat(Some(&thread), "and now?", json!({"agent": "short"}))
        .await;
    c.turn().await;
    let sent = server.provider.requests().pop().unwrap().messages;
    assert_eq!(
        sent.len(),
        1,
        "only the new message fits in 40 tokens: {sent:?}"
    );
    // The default agent keeps the whole history.
    c.chat(Some(&thread), "and again?", json!({"agent": "default"}))
        .await;
    c.turn().await;
    assert!(server.provider.requests().pop().unwrap().messages.len() > 1);

    // Code mode does not plan or watch its budget: such an agent is refused there.
    create(
        &server,
        json!({"name": "planner", "planning_enabled": true}),
    )
    .await;
    create(
        &server,
        json!({"name": "aware", "budget_awareness": "per-message"}),
    )
    .await;
    for (agent, field) in [
        ("planner", "planning_enabled"),
        ("aware", "budget_awareness"),
    ] {
        c.chat(None, "code please", json!({"agent": agent, "mode": "code"}))
            .await;
        let reply = c.recv_until(|f| f["type"] == "error").await;
        let error = reply.last().unwrap();
        assert_eq!(error["code"], "invalid_field");
        assert!(
            error["message"].as_str().unwrap().contains(field),
            "{error}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn read_file_reads_past_the_result_cap_and_its_result_is_offloaded() {
    let server = TestServer::start_with(
        json!({"conversations": [
            {"match": "big", "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}]},
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt", "offset": 204_700, "length": 100}}]},
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "huge.txt"}}]},
                {"text": "read"}]},
        ]}),
        |c| c.agent.read_file_max_bytes = 300 << 10,
    )
    .await;
    let body: String = (0..204_800)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    std::fs::write(server.workspace.join("big.txt"), &body).unwrap();
    std::fs::write(server.workspace.join("huge.txt"), vec![b'x'; 400 << 10]).unwrap();
    let mut c = server.client().await;
    c.chat(None, "big", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let ends: Vec<&Value> = of_type(&frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["status"] == "end")
        .collect();
    // The whole file was read, so it could be kept whole and paged.
    let artifact = ends[0]["metadata"]["offloaded_artifact_id"].as_str();
    assert!(artifact.is_some(), "{}", ends[0]);
    // A part, by offset and length.
    assert_eq!(ends[1]["result"], json!(&body[204_700..]));
    // Past read_file_max_bytes: an error naming the size.
    assert_eq!(ends[2]["is_error"], true);
    let error = ends[2]["result"].as_str().unwrap();
    assert!(
        error.contains("409600 bytes") && error.contains("read_file_max_bytes"),
        "{error}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_stored_agent_naming_a_tool_the_server_dropped_is_refused_at_turn_start() {
    let server = TestServer::start(echo_script()).await;
    // Tools that join a turn beside the allow-list may be named for approval.
    create(
        &server,
        json!({"name": "careful", "tools": ["read_file"], "hitl_tools": ["remember", "read_file"]}),
    )
    .await;
    let mut c = server.client().await;
    c.chat(None, "hello", json!({"agent": "careful"})).await;
    assert_eq!(text_of(&c.turn().await), "ok");

    // Saved when the server still had `deploy_service`; the configuration has dropped it.
    let config = json!({"name": "careful", "hitl_tools": ["deploy_service"]});
    assert!(server
        .store()
        .update_agent("local", "careful", &config.to_string())
        .await
        .unwrap());
    c.chat(None, "hello again", json!({"agent": "careful"}))
        .await;
    let reply = c.recv_until(|f| f["type"] == "error").await;
    let error = reply.last().unwrap();
    assert_eq!(error["code"], "invalid_field");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("careful")
            && message.contains("hitl_tools")
            && message.contains("deploy_service"),
        "{message}"
    );
    assert!(
        of_type(&reply, "turn_started").is_empty(),
        "nothing started: {reply:?}"
    );
    server.stop().await;
}
