//! Writing a finished turn: the assistant message with its tree, usage and cost, one audit
//! row per tool call and per model call.

use serde_json::json;
use weft_core::{TurnEnd, TurnOutcome};
use weft_protocol::{
    ExecutionTreeSnapshot, MessageContent, PermissionMode, StoredMessage, ToolResultStatus,
};
use weft_store::{now_ms, MessageRow, ModelCallRow, NewMessage, Store, StoreError, ToolCallRow};

/// Identifies the turn being written.
pub struct TurnRecord<'a> {
    pub thread_id: &'a str,
    pub message_id: &'a str,
    pub user_id: &'a str,
    pub permission_mode: PermissionMode,
}

pub fn end_status(end: &TurnEnd) -> &'static str {
    match end {
        TurnEnd::Completed => "completed",
        TurnEnd::BudgetExceeded(_) => "budget_exceeded",
        TurnEnd::Cancelled => "cancelled",
        TurnEnd::ProviderError(_) => "provider_error",
        TurnEnd::ToolAborted(_) => "tool_aborted",
        TurnEnd::Failed(_) => "failed",
    }
}

fn snake<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

pub async fn persist_turn(
    store: &Store,
    record: &TurnRecord<'_>,
    outcome: &TurnOutcome,
) -> Result<NewMessage, StoreError> {
    let message = NewMessage {
        id: record.message_id.to_owned(),
        thread_id: record.thread_id.to_owned(),
        role: "assistant".to_owned(),
        content: json!(outcome.text),
        execution_tree: serde_json::to_value(&outcome.tree).ok(),
        permission_mode: Some(record.permission_mode.as_str().to_owned()),
        status: end_status(&outcome.end).to_owned(),
        input_tokens: outcome.totals.input_tokens as i64,
        output_tokens: outcome.totals.output_tokens as i64,
        cost_usd: outcome.totals.cost_usd,
        created_at: now_ms(),
    };
    let tool_rows: Vec<ToolCallRow> = outcome
        .tree
        .nodes
        .iter()
        .zip(&outcome.tool_calls)
        .map(|(node, call)| ToolCallRow {
            thread_id: record.thread_id.to_owned(),
            message_id: record.message_id.to_owned(),
            tool_call_id: node.id.clone(),
            parent_id: node.parent_id.clone(),
            depth: i64::from(call.depth),
            tool: node.name.clone(),
            arguments: node.args_preview.clone().unwrap_or_default(),
            result_preview: node.result_preview.clone().unwrap_or_default(),
            status: snake(&call.status.unwrap_or(ToolResultStatus::Error)),
            approval_status: snake(&call.approval),
            started_at: call.started_at,
            duration_ms: node.duration_ms,
        })
        .collect();
    let now = now_ms();
    let model_rows: Vec<ModelCallRow> = outcome
        .model_calls
        .iter()
        .map(|c| ModelCallRow {
            thread_id: record.thread_id.to_owned(),
            message_id: record.message_id.to_owned(),
            user_id: record.user_id.to_owned(),
            provider: outcome.provider.clone(),
            model: outcome.model.clone(),
            depth: i64::from(c.depth),
            input_tokens: c.input_tokens as i64,
            output_tokens: c.output_tokens as i64,
            cost_usd: c.cost_usd,
            duration_ms: c.duration_ms,
            error: c.error.clone(),
            created_at: now,
        })
        .collect();
    store.record_turn(&message, &tool_rows, &model_rows).await?;
    Ok(message)
}

/// A stored message as clients see it.
pub fn to_wire(row: &MessageRow) -> StoredMessage {
    let content: MessageContent = serde_json::from_value(row.content.clone())
        .unwrap_or_else(|_| MessageContent::Text(row.content.to_string()));
    let execution_tree: Option<ExecutionTreeSnapshot> = row
        .execution_tree
        .as_ref()
        .and_then(|t| serde_json::from_value(t.clone()).ok());
    StoredMessage {
        id: row.id.clone(),
        role: row.role.clone(),
        content,
        permission_mode: row
            .permission_mode
            .as_deref()
            .and_then(PermissionMode::parse),
        execution_tree,
        input_tokens: (row.role == "assistant").then_some(row.input_tokens as u64),
        output_tokens: (row.role == "assistant").then_some(row.output_tokens as u64),
        cost_usd: (row.role == "assistant").then_some(row.cost_usd),
        created_at: rfc3339(row.created_at),
    }
}

pub fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}
