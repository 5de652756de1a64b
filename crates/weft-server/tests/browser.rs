//! The reference web client in headless Chromium (driven over WebDriver by fantoccini)
//! against the real server with the scripted provider. Screenshots land in
//! `artifacts/screenshots/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/browser.rs"]
mod chromium;
mod support;

use chromium::{Browser, ANSWER, ONE_BROWSER};
use fantoccini::Locator;
use serde_json::{json, Value};
use support::TestServer;

fn script() -> Value {
    let greeter = json!({"nodes": [
        {"id": "who", "type": "input.text", "inputs": {"name": "name"}},
        {"id": "greet", "type": "text.template", "inputs": {"template": "Hello {{ who }}"}},
        {"id": "out", "type": "output", "inputs": {"name": "greeting"}}
    ], "edges": [
        {"from": "who", "output": "value", "to": "greet", "input": "who"},
        {"from": "greet", "output": "text", "to": "out", "input": "value"}
    ]});
    json!({"conversations": [
        {"match": "Objective: greet", "steps": [{"text": greeter.to_string()}]},
        {"match": "build a greeter", "steps": [
            {"tool_calls": [{"name": "build_workflow", "arguments": {"objective": "greet"}}]},
            {"tool_calls": [{"name": "ui_paste_graph", "arguments": {"graph": greeter}}]},
            {"text": "Built it.", "repeat": true}]},
        {"match": "what do Moonfall weavers eat", "steps": [
            {"tool_calls": [{"name": "query_collection", "arguments": {"collection": "atlas", "query": "What do the weavers of Moonfall eat?", "k": 2}}]},
            {"text": "They eat plums [1].", "repeat": true}]},
        {"match": "in code", "steps": [
            {"text": "```js\nawait tools.memory_write({key: 'k', value: 'v'});\nconst keys = await tools.memory_list({});\noutput(`keys: ${keys.join(', ')}`);\ndone();\n```"}]},
        {"match": "Plan this request", "steps": [{"text": "1. wake up\n2. work", "repeat": true}]},
        {"match": "plan my day", "steps": [{"text": "Here is your day.", "repeat": true}]},
        {"match": "research A", "steps": [
            {"tool_calls": [{"name": "memory_write", "arguments": {"key": "a", "value": "old"}}]},
            {"text": "A is old.", "delay_ms": 100}]},
        {"match": "research B", "steps": [{"text": "B is new.", "delay_ms": 300}]},
        {"match": "compare", "steps": [
            {"tool_calls": [
                {"name": "run_subtask", "arguments": {"title": "Research A", "instructions": "research A"}},
                {"name": "run_subtask", "arguments": {"title": "Research B", "instructions": "research B"}}]},
            {"chunks": ["A and B ", "differ."]}]},
        {"match": "enormous", "steps": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "big.py", "content": BIG_FILE.as_str()}}]},
            {"text": "wrote it", "repeat": true}]},
        {"match": "write", "steps": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.md", "content": "hello from the browser"}}]},
            {"text": "done writing", "repeat": true}]},
        {"match": "two nodes", "steps": [
            {"tool_calls": [
                {"name": "run_node", "arguments": {"node_type": "text.template", "inputs": {"template": "one"}}},
                {"name": "run_node", "arguments": {"node_type": "text.template", "inputs": {"template": "two"}}}]},
            {"text": "both handled"}]},
        {"match": "in order", "steps": [
            {"text": "First I note it.", "tool_calls": [{"name": "memory_write", "arguments": {"key": "k", "value": "v"}}]},
            {"text": "Then I read it back.", "tool_calls": [{"name": "memory_read", "arguments": {"key": "k"}}]},
            {"chunks": ["All ", "done."]}]},
        {"match": "broken", "steps": [{"error": {"kind": "http_status", "status": 500}}]},
        {"match": "markdown", "steps": [{"chunks": [
            "# Plan\n\nSome **bold** and a [link](https://example.com/docs).\n\n",
            "- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```rust\nfn main() {}\n",
            "```\n\n<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\"> done"
        ], "chunk_delay_ms": 150}]},
        {"match": "slow", "steps": [{"chunks": ["one ", "two ", "three ", "four"], "chunk_delay_ms": 400}]},
        {"match": "scroll", "steps": [{"chunks": ["Hello ", "there!"], "chunk_delay_ms": 1500, "repeat": true}]},
        {"match": "*", "steps": [{"chunks": ["Hello ", "there!"], "chunk_delay_ms": 400, "repeat": true}]}
    ]})
}

/// 150 lines of Python for a file write to ask about.
static BIG_FILE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    (0..150)
        .map(|i| format!("def step_{i}():\n    return {i}"))
        .collect::<Vec<_>>()
        .join("\n")
        .lines()
        .take(150)
        .collect::<Vec<_>>()
        .join("\n")
});

