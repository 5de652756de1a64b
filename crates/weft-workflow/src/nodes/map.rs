//! `list.map`: runs a sub-graph once per item (the item is its `input.*` parameter `item`,
//! its result the `output` named `result`), items concurrently within the run's bounds.

use async_trait::async_trait;
use futures::future::join_all;
use serde_json::{json, Map, Value};

use crate::executor::{execute, Job, RunStatus};
use crate::graph::Graph;
use crate::node::{NodeContext, NodeType, Ports};
use crate::validate::validate;

pub const LIST_MAP: &str = "list.map";
pub const GRAPH_PORT: &str = "graph";

pub struct ListMap;

#[async_trait]
impl NodeType for ListMap {
    fn type_name(&self) -> &str {
        LIST_MAP
    }
    fn description(&self) -> &str {
        "Run a sub-graph for each item of a list: the item is its parameter `item`, its \
`output` named `result` is collected into `results`."
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {
            "items": {"type": "array"},
            "graph": {"type": "object", "description": "The sub-graph (nodes and edges)."},
        }, "required": ["items", "graph"]})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"results": {"type": "array"}}})
    }
    async fn run(&self, inputs: Ports, ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let items = inputs
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let graph: Graph =
            serde_json::from_value(inputs.get(GRAPH_PORT).cloned().unwrap_or_default())
                .map_err(|e| format!("graph: {e}"))?;
        let plan = validate(&graph, ctx.registry).map_err(|errors| {
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        let prefixes: Vec<String> = (0..items.len())
            .map(|i| format!("{}[{i}]", ctx.node_path))
            .collect();
        let runs = items.into_iter().zip(&prefixes).map(|(item, prefix)| {
            let plan = &plan;
            async move {
                let params = Map::from_iter([("item".to_owned(), item)]);
                let job = Job {
                    prefix: Some(prefix),
                    ..ctx.job
                };
                execute(plan, &params, ctx.host, ctx.registry, ctx.limits, job).await
            }
        });
        let mut results = Vec::new();
        for (i, run) in join_all(runs).await.into_iter().enumerate() {
            if run.status != RunStatus::Completed {
                return Err(format!(
                    "item {i}: {}",
                    run.error.unwrap_or_else(|| run.status.as_str().to_owned())
                ));
            }
            results.push(run.outputs.get("result").cloned().unwrap_or(Value::Null));
        }
        Ok(Ports::from_iter([(
            "results".to_owned(),
            Value::Array(results),
        )]))
    }
}
