//! `SIGTERM` always ends a real `weft serve` within `shutdown_timeout_ms` and a few seconds,
//! whatever its dependencies do: its `nats-server` killed, its `nats-server` frozen
//! (`SIGSTOP`), its PostgreSQL frozen behind a proxy that stops forwarding while a turn
//! runs, an MCP server that never answers and a "Chromium" that never starts while a turn
//! waits on the browser. Each ends through its own bounded waits (exit status 0), not the
//! process's last resort deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{chat, send, until, Db, FreezingProxy, Nats, Server, NO_USER_LIMITS};

/// The turns' time at shutdown in these tests.
const SHUTDOWN_TIMEOUT_MS: u64 = 1_000;

/// What the rest of a shutdown may take beyond that: every bounded wait it can meet.
const BOUND: Duration = Duration::from_secs(14);

fn config(nats_url: Option<&str>) -> String {
    let cluster = nats_url.map_or(String::new(), |url| {
        format!(
            "[cluster]\nreplica_id = \"a\"\nnats_url = \"{url}\"\nlease_ms = 1500\nheartbeat_ms = 250\n"
        )
    });
    format!("{NO_USER_LIMITS}shutdown_timeout_ms = {SHUTDOWN_TIMEOUT_MS}\n{cluster}")
}

fn slow_script() -> Value {
    json!({"conversations": [{"match": "*", "steps": [
        {"delay_ms": 60_000, "text": "late", "repeat": true}]}]})
}

/// Send SIGTERM and wait for the process to end: how long it took and whether it exited 0.
async fn terminate(mut server: Server) -> (Duration, bool) {
    let asked = Instant::now();
    server.signal("TERM");
    let limit = Duration::from_millis(SHUTDOWN_TIMEOUT_MS) + BOUND + Duration::from_secs(10);
    let status = tokio::time::timeout(limit, server.child.wait())
        .await
        .expect("the process did not end after SIGTERM")
        .unwrap();
    (asked.elapsed(), status.success())
}

fn assert_bounded(took: Duration, clean: bool, case: &str) {
    assert!(
        took <= Duration::from_millis(SHUTDOWN_TIMEOUT_MS) + BOUND,
        "{case}: SIGTERM took {took:?}"
    );
    assert!(
        clean,
        "{case}: the process ended through its last resort, not its own waits"
    );
}

#[tokio::test]
async fn sigterm_ends_an_idle_replica_whose_nats_server_is_gone() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let server = Server::start_with(&db, &slow_script(), &config(Some(&nats.url))).await;
    let _socket = server.connect().await;
    nats.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (took, clean) = terminate(server).await;
    assert_bounded(took, clean, "NATS killed");
    db.drop_database().await;
}

#[tokio::test]
async fn sigterm_ends_a_replica_whose_nats_server_froze_while_a_turn_ran() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let server = Server::start_with(&db, &slow_script(), &config(Some(&nats.url))).await;
    let mut socket = server.connect().await;
    send(&mut socket, chat("go", None)).await;
    until(&mut socket, |f| f["type"] == "turn_started").await;
    nats.signal("STOP");
    let (took, clean) = terminate(server).await;
    nats.signal("CONT");
    assert_bounded(took, clean, "NATS frozen");
    nats.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn sigterm_ends_a_server_whose_postgresql_froze_while_a_turn_ran() {
    let db = Db::new(true).await;
    // postgres://user@host:port/database, its host and port through the proxy.
    let (head, rest) = db.url.split_once('@').unwrap();
    let (backend, database) = rest.split_once('/').unwrap();
    let proxy = FreezingProxy::start(backend).await;
    let through = format!("{head}@{}/{database}", proxy.addr);
    let server = Server::start_env(
        &db,
        &slow_script(),
        &config(None),
        "127.0.0.1:0",
        &[("WEFT_DATABASE_URL", &through)],
    )
    .await;
    let mut socket = server.connect().await;
    send(&mut socket, chat("go", None)).await;
    until(&mut socket, |f| f["type"] == "turn_started").await;
    proxy.freeze();
    let (took, clean) = terminate(server).await;
    assert_bounded(took, clean, "PostgreSQL frozen");
    db.drop_database().await;
}

#[tokio::test]
async fn sigterm_ends_a_server_whose_mcp_server_and_chromium_hang() {
    let db = Db::new(false).await;
    // A "Chromium" that never says where its DevTools are, and an MCP server that never
    // answers its handshake.
    let chromium = db.dir.path().join("hung-chromium.sh");
    std::fs::write(&chromium, "#!/bin/sh\nexec sleep 600\n").unwrap();
    std::process::Command::new("chmod")
        .args(["+x", &chromium.display().to_string()])
        .status()
        .unwrap();
    let config = format!(
        "{}[policy]\nallowed_mcp_servers = [\"hung\"]\n[web]\nbrowser_executable = \"{}\"\n\
         [[mcp.servers]]\nname = \"hung\"\ncommand = \"sleep\"\nargs = [\"600\"]\ntimeout_ms = 500\n",
        config(None),
        chromium.display()
    );
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "browser", "arguments": {"action": "open", "url": "https://example.com"}}]},
        {"text": "seen", "repeat": true}]}]});
    let server = Server::start_with(&db, &script, &config).await;
    let mut socket = server.connect().await;
    let mut go = chat("look", None);
    go["data"]["permission_mode"] = json!("auto");
    send(&mut socket, go).await;
    until(&mut socket, |f| {
        f["type"] == "tool_call_update" && f["status"] == "start" && f["name"] == "browser"
    })
    .await;
    let (took, clean) = terminate(server).await;
    assert_bounded(took, clean, "MCP server and Chromium hung");
    db.drop_database().await;
}