#[tokio::test]
async fn a_question_streams_its_answer() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("hi").await;
    // Seen mid-stream, then complete.
    b.wait(&format!("{ANSWER} === 'Hello'")).await;
    b.wait(&format!("{ANSWER} === 'Hello there!'")).await;
    b.wait("document.querySelector('.message.assistant .cost')")
        .await;
    b.wait("document.querySelector('#threads li .thread-open')?.textContent === 'hi'")
        .await;
    b.shot("streamed-answer").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn subtasks_show_nested_cards_and_a_reload_shows_the_same_tree() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("compare A and B").await;
    b.wait(&format!("{ANSWER} === 'A and B differ.'")).await;
    let tree = "Array.from(document.querySelectorAll('.tool-card')).map(c => [c.dataset.name, c.dataset.depth, c.dataset.status, c.parentElement.closest('.tool-card')?.dataset.name ?? null, c.open].join('|'))";
    let live = b.js(tree).await;
    assert_eq!(
        live,
        json!([
            "run_subtask|0|done||true",
            "memory_write|1|done|run_subtask|false",
            "run_subtask|0|done||true"
        ]),
        "depth-0 cards open, nested ones collapsed"
    );
    b.shot("nested-subtask-cards").await;

    b.client.refresh().await.unwrap();
    b.wait("document.getElementById('connection').classList.contains('up')")
        .await;
    b.click("#threads li .thread-open").await;
    b.wait(&format!("{ANSWER} === 'A and B differ.'")).await;
    b.wait("document.querySelectorAll('.tool-card').length === 3")
        .await;
    assert_eq!(b.js(tree).await, live);
    let titles = b
        .js("Array.from(document.querySelectorAll('.tool-card .title')).map(t => t.textContent)")
        .await;
    assert_eq!(titles, json!(["Research A", "Research B"]));
    b.shot("reloaded-tree").await;

    // The trace view: every response and full result, subtasks nested under their calls.
    b.click(".message.assistant:last-of-type .trace-toggle")
        .await;
    b.wait("document.querySelectorAll('.trace-panel:not([hidden]) .trace-subtask').length === 2")
        .await;
    let trace = b
        .js("Array.from(document.querySelectorAll('.trace-panel > .trace > li')).map(li => li.dataset.kind || li.firstChild.dataset.kind)")
        .await;
    assert_eq!(
        trace,
        json!([
            "assistant",
            "subtask",
            "tool_result",
            "subtask",
            "tool_result",
            "assistant"
        ])
    );
    let nested = b
        .js("Array.from(document.querySelectorAll('.trace-subtask .trace-result pre')).map(p => p.textContent)")
        .await;
    assert_eq!(nested, json!(["stored a"]));
    b.js("document.querySelector('.trace-panel').scrollIntoView() || true")
        .await;
    b.shot("trace-view").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn an_agent_picked_for_a_thread_plans_and_the_plan_shows_above_the_answer() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let (status, _) = server
        .call(
            reqwest::Method::POST,
            "/agents",
            None,
            Some(json!({"name": "planner", "planning_enabled": true})),
        )
        .await;
    assert_eq!(status, 201);
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.wait(
        "[...document.querySelectorAll('#agent-select option')].some(o => o.value === 'planner')",
    )
    .await;
    b.client
        .find(Locator::Css("#agent-select"))
        .await
        .unwrap()
        .select_by_value("planner")
        .await
        .unwrap();
    b.say("plan my day").await;
    b.wait(&format!("{ANSWER} === 'Here is your day.'")).await;
    let plan = "(() => { const m = document.querySelector('.message.assistant:last-of-type'); const p = m.firstElementChild; return p.classList.contains('plan') ? [p.querySelector('.plan-text').textContent, p.dataset.status] : null; })()";
    assert_eq!(b.wait(plan).await, json!(["1. wake up\n2. work", "done"]));
    b.click(".message.assistant:last-of-type .plan > summary")
        .await;
    b.shot("agent-plan").await;

    // After a reload the thread shows its agent and the stored plan, collapsed.
    b.client.refresh().await.unwrap();
    b.wait("document.getElementById('connection').classList.contains('up')")
        .await;
    b.click("#threads li .thread-open").await;
    b.wait(&format!("{ANSWER} === 'Here is your day.'")).await;
    assert_eq!(b.wait(plan).await, json!(["1. wake up\n2. work", "done"]));
    assert_eq!(
        b.js("document.querySelector('.message.assistant .plan').open")
            .await,
        json!(false)
    );
    assert_eq!(
        b.wait("document.getElementById('agent-select').value === 'planner' && 'planner'")
            .await,
        json!("planner")
    );
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn code_mode_picked_in_the_composer_shows_the_run_and_its_calls() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.wait("[...document.querySelectorAll('#exec-mode option')].some(o => o.value === 'code')")
        .await;
    b.client
        .find(Locator::Css("#exec-mode"))
        .await
        .unwrap()
        .select_by_value("code")
        .await
        .unwrap();
    b.pick_mode("auto").await;
    b.say("count keys in code").await;
    b.wait(&format!("{ANSWER} === 'keys: k'")).await;
    let tree = "Array.from(document.querySelectorAll('.tool-card')).map(c => [c.dataset.name, c.dataset.depth, c.dataset.status, c.parentElement.closest('.tool-card')?.dataset.name ?? null].join('|'))";
    assert_eq!(
        b.wait(&format!("{tree}.length === 3 && {tree}")).await,
        json!([
            "code.execute|0|done|",
            "memory_write|1|done|code.execute",
            "memory_list|1|done|code.execute"
        ])
    );
    let shown = b
        .js("document.querySelector(\".tool-card[data-name='code.execute'] .args\").textContent")
        .await;
    assert!(
        shown
            .as_str()
            .unwrap()
            .starts_with("await tools.memory_write"),
        "{shown}"
    );
    b.shot("code-mode").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn an_allowed_approval_writes_the_file() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("write my notes").await;
    b.wait("document.querySelector('.approval button[data-decision=allow]')")
        .await;
    assert_eq!(
        b.js("document.querySelectorAll('.approval').length").await,
        json!(1)
    );
    b.shot("approval-card").await;
    b.click(".approval button[data-decision='allow']").await;
    b.wait("document.querySelector('.tool-card[data-name=write_file]')?.dataset.status === 'done'")
        .await;
    b.wait(&format!("{ANSWER} === 'done writing'")).await;
    assert_eq!(
        std::fs::read_to_string(server.workspace.join("notes.md")).unwrap(),
        "hello from the browser"
    );
    assert_eq!(
        b.js("document.querySelectorAll('.approval').length").await,
        json!(0)
    );
    b.shot("approval-allowed").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_denial_shows_as_an_error_card() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("write my notes").await;
    b.wait("document.querySelector('.approval button[data-decision=deny]')")
        .await;
    b.click(".approval button[data-decision='deny']").await;
    b.wait(
        "document.querySelector('.tool-card[data-name=write_file]')?.dataset.status === 'error'",
    )
    .await;
    let result = b
        .js("document.querySelector('.tool-card[data-name=write_file] .result').textContent")
        .await;
    assert!(result.as_str().unwrap().starts_with("denied:"), "{result}");
    assert!(!server.workspace.join("notes.md").exists());
    b.shot("approval-denied").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn switching_the_mode_changes_what_the_next_write_does() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;

    b.pick_mode("plan").await;
    let checked = b.js("Array.from(document.querySelectorAll('#mode-menu li')).map(li => li.dataset.mode + ':' + li.getAttribute('aria-selected'))").await;
    assert_eq!(checked, json!(["plan:true", "default:false", "auto:false"]));
    b.say("write in plan mode").await;
    b.wait(
        "document.querySelector('.tool-card[data-name=write_file]')?.dataset.status === 'error'",
    )
    .await;
    let result = b
        .js("document.querySelector('.tool-card[data-name=write_file] .result').textContent")
        .await;
    assert!(result.as_str().unwrap().contains("plan mode"), "{result}");
    assert!(!server.workspace.join("notes.md").exists());
    b.shot("plan-mode-refusal").await;

    b.click("#new-thread").await;
    b.pick_mode("auto").await;
    b.say("write in auto mode").await;
    b.wait("document.querySelector('.tool-card[data-name=write_file]')?.dataset.status === 'done'")
        .await;
    assert_eq!(
        b.js("document.querySelectorAll('.approval').length").await,
        json!(0),
        "auto never asks"
    );
    assert!(server.workspace.join("notes.md").exists());
    b.shot("auto-mode-write").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_dropped_socket_resumes_the_running_turn() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("slow story").await;
    b.wait(&format!("{ANSWER} === 'one'")).await;
    b.js("(window.weft.socket.drop(), true)").await;
    b.wait(&format!("{ANSWER} === 'one two three four'")).await;
    b.wait("!window.weft.state.running").await;
    b.shot("resumed-after-drop").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn several_pending_approvals_queue_one_card_at_a_time() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    // Two calls that may run side by side both ask at once (calls sharing a lock, such as
    // two file writes, ask one after the other instead).
    b.say("run two nodes").await;
    b.wait("document.querySelector('.approval .queued')?.textContent === '+1 more pending'")
        .await;
    assert_eq!(
        b.js("document.querySelectorAll('.approval').length").await,
        json!(1)
    );
    b.shot("queued-approvals").await;
    b.click(".approval button[data-decision='allow']").await;
    b.wait("document.querySelector('.approval') && !document.querySelector('.approval .queued')")
        .await;
    b.click(".approval button[data-decision='deny']").await;
    b.wait(&format!("{ANSWER} === 'both handled'")).await;
    let statuses = b.js("Array.from(document.querySelectorAll('.tool-card[data-name=run_node]')).map(c => c.dataset.status).sort()").await;
    assert_eq!(
        statuses,
        json!(["done", "error"]),
        "exactly the allowed call ran"
    );
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn the_agent_builds_a_workflow_in_the_editor_and_the_user_saves_and_runs_it() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.click("#workflows-toggle").await;
    b.wait("!document.getElementById('workflow-panel').hidden")
        .await;
    b.click("#editor-toggle").await;
    b.pick_mode("auto").await;
    b.say("build a greeter").await;
    b.wait(&format!("{ANSWER} === 'Built it.'")).await;
    let nodes =
        "Array.from(document.querySelectorAll('#graph-view g.node')).map(g => g.dataset.id)";
    assert_eq!(
        b.wait(&format!("{nodes}.length === 3 && {nodes}")).await,
        json!(["who", "greet", "out"])
    );
    assert_eq!(
        b.js("document.querySelectorAll('#graph-view path.edge').length")
            .await,
        json!(2)
    );
    b.shot("workflow-built").await;

    let name = b.client.find(Locator::Css("#workflow-name")).await.unwrap();
    name.send_keys("Greeter").await.unwrap();
    b.click("#save-workflow").await;
    b.wait("document.getElementById('workflow-status').textContent === 'saved as Greeter'")
        .await;
    b.wait("document.querySelector('#workflow-list li.current')?.textContent === 'Greeter'")
        .await;
    let param = b
        .client
        .find(Locator::Css("#run-params input[name='name']"))
        .await
        .unwrap();
    param.send_keys("Ada").await.unwrap();
    b.click("#run-workflow").await;
    let states =
        "Array.from(document.querySelectorAll('#graph-view g.node')).map(g => g.dataset.status)";
    assert_eq!(
        b.wait(&format!(
            "{states}.every(s => s === 'completed') && {states}"
        ))
        .await,
        json!(["completed", "completed", "completed"])
    );
    b.wait("document.getElementById('workflow-status').textContent === 'completed'")
        .await;
    let answer = b
        .wait(&format!("{ANSWER}?.includes('Hello Ada') && {ANSWER}"))
        .await;
    assert!(answer.as_str().unwrap().contains("greeting"), "{answer}");
    b.shot("workflow-run").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn an_answer_from_a_collection_shows_its_sources() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let (status, _) = server
        .call(
            reqwest::Method::POST,
            "/collections",
            None,
            Some(json!({"name": "atlas"})),
        )
        .await;
    assert_eq!(status, 201);
    for (place, food) in [
        ("Moonfall", "plums"),
        ("Ironvale", "herring"),
        ("Larkspur", "figs"),
    ] {
        let text =
            format!("Weaving towns keep records.\n\nThe weavers of {place} eat {food} in winter.");
        let (status, _) = server
            .call(
                reqwest::Method::POST,
                "/collections/atlas/documents",
                None,
                Some(json!({"title": place, "text": text})),
            )
            .await;
        assert_eq!(status, 201);
    }
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("what do Moonfall weavers eat?").await;
    b.wait(&format!("{ANSWER} === 'They eat plums [1].'")).await;
    let first =
        "document.querySelector('.message.assistant:last-of-type .citations li b')?.textContent";
    assert_eq!(b.wait(first).await, json!("Moonfall"));
    let quote = b
        .js("document.querySelector('.message.assistant:last-of-type .citations li blockquote').textContent")
        .await;
    assert!(quote.as_str().unwrap().contains("plums"), "{quote}");
    b.shot("citations").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_browser_screenshot_shows_in_its_card() {
    let _one = ONE_BROWSER.lock().await;
    let site = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path("/page"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_raw(
            "<html><body style='background:#cde'><h1>Local page</h1></body></html>",
            "text/html",
        ))
        .mount(&site)
        .await;
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "browser", "arguments": {"action": "open", "url": format!("{}/page", site.uri())}}]},
        {"tool_calls": [{"name": "browser", "arguments": {"action": "screenshot"}}]},
        {"text": "Here it is.", "repeat": true}]}]});
    let server = TestServer::start_with(script, |c| c.policy.allow_private_network = true).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.pick_mode("auto").await;
    b.say("show me the page").await;
    b.wait(&format!("{ANSWER} === 'Here it is.'")).await;
    let loaded = "(() => { const i = document.querySelector('.tool-card .result-image'); return i && i.complete && i.naturalWidth; })()";
    let width = b.wait(loaded).await;
    assert!(width.as_u64().unwrap() > 100, "{width}");
    b.shot("browser-screenshot").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn spoken_audio_plays_in_its_card() {
    let _one = ONE_BROWSER.lock().await;
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "text_to_speech", "arguments": {"text": "Hello from Weft"}}]},
        {"text": "Listen.", "repeat": true}]}]});
    // Offline speech with espeak-ng (scripts/test.sh installs it).
    let server = TestServer::start(script).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.pick_mode("auto").await;
    b.say("read it to me").await;
    b.wait(&format!("{ANSWER} === 'Listen.'")).await;
    let duration = "(() => { const a = document.querySelector('.tool-card .result-audio'); return a && a.readyState >= 1 && a.duration; })()";
    let seconds = b.wait(duration).await;
    assert!(seconds.as_f64().unwrap() > 0.3, "{seconds}");
    b.shot("speech").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn an_mcp_tool_card_shows_live_progress_and_images() {
    let _one = ONE_BROWSER.lock().await;
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "mcp__fixture__count", "arguments": {"n": 30}}]},
        {"tool_calls": [{"name": "mcp__fixture__picture", "arguments": {}}]},
        {"text": "Counted.", "repeat": true}]}]});
    let server = TestServer::start_with(script, |c| {
        c.mcp.servers = vec![weft_tools::mcp::McpServerConfig {
            name: "fixture".into(),
            command: Some(support::mcp_fixture()),
            args: Vec::new(),
            env: Default::default(),
            url: None,
            headers: Default::default(),
            bearer_token_env: None,
            category: None,
            timeout_ms: 30_000,
        }];
        c.policy.allowed_mcp_servers = vec!["fixture".into()];
    })
    .await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.pick_mode("auto").await;
    b.say("count for me").await;
    // While it runs, the card shows the bar moving and the server's message.
    let moving = "(() => { const p = document.querySelector(\".tool-card[data-name='mcp__fixture__count'] progress\"); return p && p.value > 0 && p.value < 30 && p.value; })()";
    assert!(b.wait(moving).await.as_f64().unwrap() > 0.0);
    let text = b
        .js("document.querySelector('.tool-card .progress-text').textContent")
        .await;
    assert!(text.as_str().unwrap().starts_with("step "), "{text}");
    b.shot("mcp-progress").await;
    b.wait(&format!("{ANSWER} === 'Counted.'")).await;
    // The image the next MCP tool returned was kept as an asset and shows in its card.
    let width = "(() => { const i = document.querySelector(\".tool-card[data-name='mcp__fixture__picture'] img.result-image\"); return i && i.complete && i.naturalWidth; })()";
    assert_eq!(b.wait(width).await.as_f64().unwrap(), 8.0);
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn stop_ends_the_answer_and_each_chat_has_its_own_address() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    assert_eq!(
        b.js("document.getElementById('stop').hidden").await,
        json!(true)
    );
    b.say("slow story").await;
    // While the answer streams, Stop takes Send's place.
    b.wait(&format!("{ANSWER} === 'one'")).await;
    b.wait("!document.getElementById('stop').hidden && document.getElementById('send').hidden")
        .await;
    b.shot("stop-button").await;
    b.click("#stop").await;
    b.wait("!window.weft.state.running").await;
    b.wait("document.getElementById('stop').hidden && !document.getElementById('send').hidden")
        .await;
    let thread = b.js("window.weft.state.threadId").await;
    let thread = thread.as_str().unwrap().to_owned();
    let (_, messages) = server
        .get(&format!("/threads/{thread}/messages"), None)
        .await;
    assert_eq!(messages[1]["status"], "cancelled", "{messages}");
    assert!(!messages[1]["content"].as_str().unwrap().contains("four"));

    // The chat has an address and, after its first turn, its title.
    assert_eq!(b.js("location.hash").await, json!(format!("#/t/{thread}")));
    b.wait("document.getElementById('thread-title').textContent === 'slow story'")
        .await;
    // A reload lands on it, not on a new chat.
    b.client.refresh().await.unwrap();
    b.wait("document.getElementById('connection').classList.contains('up')")
        .await;
    b.wait(&format!("{ANSWER}?.startsWith('one')")).await;
    b.wait("document.getElementById('thread-title').textContent === 'slow story'")
        .await;
    // A new chat has none; Back returns to the one before.
    b.click("#new-thread").await;
    assert_eq!(b.js("location.hash").await, json!(""));
    assert_eq!(
        b.js("document.getElementById('thread-title').textContent")
            .await,
        json!("New chat")
    );
    b.js("(history.back(), true)").await;
    b.wait(&format!("window.weft.state.threadId === '{thread}'"))
        .await;
    b.wait(&format!("{ANSWER}?.startsWith('one')")).await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn scrolling_back_while_an_answer_streams_is_left_alone() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    // Enough earlier answers to scroll.
    for i in 0..6 {
        b.say(&format!("scroll question {i}")).await;
        b.wait("!window.weft.state.running").await;
    }
    let bottom = "(() => { const m = document.getElementById('messages'); return m.scrollHeight - m.scrollTop - m.clientHeight < 48; })()";
    assert_eq!(b.js(bottom).await, json!(true), "a new answer is followed");
    // Each answer of this chat streams "Hello " then, 1.5 s later, "there!". (Should a
    // loaded machine show both before the scroll below, the reader still stays put.)
    b.say("question 6").await;
    b.wait(&format!("{ANSWER}?.startsWith('Hello')")).await;
    // The reader scrolls back: what streams next does not pull them down.
    b.js("(document.getElementById('messages').scrollTop = 0, true)")
        .await;
    b.wait(&format!("{ANSWER} === 'Hello there!'")).await;
    b.wait("!window.weft.state.running").await;
    assert_eq!(
        b.js("document.getElementById('messages').scrollTop").await,
        json!(0)
    );
    // Back at the bottom, the next answer is followed again.
    b.js("(document.getElementById('messages').scrollTop = 1e9, true)")
        .await;
    b.say("slow again").await;
    b.wait(&format!("{ANSWER} === 'Hello there!'")).await;
    b.wait("!window.weft.state.running").await;
    assert_eq!(b.js(bottom).await, json!(true));
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn answers_are_markdown_made_safe_with_highlighted_code_live_and_after_a_reload() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("markdown please").await;
    b.wait(&format!("{ANSWER}?.endsWith('done')")).await;
    let shape = "(() => { const t = document.querySelector('.message.assistant:last-of-type .text'); const a = t.querySelector('a'); return { h1: t.querySelector('h1')?.textContent, bold: t.querySelector('strong')?.textContent, link: [a?.href, a?.target, a?.rel], items: t.querySelectorAll('li').length, cells: [...t.querySelectorAll('td')].map(c => c.textContent), keyword: t.querySelector('pre code.hljs .hljs-keyword')?.textContent, copy: !!t.querySelector('pre > button.copy-code'), raw: t.textContent.includes('**') || t.textContent.includes('```'), script: !!t.querySelector('script'), onerror: !!t.querySelector('[onerror]'), img: !!t.querySelector('img'), pwned: window.pwned ?? null }; })()";
    let expected = json!({
        "h1": "Plan", "bold": "bold",
        "link": ["https://example.com/docs", "_blank", "noopener noreferrer"],
        "items": 2, "cells": ["1", "2"], "keyword": "fn", "copy": true,
        "raw": false, "script": false, "onerror": false, "img": false, "pwned": null
    });
    assert_eq!(b.js(shape).await, expected, "streamed");
    b.wait("!window.weft.state.running").await;
    b.doc_shot("desktop").await;
    b.client.refresh().await.unwrap();
    b.wait("document.getElementById('connection').classList.contains('up')")
        .await;
    b.wait(&format!("{ANSWER}?.endsWith('done')")).await;
    assert_eq!(b.js(shape).await, expected, "after a reload");
    b.close().await;
    server.stop().await;
}

