//! Graph validation, one case per error kind, and the executor: data along edges, parallel
//! branches, failures skipping dependants, branches, maps, stop and the node timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::{json, Map, Value};
use tokio::sync::Notify;
use weft_core::{ChatMessage, ModelError, NestedCalls, ToolOutcome};
use weft_protocol::ServerEvent;
use weft_workflow::{
    execute, validate, Graph, Job, NodeContext, NodeRegistry, NodeStatus, NodeType, Ports,
    RunLimits, RunStatus,
};

/// A host whose "tools" and "model" are local, recording frames.
#[derive(Default)]
struct Host {
    events: parking_lot_free::Events,
    stop: Notify,
    stopped: std::sync::atomic::AtomicBool,
    model_delay_ms: u64,
}

mod parking_lot_free {
    use std::sync::Mutex;

    use weft_protocol::ServerEvent;

    #[derive(Default)]
    pub struct Events(pub Mutex<Vec<ServerEvent>>);
}

#[async_trait]
impl NestedCalls for Host {
    async fn call_tool(&self, name: &str, arguments: String) -> ToolOutcome {
        let args: Value = serde_json::from_str(&arguments).unwrap();
        match name {
            "shout" => ToolOutcome {
                content: args["text"].as_str().unwrap_or_default().to_uppercase(),
                is_error: false,
            },
            _ => ToolOutcome {
                content: format!("no tool {name}"),
                is_error: true,
            },
        }
    }
    async fn complete(
        &self,
        _system: &str,
        messages: Vec<ChatMessage>,
    ) -> Result<String, ModelError> {
        tokio::time::sleep(Duration::from_millis(self.model_delay_ms)).await;
        Ok(format!("model says: {}", messages[0].text()))
    }
    async fn complete_json(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
        _schema: Arc<Value>,
    ) -> Result<String, ModelError> {
        self.complete(system, messages).await
    }
    fn emit(&self, event: ServerEvent) {
        self.events.0.lock().unwrap().push(event);
    }
    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
    async fn stopped(&self) {
        if self.is_stopped() {
            return;
        }
        self.stop.notified().await
    }
    fn parent_id(&self) -> Option<&str> {
        None
    }
    fn depth(&self) -> u32 {
        0
    }
}

impl Host {
    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.stop.notify_waiters();
    }

    fn node_lines(&self) -> Vec<String> {
        self.events
            .0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                ServerEvent::NodeUpdate {
                    node_id, status, ..
                } => Some(format!("{node_id} {status}")),
                ServerEvent::JobUpdate { status, .. } => Some(format!("job {status}")),
                _ => None,
            })
            .collect()
    }
}

/// Sleeps, counting how many run at once; fails when told to.
struct Slow {
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

#[async_trait]
impl NodeType for Slow {
    fn type_name(&self) -> &str {
        "test.slow"
    }
    fn description(&self) -> &str {
        "sleeps"
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {"ms": {"type": "integer"}, "fail": {"type": "boolean"}, "in": {}}})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"out": {"type": "string"}}})
    }
    async fn run(&self, inputs: Ports, _ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let ms = inputs.get("ms").and_then(Value::as_u64).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        if inputs.get("fail") == Some(&json!(true)) {
            return Err("told to fail".into());
        }
        Ok(Ports::from_iter([("out".to_owned(), json!("slept"))]))
    }
}

fn registry() -> (NodeRegistry, Arc<AtomicUsize>) {
    let mut registry = NodeRegistry::with_builtins();
    let peak = Arc::new(AtomicUsize::new(0));
    registry.register(Arc::new(Slow {
        running: Arc::default(),
        peak: peak.clone(),
    }));
    registry.register(Arc::new(weft_workflow::tool_node::ToolNode::new(Arc::new(
        Shout,
    ))));
    (registry, peak)
}

/// A tool, to be a node.
struct Shout;

#[async_trait]
impl weft_core::Tool for Shout {
    fn name(&self) -> &str {
        "shout"
    }
    fn description(&self) -> &str {
        "upper-cases text"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    }
    fn policy_class(&self) -> weft_protocol::PolicyClass {
        weft_protocol::PolicyClass::Safe
    }
    fn category(&self) -> weft_protocol::ToolCategory {
        weft_protocol::ToolCategory::Read
    }
    async fn call(
        &self,
        _: Value,
        _: &weft_core::ToolContext,
    ) -> Result<String, weft_core::ToolError> {
        unreachable!("nodes reach tools through the host")
    }
}

