//! A graph's edges with the world: `input.text`, `input.number`, `input.json` read a run
//! parameter by name (or their default); `output` names a result of the run.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::node::{NodeContext, NodeType, Ports};

pub const OUTPUT: &str = "output";

/// An `input.*` node: the parameter `name` (or `default`), checked against its kind.
pub struct Input {
    type_name: &'static str,
    kind: &'static str,
    description: &'static str,
}

impl Input {
    pub fn text() -> Self {
        Input {
            type_name: "input.text",
            kind: "string",
            description: "A text parameter of the run, by name.",
        }
    }
    pub fn number() -> Self {
        Input {
            type_name: "input.number",
            kind: "number",
            description: "A number parameter of the run, by name.",
        }
    }
    pub fn json() -> Self {
        Input {
            type_name: "input.json",
            kind: "",
            description: "Any JSON parameter of the run, by name.",
        }
    }

    fn value_schema(&self) -> Value {
        if self.kind.is_empty() {
            json!({})
        } else {
            json!({"type": self.kind})
        }
    }
}

#[async_trait]
impl NodeType for Input {
    fn type_name(&self) -> &str {
        self.type_name
    }
    fn description(&self) -> &str {
        self.description
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string", "description": "The parameter's name."},
            "default": self.value_schema(),
        }, "required": ["name"]})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"value": self.value_schema()}})
    }
    async fn run(&self, inputs: Ports, ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let name = inputs
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let value = ctx
            .params
            .get(name)
            .or_else(|| inputs.get("default"))
            .cloned()
            .ok_or_else(|| format!("missing parameter `{name}`"))?;
        let fits = match self.kind {
            "string" => value.is_string(),
            "number" => value.is_number(),
            _ => true,
        };
        if !fits {
            return Err(format!("parameter `{name}` must be a {}", self.kind));
        }
        Ok(Ports::from_iter([("value".to_owned(), value)]))
    }
}

/// `output`: names a result of the run.
pub struct Output;

#[async_trait]
impl NodeType for Output {
    fn type_name(&self) -> &str {
        OUTPUT
    }
    fn description(&self) -> &str {
        "A result of the run: its value under its name."
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string", "description": "The result's name."},
            "value": {"description": "The result."},
        }, "required": ["name", "value"]})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn run(&self, inputs: Ports, _ctx: &NodeContext<'_>) -> Result<Ports, String> {
        Ok(inputs)
    }
}
