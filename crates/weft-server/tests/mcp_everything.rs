//! MCP against a real third-party server: the reference "everything" server from npm
//! (`mcp-fixtures/`, installed by `scripts/test.sh`), over stdio and over streamable HTTP.
//! Its tools are listed under `mcp__everything__…`, go through the gate in each mode, report
//! progress (or not, per agent), and its resources and prompts reach the model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use support::{of_type, tool_end, TestServer};
use weft_tools::mcp::McpServerConfig;

/// The server's entry point, installed by `scripts/test.sh` (`npm ci --prefix mcp-fixtures`).
fn everything() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../../mcp-fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    assert!(
        path.exists(),
        "{} is missing: run ./scripts/test.sh, or `npm ci --prefix mcp-fixtures`",
        path.display()
    );
    path
}

fn stdio_config() -> McpServerConfig {
    McpServerConfig {
        name: "everything".into(),
        command: Some("node".into()),
        args: vec![everything().display().to_string(), "stdio".into()],
        env: Default::default(),
        url: None,
        headers: Default::default(),
        bearer_token_env: None,
        category: None,
        timeout_ms: 20_000,
    }
}

fn http_config(port: u16) -> McpServerConfig {
    McpServerConfig {
        name: "everything".into(),
        command: None,
        args: Vec::new(),
        env: Default::default(),
        url: Some(format!("http://127.0.0.1:{port}/mcp")),
        headers: Default::default(),
        bearer_token_env: None,
        category: None,
        timeout_ms: 20_000,
    }
}