fn graph(value: Value) -> Graph {
    serde_json::from_value(value).unwrap()
}

const JOB: Job<'static> = Job {
    job_id: "run_1",
    workflow_id: "wf",
    prefix: None,
};

#[test]
fn every_kind_of_invalid_graph_names_its_node_and_port() {
    let (registry, _) = registry();
    let cases = [
        (json!({"nodes": []}), "", None, "no nodes"),
        (
            json!({"nodes": [{"id": "a", "type": "nope"}]}),
            "a",
            None,
            "unknown node type",
        ),
        (
            json!({"nodes": [{"id": "a", "type": "input.text", "inputs": {"name": "x"}}, {"id": "a", "type": "input.text", "inputs": {"name": "y"}}]}),
            "a",
            None,
            "unique",
        ),
        (
            json!({"nodes": [{"id": "a", "type": "input.text", "inputs": {"name": "x"}}],
                   "edges": [{"from": "a", "output": "value", "to": "ghost", "input": "x"}]}),
            "ghost",
            None,
            "does not exist",
        ),
        (
            json!({"nodes": [{"id": "a", "type": "input.text", "inputs": {"name": "x"}}, {"id": "b", "type": "output", "inputs": {"name": "r"}}],
                   "edges": [{"from": "a", "output": "nope", "to": "b", "input": "value"}]}),
            "a",
            Some("nope"),
            "no such output port",
        ),
        (
            json!({"nodes": [{"id": "a", "type": "input.text", "inputs": {"name": "x"}}, {"id": "b", "type": "llm.prompt"}],
                   "edges": [{"from": "a", "output": "value", "to": "b", "input": "promptt"}]}),
            "b",
            Some("promptt"),
            "no such input port",
        ),
        (
            json!({"nodes": [{"id": "a", "type": "input.number", "inputs": {"name": "x"}}, {"id": "b", "type": "llm.prompt"}],
                   "edges": [{"from": "a", "output": "value", "to": "b", "input": "prompt"}]}),
            "b",
            Some("prompt"),
            "takes",
        ),
        (
            json!({"nodes": [{"id": "a", "type": "input.text", "inputs": {"name": "x"}}, {"id": "c", "type": "input.text", "inputs": {"name": "y"}}, {"id": "b", "type": "llm.prompt"}],
                   "edges": [{"from": "a", "output": "value", "to": "b", "input": "prompt"}, {"from": "c", "output": "value", "to": "b", "input": "prompt"}]}),
            "b",
            Some("prompt"),
            "more than one edge",
        ),
        (
            json!({"nodes": [{"id": "a", "type": "text.template", "inputs": {"template": "x"}}, {"id": "b", "type": "text.template", "inputs": {"template": "y"}}],
                   "edges": [{"from": "a", "output": "text", "to": "b", "input": "v"}, {"from": "b", "output": "text", "to": "a", "input": "v"}]}),
            "a",
            None,
            "cycle",
        ),
        (
            json!({"nodes": [{"id": "p", "type": "llm.prompt"}]}),
            "p",
            Some("prompt"),
            "neither set nor connected",
        ),
        (
            json!({"nodes": [{"id": "p", "type": "llm.prompt", "inputs": {"prompt": 42}}]}),
            "p",
            Some("prompt"),
            "does not fit",
        ),
        (
            json!({"nodes": [{"id": "m", "type": "list.map", "inputs": {"items": [], "graph": {"nodes": [{"id": "x", "type": "nope"}]}}}]}),
            "m/x",
            None,
            "unknown node type",
        ),
    ];
    for (value, node, port, message) in cases {
        let errors = match validate(&graph(value.clone()), &registry) {
            Ok(_) => panic!("valid: {value}"),
            Err(errors) => errors,
        };
        assert!(
            errors.iter().any(|e| e.node == node
                && e.port.as_deref() == port
                && e.message.contains(message)),
            "{value}: {errors:?}"
        );
    }
}

