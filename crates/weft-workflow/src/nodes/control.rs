//! `control.if`: passes its value on the `then` or the `else` port; what hangs off the other
//! port is skipped.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::node::{NodeContext, NodeType, Ports};

pub struct If;

/// JavaScript-like truthiness: false, null, 0, "" and empty arrays and objects are false.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty() && s != "false",
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

#[async_trait]
impl NodeType for If {
    fn type_name(&self) -> &str {
        "control.if"
    }
    fn description(&self) -> &str {
        "Branch: the value goes out on `then` when the condition is truthy, else on `else`; \
nodes fed by the other port are skipped."
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {
            "condition": {"description": "Truthy or not."},
            "value": {"description": "What to pass on (default: the condition)."},
        }, "required": ["condition"]})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {"then": {}, "else": {}}})
    }
    async fn run(&self, inputs: Ports, _ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let condition = inputs.get("condition").cloned().unwrap_or(Value::Null);
        let value = inputs
            .get("value")
            .cloned()
            .unwrap_or_else(|| condition.clone());
        let port = if truthy(&condition) { "then" } else { "else" };
        Ok(Ports::from_iter([(port.to_owned(), value)]))
    }
}
