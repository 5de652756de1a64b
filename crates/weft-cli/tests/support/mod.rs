//! Real `weft serve` processes for end-to-end tests: a database that outlives them, start,
//! `kill -9`, a websocket and REST to them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use weft_store::testing::TestDb;

const WEFT: &str = env!("CARGO_BIN_EXE_weft");

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A database that outlives server processes.
pub struct Db {
    pub url: String,
    pg: Option<TestDb>,
    pub dir: tempfile::TempDir,
}

impl Db {
    pub async fn new(postgres: bool) -> Db {
        let dir = tempfile::tempdir().unwrap();
        if postgres {
            let pg = TestDb::postgres().await.unwrap();
            Db {
                url: pg.url.clone(),
                pg: Some(pg),
                dir,
            }
        } else {
            Db {
                url: format!("sqlite://{}/weft.db", dir.path().display()),
                pg: None,
                dir,
            }
        }
    }

    pub async fn drop_database(self) {
        if let Some(pg) = self.pg {
            pg.drop_database().await.unwrap();
        }
    }
}

pub struct Server {
    pub child: Child,
    pub addr: String,
}

/// One local user runs every turn here: no per-user limits.
pub const NO_USER_LIMITS: &str =
    "[limits]\nturns_per_user = 0\nmessages_per_minute = 0\n[server]\nmax_sockets_per_user = 0\n";

impl Server {
    pub async fn start(db: &Db, script: &Value) -> Server {
        Self::start_with(db, script, NO_USER_LIMITS).await
    }

    /// `weft serve` on `db` with the scripted provider's `script` and `config` (TOML).
    pub async fn start_with(db: &Db, script: &Value, config: &str) -> Server {
        Self::start_on(db, script, config, "127.0.0.1:0").await
    }

    /// [`Server::start_with`] listening on `bind` (a restarted server on its former address).
    pub async fn start_on(db: &Db, script: &Value, config: &str, bind: &str) -> Server {
        Self::start_env(db, script, config, bind, &[]).await
    }

    /// [`Server::start_on`] with more environment variables (`WEFT_DATABASE_URL` among them
    /// replaces the database's).
    pub async fn start_env(
        db: &Db,
        script: &Value,
        config: &str,
        bind: &str,
        env: &[(&str, &str)],
    ) -> Server {
        let script_path = db.dir.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let config_path = db.dir.path().join("weft.toml");
        std::fs::write(&config_path, config).unwrap();
        let config = config_path;
        let mut child = Command::new(WEFT)
            .args(["serve", "--bind", bind, "--config"])
            .arg(&config)
            .env("WEFT_SCRIPT", &script_path)
            .env("WEFT_DATABASE_URL", &db.url)
            .env("WEFT_WORKSPACE", db.dir.path().join("workspace"))
            .env(
                "RUST_LOG",
                std::env::var("WEFT_TEST_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .current_dir(db.dir.path())
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("WEFT_TEST_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = loop {
            assert!(
                Instant::now() < deadline,
                "the server never said `listening on`"
            );
            let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                .await
                .unwrap()
                .unwrap()
                .expect("server output");
            if let Some(at) = line.find("listening on ") {
                break line[at + 13..]
                    .chars()
                    .take_while(|c| !c.is_whitespace())
                    .collect::<String>();
            }
        };
        // WEFT_TEST_LOG=1 shows the servers' logs with the test's output.
        let show = std::env::var_os("WEFT_TEST_LOG").is_some();
        let name = addr.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if show {
                    eprintln!("[{name}] {line}");
                }
            }
        });
        Server { child, addr }
    }

    /// `kill -9`: no shutdown, no flush, nothing.
    pub async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Send the process a signal by name (`STOP`, `CONT`, `TERM`).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().expect("the server runs").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} {pid}");
    }

    pub async fn connect(&self) -> Ws {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", self.addr))
            .await
            .unwrap();
        ws
    }

    /// A websocket as the user whose API key is `key`.
    pub async fn connect_as(&self, key: &str) -> Ws {
        let (ws, _) =
            tokio_tungstenite::connect_async(format!("ws://{}/ws?api_key={key}", self.addr))
                .await
                .unwrap();
        ws
    }

    /// A REST call as the user whose API key is `key`: its status and JSON body (`null`
    /// when it has none).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        key: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = reqwest::Client::new()
            .request(method, format!("http://{}{path}", self.addr))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// One turn's trace (`message` is its final `message` frame): subtasks nested, full
    /// results.
    pub async fn trace(&self, thread: &str, message: &Value) -> Value {
        let id = message["message"]["id"].as_str().unwrap();
        self.get(&format!("/threads/{thread}/messages/{id}/trace"))
            .await
    }

    pub async fn get(&self, path: &str) -> Value {
        reqwest::get(format!("http://{}{path}", self.addr))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

pub async fn send(ws: &mut Ws, frame: Value) {
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
}

pub async fn recv(ws: &mut Ws) -> Value {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("timed out waiting for a frame");
        match next {
            Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).unwrap(),
            Some(Ok(_)) => continue,
            other => panic!("socket ended: {other:?}"),
        }
    }
}

