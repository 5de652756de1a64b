//! Integration harness: the real server on an ephemeral port, a real websocket client, and
//! PostgreSQL (or SQLite with `WEFT_TEST_DB=sqlite`, PostgreSQL with pgvector with
//! `WEFT_TEST_DB=pgvector`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use weft_core::{Provider, ProviderRequest};
use weft_providers::ScriptedProvider;
use weft_server::{Config, ServerState};
use weft_store::testing::TestDb;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

// Mock OpenAI endpoints (wiremock): SSE bodies and responses mounted in order.

pub fn openai_sse(chunks: &[Value]) -> ResponseTemplate {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

pub fn openai_chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

pub fn openai_text(text: &str) -> ResponseTemplate {
    openai_sse(&[
        openai_chunk(json!({"content": text}), None),
        openai_chunk(json!({}), Some("stop")),
    ])
}

/// Mount `responses` to answer the provider's calls in order, one each.
pub async fn in_order(server: &MockServer, route: &str, responses: Vec<ResponseTemplate>) {
    for (i, response) in responses.into_iter().enumerate() {
        Mock::given(method("POST"))
            .and(path(route))
            .respond_with(response)
            .up_to_n_times(1)
            .with_priority(u8::try_from(i + 1).unwrap())
            .mount(server)
            .await;
    }
}

/// The scripted provider as the server uses it, recording every request it is sent; its
/// script can be replaced mid-test (for a script that names ids only known after a turn).
pub struct TestProvider {
    inner: parking_lot::Mutex<Arc<dyn Provider>>,
    pub requests: parking_lot::Mutex<Vec<ProviderRequest>>,
}

impl TestProvider {
    pub fn set_script(&self, script: Value) {
        *self.inner.lock() = Arc::new(ScriptedProvider::from_value(script).unwrap());
    }

    pub fn requests(&self) -> Vec<ProviderRequest> {
        self.requests.lock().clone()
    }
}

#[async_trait::async_trait]
impl Provider for TestProvider {
    fn name(&self) -> &str {
        "scripted"
    }
    fn capabilities(&self, model: &str) -> weft_core::Capabilities {
        self.inner.lock().capabilities(model)
    }
    async fn stream(
        &self,
        request: ProviderRequest,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<weft_core::ProviderStream, weft_core::ProviderError> {
        self.requests.lock().push(request.clone());
        let inner = self.inner.lock().clone();
        inner.stream(request, cancel).await
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub state: Arc<ServerState>,
    /// The scripted provider, recording what the model was sent.
    pub provider: Arc<TestProvider>,
    /// The local user's workspace (each user has `<root>/<user>`).
    pub workspace: std::path::PathBuf,
    pub workspace_root: std::path::PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    db: Option<TestDb>,
    _dir: tempfile::TempDir,
}

pub fn use_sqlite() -> bool {
    std::env::var("WEFT_TEST_DB").is_ok_and(|v| v == "sqlite")
}

/// `WEFT_TEST_DB=pgvector`: PostgreSQL with the pgvector extension (`scripts/pgvector.sh`).
pub fn use_pgvector() -> bool {
    std::env::var("WEFT_TEST_DB").is_ok_and(|v| v == "pgvector")
}

impl TestServer {
    pub async fn start(script: Value) -> TestServer {
        Self::start_with(script, |_| {}).await
    }

    pub async fn start_with(script: Value, configure: impl FnOnce(&mut Config)) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let script_path = dir.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let workspace = dir.path().join("workspace");
        let mut config = Config::default();
        config.providers.scripted.script = Some(script_path);
        config.provider.default = Some("scripted".into());
        config.policy.workspace_root = workspace.clone();
        config.assets.dir = dir.path().join("assets");
        config.server.shutdown_timeout_ms = 5_000;
        // Tests run many turns as one user; the limits have their own tests.
        config.limits.turns_per_user = 0;
        config.limits.messages_per_minute = 0;
        config.server.max_sockets_per_user = 0;
        configure(&mut config);

        let db = if use_sqlite() {
            TestDb::sqlite(dir.path()).await.unwrap()
        } else if use_pgvector() {
            TestDb::postgres_at(&weft_store::testing::pgvector_admin_url())
                .await
                .unwrap()
        } else {
            TestDb::postgres().await.unwrap()
        };
        let mut providers = config.build_providers().unwrap();
        let provider = Arc::new(TestProvider {
            inner: parking_lot::Mutex::new(Arc::new(
                ScriptedProvider::from_value(script.clone()).unwrap(),
            )),
            requests: parking_lot::Mutex::default(),
        });
        providers.insert("scripted", provider.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = ServerState::start(config, db.store.clone(), providers, addr)
            .await
            .unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(weft_server::serve(state.clone(), listener, async move {
            let _ = rx.await;
        }));
        let workspace_root = workspace.canonicalize().unwrap();
        let workspace = workspace_root.join("local");
        std::fs::create_dir_all(&workspace).unwrap();
        TestServer {
            addr,
            state,
            provider,
            workspace,
            workspace_root,
            shutdown: Some(tx),
            handle: Some(handle),
            db: Some(db),
            _dir: dir,
        }
    }

    /// A user's own workspace directory (created if missing).
    pub fn workspace_of(&self, user: &str) -> std::path::PathBuf {
        let dir = self.workspace_root.join(user);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The text of the last message the model was sent (after a tool round: its result).
    pub fn last_tool_result(&self) -> String {
        self.provider
            .requests()
            .pop()
            .expect("the model was asked")
            .messages
            .last()
            .expect("with messages")
            .text()
    }

    pub async fn client(&self) -> Client {
        self.client_with_key(None).await.unwrap()
    }

    pub async fn client_with_key(&self, key: Option<&str>) -> Result<Client, u16> {
        let mut request = format!("ws://{}/ws", self.addr)
            .into_client_request()
            .unwrap();
        if let Some(key) = key {
            request
                .headers_mut()
                .insert("Authorization", format!("Bearer {key}").parse().unwrap());
        }
        match tokio_tungstenite::connect_async(request).await {
            Ok((ws, _)) => Ok(Client { ws }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                Err(response.status().as_u16())
            }
            Err(e) => panic!("connect failed: {e}"),
        }
    }

    pub async fn get(&self, path: &str, key: Option<&str>) -> (u16, Value) {
        let mut req = reqwest::Client::new().get(self.url(path));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A REST call with a JSON body (or none); the status and the JSON answer.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = reqwest::Client::new().request(method, self.url(path));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Shut down (as on SIGTERM) and wait for the server to finish.
    pub async fn stop(mut self) {
        self.shutdown_and_wait().await;
        if let Some(db) = self.db.take() {
            let _ = db.drop_database().await;
        }
    }

    pub async fn shutdown_and_wait(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(handle) = self.handle.take() {
            tokio::time::timeout(Duration::from_secs(20), handle)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
        }
    }

    /// A new connection to the server's database (after shutdown closed the server's pool).
    pub async fn reopened_store(&self) -> weft_store::Store {
        weft_store::Store::connect(&self.db.as_ref().unwrap().url)
            .await
            .unwrap()
    }

    pub fn store(&self) -> &weft_store::Store {
        &self.state.runtime.store
    }

    /// The runtime the server runs on.
    pub fn runtime(&self) -> &weft_server::Runtime {
        &self.state.runtime
    }

    /// The database's URL.
    pub fn database_url(&self) -> String {
        self.db.as_ref().unwrap().url.clone()
    }
}

pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Client {
    pub async fn send(&mut self, frame: Value) {
        self.ws
            .send(Message::Text(frame.to_string().into()))
            .await
            .unwrap();
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws
            .send(Message::Text(text.to_owned().into()))
            .await
            .unwrap();
    }

    pub async fn send_msgpack(&mut self, frame: &Value) {
        let bytes = rmp_serde::to_vec_named(frame).unwrap();
        self.ws.send(Message::Binary(bytes.into())).await.unwrap();
    }

    /// Start a chat turn.
    pub async fn chat(&mut self, thread_id: Option<&str>, content: &str, extra: Value) {
        let mut data = json!({"content": content});
        if let Some(id) = thread_id {
            data["thread_id"] = json!(id);
        }
        if let Value::Object(extra) = extra {
            for (k, v) in extra {
                data[k] = v;
            }
        }
        self.send(json!({"command": "chat_message", "request_id": "r1", "data": data}))
            .await;
    }

    /// The next frame (JSON or MessagePack), or `{"type": "__closed", "code": …}`.
    pub async fn recv(&mut self) -> Value {
        loop {
            let next = tokio::time::timeout(Duration::from_secs(15), self.ws.next())
                .await
                .expect("timed out waiting for a frame");
            match next {
                Some(Ok(Message::Text(t))) => {
                    let frame: Value = serde_json::from_str(&t).unwrap();
                    fits_the_schema(&frame);
                    return frame;
                }
                Some(Ok(Message::Binary(b))) => {
                    let mut v: Value = rmp_serde::from_slice(&b).unwrap();
                    v["__binary"] = json!(true);
                    return v;
                }
                Some(Ok(Message::Close(frame))) => {
                    return json!({"type": "__closed", "code": frame.map(|f| u16::from(f.code))});
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return json!({"type": "__closed", "error": e.to_string()}),
                None => return json!({"type": "__closed"}),
            }
        }
    }

    /// Frames up to and including the first that matches.
    pub async fn recv_until(&mut self, done: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let stop = done(&frame) || frame["type"] == "__closed";
            frames.push(frame);
            if stop {
                return frames;
            }
        }
    }

    /// Frames until the turn's final `chunk {done: true}`.
    pub async fn turn(&mut self) -> Vec<Value> {
        self.recv_until(|f| f["type"] == "chunk" && f["done"] == true)
            .await
    }

    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

/// The provider's id inside a server-unique call id (`sa~k3f9a21` → `sa`).
pub fn hint(id: &str) -> &str {
    id.split('~').next().unwrap_or(id)
}

/// A JSON id value reduced to its provider hint.
pub fn hinted(id: &Value) -> Value {
    id.as_str().map_or(Value::Null, |s| json!(hint(s)))
}

/// The first tool call's `end` update among `frames`.
pub fn tool_end(frames: &[Value]) -> &Value {
    frames
        .iter()
        .find(|f| f["type"] == "tool_call_update" && f["status"] == "end")
        .expect("a tool call ended")
}

pub fn of_type<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["type"] == kind).collect()
}

pub fn text_of(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "chunk" && f["depth"] == 0)
        .filter_map(|f| f["content"].as_str())
        .collect()
}

pub fn thread_of(frames: &[Value]) -> String {
    frames
        .iter()
        .find_map(|f| f["thread_id"].as_str())
        .unwrap()
        .to_owned()
}

/// The id of the assistant message a turn's `message` frame carries.
pub fn answer_id(frames: &[Value]) -> String {
    of_type(frames, "message")[0]["message"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A compact line per frame for sequence assertions.
pub fn kinds(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|f| match f["type"].as_str().unwrap_or("?") {
            "chunk" if f["done"] == true => "done".to_owned(),
            "chunk" => format!("chunk d{}", f["depth"]),
            "tool_call_update" => format!(
                "{} {} d{}",
                f["status"].as_str().unwrap(),
                f["name"].as_str().unwrap(),
                f["depth"]
            ),
            other => other.to_owned(),
        })
        .collect()
}

/// What the server logs on this thread while the guard lives (a `#[tokio::test]` runs the
/// server's tasks on its own thread).
pub fn capture_logs() -> (tracing::subscriber::DefaultGuard, Logs) {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    (tracing::subscriber::set_default(subscriber), logs)
}

/// Captured log lines.
#[derive(Clone, Default)]
pub struct Logs(Arc<parking_lot::Mutex<Vec<u8>>>);

impl Logs {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

/// Every frame a test receives fits the committed schema (`docs/schema/server_frame.json`):
/// what the server sends cannot drift from what client authors are told.
pub fn fits_the_schema(frame: &Value) {
    static SERVER_FRAME: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    let validator = SERVER_FRAME.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/schema/server_frame.json"
        );
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        jsonschema::validator_for(&schema).unwrap()
    });
    let errors: Vec<String> = validator
        .iter_errors(frame)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "a frame outside the schema: {frame}: {errors:?}"
    );
}

/// The `weft-mcp-fixture` binary (a dev-only crate of its own), beside this test's binary in
/// the target directory: `cargo test --workspace` and `scripts/test.sh` build it.
pub fn mcp_fixture() -> String {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the target directory");
    let fixture = dir.join(format!("weft-mcp-fixture{}", std::env::consts::EXE_SUFFIX));
    assert!(
        fixture.exists(),
        "{} is missing: run `cargo build -p weft-mcp-fixture` (scripts/test.sh does)",
        fixture.display()
    );
    fixture.to_string_lossy().into_owned()
}
