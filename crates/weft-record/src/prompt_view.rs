//! A turn read back as the prompt API's prompt object (and that object's types): its id (the assistant message's), the
//! conversation (thread), mode, state, the tool calls it made with their results (pending
//! while unanswered), its text, and usage.

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use weft_protocol::{ContentPart, MessageContent, RecordEntry};
use weft_store::{ItemRow, MessageRow};

use crate::entries;
use crate::persist::rfc3339;
use crate::views::root_text;

/// A prompt: one turn as the prompt API shows it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Prompt {
    /// The turn's assistant message.
    pub id: String,
    /// Its thread.
    pub conversation_id: String,
    /// The execution mode (`classic`, `code`, …).
    pub mode: String,
    pub state: PromptState,
    /// The stored message's status (`running`, `completed`, `failed`, `cancelled`, …).
    pub status: String,
    /// The user message that started it.
    pub input: Option<String>,
    /// Its tool calls (every depth, in order, each with its result), then its text.
    pub output: Vec<PromptOutput>,
    pub usage: Usage,
    /// RFC 3339.
    pub created_at: String,
}

/// Where a prompt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PromptState {
    Running,
    WaitingForApproval,
    Completed,
    Failed,
}

/// One piece of a prompt's output.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PromptOutput {
    Tool {
        /// The call's id (what `approve` and `reject` take).
        id: String,
        function: String,
        /// Its arguments (their raw text when they are not JSON).
        input: Value,
        result: CallOutcome,
    },
    Text {
        content: String,
    },
    /// A file the turn made (a generated image or speech): where to fetch it.
    File {
        /// `/assets/{id}`, read with the same key.
        url: String,
        /// `image` or `audio`.
        kind: String,
    },
    /// What the server says about how the prompt ended (a code prompt that used all its
    /// rounds).
    System {
        content: String,
    },
}

/// A tool call's result.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CallOutcome {
    /// Not answered yet (running, or waiting for an approval).
    Pending,
    Success {
        output: String,
    },
    Error {
        error: String,
    },
}

/// Tokens and cost.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Usage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
}

/// The prompt of the turn whose assistant message is `message`; `input` is the user message
/// that started it, `items` its record, `waiting` whether it waits on an approval.
pub fn prompt_json(
    message: &MessageRow,
    input: Option<&MessageRow>,
    items: &[ItemRow],
    waiting: bool,
) -> Prompt {
    let metadata: Value = message
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or(Value::Null);
    let mode = metadata["mode"].as_str().unwrap_or("classic");
    // Code mode that used every round completes with a word from the server (seed 003).
    let out_of_rounds = mode == weft_codemode::CODE
        && message.status == "budget_exceeded"
        && metadata["budget"]["reason"] == "iterations";
    let state = match message.status.as_str() {
        "completed" => PromptState::Completed,
        _ if out_of_rounds => PromptState::Completed,
        "running" if waiting => PromptState::WaitingForApproval,
        "running" => PromptState::Running,
        _ => PromptState::Failed,
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
        output.push(PromptOutput::Text { content: text });
    }
    output.extend(files_of(&message.content));
    if out_of_rounds {
        let rounds = metadata["budget"]["limit"].as_f64().unwrap_or_default();
        output.push(PromptOutput::System {
            content: format!(
                "Stopped after {rounds} rounds, code mode's limit; the work so far is above."
            ),
        });
    }
    Prompt {
        id: message.id.clone(),
        conversation_id: message.thread_id.clone(),
        mode: mode.to_owned(),
        state,
        status: message.status.clone(),
        input: input.map(|m| text_of(&m.content)),
        output,
        usage: Usage {
            input_tokens: message.input_tokens,
            output_tokens: message.output_tokens,
            cost_usd: message.cost_usd,
        },
        created_at: rfc3339(message.created_at),
    }
}

/// Every tool call of the turn, every depth, in record order, each with its result; then the
/// files they made.
fn tools(items: &[ItemRow]) -> Vec<PromptOutput> {
    let mut out: Vec<PromptOutput> = Vec::new();
    let mut files = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for entry in items.iter().flat_map(entries) {
        match entry {
            RecordEntry::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .unwrap_or(Value::String(call.arguments));
                    at.insert(call.id.clone(), out.len());
                    out.push(PromptOutput::Tool {
                        id: call.id,
                        function: call.name,
                        input,
                        result: CallOutcome::Pending,
                    });
                }
            }
            RecordEntry::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => {
                if let Some(PromptOutput::Tool { result: slot, .. }) =
                    at.get(&tool_call_id).and_then(|&i| out.get_mut(i))
                {
                    if !is_error {
                        files.extend(generated_file(&result));
                    }
                    *slot = if is_error {
                        CallOutcome::Error { error: result }
                    } else {
                        CallOutcome::Success { output: result }
                    };
                }
            }
            _ => {}
        }
    }
    out.extend(files);
    out
}

/// The file a media tool made (`generate_image`, `text_to_speech` answer
/// `{"asset_id","url","mime_type"}`), if `result` is one.
fn generated_file(result: &str) -> Option<PromptOutput> {
    // Their keys are written sorted: anything else is not parsed.
    if !result.starts_with("{\"asset_id\":") {
        return None;
    }
    let made: Value = serde_json::from_str(result).ok()?;
    made.get("asset_id")?;
    let url = made["url"].as_str().filter(|u| u.starts_with("/assets/"))?;
    let media_type = made["mime_type"].as_str()?;
    Some(PromptOutput::File {
        url: url.to_owned(),
        kind: media_type.split('/').next().unwrap_or("file").to_owned(),
    })
}

/// The generated files among a message's parts.
fn files_of(content: &Value) -> Vec<PromptOutput> {
    let Ok(MessageContent::Parts(parts)) =
        serde_json::from_value::<MessageContent>(content.clone())
    else {
        return Vec::new();
    };
    parts
        .into_iter()
        .filter_map(|part| match part {
            ContentPart::ImageUrl { image_url } => Some(PromptOutput::File {
                url: image_url,
                kind: "image".to_owned(),
            }),
            ContentPart::AudioUrl { audio_url } => Some(PromptOutput::File {
                url: audio_url,
                kind: "audio".to_owned(),
            }),
            ContentPart::Text { .. } => None,
        })
        .collect()
}

fn text_of(content: &Value) -> String {
    serde_json::from_value::<MessageContent>(content.clone())
        .map(|c| c.text())
        .unwrap_or_default()
}

/// The prompt whose turn's assistant message is `message_id`, as stored: its message, the
/// user message that started it, its record; `waiting` says whether it waits on an
/// approval, or (`None`) reads that from the store (a turn another replica runs commits its
/// pending approvals before it asks). `None` when there is no such message.
pub async fn read_prompt(
    store: &weft_store::Store,
    thread_id: &str,
    message_id: &str,
    waiting: Option<bool>,
) -> Result<Option<Prompt>, weft_store::StoreError> {
    let Some(message) = store.message(thread_id, message_id).await? else {
        return Ok(None);
    };
    let waiting = match waiting {
        Some(waiting) => waiting,
        None => {
            message.status == "running" && !store.pending_approval_ids(thread_id).await?.is_empty()
        }
    };
    let messages = store.messages(thread_id).await?;
    let input = messages
        .iter()
        .filter(|m| m.role == "user" && m.position < message.position)
        .max_by_key(|m| m.position);
    let items = store.turn_items(thread_id, message_id).await?;
    Ok(Some(prompt_json(&message, input, &items, waiting)))
}
