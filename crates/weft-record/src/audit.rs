//! The tool-call audit log, read from the conversation record: one row per call of a thread,
//! at every depth, with what it was asked, what it returned, how it ended, whether it was
//! approved, and when and how long it ran.

use std::collections::HashMap;

use weft_protocol::tree::preview;
use weft_protocol::{ApprovalStatus, RecordEntry, ToolResultStatus};
use weft_store::{Store, StoreError};

use crate::entries;

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRow {
    pub message_id: String,
    pub tool_call_id: String,
    /// The call whose subtask made this one.
    pub parent_id: Option<String>,
    pub depth: i64,
    pub tool: String,
    /// Argument and result previews (at most 500 characters).
    pub arguments: String,
    pub result_preview: String,
    /// `success`, `error`, `rejected`, `timed_out`; `unfinished` with no result yet.
    pub status: String,
    pub approval_status: String,
    /// Unix seconds.
    pub started_at: f64,
    pub duration_ms: f64,
}

fn snake<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Every tool call of a thread, in record order.
pub async fn tool_calls(store: &Store, thread_id: &str) -> Result<Vec<ToolCallRow>, StoreError> {
    let items = store.thread_items(thread_id).await?;
    let mut rows: Vec<ToolCallRow> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for item in &items {
        for entry in entries(item) {
            match entry {
                RecordEntry::Assistant { tool_calls, .. } => {
                    for call in tool_calls {
                        at.insert(call.id.clone(), rows.len());
                        rows.push(ToolCallRow {
                            message_id: item.message_id.to_string(),
                            tool_call_id: call.id,
                            parent_id: crate::shown_parent(item).map(str::to_owned),
                            depth: item.depth,
                            tool: call.name,
                            arguments: preview(&call.arguments),
                            result_preview: String::new(),
                            status: "unfinished".to_owned(),
                            approval_status: snake(&ApprovalStatus::NotRequired),
                            started_at: 0.0,
                            duration_ms: 0.0,
                        });
                    }
                }
                RecordEntry::ToolResult {
                    tool_call_id,
                    result,
                    is_error,
                    metadata,
                    ..
                } => {
                    let Some(&i) = at.get(&tool_call_id) else {
                        continue;
                    };
                    let row = &mut rows[i];
                    row.result_preview = preview(&result);
                    match metadata {
                        Some(m) => {
                            row.status = snake(&m.status);
                            row.approval_status = snake(&m.approval_status);
                            row.started_at = m.started_at;
                            row.duration_ms = m.execution_time_ms;
                        }
                        None => {
                            let status = if is_error {
                                ToolResultStatus::Error
                            } else {
                                ToolResultStatus::Success
                            };
                            row.status = snake(&status);
                        }
                    }
                }
                RecordEntry::User { .. }
                | RecordEntry::Subtask { .. }
                | RecordEntry::Plan { .. }
                | RecordEntry::Node { .. }
                | RecordEntry::Summary { .. } => {}
            }
        }
    }
    Ok(rows)
}
