//! A tool as a node: its arguments are the node's inputs, its result the `result` output
//! (parsed when it is JSON). The call goes through the run's host, so the gate, budget and
//! record treat it exactly as a tool call.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_core::Tool;
use weft_protocol::{PolicyClass, ToolCategory};

use crate::node::{NodeContext, NodeType, Ports};

pub struct ToolNode {
    tool: Arc<dyn Tool>,
    inputs: Value,
}

impl ToolNode {
    pub fn new(tool: Arc<dyn Tool>) -> Self {
        let inputs = tool.parameters();
        ToolNode { tool, inputs }
    }
}

#[async_trait]
impl NodeType for ToolNode {
    fn type_name(&self) -> &str {
        self.tool.name()
    }

    fn description(&self) -> &str {
        self.tool.description()
    }

    fn inputs(&self) -> Value {
        self.inputs.clone()
    }

    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"result": {"description": "The tool's result (parsed when it is JSON)."}}})
    }

    fn category(&self) -> ToolCategory {
        self.tool.category()
    }

    fn policy_class(&self) -> PolicyClass {
        self.tool.policy_class()
    }

    /// The tool's own timeout (`tool_timeout_ms`) applies inside the call.
    fn timed(&self) -> bool {
        false
    }

    async fn run(&self, inputs: Ports, ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let text =
            crate::host::call_tool(ctx.host, self.tool.name(), Value::Object(inputs)).await?;
        let result = serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
        let mut out = Ports::new();
        out.insert("result".into(), result);
        Ok(out)
    }
}