#[tokio::test]
async fn data_flows_along_edges_through_templates_extracts_branches_and_maps() {
    let (registry, _) = registry();
    let g = graph(json!({
        "nodes": [
            {"id": "who", "type": "input.text", "inputs": {"name": "name"}},
            {"id": "data", "type": "input.json", "inputs": {"name": "data"}},
            {"id": "greet", "type": "text.template", "inputs": {"template": "Hello {{ who }}!"}},
            {"id": "loud", "type": "shout"},
            {"id": "first", "type": "json.extract", "inputs": {"path": "$.items[0]"}},
            {"id": "branch", "type": "control.if"},
            {"id": "yes", "type": "output", "inputs": {"name": "had_items"}},
            {"id": "no", "type": "output", "inputs": {"name": "empty"}},
            {"id": "each", "type": "list.map", "inputs": {"graph": {
                "nodes": [
                    {"id": "item", "type": "input.json", "inputs": {"name": "item"}},
                    {"id": "t", "type": "text.template", "inputs": {"template": "<{{ x }}>"}},
                    {"id": "r", "type": "output", "inputs": {"name": "result"}}],
                "edges": [
                    {"from": "item", "output": "value", "to": "t", "input": "x"},
                    {"from": "t", "output": "text", "to": "r", "input": "value"}]}}},
            {"id": "out1", "type": "output", "inputs": {"name": "greeting"}},
            {"id": "out2", "type": "output", "inputs": {"name": "wrapped"}},
            {"id": "ask", "type": "llm.prompt"},
            {"id": "out3", "type": "output", "inputs": {"name": "answer"}}
        ],
        "edges": [
            {"from": "who", "output": "value", "to": "greet", "input": "who"},
            {"from": "greet", "output": "text", "to": "loud", "input": "text"},
            {"from": "loud", "output": "result", "to": "out1", "input": "value"},
            {"from": "data", "output": "value", "to": "first", "input": "json"},
            {"from": "first", "output": "value", "to": "branch", "input": "condition"},
            {"from": "branch", "output": "then", "to": "yes", "input": "value"},
            {"from": "branch", "output": "else", "to": "no", "input": "value"},
            {"from": "first", "output": "values", "to": "each", "input": "items"},
            {"from": "each", "output": "results", "to": "out2", "input": "value"},
            {"from": "greet", "output": "text", "to": "ask", "input": "prompt"},
            {"from": "ask", "output": "text", "to": "out3", "input": "value"}
        ]
    }));
    let plan = validate(&g, &registry).unwrap();
    let host = Host::default();
    let params = Map::from_iter([
        ("name".to_owned(), json!("Ada")),
        ("data".to_owned(), json!({"items": ["a", "b"]})),
    ]);
    let run = execute(&plan, &params, &host, &registry, &RunLimits::default(), JOB).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(
        Value::Object(run.outputs),
        json!({
            "greeting": "HELLO ADA!",
            "had_items": "a",
            "wrapped": ["<a>"],
            "answer": "model says: Hello Ada!"
        })
    );
    let skipped: Vec<&str> = run
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Skipped)
        .map(|n| n.node_id.as_str())
        .collect();
    assert_eq!(skipped, vec!["no"], "the untaken branch");
    let lines = host.node_lines();
    assert_eq!(lines.first().unwrap(), "job running");
    assert_eq!(lines.last().unwrap(), "job completed");
    assert!(
        lines.contains(&"each[0]/t completed".to_owned()),
        "{lines:?}"
    );
}

#[tokio::test]
async fn parallel_branches_overlap_and_a_failure_skips_what_depends_on_it() {
    let (registry, peak) = registry();
    let g = graph(json!({
        "nodes": [
            {"id": "a", "type": "test.slow", "inputs": {"ms": 100}},
            {"id": "b", "type": "test.slow", "inputs": {"ms": 100}},
            {"id": "bad", "type": "test.slow", "inputs": {"fail": true}},
            {"id": "after_bad", "type": "test.slow"},
            {"id": "after_that", "type": "test.slow"},
            {"id": "join", "type": "test.slow"}
        ],
        "edges": [
            {"from": "bad", "output": "out", "to": "after_bad", "input": "in"},
            {"from": "after_bad", "output": "out", "to": "after_that", "input": "in"},
            {"from": "a", "output": "out", "to": "join", "input": "in"}
        ]
    }));
    let plan = validate(&g, &registry).unwrap();
    let host = Host::default();
    let started = std::time::Instant::now();
    let run = execute(
        &plan,
        &Map::new(),
        &host,
        &registry,
        &RunLimits::default(),
        JOB,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_millis(190),
        "a and b overlapped"
    );
    assert!(peak.load(Ordering::SeqCst) >= 2);
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        run.error.as_deref(),
        Some("node `bad` failed: told to fail")
    );
    let status = |id: &str| run.nodes.iter().find(|n| n.node_id == id).unwrap().status;
    assert_eq!(status("after_bad"), NodeStatus::Skipped);
    assert_eq!(status("after_that"), NodeStatus::Skipped);
    assert_eq!(status("join"), NodeStatus::Completed);
}

