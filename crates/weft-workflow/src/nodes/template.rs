//! `text.template`: a Jinja template (`minijinja`) rendered with the node's other inputs.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::node::{NodeContext, NodeType, Ports};

pub struct Template;

#[async_trait]
impl NodeType for Template {
    fn type_name(&self) -> &str {
        "text.template"
    }
    fn description(&self) -> &str {
        "Render a Jinja template (`Hello {{ name }}`) with the node's other inputs as variables."
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {
            "template": {"type": "string", "description": "The template."},
        }, "required": ["template"], "additionalProperties": true})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    }
    async fn run(&self, mut inputs: Ports, _ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let template = match inputs.remove("template") {
            Some(Value::String(t)) => t,
            _ => return Err("template must be a string".to_owned()),
        };
        let env = minijinja::Environment::new();
        let text = env
            .render_str(
                &template,
                minijinja::Value::from(minijinja::value::Serde(Value::Object(inputs))),
            )
            .map_err(|e| format!("template: {e}"))?;
        Ok(Ports::from_iter([("text".to_owned(), Value::String(text))]))
    }
}
