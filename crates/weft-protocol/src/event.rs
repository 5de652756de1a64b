//! Server → client frames: turn events carry `thread_id` and `seq` in a shared envelope.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::metadata::ToolResultMetadata;
use crate::tree::ExecutionTreeSnapshot;
use crate::types::{MessageContent, PermissionMode, ToolCategory};

/// One outbound frame: an event plus the thread and per-thread sequence it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerFrame {
    /// Shared by every frame of the thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<std::sync::Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(flatten)]
    pub event: ServerEvent,
}

impl ServerFrame {
    /// A frame outside any thread (errors, pong).
    pub fn bare(event: ServerEvent) -> Self {
        ServerFrame {
            thread_id: None,
            seq: None,
            event,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    Start,
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetReason {
    Subtasks,
    LlmCalls,
    ToolCalls,
    WallClock,
    Tokens,
    Bytes,
    Cost,
    Depth,
    Iterations,
    /// The prompt passed the agent's context limit (`budget_awareness = "limit:<n>"`).
    Context,
}

impl BudgetReason {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetReason::Subtasks => "subtasks",
            BudgetReason::LlmCalls => "llm_calls",
            BudgetReason::ToolCalls => "tool_calls",
            BudgetReason::WallClock => "wall_clock",
            BudgetReason::Tokens => "tokens",
            BudgetReason::Bytes => "bytes",
            BudgetReason::Cost => "cost",
            BudgetReason::Depth => "depth",
            BudgetReason::Iterations => "iterations",
            BudgetReason::Context => "context",
        }
    }
}

/// Stable machine words for `error.code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidJson,
    UnknownCommand,
    InvalidField,
    Unauthorized,
    Forbidden,
    ThreadNotFound,
    TurnInProgress,
    UnknownMode,
    UnsupportedRoute,
    ProviderError,
    RateLimited,
    TooLarge,
    InvalidGraph,
    WorkflowNotFound,
    AgentNotFound,
    AssetNotFound,
    MessageNotFound,
    CollectionNotFound,
    CollectionExists,
    DocumentRejected,
    WorkflowsDisabled,
    Internal,
}

/// A number that serializes as an integer when it is whole (`200`, not `200.0`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Amount(pub f64);

impl Serialize for Amount {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.fract() == 0.0 && self.0.abs() < 9.0e15 {
            s.serialize_i64(self.0 as i64)
        } else {
            s.serialize_f64(self.0)
        }
    }
}

impl schemars::JsonSchema for Amount {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Amount".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "number"})
    }
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        f64::deserialize(d).map(Amount)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerEvent {
    Chunk {
        content: String,
        #[serde(default)]
        done: bool,
        #[serde(default)]
        parent_id: Option<String>,
        #[serde(default)]
        depth: u32,
    },
    /// The model's reasoning ("thinking") as it streams, apart from its answer; a client
    /// may show it or ignore it.
    Reasoning {
        content: String,
        #[serde(default)]
        parent_id: Option<String>,
        #[serde(default)]
        depth: u32,
    },
    ToolCallUpdate {
        tool_call_id: String,
        name: String,
        status: ToolCallStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        args: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        #[serde(default)]
        parent_id: Option<String>,
        #[serde(default)]
        depth: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Box<ToolResultMetadata>>,
    },
    ToolApprovalRequest {
        tool_call_id: String,
        name: String,
        args: Value,
        category: ToolCategory,
        /// Schema-only arguments the model sent with the call (never passed to the tool).
        #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
        injected_args: serde_json::Map<String, Value>,
        #[serde(default)]
        parent_id: Option<String>,
        #[serde(default)]
        depth: u32,
    },
    /// A previously requested approval is no longer pending (answered, released or timed out).
    ToolApprovalResolved {
        tool_call_id: String,
        decision: crate::control::ApprovalOutcome,
    },
    BudgetExceeded {
        reason: BudgetReason,
        limit: Amount,
        observed: Amount,
        /// Whether the whole turn ends; depth and sub-level iteration limits only fail a subtask.
        #[serde(default = "yes")]
        ends_turn: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_id: Option<String>,
        #[serde(default, skip_serializing_if = "is_zero")]
        depth: u32,
    },
    CostSummary {
        llm_calls: u64,
        tool_calls: u64,
        input_tokens: u64,
        output_tokens: u64,
        cost_usd: f64,
    },
    Message {
        message: StoredMessage,
    },
    /// A client-run (`ui_*`) tool call for the client to carry out and answer with `tool_result`.
    ToolCall {
        tool_call_id: String,
        name: String,
        args: Value,
        parent_id: Option<String>,
        depth: u32,
    },
    /// Around the planner pre-pass: `started`, then `done` with the plan or `failed`. A tool
    /// that plans (`build_workflow`) sends them too, with its call as `parent_id`.
    PlanningUpdate {
        status: String,
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_id: Option<String>,
    },
    /// A tool reports how far it has got (only when the agent's `emit_mcp_progress`).
    McpProgress {
        tool_call_id: String,
        progress: Amount,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<Amount>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default)]
        parent_id: Option<String>,
        #[serde(default)]
        depth: u32,
    },
    /// A workflow run's state (route 1, or `run_workflow` nested under its tool call).
    JobUpdate {
        job_id: String,
        workflow_id: String,
        /// `running`, `completed`, `failed`, `cancelled`.
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_id: Option<String>,
        #[serde(default, skip_serializing_if = "is_zero")]
        depth: u32,
    },
    /// One node of a workflow run: `running`, `completed`, `failed`, `skipped`.
    NodeUpdate {
        job_id: String,
        node_id: String,
        node_type: String,
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result_preview: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_id: Option<String>,
        #[serde(default, skip_serializing_if = "is_zero")]
        depth: u32,
    },
    /// The turn for this thread has started (tells a client the id of a new thread).
    TurnStarted {
        message_id: String,
        permission_mode: PermissionMode,
        mode: String,
    },
    /// The thread's turn was taken up again after the server running it stopped: it goes on
    /// from its last completed round. `content` is its answer so far; it replaces what the
    /// client showed (text of a round that was cut is streamed again).
    TurnResumed {
        message_id: String,
        content: String,
        permission_mode: PermissionMode,
        mode: String,
    },
    Error {
        code: ErrorCode,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    Pong,
}

fn yes() -> bool {
    true
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ServerEvent {
    pub fn error(code: ErrorCode, message: impl Into<String>, request_id: Option<String>) -> Self {
        ServerEvent::Error {
            code,
            message: message.into(),
            request_id,
        }
    }
}

/// A persisted message as clients see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoredMessage {
    pub id: String,
    pub role: String,
    pub content: MessageContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_tree: Option<std::sync::Arc<ExecutionTreeSnapshot>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Assistant messages: `running`, `completed`, `budget_exceeded`, `cancelled`,
    /// `provider_error`, `interrupted`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Assistant messages: how the turn ran (`agent`, `plan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    pub created_at: String,
}
