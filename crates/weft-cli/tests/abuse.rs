//! The real `weft` process against inputs that aim at its memory and its cores: workflows
//! that nest, fan out or hold more nodes than a run may run (refused on save, or stopped by
//! the run's bounds when the graph comes as data), templates that would never end, and
//! code-mode runs that flood `output`, `log` and `store`. Every attack gets a clear error,
//! `/healthz` keeps answering, and the process's peak memory stays small.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{is_done, send, until, Db, Server, NO_USER_LIMITS};

/// `depth` list.maps nested, each over `items` items, around a template.
fn nested(depth: usize, items: usize) -> Value {
    let mut graph = json!({"nodes": [
        {"id": "t", "type": "text.template", "inputs": {"template": "x"}},
        {"id": "r", "type": "output", "inputs": {"name": "result"}}
    ], "edges": [{"from": "t", "output": "text", "to": "r", "input": "value"}]});
    for _ in 0..depth {
        graph = json!({"nodes": [
            {"id": "m", "type": "list.map", "inputs": {"items": vec![0; items], "graph": graph}},
            {"id": "r", "type": "output", "inputs": {"name": "result"}}
        ], "edges": [{"from": "m", "output": "results", "to": "r", "input": "value"}]});
    }
    graph
}

/// A map whose graph and items arrive as the run's parameters.
fn map_of_params() -> Value {
    json!({"nodes": [
        {"id": "g", "type": "input.json", "inputs": {"name": "graph"}},
        {"id": "i", "type": "input.json", "inputs": {"name": "items"}},
        {"id": "m", "type": "list.map"},
        {"id": "r", "type": "output", "inputs": {"name": "out"}}
    ], "edges": [
        {"from": "g", "output": "value", "to": "m", "input": "graph"},
        {"from": "i", "output": "value", "to": "m", "input": "items"},
        {"from": "m", "output": "results", "to": "r", "input": "value"}
    ]})
}

fn code(body: &str) -> Value {
    json!({"text": format!("```js\n{body}\n```")})
}

fn script() -> Value {
    json!({"conversations": [
        {"match": "output bomb", "steps": [
            code("const s = 'x'.repeat(1 << 20); while (true) output(s);"), {"text": "went on"}]},
        {"match": "log bomb", "steps": [
            code("const s = 'x'.repeat(1 << 20); while (true) log(s);"), {"text": "went on"}]},
        {"match": "store bomb", "steps": [
            code("const s = 'x'.repeat(1 << 20); let i = 0; while (true) store('k' + i++, s);"),
            {"text": "went on"}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

/// The process's peak resident memory so far, in MB.
fn peak_rss_mb(server: &Server) -> u64 {
    let pid = server.child.id().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb / 1024
}

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{}{path}", server.addr))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn save(server: &Server, name: &str, graph: Value) -> String {
    let (status, body) = post(server, "/workflows", json!({"name": name, "graph": graph})).await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn amplifying_workflows_and_code_bombs_leave_the_server_standing() {
    let db = Db::new(false).await;
    let config = format!("{NO_USER_LIMITS}\n[workflow]\nnode_timeout_ms = 3000\n");
    let server = Server::start_with(&db, &script(), &config).await;

    // Seven maps deep, ten items each (10^7 node runs): refused when saved.
    let (status, body) = post(
        &server,
        "/workflows",
        json!({"name": "deep", "graph": nested(7, 10)}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_graph");

    // A hundred thousand nodes side by side: more than a run may run, refused when saved.
    let wide: Vec<Value> = (0..100_000)
        .map(|i| json!({"id": format!("t{i}"), "type": "text.template", "inputs": {"template": "x"}}))
        .collect();
    let (status, body) = post(
        &server,
        "/workflows",
        json!({"name": "wide", "graph": {"nodes": wide, "edges": []}}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_graph");
    assert!(body.to_string().contains("max_node_runs"), "{body}");

    // The same graph as data: the run fails at the depth bound.
    let id = save(&server, "maps", map_of_params()).await;
    let runs = format!("/workflows/{id}/runs");
    let (status, run) = post(
        &server,
        &runs,
        json!({"params": {"graph": nested(6, 10), "items": vec![0; 10]}}),
    )
    .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "failed");
    assert!(
        run["error"].as_str().unwrap().contains("max_map_depth"),
        "{run}"
    );

    // Two hundred thousand items: the run fails at the item bound.
    let (_, run) = post(
        &server,
        &runs,
        json!({"params": {"graph": nested(0, 0), "items": vec![0; 200_000]}}),
    )
    .await;
    assert_eq!(run["status"], "failed");
    assert!(
        run["error"].as_str().unwrap().contains("max_map_items"),
        "{run}"
    );

    // Three templates that would loop 10^10 times, at once, while /healthz is asked.
    let spin = save(
        &server,
        "spin",
        json!({"nodes": [{"id": "t", "type": "text.template", "inputs": {"template":
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}"}}]}),
    )
    .await;
    let spin_runs = format!("/workflows/{spin}/runs");
    let spins: Vec<_> = (0..3)
        .map(|_| {
            let addr = server.addr.clone();
            let path = spin_runs.clone();
            tokio::spawn(async move {
                reqwest::Client::new()
                    .post(format!("http://{addr}{path}"))
                    .json(&json!({}))
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    for _ in 0..10 {
        let started = Instant::now();
        let health = tokio::time::timeout(
            Duration::from_secs(2),
            reqwest::get(format!("http://{}/healthz", server.addr)),
        )
        .await
        .expect("/healthz answered within 2 s")
        .unwrap();
        assert_eq!(health.status(), 200);
        tokio::time::sleep(Duration::from_millis(300).saturating_sub(started.elapsed())).await;
    }
    for spin in spins {
        let run = spin.await.unwrap();
        assert_eq!(run["status"], "failed", "{run}");
    }

    // Code that floods output() is cut at the turn's output cap, which ends the turn.
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "chat_message", "data": {"content": "output bomb", "mode": "code", "permission_mode": "auto"}}),
    )
    .await;
    let frames = until(&mut ws, is_done).await;
    let trip = frames
        .iter()
        .find(|f| f["type"] == "budget_exceeded")
        .unwrap();
    assert_eq!(trip["reason"], "bytes");
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    let shown = message["message"]["content"].as_str().unwrap().len();
    assert!(shown <= 1 << 20, "{shown} bytes shown");

    // Code that floods log() or store() gets an error; the turn goes on.
    for bomb in ["log bomb", "store bomb"] {
        send(
            &mut ws,
            json!({"command": "chat_message", "data": {"content": bomb, "mode": "code", "permission_mode": "auto"}}),
        )
        .await;
        let frames = until(&mut ws, is_done).await;
        let message = frames
            .iter()
            .find(|f| f["type"] == "message")
            .unwrap_or_else(|| panic!("{bomb}: no message"));
        let content = message["message"]["content"].as_str().unwrap_or_default();
        assert!(
            content.ends_with("went on"),
            "{bomb}: {}",
            &content[content.len().saturating_sub(200)..]
        );
    }

    let peak = peak_rss_mb(&server);
    assert!(peak < 600, "peak resident memory {peak} MB");
    eprintln!("peak resident memory after every attack: {peak} MB");
    server.stop().await;
    db.drop_database().await;
}
