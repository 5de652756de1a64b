//! Reading tool arguments the schema already checked the shape of.

use serde_json::Value;
use weft_core::ToolError;

/// A string argument that must be there and not blank.
pub fn required_text<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| ToolError::model(format!("`{key}` is required")))
}