#[tokio::test]
async fn stop_cancels_the_run_and_skips_what_did_not_start() {
    let (registry, _) = registry();
    let g = graph(json!({
        "nodes": [
            {"id": "first", "type": "test.slow", "inputs": {"ms": 50}},
            {"id": "second", "type": "test.slow", "inputs": {"ms": 50}}
        ],
        "edges": [{"from": "first", "output": "out", "to": "second", "input": "in"}]
    }));
    let plan = validate(&g, &registry).unwrap();
    let host = Arc::new(Host::default());
    let stopper = {
        let host = host.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            host.stop();
        })
    };
    let run = execute(
        &plan,
        &Map::new(),
        host.as_ref(),
        &registry,
        &RunLimits::default(),
        JOB,
    )
    .await;
    stopper.await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_eq!(run.nodes[1].status, NodeStatus::Skipped);
    assert_eq!(host.node_lines().last().unwrap(), "job cancelled");
}

#[tokio::test]
async fn a_node_past_its_timeout_fails() {
    let (registry, _) = registry();
    let g = graph(
        json!({"nodes": [{"id": "ask", "type": "llm.prompt", "inputs": {"prompt": "slow?"}}]}),
    );
    let plan = validate(&g, &registry).unwrap();
    let host = Host {
        model_delay_ms: 500,
        ..Host::default()
    };
    let limits = RunLimits {
        node_timeout: Duration::from_millis(50),
        ..RunLimits::default()
    };
    let run = execute(&plan, &Map::new(), &host, &registry, &limits, JOB).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.nodes[0].error.as_deref(), Some("timed out after 50 ms"));
}

#[tokio::test]
async fn a_missing_parameter_is_a_clear_failure() {
    let (registry, _) = registry();
    let g =
        graph(json!({"nodes": [{"id": "n", "type": "input.number", "inputs": {"name": "count"}}]}));
    let plan = validate(&g, &registry).unwrap();
    let run = execute(
        &plan,
        &Map::new(),
        &Host::default(),
        &registry,
        &RunLimits::default(),
        JOB,
    )
    .await;
    assert_eq!(
        run.nodes[0].error.as_deref(),
        Some("missing parameter `count`")
    );
    let params = Map::from_iter([("count".to_owned(), json!("three"))]);
    let run = execute(
        &plan,
        &params,
        &Host::default(),
        &registry,
        &RunLimits::default(),
        JOB,
    )
    .await;
    assert_eq!(
        run.nodes[0].error.as_deref(),
        Some("parameter `count` must be a number")
    );
}

/// `depth` `list.map`s nested, each over `items` items, the innermost a `slow` node; the
/// innermost graph reads `item` and each outer graph passes its item's list down.
fn nested_maps(depth: usize, items: usize) -> Value {
    let mut inner = json!({"nodes": [
        {"id": "s", "type": "test.slow", "inputs": {"ms": 0}},
        {"id": "r", "type": "output", "inputs": {"name": "result", "value": 1}}
    ]});
    for _ in 0..depth {
        inner = json!({"nodes": [
            {"id": "m", "type": "list.map", "inputs": {"items": vec![0; items], "graph": inner}},
            {"id": "r", "type": "output", "inputs": {"name": "result"}}
        ], "edges": [{"from": "m", "output": "results", "to": "r", "input": "value"}]});
    }
    inner
}

