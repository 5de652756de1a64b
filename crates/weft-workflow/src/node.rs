//! `NodeType`: what a node does, its input and output ports (JSON Schemas whose properties
//! are the ports), and what the permission gate makes of it; `NodeContext`: what a running
//! node may use, nested runs (`Subgraphs`) included.

use async_trait::async_trait;
use serde_json::{Map, Value};
use weft_core::NestedCalls;
use weft_protocol::{PolicyClass, ToolCategory};

use crate::graph::Graph;
use crate::run::RunLimits;

/// Values by port name.
pub type Ports = Map<String, Value>;

/// Runs of a graph nested in a node's run (what `list.map` uses), inside the outer run's
/// bounds: its node-run count, its concurrency, the nesting depth.
#[async_trait]
pub trait Subgraphs: Send + Sync {
    /// Run `graph` once per item (the item is its parameter `item`), at most
    /// `max_parallel` at once; each run's `output` named `result`, in order, or why one
    /// item did not complete (the rest are then stopped).
    async fn map(&self, graph: &Graph, items: Vec<Value>) -> Result<Vec<Value>, String>;
}

/// What a running node may use.
pub struct NodeContext<'a> {
    pub host: &'a dyn NestedCalls,
    /// The run's parameters (what `input.*` nodes read).
    pub params: &'a Map<String, Value>,
    pub limits: &'a RunLimits,
    /// The node's id within the run (prefixed inside nested runs).
    pub node_path: &'a str,
    /// Runs nested under this node.
    pub subgraphs: &'a dyn Subgraphs,
}

#[async_trait]
pub trait NodeType: Send + Sync {
    fn type_name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the inputs: each property is an input port; `required` ones must be
    /// set or connected; `additionalProperties: true` takes ports of any name.
    fn inputs(&self) -> Value;
    /// JSON Schema of the outputs: each property is an output port.
    fn outputs(&self) -> Value;
    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }
    fn policy_class(&self) -> PolicyClass {
        PolicyClass::Safe
    }
    /// Whether the executor's per-node timeout applies (tool nodes keep the tool timeout).
    fn timed(&self) -> bool {
        true
    }
    /// The input port holding a graph this node runs (`list.map`'s `graph`): validated with
    /// the graph around it, and the node takes no run slot of its own while it runs it.
    fn graph_port(&self) -> Option<&str> {
        None
    }
    async fn run(&self, inputs: Ports, ctx: &NodeContext<'_>) -> Result<Ports, String>;
}
