//! `llm.prompt`: one model call on the run's model and budget.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::node::{NodeContext, NodeType, Ports};

pub struct Prompt;

const DEFAULT_SYSTEM: &str = "You are a step of a workflow. Do what the prompt asks and reply \
with the result only.";

#[async_trait]
impl NodeType for Prompt {
    fn type_name(&self) -> &str {
        "llm.prompt"
    }
    fn description(&self) -> &str {
        "Ask the model: a prompt (and optional system prompt) in, its text out."
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {
            "prompt": {"type": "string"},
            "system": {"type": "string"},
        }, "required": ["prompt"]})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    }
    async fn run(&self, inputs: Ports, ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let prompt = inputs
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let system = inputs
            .get("system")
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_SYSTEM);
        let text = crate::host::complete(ctx.host, system, prompt).await?;
        Ok(Ports::from_iter([("text".to_owned(), Value::String(text))]))
    }
}
