//! Writing a turn: its start (thread when new, user message, the assistant message as
//! `running`) and its end (the assistant message with tree, usage, cost and status, one row
//! per model call); stored messages in their wire shape.

use std::sync::Arc;

use serde_json::json;
use weft_core::{TurnEnd, TurnOutcome};
use weft_protocol::{ErrorCode, MessageContent, PermissionMode, StoredMessage};
use weft_store::{MessageRow, NewMessage, WriteOp};

/// Identifies the turn being written.
pub struct TurnRecord<'a> {
    pub thread_id: &'a str,
    pub message_id: &'a str,
    pub user_id: &'a str,
    pub permission_mode: PermissionMode,
    /// The assistant message's place in the thread.
    pub position: i64,
    pub started_at: i64,
    /// The agent the turn runs.
    pub agent: &'a str,
    /// The execution mode it runs in.
    pub mode: &'a str,
    /// The provider and model it runs on.
    pub provider: &'a str,
    pub model: &'a str,
}

/// What the assistant message's `metadata` says of the run: its agent, mode, provider and
/// model (a turn taken up after a crash runs on them again).
fn run_metadata(record: &TurnRecord<'_>) -> serde_json::Value {
    json!({"agent": record.agent, "mode": record.mode, "provider": record.provider, "model": record.model})
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

/// The error a turn that ended so tells its clients (its message keeps it in `metadata.error`,
/// so a reload still shows it).
pub fn end_error(end: &TurnEnd, provider: &str) -> Option<(ErrorCode, String)> {
    match end {
        TurnEnd::ProviderError(message) => Some((
            ErrorCode::ProviderError,
            format!("{provider} failed: {message}"),
        )),
        TurnEnd::ToolAborted(message) | TurnEnd::Failed(message) => {
            Some((ErrorCode::Internal, message.clone()))
        }
        TurnEnd::Completed | TurnEnd::BudgetExceeded(_) | TurnEnd::Cancelled => None,
    }
}

/// The assistant message as it stands while the turn runs.
pub fn running_message(record: &TurnRecord<'_>) -> NewMessage {
    NewMessage {
        id: record.message_id.to_owned(),
        thread_id: record.thread_id.to_owned(),
        role: "assistant".to_owned(),
        content: json!(""),
        execution_tree: None,
        permission_mode: Some(record.permission_mode.as_str().to_owned()),
        status: "running".to_owned(),
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        created_at: record.started_at,
        position: record.position,
        metadata: Some(run_metadata(record).to_string()),
    }
}

/// What a turn was started with beyond its thread, agent, mode and model, for a life that
/// takes it up after a crash: the chat context (the editor's open workflow), long-term
/// memory, the client's `ui_*` tools. `None` when it was all the defaults.
pub fn started_with(
    context: &weft_protocol::ChatContext,
    memory: bool,
    client_tools: &[weft_protocol::ClientTool],
) -> Option<serde_json::Value> {
    let mut with = serde_json::Map::new();
    if *context != weft_protocol::ChatContext::Thread {
        with.insert("chat_context".into(), json!(context));
    }
    if memory {
        with.insert("memory_enabled".into(), json!(true));
    }
    if !client_tools.is_empty() {
        with.insert("client_tools".into(), json!(client_tools));
    }
    (!with.is_empty()).then_some(serde_json::Value::Object(with))
}

/// The running message with what its turn was started with (see [`started_with`]) in its
/// metadata, as `started_with`.
pub fn running_message_with(
    record: &TurnRecord<'_>,
    with: Option<&serde_json::Value>,
) -> NewMessage {
    let mut message = running_message(record);
    if let Some(with) = with {
        let mut metadata = run_metadata(record);
        metadata["started_with"] = with.clone();
        message.metadata = Some(metadata.to_string());
    }
    message
}

/// The write that ends a turn, and the final message as clients see it (with the tree,
/// taken from the outcome; the row keeps none).
pub fn finish_turn(record: &TurnRecord<'_>, outcome: &mut TurnOutcome) -> (WriteOp, StoredMessage) {
    let tree = Arc::new(std::mem::take(&mut outcome.tree));
    let mut metadata = run_metadata(record);
    if let Some(plan) = &outcome.plan {
        metadata["plan"] = json!(plan);
    }
    if let Some((code, message)) = end_error(&outcome.end, record.provider) {
        metadata["error"] = json!({"code": code, "message": message});
    }
    if let TurnEnd::BudgetExceeded(trip) = &outcome.end {
        metadata["budget"] = json!({"reason": trip.reason, "limit": trip.limit});
    }
    // Text alone, or (with generated media) the text then the media as parts; the outcome
    // gives its text up rather than keep a copy while the end commits.
    let text = std::mem::take(&mut outcome.text);
    let content = if outcome.attachments.is_empty() {
        MessageContent::Text(text)
    } else {
        let mut parts = Vec::with_capacity(outcome.attachments.len() + 1);
        if !text.is_empty() {
            parts.push(weft_protocol::ContentPart::Text { text });
        }
        parts.extend(outcome.attachments.iter().cloned());
        MessageContent::Parts(parts)
    };
    let message = NewMessage {
        metadata: Some(metadata.to_string()),
        content: serde_json::to_value(&content).unwrap_or_else(|_| json!(content.text())),
        // The record holds every call and result: the tree is rebuilt from it when read
        // (`record::views::stored_message`), not written twice.
        execution_tree: None,
        status: end_status(&outcome.end).to_owned(),
        input_tokens: outcome.totals.input_tokens as i64,
        output_tokens: outcome.totals.output_tokens as i64,
        cost_usd: outcome.totals.cost_usd,
        ..running_message(record)
    };
    let wire = StoredMessage {
        id: message.id.clone(),
        role: message.role.clone(),
        content,
        permission_mode: Some(record.permission_mode),
        execution_tree: Some(tree),
        input_tokens: Some(outcome.totals.input_tokens),
        output_tokens: Some(outcome.totals.output_tokens),
        cost_usd: Some(outcome.totals.cost_usd),
        status: Some(message.status.clone()),
        metadata: Some(metadata),
        created_at: rfc3339(message.created_at),
    };
    (WriteOp::FinishTurn { message }, wire)
}

/// A stored message as clients see it.
pub fn to_wire(row: &MessageRow) -> StoredMessage {
    let content: MessageContent = serde_json::from_value(row.content.clone())
        .unwrap_or_else(|_| MessageContent::Text(row.content.to_string()));
    let execution_tree = row.execution_tree.clone();
    let assistant = row.role == "assistant";
    StoredMessage {
        id: row.id.clone(),
        role: row.role.clone(),
        content,
        permission_mode: row
            .permission_mode
            .as_deref()
            .and_then(PermissionMode::parse),
        execution_tree,
        input_tokens: assistant.then_some(row.input_tokens as u64),
        output_tokens: assistant.then_some(row.output_tokens as u64),
        cost_usd: assistant.then_some(row.cost_usd),
        status: assistant.then(|| row.status.clone()),
        metadata: row
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok()),
        created_at: rfc3339(row.created_at),
    }
}

pub use weft_store::rfc3339;