#[tokio::test]
async fn nesting_items_and_node_runs_are_bounded_with_clear_errors() {
    let (registry, _) = registry();
    let limits = RunLimits::default();
    // Seven maps deep, ten items each: refused before anything runs.
    let deep = graph(nested_maps(7, 10));
    let errors = weft_workflow::validate_within(&deep, &registry, &limits)
        .err()
        .expect("refused");
    assert!(
        errors[0].message.contains("nested 7 deep") && errors[0].message.contains("max_map_depth"),
        "{errors:?}"
    );
    let plan = validate(&deep, &registry).unwrap();
    assert_eq!(plan.nesting, 7);
    let run = execute(
        &plan,
        &Map::new(),
        &Host::default(),
        &registry,
        &limits,
        JOB,
    )
    .await;
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.error.unwrap().contains("max_map_depth"));

    // A graph that arrives as data (not checkable ahead) is checked when it runs.
    let dynamic = graph(json!({"nodes": [
        {"id": "g", "type": "input.json", "inputs": {"name": "graph"}},
        {"id": "m", "type": "list.map", "inputs": {"items": [1, 2]}},
        {"id": "r", "type": "output", "inputs": {"name": "out"}}
    ], "edges": [
        {"from": "g", "output": "value", "to": "m", "input": "graph"},
        {"from": "m", "output": "results", "to": "r", "input": "value"}
    ]}));
    let plan = weft_workflow::validate_within(&dynamic, &registry, &limits).unwrap();
    let params = Map::from_iter([("graph".to_owned(), nested_maps(3, 2))]);
    let run = execute(&plan, &params, &Host::default(), &registry, &limits, JOB).await;
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    assert!(run.error.unwrap().contains("max_map_depth"));
    // Within the depth it runs.
    let params = Map::from_iter([("graph".to_owned(), nested_maps(2, 2))]);
    let run = execute(&plan, &params, &Host::default(), &registry, &limits, JOB).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");

    // Too many items for one map.
    let many = graph(nested_maps(1, 1_001));
    let plan = validate(&many, &registry).unwrap();
    let run = execute(
        &plan,
        &Map::new(),
        &Host::default(),
        &registry,
        &limits,
        JOB,
    )
    .await;
    assert!(
        run.error
            .unwrap()
            .contains("1001 items; a list.map takes at most 1000"),
        "the item cap"
    );

    // Node runs of the whole run, nested ones included.
    let limits = RunLimits {
        max_node_runs: 50,
        ..RunLimits::default()
    };
    let wide = graph(nested_maps(2, 10));
    let plan = validate(&wide, &registry).unwrap();
    let run = execute(
        &plan,
        &Map::new(),
        &Host::default(),
        &registry,
        &limits,
        JOB,
    )
    .await;
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.error.unwrap().contains("passed 50 node runs"));
}

#[tokio::test]
async fn nodes_at_once_are_bounded_across_nested_runs() {
    let (registry, peak) = registry();
    let mut g = nested_maps(2, 6);
    g["nodes"][0]["inputs"]["graph"]["nodes"][0]["inputs"]["graph"]["nodes"][0]["inputs"]["ms"] =
        json!(20);
    let plan = validate(&graph(g), &registry).unwrap();
    let limits = RunLimits {
        max_parallel: 3,
        ..RunLimits::default()
    };
    let run = execute(
        &plan,
        &Map::new(),
        &Host::default(),
        &registry,
        &limits,
        JOB,
    )
    .await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let peak = peak.load(Ordering::SeqCst);
    assert!((2..=3).contains(&peak), "{peak} slow nodes at once");
}

#[tokio::test]
async fn a_runaway_template_ends_by_itself_within_its_fuel() {
    let (registry, _) = registry();
    let g = graph(
        json!({"nodes": [{"id": "t", "type": "text.template", "inputs": {
            "template": "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}"
        }}]}),
    );
    let plan = validate(&g, &registry).unwrap();
    let limits = RunLimits {
        node_timeout: Duration::from_secs(3),
        ..RunLimits::default()
    };
    let run = execute(
        &plan,
        &Map::new(),
        &Host::default(),
        &registry,
        &limits,
        JOB,
    )
    .await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.nodes[0].error.clone().unwrap();
    assert!(
        error.contains("template_fuel") || error.contains("max_template_bytes"),
        "{error}"
    );
}

/// A node that may act (a write), noting each run by node id.
struct Act(Arc<std::sync::Mutex<Vec<String>>>);

#[async_trait]
impl NodeType for Act {
    fn type_name(&self) -> &str {
        "test.act"
    }
    fn description(&self) -> &str {
        "acts"
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {"in": {}}})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"out": {"type": "string"}}})
    }
    fn category(&self) -> weft_protocol::ToolCategory {
        weft_protocol::ToolCategory::Write
    }
    async fn run(&self, inputs: Ports, ctx: &NodeContext<'_>) -> Result<Ports, String> {
        self.0.lock().unwrap().push(ctx.node_path.to_owned());
        let seen = inputs.get("in").cloned().unwrap_or(Value::Null);
        Ok(Ports::from_iter([(
            "out".to_owned(),
            json!(format!("acted on {seen}")),
        )]))
    }
}

