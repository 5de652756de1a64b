//! Row types: what the store reads and writes, one struct per table.

use serde_json::Value;
use sqlx::any::AnyRow;

use crate::{get, parse_json, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct ThreadRow {
    pub id: String,
    pub owner: String,
    pub title: String,
    pub permission_mode: String,
    pub created_at: i64,
    pub updated_at: i64,
}

impl ThreadRow {
    pub(crate) const COLUMNS: &'static str =
        "id, owner, title, permission_mode, created_at, updated_at";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(ThreadRow {
            id: get(row, "id")?,
            owner: get(row, "owner")?,
            title: get(row, "title")?,
            permission_mode: get(row, "permission_mode")?,
            created_at: get(row, "created_at")?,
            updated_at: get(row, "updated_at")?,
        })
    }
}

/// A message to insert; `content` and `execution_tree` are JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    pub id: String,
    pub thread_id: String,
    pub role: String,
    pub content: Value,
    pub execution_tree: Option<Value>,
    pub permission_mode: Option<String>,
    /// `completed`, `budget_exceeded`, `cancelled`, `provider_error`, `failed`.
    pub status: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub created_at: i64,
}

pub type MessageRow = NewMessage;

impl NewMessage {
    pub(crate) const COLUMNS: &'static str =
        "id, thread_id, role, content, execution_tree, permission_mode, status, \
         input_tokens, output_tokens, cost_usd, created_at";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        let content: String = get(row, "content")?;
        let tree: Option<String> = get(row, "execution_tree")?;
        Ok(NewMessage {
            id: get(row, "id")?,
            thread_id: get(row, "thread_id")?,
            role: get(row, "role")?,
            content: parse_json(&content)?,
            execution_tree: tree.as_deref().map(parse_json).transpose()?,
            permission_mode: get(row, "permission_mode")?,
            status: get(row, "status")?,
            input_tokens: get(row, "input_tokens")?,
            output_tokens: get(row, "output_tokens")?,
            cost_usd: get(row, "cost_usd")?,
            created_at: get(row, "created_at")?,
        })
    }
}

/// One executed (or refused) tool call, for the audit log.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRow {
    pub thread_id: String,
    pub message_id: String,
    pub tool_call_id: String,
    pub parent_id: Option<String>,
    pub depth: i64,
    pub tool: String,
    pub arguments: String,
    pub result_preview: String,
    pub status: String,
    pub approval_status: String,
    pub started_at: f64,
    pub duration_ms: f64,
}

impl ToolCallRow {
    pub(crate) const COLUMNS: &'static str =
        "thread_id, message_id, tool_call_id, parent_id, depth, tool, arguments, \
         result_preview, status, approval_status, started_at, duration_ms";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(ToolCallRow {
            thread_id: get(row, "thread_id")?,
            message_id: get(row, "message_id")?,
            tool_call_id: get(row, "tool_call_id")?,
            parent_id: get(row, "parent_id")?,
            depth: get(row, "depth")?,
            tool: get(row, "tool")?,
            arguments: get(row, "arguments")?,
            result_preview: get(row, "result_preview")?,
            status: get(row, "status")?,
            approval_status: get(row, "approval_status")?,
            started_at: get(row, "started_at")?,
            duration_ms: get(row, "duration_ms")?,
        })
    }
}

/// One provider call, for accounting.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCallRow {
    pub thread_id: String,
    pub message_id: String,
    pub user_id: String,
    pub provider: String,
    pub model: String,
    pub depth: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub duration_ms: f64,
    pub error: Option<String>,
    pub created_at: i64,
}

impl ModelCallRow {
    pub(crate) const COLUMNS: &'static str =
        "thread_id, message_id, user_id, provider, model, depth, input_tokens, \
         output_tokens, cost_usd, duration_ms, error, created_at";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(ModelCallRow {
            thread_id: get(row, "thread_id")?,
            message_id: get(row, "message_id")?,
            user_id: get(row, "user_id")?,
            provider: get(row, "provider")?,
            model: get(row, "model")?,
            depth: get(row, "depth")?,
            input_tokens: get(row, "input_tokens")?,
            output_tokens: get(row, "output_tokens")?,
            cost_usd: get(row, "cost_usd")?,
            duration_ms: get(row, "duration_ms")?,
            error: get(row, "error")?,
            created_at: get(row, "created_at")?,
        })
    }
}

/// An approval request and its outcome: `pending`, `approved`, `rejected`, `timed_out`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRow {
    /// The tool-call id.
    pub id: String,
    pub thread_id: String,
    pub tool: String,
    pub arguments: String,
    pub status: String,
    pub created_at: i64,
    pub decided_at: Option<i64>,
}

impl ApprovalRow {
    pub(crate) const COLUMNS: &'static str =
        "id, thread_id, tool, arguments, status, created_at, decided_at";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(ApprovalRow {
            id: get(row, "id")?,
            thread_id: get(row, "thread_id")?,
            tool: get(row, "tool")?,
            arguments: get(row, "arguments")?,
            status: get(row, "status")?,
            created_at: get(row, "created_at")?,
            decided_at: get(row, "decided_at")?,
        })
    }
}