/// The HTTP server as a child process on a free port, killed when dropped.
struct HttpEverything {
    child: tokio::process::Child,
    port: u16,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl HttpEverything {
    async fn start() -> HttpEverything {
        Self::start_on(free_port()).await
    }

    async fn start_on(port: u16) -> HttpEverything {
        let child = tokio::process::Command::new("node")
            .arg(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return HttpEverything { child, port };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the everything server did not listen on {port}");
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"tool_calls": [{"id": id, "name": name, "arguments": args}]})
}

fn script() -> Value {
    json!({"conversations": [
        {"match": "echo", "steps": [call("e", "mcp__everything__echo", json!({"message": "hi"})), {"text": "echoed", "repeat": true}]},
        {"match": "sum", "steps": [call("s", "mcp__everything__get-sum", json!({"a": 2, "b": 40})), {"text": "summed", "repeat": true}]},
        {"match": "long", "steps": [
            call("l", "mcp__everything__trigger-long-running-operation", json!({"duration": 0.6, "steps": 3})),
            {"text": "done", "repeat": true}]},
        {"match": "resource", "steps": [
            call("r", "mcp__read_resource", json!({"server": "everything", "uri": "demo://resource/dynamic/text/1"})),
            {"text": "read", "repeat": true}]},
        {"match": "prompt", "steps": [
            call("p", "mcp__get_prompt", json!({"server": "everything", "name": "args-prompt", "arguments": {"city": "Lyon"}})),
            {"text": "prompted", "repeat": true}]},
        {"match": "image", "steps": [call("i", "mcp__everything__get-tiny-image", json!({})), {"text": "shown", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

async fn start(config: McpServerConfig, progress: bool) -> TestServer {
    TestServer::start_with(script(), move |c| {
        c.mcp.servers = vec![config];
        c.policy.allowed_mcp_servers = vec!["everything".into()];
        c.agent.emit_mcp_progress = progress;
    })
    .await
}

/// The tool specs the model was last offered, by name.
fn offered(server: &TestServer) -> Vec<(String, String)> {
    server
        .provider
        .requests()
        .pop()
        .unwrap()
        .tools
        .iter()
        .filter(|t| t.name.starts_with("mcp__"))
        .map(|t| (t.name.clone(), t.description.clone()))
        .collect()
}

/// The `end` update of the turn's only tool call: (is_error, result, metadata status).
fn end_of(frames: &[Value]) -> (bool, String, Value) {
    let end = tool_end(frames);
    (
        end["is_error"] == true,
        end["result"].as_str().unwrap_or_default().to_owned(),
        end["metadata"]["status"].clone(),
    )
}

/// Everything the tests check, over whichever transport `server` was configured with.
async fn exercise(server: &TestServer) {
    let mut c = server.client().await;

    // Default mode: an external tool asks first; allowed, it runs.
    c.chat(None, "echo please", json!({})).await;
    let ask = c
        .recv_until(|f| f["type"] == "tool_approval_request")
        .await
        .pop()
        .unwrap();
    assert_eq!(
        (ask["name"].as_str(), ask["category"].as_str()),
        (Some("mcp__everything__echo"), Some("external"))
    );
    c.send(json!({"type": "tool_approval_response", "tool_call_id": ask["tool_call_id"], "decision": "allow"}))
        .await;
    c.turn().await;
    assert_eq!(server.last_tool_result(), "Echo: hi");
    let names: Vec<String> = offered(server).into_iter().map(|(n, _)| n).collect();
    for expected in [
        "mcp__everything__echo",
        "mcp__everything__get-sum",
        "mcp__everything__trigger-long-running-operation",
        "mcp__read_resource",
        "mcp__get_prompt",
    ] {
        assert!(names.contains(&expected.to_owned()), "{names:?}");
    }

    // Plan mode refuses it without asking; Auto runs it without asking.
    c.chat(None, "sum please", json!({"permission_mode": "plan"}))
        .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "tool_approval_request").is_empty());
    let (is_error, _, status) = end_of(&frames);
    assert!(is_error);
    assert_eq!(status, "rejected");
    c.chat(None, "sum please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "tool_approval_request").is_empty());
    let (is_error, result, _) = end_of(&frames);
    assert!(!is_error, "{result}");
    assert!(result.contains("42"), "{result}");

    // Resources and prompts reach the server as its tools do: its category (external here),
    // so they are refused in Plan mode and run in Auto; the model sees what there is in their
    // descriptions.
    let (_, about) = offered(server)
        .into_iter()
        .find(|(n, _)| n == "mcp__read_resource")
        .unwrap();
    assert!(
        about.contains("demo://resource/static/document/"),
        "{about}"
    );
    assert!(about.contains("demo://resource/dynamic/text/{"), "{about}");
    c.chat(None, "resource please", json!({"permission_mode": "plan"}))
        .await;
    let frames = c.turn().await;
    let (is_error, _, status) = end_of(&frames);
    assert!(is_error);
    assert_eq!(status, "rejected", "refused in Plan mode");
    c.chat(None, "resource please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let (is_error, result, _) = end_of(&frames);
    assert!(!is_error, "{result}");
    assert!(result.contains("Resource 1"), "{result}");
    let (_, about) = offered(server)
        .into_iter()
        .find(|(n, _)| n == "mcp__get_prompt")
        .unwrap();
    assert!(about.contains("args-prompt(city, state?)"), "{about}");
    c.chat(None, "prompt please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let (is_error, result, _) = end_of(&frames);
    assert!(!is_error, "{result}");
    assert!(result.contains("user: What's weather in Lyon?"), "{result}");
}

/// An image a tool returns is kept as the caller's asset, and the result points at it.
async fn image_becomes_an_asset(server: &TestServer) {
    let mut c = server.client().await;
    c.chat(None, "image please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let (is_error, result, _) = end_of(&frames);
    assert!(!is_error, "{result}");
    let result: Value = serde_json::from_str(&result).unwrap();
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("The image above is the MCP logo."),
        "{result}"
    );
    let asset = &result["assets"][0];
    assert_eq!(asset["mime_type"], "image/png");
    let response = reqwest::get(server.url(asset["url"].as_str().unwrap()))
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "image/png");
    let png = response.bytes().await.unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

/// The progress frames of a long-running operation (3 steps).
async fn progress_frames(server: &TestServer) -> Vec<Value> {
    let mut c = server.client().await;
    c.chat(None, "long please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let (is_error, result, _) = end_of(&frames);
    assert!(!is_error, "{result}");
    assert!(
        result.contains("Long running operation completed"),
        "{result}"
    );
    of_type(&frames, "mcp_progress")
        .into_iter()
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_everything_server_over_stdio() {
    let server = start(stdio_config(), true).await;
    exercise(&server).await;
    image_becomes_an_asset(&server).await;
    let progress = progress_frames(&server).await;
    let steps: Vec<(f64, f64)> = progress
        .iter()
        .map(|f| {
            (
                f["progress"].as_f64().unwrap(),
                f["total"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(steps, [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]);
    server.stop().await;

    let quiet = start(stdio_config(), false).await;
    assert!(progress_frames(&quiet).await.is_empty());
    quiet.stop().await;
}

#[tokio::test]
async fn the_everything_server_over_streamable_http() {
    let everything = HttpEverything::start().await;
    let server = start(http_config(everything.port), true).await;
    exercise(&server).await;
    assert_eq!(progress_frames(&server).await.len(), 3);
    server.stop().await;
}

#[tokio::test]
async fn the_everything_server_is_absent_when_the_policy_does_not_allow_it() {
    let server = TestServer::start_with(script(), |c| {
        c.mcp.servers = vec![stdio_config()];
        c.policy.allowed_mcp_servers = Vec::new();
    })
    .await;
    let mut c = server.client().await;
    c.chat(None, "echo please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    assert!(offered(&server).is_empty());
    let (is_error, result, _) = end_of(&frames);
    assert!(is_error);
    assert!(result.contains("mcp__everything__echo"), "{result}");
    server.stop().await;
}

#[tokio::test]
async fn a_server_that_comes_up_after_weft_joins_later() {
    let port = free_port();
    // Nothing listens yet: Weft starts without it and keeps trying in the background.
    let server = start(http_config(port), true).await;
    let has_echo = || {
        server
            .state
            .runtime
            .toolbelt_for(&weft_protocol::ChatContext::Thread)
            .contains("mcp__everything__echo")
    };
    assert!(!has_echo());
    let _everything = HttpEverything::start_on(port).await;
    for _ in 0..300 {
        if has_echo() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(has_echo(), "the server's tools never joined");
    let mut c = server.client().await;
    c.chat(None, "sum please", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let (is_error, result, _) = end_of(&frames);
    assert!(!is_error && result.contains("42"), "{result}");
    server.stop().await;
}

#[tokio::test]
async fn an_http_server_gets_the_configured_headers_and_bearer_token() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    // A server that refuses everything but records what it was sent.
    let refusing = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401))
        .mount(&refusing)
        .await;
    std::env::set_var("WEFT_TEST_MCP_TOKEN", "s3cret");
    let mut config = http_config(0);
    config.url = Some(format!("{}/mcp", refusing.uri()));
    config.headers = [("X-Team".to_owned(), "looms".to_owned())].into();
    config.bearer_token_env = Some("WEFT_TEST_MCP_TOKEN".into());
    let server = start(config, true).await;
    let requests = refusing.received_requests().await.unwrap();
    let first = requests.first().expect("the handshake was attempted");
    assert_eq!(first.headers["authorization"], "Bearer s3cret");
    assert_eq!(first.headers["x-team"], "looms");
    // Refused: no tools from it, and Weft runs all the same.
    assert!(offered_now(&server).is_empty());
    server.stop().await;
}

/// The MCP tools in the thread toolbelt now.
fn offered_now(server: &TestServer) -> Vec<String> {
    let belt = server
        .state
        .runtime
        .toolbelt_for(&weft_protocol::ChatContext::Thread);
    belt.specs(&Default::default())
        .iter()
        .map(|t| t.name.clone())
        .filter(|n| n.starts_with("mcp__"))
        .collect()
}
