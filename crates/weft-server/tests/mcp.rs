//! MCP servers as tools, against the real `weft-mcp-fixture` over stdio: only allowed servers,
//! `mcp__<server>__<tool>` names, the gate by category (and its override), results and error
//! results, progress as `mcp_progress` frames, the per-call timeout, and stop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::{of_type, tool_end, TestServer};
use weft_protocol::ToolCategory;
use weft_tools::mcp::McpServerConfig;

fn server_config(name: &str, category: Option<ToolCategory>, timeout_ms: u64) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        command: Some(support::mcp_fixture()),
        args: Vec::new(),
        env: Default::default(),
        url: None,
        headers: Default::default(),
        bearer_token_env: None,
        category,
        timeout_ms,
    }
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"tool_calls": [{"id": id, "name": name, "arguments": args}]})
}

fn script() -> Value {
    json!({"conversations": [
        {"match": "echo", "steps": [call("e", "mcp__fixture__echo", json!({"text": "hi"})), {"text": "echoed", "repeat": true}]},
        {"match": "long", "steps": [call("l", "mcp__fixture__count", json!({"n": 200})), {"text": "done", "repeat": true}]},
        {"match": "count", "steps": [call("c", "mcp__fixture__count", json!({"n": 3})), {"text": "counted", "repeat": true}]},
        {"match": "crash", "steps": [
            call("x", "mcp__fixture__exit", json!({})),
            call("b", "mcp__fixture__echo", json!({"text": "back"})),
            {"text": "recovered", "repeat": true}]},
        {"match": "reveal", "steps": [call("v", "mcp__fixture__reveal", json!({})), {"text": "revealed", "repeat": true}]},
        {"match": "bonus", "steps": [call("o", "mcp__fixture__bonus", json!({})), {"text": "got it", "repeat": true}]},
        {"match": "fail", "steps": [call("f", "mcp__fixture__fail", json!({})), {"text": "failed", "repeat": true}]},
        {"match": "reader", "steps": [call("r", "mcp__reader__echo", json!({"text": "quiet"})), {"text": "read", "repeat": true}]},
        {"match": "notes", "steps": [
            call("n", "mcp__read_resource", json!({"server": "fixture", "uri": "fixture://notes/loom"})),
            {"text": "read", "repeat": true}]},
        {"match": "missing", "steps": [
            call("m", "mcp__read_resource", json!({"server": "fixture", "uri": "fixture://nothing"})),
            {"text": "none", "repeat": true}]},
        {"match": "greet", "steps": [
            call("g", "mcp__get_prompt", json!({"server": "fixture", "name": "greet", "arguments": {"name": "Ada"}})),
            {"text": "greeted", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

async fn start(timeout_ms: u64) -> TestServer {
    TestServer::start_with(script(), move |c| {
        c.mcp.servers = vec![
            server_config("fixture", None, timeout_ms),
            server_config("reader", Some(ToolCategory::Read), timeout_ms),
            server_config("stranger", None, timeout_ms),
        ];
        c.policy.allowed_mcp_servers = vec!["fixture".into(), "reader".into()];
    })
    .await
}

#[tokio::test]
async fn allowed_servers_tools_ask_by_category_and_answer() {
    let server = start(10_000).await;
    let mut c = server.client().await;
    c.chat(None, "echo please", json!({})).await;
    let ask = c
        .recv_until(|f| f["type"] == "tool_approval_request")
        .await
        .pop()
        .unwrap();
    assert_eq!(
        (ask["name"].as_str(), ask["category"].as_str()),
        (Some("mcp__fixture__echo"), Some("external"))
    );
    c.send(json!({"type": "tool_approval_response", "tool_call_id": ask["tool_call_id"], "decision": "allow"}))
        .await;
    c.turn().await;
    assert_eq!(server.last_tool_result(), "echo: hi");
    let names: Vec<String> = server
        .provider
        .requests()
        .pop()
        .unwrap()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .filter(|n| n.starts_with("mcp__"))
        .collect();
    for expected in [
        "mcp__fixture__echo",
        "mcp__fixture__count",
        "mcp__fixture__fail",
        "mcp__reader__echo",
    ] {
        assert!(names.contains(&expected.to_owned()), "{names:?}");
    }
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__stranger__")),
        "{names:?}"
    );
    // Names providers accept (odd characters replaced, long ones cut with a hash); a tool
    // whose schema does not compile is left out.
    assert!(
        names.contains(&"mcp__fixture__notes_read_v2".to_owned()),
        "{names:?}"
    );
    let long = names
        .iter()
        .find(|n| n.starts_with("mcp__fixture__longlong"))
        .unwrap();
    assert_eq!(long.len(), 64, "{long}");
    assert!(!names.iter().any(|n| n.contains("broken")), "{names:?}");
    assert!(names.iter().all(|n| n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')));

    // A server whose category is `read` runs without asking; an error result is an error.
    c.chat(None, "reader please", json!({})).await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "tool_approval_request").is_empty());
    assert_eq!(server.last_tool_result(), "echo: quiet");
    c.chat(None, "fail please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let end = tool_end(&frames).clone();
    assert_eq!(end["is_error"], true);
    assert!(
        end["result"]
            .as_str()
            .unwrap()
            .contains("failed on purpose"),
        "{end}"
    );
    server.stop().await;
}

#[tokio::test]
async fn progress_becomes_frames_and_a_slow_call_times_out() {
    let server = start(10_000).await;
    let mut c = server.client().await;
    c.chat(None, "count please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let progress: Vec<(f64, String)> = of_type(&frames, "mcp_progress")
        .iter()
        .map(|f| {
            (
                f["progress"].as_f64().unwrap(),
                f["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        progress,
        [
            (1.0, "step 1".into()),
            (2.0, "step 2".into()),
            (3.0, "step 3".into())
        ]
    );
    assert!(of_type(&frames, "mcp_progress")
        .iter()
        .all(|f| f["total"] == 3.0));
    assert_eq!(server.last_tool_result(), "counted to 3");
    server.stop().await;

    let server = start(300).await;
    let mut c = server.client().await;
    c.chat(None, "long count", json!({"permission_mode": "auto"}))
        .await;
    c.turn().await;
    let result = server.last_tool_result();
    assert!(
        result.contains("timed out") || result.contains("timeout"),
        "{result}"
    );
    server.stop().await;
}

#[tokio::test]
async fn stop_cancels_a_running_call() {
    let server = start(60_000).await;
    let mut c = server.client().await;
    c.chat(None, "long count", json!({"permission_mode": "auto"}))
        .await;
    let first = c.recv_until(|f| f["type"] == "mcp_progress").await;
    let thread = first[0]["thread_id"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    c.send(json!({"command": "stop", "data": {"thread_id": thread}}))
        .await;
    let frames = c.turn().await;
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["status"], "cancelled");
    server.stop().await;
}

#[tokio::test]
async fn a_server_that_dies_is_restarted_and_the_next_call_waits_for_it() {
    let server = start(10_000).await;
    let mut c = server.client().await;
    c.chat(None, "crash please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let ends: Vec<(bool, String)> = of_type(&frames, "tool_call_update")
        .iter()
        .filter(|f| f["status"] == "end")
        .map(|f| {
            (
                f["is_error"] == true,
                f["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(
        ends[0].0 && ends[0].1.contains("being restarted"),
        "{ends:?}"
    );
    assert_eq!(ends[1], (false, "echo: back".to_owned()));
    server.stop().await;
}

#[tokio::test]
async fn a_changed_tool_list_reaches_the_next_turns() {
    let server = start(10_000).await;
    let has_bonus = || {
        server
            .state
            .runtime
            .toolbelt_for(&weft_protocol::ChatContext::Thread)
            .contains("mcp__fixture__bonus")
    };
    assert!(!has_bonus());
    let mut c = server.client().await;
    c.chat(None, "reveal please", json!({"permission_mode": "auto"}))
        .await;
    c.turn().await;
    assert_eq!(server.last_tool_result(), "revealed");
    // The server said its tools changed; they are listed again in the background.
    for _ in 0..100 {
        if has_bonus() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(has_bonus());
    c.chat(None, "bonus please", json!({"permission_mode": "auto"}))
        .await;
    c.turn().await;
    assert_eq!(server.last_tool_result(), "bonus!");
    server.stop().await;
}

#[tokio::test]
async fn a_tool_an_allowed_server_does_not_offer_is_left_out_not_fatal() {
    // `[agent]` names the fixture's `bonus`, which it does not offer (as when a server
    // renamed or dropped a tool): the server starts, and the default agent's turns run.
    let server = TestServer::start_with(script(), |c| {
        c.mcp.servers = vec![server_config("fixture", None, 10_000)];
        c.policy.allowed_mcp_servers = vec!["fixture".into()];
        c.agent.hitl_tools = vec!["mcp__fixture__bonus".into()];
    })
    .await;
    let belt = || {
        server
            .state
            .runtime
            .toolbelt_for(&weft_protocol::ChatContext::Thread)
    };
    for _ in 0..100 {
        if belt().contains("mcp__fixture__echo") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(belt().contains("mcp__fixture__echo") && !belt().contains("mcp__fixture__bonus"));
    let mut c = server.client().await;
    c.chat(None, "echo please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");
    assert_eq!(server.last_tool_result(), "echo: hi");
    let (status, _) = server
        .call(
            reqwest::Method::POST,
            "/prompt",
            None,
            Some(json!({"input": "hello"})),
        )
        .await;
    assert_eq!(status, 200);

    // Once offered, the tool asks first, even in Auto.
    c.chat(None, "reveal please", json!({"permission_mode": "auto"}))
        .await;
    c.turn().await;
    for _ in 0..100 {
        if belt().contains("mcp__fixture__bonus") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    c.chat(None, "bonus please", json!({"permission_mode": "auto"}))
        .await;
    let asked = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    assert_eq!(asked.last().unwrap()["name"], "mcp__fixture__bonus");
    server.stop().await;
}

#[tokio::test]
async fn plan_mode_refuses_mcp_tools_and_progress_can_be_off() {
    let server = start(10_000).await;
    let mut c = server.client().await;
    c.chat(None, "echo please", json!({"permission_mode": "plan"}))
        .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "tool_approval_request").is_empty());
    let end = tool_end(&frames).clone();
    assert_eq!(end["is_error"], true, "{end}");
    assert_eq!(end["metadata"]["status"], "rejected", "{end}");
    server.stop().await;

    // An agent with `emit_mcp_progress = false` gets the result without progress frames.
    let quiet = TestServer::start_with(script(), |c| {
        c.mcp.servers = vec![server_config("fixture", None, 10_000)];
        c.policy.allowed_mcp_servers = vec!["fixture".into()];
        c.agent.emit_mcp_progress = false;
    })
    .await;
    let mut c = quiet.client().await;
    c.chat(None, "count please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "mcp_progress").is_empty());
    assert_eq!(quiet.last_tool_result(), "counted to 3");
    quiet.stop().await;
}

#[tokio::test]
async fn resources_and_prompts_take_their_servers_category_and_list_what_there_is() {
    let server = start(10_000).await;
    let mut c = server.client().await;
    // They reach the servers as their tools do: never in Plan mode...
    c.chat(None, "notes please", json!({"permission_mode": "plan"}))
        .await;
    let frames = c.turn().await;
    let end = support::tool_end(&frames);
    assert_eq!(end["metadata"]["status"], "rejected", "{end}");
    // ...and without asking in Auto.
    c.chat(None, "notes please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "tool_approval_request").is_empty());
    assert_eq!(
        server.last_tool_result(),
        "A loom weaves weft threads through the warp."
    );
    let tools = server.provider.requests().pop().unwrap().tools;
    let reader = tools
        .iter()
        .find(|t| t.name == "mcp__read_resource")
        .unwrap();
    assert!(
        reader
            .description
            .contains("- fixture://notes/loom (loom notes, text/markdown): What a loom is"),
        "{}",
        reader.description
    );
    // Only allowed servers are offered (and `stranger` is not).
    assert_eq!(
        reader.parameters["properties"]["server"]["enum"],
        json!(["fixture", "reader"])
    );
    let prompts = tools.iter().find(|t| t.name == "mcp__get_prompt").unwrap();
    assert!(
        prompts
            .description
            .contains("- greet(name): Greet someone by name"),
        "{}",
        prompts.description
    );

    c.chat(None, "greet please", json!({"permission_mode": "auto"}))
        .await;
    c.turn().await;
    assert_eq!(server.last_tool_result(), "user: Say hello to Ada, warmly.");

    // A resource the server does not have is an error the model reads.
    c.chat(None, "missing please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let end = tool_end(&frames).clone();
    assert_eq!(end["is_error"], true);
    assert!(
        end["result"]
            .as_str()
            .unwrap()
            .contains("no resource fixture://nothing"),
        "{end}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_server_without_tools_still_offers_its_resources() {
    let server = TestServer::start_with(script(), |c| {
        let mut notes = server_config("notes", None, 10_000);
        notes.args = vec!["--no-tools".into()];
        c.mcp.servers = vec![notes];
        c.policy.allowed_mcp_servers = vec!["notes".into()];
    })
    .await;
    let belt = server
        .state
        .runtime
        .toolbelt_for(&weft_protocol::ChatContext::Thread);
    assert!(belt.contains("mcp__read_resource"));
    assert!(belt.contains("mcp__get_prompt"));
    assert!(!belt.contains("mcp__notes__echo"));
    server.stop().await;
}

#[tokio::test]
async fn a_server_that_never_answers_does_not_hold_up_the_others() {
    let started = std::time::Instant::now();
    let server = TestServer::start_with(script(), |c| {
        // A process that never speaks MCP: its handshake times out.
        let mut silent = server_config("silent", None, 500);
        silent.command = Some("sleep".into());
        silent.args = vec!["30".into()];
        c.mcp.servers = vec![silent, server_config("fixture", None, 10_000)];
        c.policy.allowed_mcp_servers = vec!["silent".into(), "fixture".into()];
    })
    .await;
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // The health check reports each allowed server; one that is down does not make Weft
    // unhealthy.
    let (status, health) = server.get("/healthz", None).await;
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    assert_eq!(
        health["mcp"]["silent"],
        json!({"connected": false, "tools": 0})
    );
    assert_eq!(health["mcp"]["fixture"]["connected"], true);
    assert!(health["mcp"]["fixture"]["tools"].as_u64().unwrap() >= 5);
    let belt = server
        .state
        .runtime
        .toolbelt_for(&weft_protocol::ChatContext::Thread);
    assert!(belt.contains("mcp__fixture__echo"));
    let mut c = server.client().await;
    c.chat(None, "echo please", json!({"permission_mode": "auto"}))
        .await;
    c.turn().await;
    assert_eq!(server.last_tool_result(), "echo: hi");
    server.stop().await;
}

/// A server configured with `hitl_tools`, started as `weft serve` would.
async fn start_up(hitl_tools: &[&str]) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut config = weft_server::Config::default();
    config.policy.workspace_root = dir.path().join("workspace");
    config.assets.dir = dir.path().join("assets");
    // A server that is not there yet: its tools are listed once it answers.
    let mut ghost = server_config("ghost", None, 200);
    ghost.command = Some(dir.path().join("not-installed-yet").display().to_string());
    config.mcp.servers = vec![ghost];
    config.policy.allowed_mcp_servers = vec!["ghost".into()];
    config.agent.hitl_tools = hitl_tools.iter().map(|t| t.to_string()).collect();
    let db = weft_store::testing::TestDb::sqlite(dir.path())
        .await
        .unwrap();
    let providers = config.build_providers().unwrap();
    let addr = "127.0.0.1:0".parse().unwrap();
    weft_server::ServerState::start(config, db.store.clone(), providers, addr)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn hitl_tools_may_name_a_tool_of_an_mcp_server_still_connecting_but_not_a_stranger() {
    start_up(&["mcp__ghost__deploy", "remember", "ui_confirm", "write_file"])
        .await
        .unwrap();
    for name in ["mcp__elsewhere__deploy", "deploy_service"] {
        let error = start_up(&[name]).await.unwrap_err();
        assert!(
            error.contains("hitl_tools") && error.contains(name),
            "{error}"
        );
    }
}
