//! Row types: what the store reads and writes, one struct per table.

use std::sync::Arc;

use serde_json::Value;
use sqlx::any::{AnyRow, AnyTypeInfoKind};
use sqlx::{Row, ValueRef as _};
use weft_protocol::ExecutionTreeSnapshot;

use crate::{get, parse_json, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct ThreadRow {
    pub id: String,
    pub owner: String,
    pub title: String,
    pub permission_mode: String,
    /// The agent the thread runs (absent: the server's default).
    pub agent: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The tools its user allowed for this chat (approved without asking in Default mode).
    pub allowed_tools: Vec<String>,
}

impl ThreadRow {
    pub(crate) const COLUMNS: &'static str =
        "id, owner, title, permission_mode, agent, created_at, updated_at, allowed_tools";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(ThreadRow {
            id: get(row, "id")?,
            owner: get(row, "owner")?,
            title: get(row, "title")?,
            permission_mode: get(row, "permission_mode")?,
            agent: get(row, "agent")?,
            created_at: get(row, "created_at")?,
            updated_at: get(row, "updated_at")?,
            allowed_tools: serde_json::from_str(&get::<String>(row, "allowed_tools")?)
                .map_err(|e| crate::StoreError::Corrupt(e.to_string()))?,
        })
    }
}

/// A message to insert; `content` is JSON. The runtime writes no tree (it rebuilds a turn's
/// from the record when read); rows written by earlier versions have theirs.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    pub id: String,
    pub thread_id: String,
    pub role: String,
    pub content: Value,
    pub execution_tree: Option<Arc<ExecutionTreeSnapshot>>,
    pub permission_mode: Option<String>,
    /// `running`, `completed`, `budget_exceeded`, `cancelled`, `provider_error`, `failed`,
    /// `interrupted`.
    pub status: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub created_at: i64,
    /// Order within the thread: a user message, then its turn's assistant message.
    pub position: i64,
    /// Run metadata of an assistant message (JSON text: the plan, the agent).
    pub metadata: Option<String>,
}

pub type MessageRow = NewMessage;

impl NewMessage {
    pub(crate) const COLUMNS: &'static str =
        "id, thread_id, role, content, execution_tree, permission_mode, status, \
         input_tokens, output_tokens, cost_usd, created_at, position, metadata";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        let content: String = get(row, "content")?;
        let tree: Option<String> = get(row, "execution_tree")?;
        Ok(NewMessage {
            id: get(row, "id")?,
            thread_id: get(row, "thread_id")?,
            role: get(row, "role")?,
            content: parse_json(&content)?,
            execution_tree: tree
                .as_deref()
                .map(|t| serde_json::from_str(t).map(Arc::new))
                .transpose()
                .map_err(|e| crate::StoreError::Corrupt(e.to_string()))?,
            permission_mode: get(row, "permission_mode")?,
            status: get(row, "status")?,
            input_tokens: get(row, "input_tokens")?,
            output_tokens: get(row, "output_tokens")?,
            cost_usd: get(row, "cost_usd")?,
            created_at: get(row, "created_at")?,
            position: get(row, "position")?,
            metadata: get(row, "metadata")?,
        })
    }
}

/// One item of the conversation record: an assistant message with its tool calls, or a tool
/// result, at any depth of a turn (`message_id` is the turn's assistant message).
#[derive(Debug, Clone, PartialEq)]
pub struct ItemRow {
    /// Shared by every row of a turn (and with its log): a burst keeps many rows waiting.
    pub thread_id: Arc<str>,
    pub message_id: Arc<str>,
    /// Order within the turn.
    pub position: i64,
    /// `assistant` (one response) or `tool_results` (a round's results, a JSON array). A
    /// row of the table may hold two items (see [`ItemRow::paired`]); the store's readers
    /// give them back as two.
    pub kind: String,
    /// The `run_subtask` call a sub-level item belongs to; `None` at the root.
    pub parent_id: Option<String>,
    pub depth: i64,
    /// The item as JSON text.
    pub body: String,
    pub created_at: i64,
}

impl ItemRow {
    pub(crate) const COLUMNS: &'static str =
        "thread_id, message_id, position, kind, parent_id, depth, body, created_at";

    /// The item's identity: its turn and its place in it.
    pub fn id(&self) -> String {
        format!("{}.{}", self.message_id, self.position)
    }

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(ItemRow {
            thread_id: get::<String>(row, "thread_id")?.into(),
            message_id: get::<String>(row, "message_id")?.into(),
            position: get(row, "position")?,
            kind: get(row, "kind")?,
            parent_id: get(row, "parent_id")?,
            depth: get(row, "depth")?,
            body: body_of(row)?,
            created_at: get(row, "created_at")?,
        })
    }
}

/// An item's body: its text, or on SQLite the text a packed body holds
/// ([`packed`](crate::packed)).
fn body_of(row: &AnyRow) -> Result<String> {
    let stored = row.try_get_raw("body")?;
    if stored.type_info().kind() == AnyTypeInfoKind::Blob {
        crate::packed::unpack(&get::<Vec<u8>>(row, "body")?)
    } else {
        get(row, "body")
    }
}

/// One provider call, for accounting.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCallRow {
    pub id: String,
    /// Shared by every row of a turn (and with its log).
    pub thread_id: Arc<str>,
    pub message_id: Arc<str>,
    pub user_id: Arc<str>,
    pub provider: String,
    pub model: String,
    pub depth: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Tool calls the response asked for.
    pub tool_calls: i64,
    pub cost_usd: f64,
    pub duration_ms: f64,
    pub error: Option<String>,
    pub created_at: i64,
}

