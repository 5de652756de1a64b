//! `memory_list`, `memory_read`, `memory_write`: the turn's shared scratchpad (subtask
//! results land there as `task:<id>`). They touch no outside state, so they are `read`.

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_core::{Tool, ToolContext, ToolError};

fn string_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::model(format!("`{key}` is required")))
}

pub struct MemoryList;

#[async_trait]
impl Tool for MemoryList {
    weft_core::tool_meta! {
        name: "memory_list",
        description: "List the keys in this turn's shared memory (subtask results are stored as task:<id>).",
        class: Knowledge,
        category: Read,
        parameters: json!({"type": "object", "properties": {}}),
    }
    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        Ok(json!(ctx.memory.keys()).to_string())
    }
}

pub struct MemoryRead;

#[async_trait]
impl Tool for MemoryRead {
    weft_core::tool_meta! {
        name: "memory_read",
        description: "Read one value from this turn's shared memory.",
        class: Knowledge,
        category: Read,
        parameters: json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let key = string_arg(&args, "key")?;
        ctx.memory.get(key).ok_or_else(|| {
            ToolError::model(format!(
                "no memory entry `{key}`; keys: {:?}",
                ctx.memory.keys()
            ))
        })
    }
}

pub struct MemoryWrite;

#[async_trait]
impl Tool for MemoryWrite {
    weft_core::tool_meta! {
        name: "memory_write",
        description: "Store a value in this turn's shared memory, visible to every subtask of the turn.",
        class: Knowledge,
        category: Read,
        parameters: json!({"type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "string"}}, "required": ["key", "value"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let key = string_arg(&args, "key")?;
        let value = string_arg(&args, "value")?;
        ctx.memory.set(key, value);
        Ok(format!("stored {key}"))
    }
}
