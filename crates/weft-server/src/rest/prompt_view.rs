//! A turn read back as the prompt API's prompt object: its id (the assistant message's), the
//! conversation (thread), mode, state, the tool calls it made with their results (pending
//! while unanswered), its text, and usage.

use std::collections::HashMap;

use serde_json::{json, Value};
use weft_protocol::{MessageContent, RecordEntry};
use weft_store::{ItemRow, MessageRow};

use weft_runtime::persist::rfc3339;
use weft_runtime::record::entries;
use weft_runtime::record::views::root_text;

/// The prompt object of the turn whose assistant message is `message`; `input` is the user
/// message that started it, `items` its record, `waiting` whether it waits on an approval.
pub fn prompt_json(
    message: &MessageRow,
    input: Option<&MessageRow>,
    items: &[ItemRow],
    waiting: bool,
) -> Value {
    let metadata: Value = message
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or(Value::Null);
    let mode = metadata["mode"].as_str().unwrap_or("classic");
    let state = match message.status.as_str() {
        "completed" => "completed",
        "running" if waiting => "waiting_for_approval",
        "running" => "running",
        _ => "failed",
    };
    let mut output = tools(items);
    let text = if message.status == "running" {
        // Streaming text so far (code mode's text goes through output(), not the record).
        if mode == "classic" {
            root_text(items)
        } else {
            String::new()
        }
    } else {
        text_of(&message.content)
    };
    if !text.is_empty() {
        output.push(json!({"type": "text", "content": text}));
    }
    json!({
        "id": message.id,
        "conversation_id": message.thread_id,
        "mode": mode,
        "state": state,
        "status": message.status,
        "input": input.map(|m| text_of(&m.content)),
        "output": output,
        "usage": {
            "input_tokens": message.input_tokens,
            "output_tokens": message.output_tokens,
            "cost_usd": message.cost_usd,
        },
        "created_at": rfc3339(message.created_at),
    })
}

/// Every tool call of the turn, every depth, in record order, each with its result.
fn tools(items: &[ItemRow]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for entry in items.iter().flat_map(entries) {
        match entry {
            RecordEntry::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .unwrap_or(Value::String(call.arguments));
                    at.insert(call.id.clone(), out.len());
                    out.push(json!({
                        "type": "tool",
                        "id": call.id,
                        "function": call.name,
                        "input": input,
                        "result": {"type": "pending"},
                    }));
                }
            }
            RecordEntry::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => {
                if let Some(&i) = at.get(&tool_call_id) {
                    out[i]["result"] = if is_error {
                        json!({"type": "error", "error": result})
                    } else {
                        json!({"type": "success", "output": result})
                    };
                }
            }
            _ => {}
        }
    }
    out
}

fn text_of(content: &Value) -> String {
    serde_json::from_value::<MessageContent>(content.clone())
        .map(|c| c.text())
        .unwrap_or_default()
}
