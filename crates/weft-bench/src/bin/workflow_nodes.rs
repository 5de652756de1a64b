//! Workflow executor overhead: a 1000-node fan-out/fan-in graph of no-op nodes (one source,
//! 998 nodes fed by it, one join fed by all of them), run to completion with every
//! `node_update` frame built. Prints microseconds per node for the run, and for validation.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use weft_core::{ChatMessage, ModelError, NestedCalls, ToolOutcome};
use weft_protocol::ServerEvent;
use weft_workflow::{
    execute, validate, Edge, Graph, Job, Node, NodeContext, NodeRegistry, NodeType, Ports,
    RunLimits, RunStatus,
};

const NODES: usize = 1000;
const RUNS: usize = 50;

struct Noop;

#[async_trait]
impl NodeType for Noop {
    fn type_name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> &str {
        "does nothing"
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "additionalProperties": true})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"out": {}}})
    }
    async fn run(&self, _inputs: Ports, _ctx: &NodeContext<'_>) -> Result<Ports, String> {
        Ok(Ports::from_iter([("out".to_owned(), Value::Bool(true))]))
    }
}

/// Builds every frame (as a run in a turn does) and drops it.
struct Host;

#[async_trait]
impl NestedCalls for Host {
    async fn call_tool(&self, _: &str, _: String) -> ToolOutcome {
        ToolOutcome {
            content: "no tools".into(),
            is_error: true,
        }
    }
    async fn complete(&self, _: &str, _: Vec<ChatMessage>) -> Result<String, ModelError> {
        Err(ModelError::Provider("no model".into()))
    }
    async fn complete_json(
        &self,
        _: &str,
        _: Vec<ChatMessage>,
        _: std::sync::Arc<Value>,
    ) -> Result<String, ModelError> {
        Err(ModelError::Provider("no model".into()))
    }
    fn emit(&self, event: ServerEvent) {
        std::hint::black_box(event);
    }
    fn is_stopped(&self) -> bool {
        false
    }
    async fn stopped(&self) {
        std::future::pending::<()>().await
    }
    fn parent_id(&self) -> Option<&str> {
        None
    }
    fn depth(&self) -> u32 {
        0
    }
}

fn fan_graph() -> Graph {
    let mut nodes = vec![Node {
        id: "source".into(),
        node_type: "noop".into(),
        inputs: Map::new(),
    }];
    let mut edges = Vec::new();
    for i in 0..NODES - 2 {
        let id = format!("n{i}");
        edges.push(Edge {
            from: "source".into(),
            output: "out".into(),
            to: id.clone(),
            input: "in".into(),
        });
        edges.push(Edge {
            from: id.clone(),
            output: "out".into(),
            to: "join".into(),
            input: format!("in{i}"),
        });
        nodes.push(Node {
            id,
            node_type: "noop".into(),
            inputs: Map::new(),
        });
    }
    nodes.push(Node {
        id: "join".into(),
        node_type: "noop".into(),
        inputs: Map::new(),
    });
    Graph { nodes, edges }
}

fn main() -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut registry = NodeRegistry::with_builtins();
    registry.register(Arc::new(Noop));
    let graph = fan_graph();
    let mut validate_us = Vec::new();
    let mut run_us = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        let plan =
            validate(&graph, &registry).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        validate_us.push(started.elapsed().as_secs_f64() * 1e6 / NODES as f64);
        let started = Instant::now();
        let run = runtime.block_on(execute(
            &plan,
            &Map::new(),
            &Host,
            &registry,
            &RunLimits::default(),
            Job {
                job_id: "bench",
                workflow_id: "fan",
                prefix: None,
            },
        ));
        run_us.push(started.elapsed().as_secs_f64() * 1e6 / NODES as f64);
        assert_eq!(run.status, RunStatus::Completed);
    }
    validate_us.sort_by(f64::total_cmp);
    run_us.sort_by(f64::total_cmp);
    println!("metric,value,unit");
    println!("executor_per_node_1000_fan,{:.2},us", run_us[RUNS / 2]);
    println!(
        "validation_per_node_1000_fan,{:.2},us",
        validate_us[RUNS / 2]
    );
    Ok(())
}
