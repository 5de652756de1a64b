//! `list.map`: runs a sub-graph once per item (the item is its `input.*` parameter `item`,
//! its result the `output` named `result`), within the run's bounds: items per map, nesting
//! depth, node runs and nodes at once.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::graph::Graph;
use crate::node::{NodeContext, NodeType, Ports};

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
    fn graph_port(&self) -> Option<&str> {
        Some(GRAPH_PORT)
    }
    async fn run(&self, inputs: Ports, ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let items = match inputs.get("items") {
            Some(Value::Array(items)) => items.clone(),
            _ => return Err("items must be a list".to_owned()),
        };
        if items.len() > ctx.limits.max_map_items {
            return Err(format!(
                "{} items; a list.map takes at most {} ([workflow] max_map_items)",
                items.len(),
                ctx.limits.max_map_items
            ));
        }
        let graph: Graph =
            serde_json::from_value(inputs.get(GRAPH_PORT).cloned().unwrap_or_default())
                .map_err(|e| format!("graph: {e}"))?;
        let results = ctx.subgraphs.map(&graph, items).await?;
        Ok(Ports::from_iter([(
            "results".to_owned(),
            Value::Array(results),
        )]))
    }
}
