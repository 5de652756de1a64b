//! The real `weft` server as a child process for the socket benchmarks: a fresh database
//! (PostgreSQL or SQLite), a scripted provider, a config of the caller's, and the address it
//! listens on; or several replicas on one PostgreSQL database with a `nats-server`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use weft_store::testing::TestDb;

pub struct ServerProcess {
    pub child: Child,
    pub pid: u32,
    pub addr: String,
    /// Everything it said (its stderr, and its stdout after `listening on`).
    pub log: PathBuf,
    pg: Option<TestDb>,
    _dir: tempfile::TempDir,
}

/// One local user drives every turn of a load test, from one address: no per-user limits,
/// no cap on the user's sockets or on the address's connections still authenticating.
pub const NO_USER_LIMITS: &str = "[limits]\nturns_per_user = 0\nmessages_per_minute = 0\n\
[server]\nmax_sockets_per_user = 0\nmax_unauthenticated_per_address = 0\n";

/// Start `bin serve` with `script` (scripted provider), `config` (TOML) and `db` (`postgres`
/// or `sqlite`).
pub async fn start(
    bin: &Path,
    script: &serde_json::Value,
    config: &str,
    db: &str,
) -> Result<ServerProcess, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (db_url, pg) = if db == "sqlite" {
        (format!("sqlite://{}/bench.db", dir.path().display()), None)
    } else {
        let pg = TestDb::postgres()
            .await
            .map_err(|e| format!("PostgreSQL: {e}"))?;
        (pg.url.clone(), Some(pg))
    };
    let mut server = spawn(bin, script, config, &db_url, dir).await?;
    server.pg = pg;
    Ok(server)
}

/// `bin serve` on `db_url`, in `dir`.
async fn spawn(
    bin: &Path,
    script: &serde_json::Value,
    config: &str,
    db_url: &str,
    dir: tempfile::TempDir,
) -> Result<ServerProcess, String> {
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).map_err(|e| e.to_string())?;
    let config_path = dir.path().join("weft.toml");
    std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
    let workspace: PathBuf = dir.path().join("workspace");
    // The child runs in the temporary directory: a relative binary path is ours.
    let bin =
        std::fs::canonicalize(bin).map_err(|e| format!("cannot find {}: {e}", bin.display()))?;
    // Its log goes to a file beside its database: read back when it fails to start.
    let log_path = dir.path().join("server.log");
    let mut log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let stderr = log.try_clone().map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(&bin)
        .args(["serve", "--bind", "127.0.0.1:0", "--config"])
        .arg(&config_path)
        .env("WEFT_SCRIPT", &script_path)
        .env("WEFT_DATABASE_URL", db_url)
        .env("WEFT_WORKSPACE", &workspace)
        .env("RUST_LOG", "warn,weft_server=info")
        .current_dir(dir.path())
        .stderr(stderr)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let pid = child.id().unwrap_or(0);
    let stdout = child.stdout.take().ok_or("no server stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    // What it said before failing to start, to say why.
    let mut said: Vec<String> = Vec::new();
    let addr = loop {
        match tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await {
            Ok(Ok(Some(line))) => {
                if let Some(at) = line.find("listening on ") {
                    // The log may be coloured: the address ends at whitespace or an escape.
                    let rest = &line[at + "listening on ".len()..];
                    break rest
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != '\u{1b}')
                        .collect::<String>();
                }
                said.push(line);
            }
            _ => {
                said.extend(
                    std::fs::read_to_string(&log_path)
                        .unwrap_or_default()
                        .lines()
                        .map(str::to_owned),
                );
                let tail = &said[said.len().saturating_sub(20)..];
                return Err(format!(
                    "the server never said `listening on`; it said:\n{}",
                    tail.join("\n")
                ));
            }
        }
    };
    // The rest of what it says goes to its log too, for a run that fails (`ws_load` leaves its
    // directory in place then).
    tokio::spawn(async move {
        use std::io::Write;
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = writeln!(log, "{line}");
        }
    });
    Ok(ServerProcess {
        child,
        pid,
        addr,
        log: log_path,
        pg: None,
        _dir: dir,
    })
}

/// Several replicas on one fresh PostgreSQL database and a `nats-server` of their own.
pub struct Cluster {
    pub replicas: Vec<ServerProcess>,
    nats: Child,
    pg: TestDb,
}

/// Start `n` replicas of `bin serve` (`r0`, `r1`, …) with `script` and `config`.
pub async fn start_cluster(
    bin: &Path,
    script: &serde_json::Value,
    config: &str,
    n: usize,
) -> Result<Cluster, String> {
    start_cluster_with(bin, script, config, "", n).await
}

/// [`start_cluster`] with more `[cluster]` settings (`lease_ms = …` lines).
pub async fn start_cluster_with(
    bin: &Path,
    script: &serde_json::Value,
    config: &str,
    cluster: &str,
    n: usize,
) -> Result<Cluster, String> {
    let pg = TestDb::postgres()
        .await
        .map_err(|e| format!("PostgreSQL: {e}"))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let nats = tokio::process::Command::new(nats_server())
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start nats-server: {e}"))?;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut replicas = Vec::with_capacity(n);
    for i in 0..n {
        let config = format!(
            "{config}[cluster]\nreplica_id = \"r{i}\"\nnats_url = \"nats://127.0.0.1:{port}\"\n{cluster}"
        );
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        replicas.push(spawn(bin, script, &config, &pg.url, dir).await?);
    }
    Ok(Cluster { replicas, nats, pg })
}

fn nats_server() -> &'static str {
    [
        "/usr/sbin/nats-server",
        "/usr/bin/nats-server",
        "/usr/local/bin/nats-server",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .unwrap_or("nats-server")
}

impl Cluster {
    /// The database the replicas share.
    pub fn database_url(&self) -> &str {
        &self.pg.url
    }

    pub async fn stop(mut self) {
        for replica in self.replicas {
            replica.stop().await;
        }
        let _ = self.nats.kill().await;
        let _ = self.pg.drop_database().await;
    }
}

impl ServerProcess {
    /// Stop the server and drop its database.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        if let Some(pg) = self.pg.take() {
            let _ = pg.drop_database().await;
        }
    }

    /// A GET on the server, as plain text (status line and body).
    pub async fn get(&self, path: &str) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(&self.addr).await.ok()?;
        tcp.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut body = String::new();
        tcp.read_to_string(&mut body).await.ok()?;
        Some(body)
    }
}
