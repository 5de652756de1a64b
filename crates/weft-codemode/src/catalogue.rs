//! The tool catalogue as the model sees it in code mode: one TypeScript-style signature per
//! tool, derived from its JSON Schema, with its description as a doc comment.

use serde_json::Value;
use weft_core::Toolbelt;

/// Every tool of `toolbelt` as `tools.<name>(args: {…}): Promise<any>` with its description.
pub fn signatures(toolbelt: &Toolbelt) -> String {
    let mut out = String::new();
    for name in toolbelt.names() {
        let Some(tool) = toolbelt.get(name) else {
            continue;
        };
        let description = tool.description().trim().replace("*/", "* /");
        out.push_str(&format!(
            "/** {description} */\ntools.{name}(args: {}): Promise<any>\n",
            type_of(&tool.parameters())
        ));
    }
    out
}

/// A JSON Schema as a TypeScript-style type.
fn type_of(schema: &Value) -> String {
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        let names: Vec<String> = options.iter().map(Value::to_string).collect();
        if !names.is_empty() {
            return names.join(" | ");
        }
    }
    match schema.get("type") {
        Some(Value::String(kind)) => named(kind, schema),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .map(|k| named(k, schema))
            .collect::<Vec<_>>()
            .join(" | "),
        _ if schema.get("properties").is_some() => object(schema),
        _ => "any".to_owned(),
    }
}

fn named(kind: &str, schema: &Value) -> String {
    match kind {
        "string" => "string".to_owned(),
        "integer" | "number" => "number".to_owned(),
        "boolean" => "boolean".to_owned(),
        "null" => "null".to_owned(),
        "array" => {
            let item = schema
                .get("items")
                .map_or_else(|| "any".to_owned(), type_of);
            if item.contains(' ') && !item.starts_with('{') {
                format!("({item})[]")
            } else {
                format!("{item}[]")
            }
        }
        "object" => object(schema),
        _ => "any".to_owned(),
    }
}

fn object(schema: &Value) -> String {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return "object".to_owned();
    };
    if properties.is_empty() {
        return "{}".to_owned();
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<String> = properties
        .iter()
        .map(|(name, property)| {
            let optional = if required.contains(&name.as_str()) {
                ""
            } else {
                "?"
            };
            format!("{name}{optional}: {}", type_of(property))
        })
        .collect();
    format!("{{ {} }}", fields.join("; "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn schemas_read_as_typescript() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "todos": {"type": "array", "items": {"type": "object", "properties": {
                    "content": {"type": "string"},
                    "status": {"enum": ["pending", "done"]}}, "required": ["content"]}}
            },
            "required": ["path"]
        });
        assert_eq!(
            type_of(&schema),
            "{ limit?: number; path: string; tags?: string[]; todos?: { content: string; status?: \"pending\" | \"done\" }[] }"
        );
        assert_eq!(type_of(&json!({"type": "object"})), "object");
        assert_eq!(type_of(&json!({})), "any");
    }
}
