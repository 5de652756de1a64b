//! `todo_write`: the agent's visible task list, kept in the turn's memory under `todos`.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_core::{Tool, ToolContext, ToolError};

pub const TODOS_KEY: &str = "todos";

#[derive(Deserialize)]
struct Todo {
    content: String,
    status: String,
}

pub struct TodoWrite;

#[async_trait]
impl Tool for TodoWrite {
    weft_core::tool_meta! {
        name: "todo_write",
        description: "Replace your todo list for this task: each item has `content` and a `status` (pending, in_progress, completed).",
        class: Safe,
        category: Read,
        parameters: json!({"type": "object", "properties": {"todos": {"type": "array", "items": {
            "type": "object",
            "properties": {"content": {"type": "string"}, "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}},
            "required": ["content", "status"]
        }}}, "required": ["todos"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let todos: Vec<Todo> = serde_json::from_value(
            args.get("todos").cloned().unwrap_or(Value::Null),
        )
        .map_err(|e| {
            ToolError::model(format!(
                "`todos` must be a list of {{content, status}}: {e}"
            ))
        })?;
        let lines: Vec<String> = todos
            .iter()
            .map(|t| {
                let mark = match t.status.as_str() {
                    "completed" => "[x]",
                    "in_progress" => "[~]",
                    _ => "[ ]",
                };
                format!("{mark} {}", t.content)
            })
            .collect();
        ctx.memory.set(
            TODOS_KEY,
            args.get("todos").map(Value::to_string).unwrap_or_default(),
        );
        let done = todos.iter().filter(|t| t.status == "completed").count();
        Ok(format!("{done}/{} done\n{}", todos.len(), lines.join("\n")))
    }
}
