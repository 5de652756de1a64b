//! `json.extract`: a JSONPath expression (RFC 9535) over a value.

use async_trait::async_trait;
use serde_json::{json, Value};
use serde_json_path::JsonPath;

use crate::node::{NodeContext, NodeType, Ports};

pub struct JsonExtract;

#[async_trait]
impl NodeType for JsonExtract {
    fn type_name(&self) -> &str {
        "json.extract"
    }
    fn description(&self) -> &str {
        "Pick values out of JSON with a JSONPath (`$.items[0].name`); text that parses as JSON \
is parsed first."
    }
    fn inputs(&self) -> Value {
        json!({"type": "object", "properties": {
            "json": {"description": "The value (or JSON text)."},
            "path": {"type": "string", "description": "A JSONPath expression."},
        }, "required": ["json", "path"]})
    }
    fn outputs(&self) -> Value {
        json!({"type": "object", "properties": {
            "value": {"description": "The first match, or null."},
            "values": {"type": "array", "description": "Every match."},
        }})
    }
    async fn run(&self, inputs: Ports, _ctx: &NodeContext<'_>) -> Result<Ports, String> {
        let path = inputs
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let path = JsonPath::parse(path).map_err(|e| format!("path: {e}"))?;
        let value = match inputs.get("json") {
            Some(Value::String(text)) => {
                serde_json::from_str(text).unwrap_or(Value::String(text.clone()))
            }
            Some(other) => other.clone(),
            None => Value::Null,
        };
        let values: Vec<Value> = path.query(&value).all().into_iter().cloned().collect();
        Ok(Ports::from_iter([
            (
                "value".to_owned(),
                values.first().cloned().unwrap_or(Value::Null),
            ),
            ("values".to_owned(), Value::Array(values)),
        ]))
    }
}