/// Where a test run keeps its checkpoints: each as a line.
#[derive(Default)]
struct Kept(std::sync::Mutex<Vec<String>>);

#[async_trait]
impl weft_workflow::NodeLog for Kept {
    async fn started(&self, node_id: &str) -> Result<(), String> {
        self.0.lock().unwrap().push(format!("{node_id} started"));
        Ok(())
    }
    fn completed(&self, node_id: &str, outputs: &Ports) {
        self.0.lock().unwrap().push(format!(
            "{node_id} completed {}",
            Value::Object(outputs.clone())
        ));
    }
}

#[tokio::test]
async fn a_run_keeps_its_progress_and_goes_on_from_its_completed_nodes() {
    use weft_workflow::{execute_from, Checkpoints, EarlierRun, CUT_NODE};
    let (mut registry, _) = registry();
    let acted = Arc::new(std::sync::Mutex::new(Vec::new()));
    registry.register(Arc::new(Act(acted.clone())));
    // read -> write -> read, and a write of its own.
    let g = graph(json!({
        "nodes": [
            {"id": "a", "type": "test.slow"},
            {"id": "b", "type": "test.act"},
            {"id": "c", "type": "test.slow"},
            {"id": "d", "type": "test.act"},
            {"id": "after_d", "type": "test.slow"}
        ],
        "edges": [
            {"from": "a", "output": "out", "to": "b", "input": "in"},
            {"from": "b", "output": "out", "to": "c", "input": "in"},
            {"from": "d", "output": "out", "to": "after_d", "input": "in"}
        ]
    }));
    let plan = validate(&g, &registry).unwrap();
    let run_from = |earlier: EarlierRun, kept: &'static Kept| {
        let checkpoints = Checkpoints { earlier, log: kept };
        let host = Host::default();
        let (plan, registry) = (&plan, &registry);
        async move {
            let run = execute_from(
                plan,
                &Map::new(),
                &host,
                registry,
                &RunLimits::default(),
                JOB,
                Some(&checkpoints),
            )
            .await;
            (run, host.node_lines())
        }
    };

    // A first life: the writes' starts are kept before they run, every node's outputs after.
    let kept: &'static Kept = Box::leak(Box::default());
    let (run, _) = run_from(EarlierRun::default(), kept).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let mut lines = kept.0.lock().unwrap().clone();
    lines.sort();
    assert_eq!(
        lines,
        [
            "a completed {\"out\":\"slept\"}",
            "after_d completed {\"out\":\"slept\"}",
            "b completed {\"out\":\"acted on \\\"slept\\\"\"}",
            "b started",
            "c completed {\"out\":\"slept\"}",
            "d completed {\"out\":\"acted on null\"}",
            "d started",
        ]
    );

    // Cut after `a` and `b` completed while `d` ran: `a` and `b` are not run again (their
    // outputs are given back), `d` may have acted so it fails, and what needs it is skipped.
    acted.lock().unwrap().clear();
    let entries: Vec<weft_protocol::RecordEntry> = serde_json::from_value(json!([
        {"kind": "node", "node_id": "a", "status": "completed", "outputs": {"out": "earlier"}},
        {"kind": "node", "node_id": "b", "status": "started"},
        {"kind": "node", "node_id": "d", "status": "started"},
        {"kind": "node", "node_id": "b", "status": "completed", "outputs": {"out": "kept"}}
    ]))
    .unwrap();
    let earlier = EarlierRun::read(&entries);
    assert_eq!(earlier.cut, ["d".to_owned()].into());
    let kept: &'static Kept = Box::leak(Box::default());
    let (run, frames) = run_from(earlier, kept).await;
    assert!(acted.lock().unwrap().is_empty(), "a node ran again");
    let node = |id: &str| run.nodes.iter().find(|n| n.node_id == id).unwrap().clone();
    assert_eq!(node("b").output, Some(json!({"out": "kept"})));
    assert_eq!(node("c").status, NodeStatus::Completed);
    assert_eq!(node("d").status, NodeStatus::Failed);
    assert_eq!(node("d").error.as_deref(), Some(CUT_NODE));
    assert_eq!(node("after_d").status, NodeStatus::Skipped);
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        *kept.0.lock().unwrap(),
        ["c completed {\"out\":\"slept\"}"],
        "only what ran in this life is kept"
    );
    assert!(frames.contains(&"a completed".to_owned()), "{frames:?}");
    assert!(!frames.contains(&"a running".to_owned()), "{frames:?}");
}
