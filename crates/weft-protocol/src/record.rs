//! The conversation record (what `GET /threads/{id}/items` and the trace return, and what is
//! stored per item): user messages, assistant messages with their tool calls, tool results,
//! and, in a trace, subtasks nested under the call that ran them.

use serde::{Deserialize, Serialize};

use crate::metadata::ToolResultMetadata;
use crate::types::MessageContent;

/// A tool call as the model emitted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RecordedCall {
    /// The server-unique id used on the wire (events, approvals, trace).
    pub id: String,
    /// The id the provider gave it, as replayed to the model in history.
    pub call_id: String,
    pub name: String,
    /// Raw JSON text of the arguments, exactly as emitted (it may be malformed).
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecordEntry {
    User {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        content: MessageContent,
    },
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        text: String,
        #[serde(default)]
        tool_calls: Vec<RecordedCall>,
        /// The response was still streaming when this was saved (a crash keeps it as is).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        partial: bool,
        /// The model's reasoning before this response, when it showed any (never sent back
        /// to a model).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    ToolResult {
        /// The wire id of the call this answers.
        tool_call_id: String,
        /// The provider's id of that call.
        call_id: String,
        name: String,
        /// The result as the model saw it (after truncation).
        result: String,
        is_error: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<ToolResultMetadata>,
    },
    /// The planner's plan for the turn, kept as soon as it was made (a turn taken up after a
    /// crash acts on it).
    Plan { plan: String },
    /// A node of the turn's workflow run: `started` (kept before a node that may act, such
    /// as a tool node, runs) or `completed` with its outputs. A run taken up after a crash
    /// goes on from its completed nodes and does not run a started one again.
    Node {
        node_id: String,
        status: NodeProgress,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outputs: Option<serde_json::Map<String, serde_json::Value>>,
    },
    /// Compaction (budget awareness): `summary` replaced the earlier conversation in the
    /// model's history, all but the newest `kept_messages` messages before this point.
    Summary { summary: String, kept_messages: u32 },
    /// In a trace: what a `run_subtask` (or sub-agent) call did, under that call's id.
    Subtask {
        tool_call_id: String,
        trace: Vec<RecordEntry>,
    },
}

/// How far a workflow node of a turn had got, as its record keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeProgress {
    Started,
    Completed,
}

/// One entry of a thread's whole record (`GET /threads/{id}/items`): its id, the turn it
/// belongs to (the assistant message; absent on user messages), when it was recorded, and the
/// entry itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RecordItem {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// The entry (its own `id` left out: the item's is the one).
    #[serde(flatten)]
    pub entry: RecordEntry,
}

/// The result given to a call a stopped server never answered.
pub const INTERRUPTED_RESULT: &str = "interrupted";