/// Nothing on the page is wider than the viewport, and `css` lies wholly inside it.
const FITS: &str = "(css) => { const r = document.querySelector(css).getBoundingClientRect(); return document.documentElement.scrollWidth <= innerWidth && document.getElementById('messages').scrollWidth <= document.getElementById('messages').clientWidth && r.left >= 0 && r.right <= innerWidth && r.top >= 0 && r.bottom <= innerHeight && r.width > 0; }";

#[tokio::test]
async fn on_a_phone_the_chats_are_a_drawer_the_composer_shows_and_nothing_scrolls_sideways() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.viewport(390, 844).await;
    b.open(&server.url("/")).await;
    assert_eq!(b.js("[innerWidth, innerHeight]").await, json!([390, 844]));
    let fits = |css: &str| format!("({FITS})('{css}')");
    let drawer_shut = "document.getElementById('sidebar').getBoundingClientRect().right <= 0";
    assert_eq!(
        b.js(drawer_shut).await,
        json!(true),
        "the chat list starts shut"
    );
    for css in ["#input", "#send", "#mode-button", "#menu-button"] {
        assert_eq!(b.js(&fits(css)).await, json!(true), "{css} is on screen");
    }
    // A wide answer (a table, a code block) scrolls inside itself, never the page.
    b.say("markdown please").await;
    b.wait(&format!("{ANSWER}?.endsWith('done')")).await;
    b.wait("!window.weft.state.running").await;
    assert_eq!(b.js(&fits("#send")).await, json!(true));
    b.doc_shot("phone").await;

    // The drawer: opened by its button, shut by starting a chat or choosing one (which
    // opens it).
    let drawer_open = "document.getElementById('sidebar').getBoundingClientRect().left >= 0";
    b.click("#menu-button").await;
    b.wait(drawer_open).await;
    b.click("#new-thread").await;
    b.wait(drawer_shut).await;
    b.say("hi").await;
    b.wait(&format!("{ANSWER} === 'Hello there!'")).await;
    b.click("#menu-button").await;
    b.wait(drawer_open).await;
    b.wait("document.querySelectorAll('#threads li').length === 2")
        .await;
    b.doc_shot("phone-chats").await;
    b.click("#threads li:last-child .thread-open").await;
    b.wait(drawer_shut).await;
    b.wait("document.getElementById('thread-title').textContent === 'markdown please'")
        .await;
    // Shut by its backdrop too.
    b.click("#menu-button").await;
    b.wait("getComputedStyle(document.getElementById('backdrop')).display === 'block'")
        .await;
    b.js("(document.getElementById('backdrop').click(), true)")
        .await;
    b.wait(drawer_shut).await;
    // The workflows panel takes the whole screen and gives it back.
    b.click("#workflows-toggle").await;
    b.wait("(() => { const r = document.getElementById('workflow-panel').getBoundingClientRect(); return r.left === 0 && r.width === innerWidth; })()").await;
    b.click("#workflow-close").await;
    b.wait("document.getElementById('workflow-panel').hidden")
        .await;
    assert_eq!(b.js(&fits("#send")).await, json!(true));
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn the_permission_menu_and_the_chat_list_work_from_the_keyboard() {
    use fantoccini::key::Key;
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("hi").await;
    b.wait(&format!("{ANSWER} === 'Hello there!'")).await;
    b.wait("!window.weft.state.running").await;
    let focused = "document.activeElement.id || document.activeElement.dataset.mode";
    let menu_open = "!document.getElementById('mode-menu').hidden";

    // Arrow keys open the menu on the current mode, move, and Enter picks; focus returns.
    b.js("(document.getElementById('mode-button').focus(), true)")
        .await;
    b.press(&Key::Down).await;
    b.wait(menu_open).await;
    assert_eq!(b.js(focused).await, json!("default"));
    b.press(&Key::Down).await;
    assert_eq!(b.js(focused).await, json!("auto"));
    b.press(&Key::Down).await;
    assert_eq!(b.js(focused).await, json!("plan"), "the arrows wrap around");
    b.press(&Key::Enter).await;
    b.wait("document.getElementById('mode-button').dataset.mode === 'plan'")
        .await;
    assert_eq!(b.js(menu_open).await, json!(false));
    assert_eq!(b.js(focused).await, json!("mode-button"));
    assert_eq!(
        b.js("document.querySelector('#mode-menu [aria-selected=true]').dataset.mode")
            .await,
        json!("plan")
    );
    // Esc shuts it and changes nothing; so does a click elsewhere.
    b.press(&Key::Up).await;
    b.wait(menu_open).await;
    b.press(&Key::Down).await;
    b.press(&Key::Escape).await;
    b.wait("document.getElementById('mode-menu').hidden").await;
    assert_eq!(b.js(focused).await, json!("mode-button"));
    assert_eq!(
        b.js("document.getElementById('mode-button').dataset.mode")
            .await,
        json!("plan")
    );
    b.click("#mode-button").await;
    b.wait(menu_open).await;
    b.click("#messages").await;
    b.wait("document.getElementById('mode-menu').hidden").await;

    // Earlier chats are buttons: Tab reaches them and Enter opens one.
    b.click("#new-thread").await;
    b.wait("document.getElementById('thread-title').textContent === 'New chat'")
        .await;
    b.js("(document.getElementById('new-thread').focus(), true)")
        .await;
    b.press(&Key::Tab).await;
    assert_eq!(
        b.js("document.activeElement.closest('#threads li') !== null")
            .await,
        json!(true)
    );
    b.press(&Key::Enter).await;
    b.wait("document.getElementById('thread-title').textContent === 'hi'")
        .await;

    // An approval answered from the keyboard: from the composer, back (Shift+Tab) to Allow.
    b.click("#new-thread").await;
    b.js("(document.getElementById('input').focus(), true)")
        .await;
    b.press("write my notes").await;
    b.press(&Key::Enter).await;
    b.wait("document.querySelector('.approval button[data-decision=allow]')")
        .await;
    b.js("(document.getElementById('input').focus(), true)")
        .await;
    let on_allow = "document.activeElement.dataset.decision === 'allow'";
    for _ in 0..12 {
        if b.js(on_allow).await == json!(true) {
            break;
        }
        b.press(&format!("{}{}{}", Key::Shift, Key::Tab, Key::Null))
            .await;
    }
    assert_eq!(
        b.js(on_allow).await,
        json!(true),
        "Allow is reachable by keyboard"
    );
    b.press(&Key::Enter).await;
    b.wait(&format!("{ANSWER} === 'done writing'")).await;
    assert_eq!(
        std::fs::read_to_string(server.workspace.join("notes.md")).unwrap(),
        "hello from the browser"
    );
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn the_page_is_dark_when_the_system_is() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start_dark().await;
    b.open(&server.url("/")).await;
    assert_eq!(
        b.js("matchMedia('(prefers-color-scheme: dark)').matches")
            .await,
        json!(true)
    );
    b.say("markdown please").await;
    b.wait(&format!("{ANSWER}?.endsWith('done')")).await;
    b.wait("!window.weft.state.running").await;
    // Light ink on a dark page.
    let lightness = "(css, prop) => { const [r, g, b] = getComputedStyle(document.querySelector(css))[prop].match(/\\d+/g).map(Number); return (r + g + b) / 3; }";
    let of = |css: &str, prop: &str| format!("({lightness})('{css}', '{prop}')");
    assert!(b.js(&of("body", "backgroundColor")).await.as_f64().unwrap() < 60.0);
    assert!(
        b.js(&of("#composer", "backgroundColor"))
            .await
            .as_f64()
            .unwrap()
            < 60.0
    );
    assert!(
        b.js(&of(".message.assistant .text", "color"))
            .await
            .as_f64()
            .unwrap()
            > 180.0
    );
    b.doc_shot("desktop-dark").await;
    b.viewport(390, 844).await;
    b.doc_shot("phone-dark").await;
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_long_file_write_asks_with_its_path_and_a_folded_preview_and_the_buttons_in_view() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("an enormous file please").await;
    b.wait("document.querySelector('.approval button[data-decision=allow]')")
        .await;
    let shape = "(() => { const card = document.querySelector('.approval'); const r = card.getBoundingClientRect(); const allow = card.querySelector('[data-decision=allow]').getBoundingClientRect(); const code = card.querySelector('.file-preview code'); return { path: card.querySelector('code.path')?.textContent, folded: !card.querySelector('.file-preview').open, lines: code.textContent.split('\\n').length, escaped: code.textContent.includes('\\\\n'), highlighted: !!code.querySelector('.hljs-keyword'), card: r.height < innerHeight / 2, allow: allow.top >= 0 && allow.bottom <= innerHeight, transcript: document.getElementById('messages').clientHeight > innerHeight / 3 }; })()";
    assert_eq!(
        b.js(shape).await,
        json!({"path": "big.py", "folded": true, "lines": 150, "escaped": false, "highlighted": true, "card": true, "allow": true, "transcript": true})
    );
    // The call's card shows the content as lines too, the path as JSON.
    assert_eq!(
        b.js("(() => { const body = document.querySelector('.tool-card[data-name=write_file] > .body'); return [body.querySelector('pre.args:not([data-field])').textContent.includes('big.py'), body.querySelector('pre.args[data-field=content]').textContent.split('\\n').length]; })()").await,
        json!([true, 150])
    );
    // Unfolded, it scrolls inside the card: the buttons stay where they were.
    b.click(".approval .file-preview summary").await;
    b.wait("document.querySelector('.approval .file-preview').open")
        .await;
    assert_eq!(b.js(shape).await["allow"], json!(true));
    assert_eq!(b.js(shape).await["card"], json!(true));
    b.shot("approval-long-file").await;
    b.click(".approval button[data-decision='allow']").await;
    b.wait(&format!("{ANSWER} === 'wrote it'")).await;
    let written = std::fs::read_to_string(server.workspace.join("big.py")).unwrap();
    assert_eq!(written, *BIG_FILE);
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn axe_finds_nothing_serious_on_the_page_light_dark_or_phone() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let serious = ["serious", "critical"];
    for dark in [false, true] {
        let b = if dark {
            Browser::start_dark().await
        } else {
            Browser::start().await
        };
        b.open(&server.url("/")).await;
        let mut found = b.accessibility_violations(&serious).await;
        // An answer with cards, Markdown and code, then a pending approval.
        b.say("compare A and B").await;
        b.wait(&format!("{ANSWER} === 'A and B differ.'")).await;
        b.wait("!window.weft.state.running").await;
        // (Each in a chat of its own: the scripted model follows a chat's first message.)
        b.click("#new-thread").await;
        b.say("markdown please").await;
        b.wait("!window.weft.state.running && document.querySelector('.copy-code')")
            .await;
        found.extend(b.accessibility_violations(&serious).await);
        b.click("#new-thread").await;
        b.say("an enormous file please").await;
        b.wait("document.querySelector('.approval button[data-decision=allow]')")
            .await;
        found.extend(b.accessibility_violations(&serious).await);
        b.click(".approval button[data-decision='deny']").await;
        b.wait("!window.weft.state.running").await;
        // The open menu, the workflows panel, and a phone with its drawer open.
        b.click("#mode-button").await;
        found.extend(b.accessibility_violations(&serious).await);
        b.press(&fantoccini::key::Key::Escape).await;
        b.click("#workflows-toggle").await;
        found.extend(b.accessibility_violations(&serious).await);
        b.click("#workflow-close").await;
        b.viewport(390, 844).await;
        b.click("#menu-button").await;
        found.extend(b.accessibility_violations(&serious).await);
        found.sort();
        found.dedup();
        assert!(found.is_empty(), "dark: {dark}: {found:#?}");
        b.close().await;
    }
    server.stop().await;
}