pub async fn until(ws: &mut Ws, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut frames = Vec::new();
    loop {
        let f = recv(ws).await;
        let stop = done(&f);
        frames.push(f);
        if stop {
            return frames;
        }
    }
}

pub fn is_done(f: &Value) -> bool {
    f["type"] == "chunk" && f["done"] == true
}

pub fn chat(content: &str, thread: Option<&str>) -> Value {
    let mut data = json!({"content": content});
    if let Some(t) = thread {
        data["thread_id"] = json!(t);
    }
    json!({"command": "chat_message", "data": data})
}

/// A `nats-server` of the test's own, on a free port, gone with the value.
pub struct Nats {
    child: Child,
    pub url: String,
    port: u16,
    dir: tempfile::TempDir,
}

/// `nats-server` on `port`, storing under `dir`.
fn spawn_nats(port: u16, dir: &std::path::Path) -> Child {
    let binary = [
        "/usr/sbin/nats-server",
        "/usr/bin/nats-server",
        "/usr/local/bin/nats-server",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .unwrap_or("nats-server");
    Command::new(binary)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("nats-server (scripts/test.sh installs it)")
}

async fn listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "nats-server did not listen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Nats {
    pub async fn start() -> Nats {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = spawn_nats(port, dir.path());
        listening(port).await;
        Nats {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            port,
            dir,
        }
    }

    /// Stop the server, wait `down`, and start it again on the same port (its clients
    /// reconnect).
    pub async fn restart(&mut self, down: Duration) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        tokio::time::sleep(down).await;
        self.child = spawn_nats(self.port, self.dir.path());
        listening(self.port).await;
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Send the server a signal by name (`STOP` freezes it, `CONT` wakes it).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().expect("nats-server runs").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} {pid}");
    }
}

/// A load balancer of the test's own: each TCP connection goes to the backend current when
/// it arrives, for as long as it lasts.
pub struct Balancer {
    pub addr: String,
    backend: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Balancer {
    pub async fn start(backend: &str) -> Balancer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let backend = std::sync::Arc::new(std::sync::Mutex::new(backend.to_owned()));
        let current = backend.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let to = current.lock().unwrap().clone();
                tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&to).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Balancer { addr, backend }
    }

    /// New connections go to `backend` from now on.
    pub fn route_to(&self, backend: &str) {
        *self.backend.lock().unwrap() = backend.to_owned();
    }
}

/// The results of `tool`'s calls anywhere in a turn's trace (subtasks included), in order,
/// each with its call's id.
pub fn results_named(trace: &Value, tool: &str) -> Vec<(String, String)> {
    fn walk(trace: &Value, tool: &str, out: &mut Vec<(String, String)>) {
        match trace {
            Value::Object(node) => {
                if node.get("name").and_then(Value::as_str) == Some(tool) {
                    if let (Some(id), Some(result)) = (
                        node.get("tool_call_id").and_then(Value::as_str),
                        node.get("result").and_then(Value::as_str),
                    ) {
                        out.push((id.to_owned(), result.to_owned()));
                    }
                }
                node.values().for_each(|v| walk(v, tool, out));
            }
            Value::Array(nodes) => nodes.iter().for_each(|v| walk(v, tool, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(trace, tool, &mut out);
    out
}

/// A TCP proxy of the test's own that can freeze: from then on it forwards nothing and
/// closes nothing, as a server that stopped answering (but whose host is still up).
pub struct FreezingProxy {
    pub addr: String,
    frozen: tokio::sync::watch::Sender<bool>,
}

impl FreezingProxy {
    pub async fn start(backend: &str) -> FreezingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (frozen, watch) = tokio::sync::watch::channel(false);
        let backend = backend.to_owned();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&backend).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(forward(client_read, server_write, watch.clone()));
                tokio::spawn(forward(server_read, client_write, watch.clone()));
            }
        });
        FreezingProxy { addr, frozen }
    }

    /// Stop forwarding, for good, on every connection (new ones hang too).
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }
}

async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if *frozen.borrow() {
            // Hold both ends open and silent.
            let _held = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
