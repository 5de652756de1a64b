//! What a turn is given ([`TurnSpec`]) and what it hands back ([`TurnOutcome`], how it
//! ended, its model calls).

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use weft_protocol::{AgentConfig, ExecutionTreeSnapshot};

use crate::artifacts::Artifacts;
use crate::budget::{BudgetTrip, UsageTotals};
use crate::cost::RateCard;
use crate::events::EventSink;
use crate::gate::PermissionGate;
use crate::memory::AgentMemory;
use crate::message::ChatMessage;
use crate::provider::Provider;
use crate::record::Recorder;
use crate::toolbelt::Toolbelt;
use crate::tree::ToolCallRecord;

/// Everything a turn needs. The history ends with the new user message.
#[derive(Clone)]
pub struct TurnSpec {
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub system_prompt: String,
    pub history: Vec<ChatMessage>,
    pub toolbelt: Toolbelt,
    pub config: Arc<AgentConfig>,
    pub gate: PermissionGate,
    pub rate_card: Arc<RateCard>,
    pub events: EventSink,
    /// Cancelling this stops the turn at its next await.
    pub cancel: CancellationToken,
    pub memory: AgentMemory,
    /// The user the turn runs for (tools see it).
    pub user_id: Arc<str>,
    /// The user's workspace.
    pub workspace_root: Option<Arc<Path>>,
    /// Receives every round as it completes (the conversation record).
    pub recorder: Arc<dyn Recorder>,
    /// The planner pre-pass, when the agent plans before it acts.
    pub planner: Option<PlannerSpec>,
    /// The model's context window in tokens (budget awareness reads it).
    pub context_window: u64,
    /// Where results over `tool_result_max_bytes` are kept whole; none: they are only cut.
    pub artifacts: Option<Arc<dyn Artifacts>>,
}

/// The planner pre-pass: its model and prompt.
#[derive(Clone)]
pub struct PlannerSpec {
    pub provider: Arc<dyn Provider>,
    pub model: String,
    /// The planner's system prompt; empty: the built-in one.
    pub instructions: String,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    Completed,
    BudgetExceeded(BudgetTrip),
    Cancelled,
    ProviderError(String),
    /// `tool_error_mode = "abort"` and a tool failed.
    ToolAborted(String),
    /// A tool reported a fatal error, or the mode could not run.
    Failed(String),
}

/// One provider call, for accounting (provider and model are the turn's).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCallRecord {
    pub depth: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    pub duration_ms: f64,
    pub error: Option<String>,
}

/// What a turn produced, whatever way it ended.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    /// Every piece of root-level text streamed during the turn, in order (partial text included).
    pub text: String,
    pub end: TurnEnd,
    pub tree: ExecutionTreeSnapshot,
    /// One record per tree node, same order.
    pub tool_calls: Vec<ToolCallRecord>,
    pub totals: UsageTotals,
    pub provider: String,
    pub model: String,
    pub model_calls: Vec<ModelCallRecord>,
    /// The root history after the turn: the input history plus every message the turn added.
    pub history: Vec<ChatMessage>,
    /// The planner's plan, when the agent plans first.
    pub plan: Option<String>,
    /// Media the answer carries after its text (generated images and audio).
    pub attachments: Vec<weft_protocol::ContentPart>,
}