#[tokio::test]
async fn a_reload_shows_a_provider_error_and_no_ghost_of_a_running_answer() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("broken please").await;
    let error = "document.querySelector('.notice.error')?.firstChild.textContent";
    let shown = b.wait(error).await;
    assert!(
        shown.as_str().unwrap().starts_with("provider_error: "),
        "{shown}"
    );
    b.wait("!window.weft.state.running").await;
    b.client.refresh().await.unwrap();
    b.wait("document.getElementById('connection').classList.contains('up')")
        .await;
    assert_eq!(
        b.wait(error).await,
        shown,
        "the error is still there after a reload"
    );
    // "Try again" asks again in the failed answer's place (the script fails it again, as a
    // model that is still down would): one question, one answer, a new one.
    let failed = b
        .js("document.querySelector('.message.assistant').dataset.id")
        .await;
    b.click(".notice.error .retry").await;
    b.wait(&format!("!window.weft.state.running && document.querySelector('.message.assistant')?.dataset.id !== {failed} && document.querySelectorAll('.notice.error').length === 1")).await;
    assert_eq!(
        b.js("Array.from(document.querySelectorAll('.message.user .text'), (t) => t.textContent)")
            .await,
        json!(["broken please"])
    );

    // Reloaded mid-answer: one answer, resumed, and no empty one above it.
    b.click("#new-thread").await;
    b.say("slow please").await;
    b.wait(&format!("{ANSWER}?.startsWith('one')")).await;
    b.client.refresh().await.unwrap();
    b.wait("document.getElementById('connection').classList.contains('up')")
        .await;
    b.wait(&format!("{ANSWER} === 'one two three four'")).await;
    b.wait("!window.weft.state.running").await;
    assert_eq!(
        b.js("document.querySelectorAll('.message.assistant').length")
            .await,
        json!(1)
    );
    assert_eq!(
        b.js("[...document.querySelectorAll('.message.assistant .cost')].map(c => c.textContent.includes('0 in / 0 out'))").await,
        json!([false])
    );
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn the_last_answer_is_regenerated_and_the_last_message_edited_in_its_place() {
    use fantoccini::key::Key;
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("hello").await;
    b.wait(&format!(
        "{ANSWER} === 'Hello there!' && !window.weft.state.running"
    ))
    .await;
    let thread = b.js("window.weft.state.threadId").await;
    let thread = thread.as_str().unwrap().to_owned();
    let answer = "document.querySelector('.message.assistant')?.dataset.id";
    let first = b.wait(answer).await;
    let stored = || async {
        let (status, messages) = server
            .get(&format!("/threads/{thread}/messages"), None)
            .await;
        assert_eq!(status, 200);
        messages
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].clone(), m["content"].clone(), m["id"].clone()))
            .collect::<Vec<_>>()
    };
    let users =
        "Array.from(document.querySelectorAll('.message.user > .text'), (t) => t.textContent)";

    // Regenerate: a new answer in the old one's place, on the page and on the server.
    b.click(".exchange-action.regenerate").await;
    b.wait(&format!(
        "!window.weft.state.running && {answer} && {answer} !== {first} && {ANSWER} === 'Hello there!'"
    ))
    .await;
    assert_eq!(b.js(users).await, json!(["hello"]));
    assert_eq!(
        b.js("document.querySelectorAll('.message.assistant').length")
            .await,
        json!(1)
    );
    let second = b.js(answer).await;
    let messages = stored().await;
    assert_eq!(messages.len(), 2);
    assert_eq!((&messages[0].1, &messages[1].2), (&json!("hello"), &second));

    // Edit: Esc keeps the message as it was; Enter asks the edited one in its place (the
    // scripted model follows a chat's first message, so it answers differently).
    b.click(".exchange-action.edit").await;
    b.wait("document.activeElement?.classList.contains('edit-field')")
        .await;
    b.press(&Key::Escape).await;
    assert_eq!(b.js(users).await, json!(["hello"]));
    b.click(".exchange-action.edit").await;
    b.wait("document.activeElement?.classList.contains('edit-field')")
        .await;
    b.js("(document.activeElement.value = 'slow please', true)")
        .await;
    b.press(&Key::Enter).await;
    b.wait(&format!(
        "!window.weft.state.running && {ANSWER} === 'one two three four'"
    ))
    .await;
    assert_eq!(b.js(users).await, json!(["slow please"]));
    let messages = stored().await;
    assert_eq!(messages.len(), 2);
    assert_eq!(
        (&messages[0].1, &messages[1].2),
        (&json!("slow please"), &b.js(answer).await)
    );

    // After a reload the chat is the edited one, and can be asked again.
    b.client.refresh().await.unwrap();
    b.wait(&format!(
        "document.querySelector('.exchange-action.regenerate') && {ANSWER} === 'one two three four'"
    ))
    .await;
    assert_eq!(b.js(users).await, json!(["slow please"]));
    // While an answer streams there is nothing to regenerate or edit.
    b.click(".exchange-action.regenerate").await;
    b.wait(&format!(
        "window.weft.state.running && {ANSWER}?.startsWith('one')"
    ))
    .await;
    assert_eq!(
        b.js("document.querySelectorAll('.exchange-action').length")
            .await,
        json!(0)
    );
    b.wait("!window.weft.state.running && document.querySelector('.exchange-action.edit')")
        .await;
    assert_eq!(stored().await.len(), 2);
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn text_and_cards_show_in_the_order_they_happened_live_and_after_a_reload() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("in order please").await;
    b.wait(&format!("{ANSWER}?.endsWith('All done.')")).await;
    b.wait("!window.weft.state.running").await;
    let flow = "Array.from([...document.querySelectorAll('.message.assistant')].pop().querySelector('.flow').children, (c) => c.classList.contains('text') ? c.textContent.trim() : c.dataset.name)";
    let expected = json!([
        "First I note it.",
        "memory_write",
        "Then I read it back.",
        "memory_read",
        "All done."
    ]);
    assert_eq!(b.js(flow).await, expected, "live");
    b.client.refresh().await.unwrap();
    b.wait("document.getElementById('connection').classList.contains('up')")
        .await;
    b.wait(&format!("{ANSWER}?.endsWith('All done.')")).await;
    assert_eq!(b.js(flow).await, expected, "after a reload");
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_chat_is_renamed_and_deleted_from_the_list() {
    use fantoccini::key::Key;
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.say("first chat").await;
    b.wait(&format!("{ANSWER} === 'Hello there!'")).await;
    b.wait("!window.weft.state.running").await;
    b.click("#new-thread").await;
    b.say("second chat").await;
    b.wait(&format!("{ANSWER} === 'Hello there!'")).await;
    b.wait("!window.weft.state.running").await;
    let names =
        "Array.from(document.querySelectorAll('#threads .thread-open'), (b) => b.textContent)";
    b.wait("document.querySelectorAll('#threads li').length === 2")
        .await;
    // The actions show on focus (on hover with a mouse); the current chat is renamed in place.
    let action =
        |which: &str| format!("#threads li:first-child .thread-action[data-action={which}]");
    b.js(&format!(
        "(document.querySelector('{}').focus(), true)",
        action("rename")
    ))
    .await;
    b.click(&action("rename")).await;
    b.wait("document.activeElement.classList.contains('thread-rename')")
        .await;
    // Its name is selected: typing replaces it.
    b.press("Trip plans").await;
    b.press(&Key::Enter).await;
    b.wait("document.getElementById('thread-title').textContent === 'Trip plans'")
        .await;
    assert_eq!(
        b.wait(&format!("{names}.includes('Trip plans') && {names}"))
            .await,
        json!(["Trip plans", "first chat"])
    );
    // Esc leaves the name as it was.
    b.js(&format!(
        "(document.querySelector('{}').focus(), true)",
        action("rename")
    ))
    .await;
    b.click(&action("rename")).await;
    b.wait("document.activeElement.classList.contains('thread-rename')")
        .await;
    b.press("never mind").await;
    b.press(&Key::Escape).await;
    b.wait("!document.querySelector('.thread-rename')").await;
    assert_eq!(b.js(names).await, json!(["Trip plans", "first chat"]));
    b.client.refresh().await.unwrap();
    b.wait("document.getElementById('connection').classList.contains('up')")
        .await;
    assert_eq!(
        b.wait(&format!("{names}.length === 2 && {names}")).await,
        json!(["Trip plans", "first chat"])
    );

    // Deleting asks first; the open chat deleted leaves a new one on screen.
    b.js(&format!(
        "(document.querySelector('{}').focus(), true)",
        action("delete")
    ))
    .await;
    b.click(&action("delete")).await;
    b.client.dismiss_alert().await.unwrap();
    assert_eq!(b.js(&format!("{names}.length")).await, json!(2));
    b.js(&format!(
        "(document.querySelector('{}').focus(), true)",
        action("delete")
    ))
    .await;
    b.click(&action("delete")).await;
    b.client.accept_alert().await.unwrap();
    b.wait(&format!("{names}.length === 1")).await;
    assert_eq!(b.js(names).await, json!(["first chat"]));
    assert_eq!(
        b.js("document.getElementById('thread-title').textContent")
            .await,
        json!("New chat")
    );
    let (_, listed) = server.get("/threads", None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    b.close().await;
    server.stop().await;
}

#[tokio::test]
async fn a_workflow_is_built_by_hand_saved_and_run_and_its_diagram_is_readable() {
    let _one = ONE_BROWSER.lock().await;
    let server = TestServer::start(script()).await;
    let b = Browser::start().await;
    b.open(&server.url("/")).await;
    b.click("#workflows-toggle").await;
    b.click("#workflow-new").await;
    b.wait("document.getElementById('graph-editor').open && document.querySelector('#node-type option[value=\"text.template\"]')")
        .await;
    let select = |css: &'static str, value: &'static str| {
        format!("(() => {{ const s = document.querySelector('{css}'); s.value = '{value}'; return s.value === '{value}'; }})()")
    };
    // Two nodes, their inputs set, one connection.
    assert_eq!(
        b.js(&select("#node-type", "text.template")).await,
        json!(true)
    );
    b.click("#add-node").await;
    assert_eq!(b.js(&select("#node-type", "output")).await, json!(true));
    b.click("#add-node").await;
    b.wait("document.querySelectorAll('#graph-view g.node').length === 2")
        .await;
    let set = |node: &str, port: &str, value: &str| {
        format!("(() => {{ const f = document.querySelector('#node-list input[data-node=\"{node}\"][data-port=\"{port}\"]'); f.value = '{value}'; f.dispatchEvent(new Event('change')); return true; }})()")
    };
    b.js(&set("template_1", "template", "Hello by hand")).await;
    b.js(&set("output_2", "name", "greeting")).await;
    assert_eq!(
        b.js(&select("#edge-from", "template_1\\u0000text")).await,
        json!(true)
    );
    assert_eq!(
        b.js(&select("#edge-to", "output_2\\u0000value")).await,
        json!(true)
    );
    b.click("#add-edge").await;
    b.wait("document.querySelectorAll('#graph-view path.edge').length === 1")
        .await;
    // A connected input is no longer a field.
    assert_eq!(
        b.js("!!document.querySelector('#node-list input[data-node=\"output_2\"][data-port=\"value\"]')").await,
        json!(false)
    );
    // The diagram's words are at least 12 px on screen.
    let smallest = "Math.min(...Array.from(document.querySelectorAll('#graph-view text'), (t) => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a))";
    assert!(b.js(smallest).await.as_f64().unwrap() >= 12.0);
    b.shot("workflow-by-hand").await;

    let name = b.client.find(Locator::Css("#workflow-name")).await.unwrap();
    name.send_keys("By hand").await.unwrap();
    b.click("#save-workflow").await;
    b.wait("document.getElementById('workflow-status').textContent === 'saved as By hand'")
        .await;
    b.click("#run-workflow").await;
    b.wait("document.getElementById('workflow-status').textContent === 'completed'")
        .await;
    let (_, runs) = server.get("/workflows", None).await;
    assert_eq!(
        runs[0]["graph"]["edges"][0],
        json!({"from": "template_1", "output": "text", "to": "output_2", "input": "value"})
    );

    // Removing a node takes its connections with it.
    b.click("#node-list li[data-id='template_1'] .remove").await;
    b.wait("document.querySelectorAll('#graph-view g.node').length === 1")
        .await;
    assert_eq!(
        b.js("document.querySelectorAll('#graph-view path.edge, #edge-list li').length")
            .await,
        json!(0)
    );
    b.close().await;
    server.stop().await;
}