impl ModelCallRow {
    pub(crate) const COLUMNS: &'static str =
        "id, thread_id, message_id, user_id, provider, model, depth, input_tokens, \
         output_tokens, tool_calls, cost_usd, duration_ms, error, created_at";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(ModelCallRow {
            id: get(row, "id")?,
            thread_id: get::<String>(row, "thread_id")?.into(),
            message_id: get::<String>(row, "message_id")?.into(),
            user_id: get::<String>(row, "user_id")?.into(),
            provider: get(row, "provider")?,
            model: get(row, "model")?,
            depth: get(row, "depth")?,
            input_tokens: get(row, "input_tokens")?,
            output_tokens: get(row, "output_tokens")?,
            tool_calls: get(row, "tool_calls")?,
            cost_usd: get(row, "cost_usd")?,
            duration_ms: get(row, "duration_ms")?,
            error: get(row, "error")?,
            created_at: get(row, "created_at")?,
        })
    }
}

/// An approval request and its outcome: `pending`, `approved`, `rejected`, `timed_out`,
/// `expired` (the server stopped while it was pending).
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
    /// The schema-only arguments the model sent with the call (JSON object text).
    pub injected_args: Option<String>,
}

impl ApprovalRow {
    pub(crate) const COLUMNS: &'static str =
        "id, thread_id, tool, arguments, status, created_at, decided_at, injected_args";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(ApprovalRow {
            id: get(row, "id")?,
            thread_id: get(row, "thread_id")?,
            tool: get(row, "tool")?,
            arguments: get(row, "arguments")?,
            status: get(row, "status")?,
            created_at: get(row, "created_at")?,
            decided_at: get(row, "decided_at")?,
            injected_args: get(row, "injected_args")?,
        })
    }
}

/// A stored agent: its owner, name and config (JSON text).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRow {
    pub owner: String,
    pub name: String,
    pub config: String,
    pub created_at: i64,
    pub updated_at: i64,
}

impl AgentRow {
    pub(crate) const COLUMNS: &'static str = "owner, name, config, created_at, updated_at";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(AgentRow {
            owner: get(row, "owner")?,
            name: get(row, "name")?,
            config: get(row, "config")?,
            created_at: get(row, "created_at")?,
            updated_at: get(row, "updated_at")?,
        })
    }
}

/// An asset's index entry; its bytes are in the object store under `<owner>/<id>`.
#[derive(Debug, Clone, PartialEq)]
pub struct AssetRow {
    pub id: String,
    pub owner: String,
    /// `artifact` (an offloaded tool result), `image`, `audio`.
    pub kind: String,
    pub media_type: String,
    pub size: i64,
    /// Where it came from (for an artifact, the tool call's id).
    pub source: Option<String>,
    /// SHA-256 of the bytes, hex (none for assets kept before it was recorded).
    pub sha256: Option<String>,
    pub created_at: i64,
}

impl AssetRow {
    pub(crate) const COLUMNS: &'static str =
        "id, owner, kind, media_type, size, source, sha256, created_at";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(AssetRow {
            id: get(row, "id")?,
            owner: get(row, "owner")?,
            kind: get(row, "kind")?,
            media_type: get(row, "media_type")?,
            size: get(row, "size")?,
            source: get(row, "source")?,
            sha256: get(row, "sha256")?,
            created_at: get(row, "created_at")?,
        })
    }

    /// The object store key of its bytes.
    pub fn key(&self) -> String {
        format!("{}/{}", self.owner, self.id)
    }
}

/// A saved workflow; `graph` is JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowRow {
    pub id: String,
    pub owner: String,
    pub name: String,
    pub description: String,
    pub graph: String,
    pub created_at: i64,
    pub updated_at: i64,
}

impl WorkflowRow {
    pub(crate) const COLUMNS: &'static str =
        "id, owner, name, description, graph, created_at, updated_at";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(WorkflowRow {
            id: get(row, "id")?,
            owner: get(row, "owner")?,
            name: get(row, "name")?,
            description: get(row, "description")?,
            graph: get(row, "graph")?,
            created_at: get(row, "created_at")?,
            updated_at: get(row, "updated_at")?,
        })
    }
}

/// One run of a workflow; `params`, `outputs` and `nodes` are JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowRunRow {
    pub id: String,
    pub workflow_id: String,
    pub owner: String,
    /// The thread it ran in (route 1), if any.
    pub thread_id: Option<String>,
    pub message_id: Option<String>,
    pub status: String,
    pub params: String,
    pub outputs: String,
    pub nodes: String,
    pub error: Option<String>,
    pub started_at: i64,
    pub finished_at: i64,
}

impl WorkflowRunRow {
    pub(crate) const COLUMNS: &'static str = "id, workflow_id, owner, thread_id, message_id, \
        status, params, outputs, nodes, error, started_at, finished_at";

    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(WorkflowRunRow {
            id: get(row, "id")?,
            workflow_id: get(row, "workflow_id")?,
            owner: get(row, "owner")?,
            thread_id: get(row, "thread_id")?,
            message_id: get(row, "message_id")?,
            status: get(row, "status")?,
            params: get(row, "params")?,
            outputs: get(row, "outputs")?,
            nodes: get(row, "nodes")?,
            error: get(row, "error")?,
            started_at: get(row, "started_at")?,
            finished_at: get(row, "finished_at")?,
        })
    }
}
