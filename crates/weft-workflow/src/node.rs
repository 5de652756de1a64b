//! `NodeType`: what a node does, its input and output ports (JSON Schemas whose properties
//! are the ports), and what the permission gate makes of it.

use async_trait::async_trait;
use serde_json::{Map, Value};
use weft_protocol::{PolicyClass, ToolCategory};

use crate::executor::{Job, RunLimits};
use crate::host::RunHost;
use crate::registry::NodeRegistry;

/// Values by port name.
pub type Ports = Map<String, Value>;

/// What a running node may use.
pub struct NodeContext<'a> {
    pub host: &'a dyn RunHost,
    pub registry: &'a NodeRegistry,
    /// The run's parameters (what `input.*` nodes read).
    pub params: &'a Map<String, Value>,
    pub limits: &'a RunLimits,
    /// The run, for runs a node starts (`list.map`).
    pub job: Job<'a>,
    /// The node's id within the run (prefixed inside nested runs).
    pub node_path: &'a str,
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
    async fn run(&self, inputs: Ports, ctx: &NodeContext<'_>) -> Result<Ports, String>;
}
