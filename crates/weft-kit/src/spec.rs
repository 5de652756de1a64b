//! What a turn is given ([`TurnSpec`]) and what it hands back ([`TurnOutcome`], how it
//! ended, its model calls).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use weft_protocol::{AgentConfig, ExecutionTreeSnapshot};

use crate::artifacts::Artifacts;
use crate::budget::{BudgetTrip, UsageTotals};
use crate::cost::RateCard;
use crate::events::EventSink;
use crate::gate::PermissionGate;
use crate::memory::AgentMemory;
use crate::message::ChatMessage;
use crate::pace::Pace;
use crate::provider::Provider;
use crate::record::Recorder;
use crate::resume::Resume;
use crate::toolbelt::Toolbelt;
use crate::tree::ToolCallRecord;

/// Everything a turn needs. The history ends with the new user message.
#[derive(Clone)]
pub struct TurnSpec {
    pub provider: Arc<dyn Provider>,
    pub model: String,
    /// Shared with the turn's root level (it is the same text unless a plan is added).
    pub system_prompt: Arc<str>,
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
    /// Where a turn taken up again after its process died starts from; `None`: a new turn.
    pub resume: Option<Resume>,
    /// What the turn waits for between rounds; `None`: it only yields.
    pub pace: Option<Arc<dyn Pace>>,
    /// The least time between two text chunks of one response: what the model streams
    /// meanwhile goes out together in the next. Zero: each piece as it comes.
    pub chunk_interval: Duration,
}

impl TurnSpec {
    /// A turn of `model` on `provider` under `config`; everything else at its default (no
    /// system prompt, history or tools, a gate in Default mode, no prices, nobody listening,
    /// nothing recorded, no user or workspace, a 128k-token context, no artifact store). Set
    /// the rest with the methods below.
    pub fn new(
        provider: Arc<dyn Provider>,
        model: impl Into<String>,
        config: Arc<AgentConfig>,
    ) -> TurnSpec {
        TurnSpec {
            provider,
            model: model.into(),
            system_prompt: Arc::from(""),
            history: Vec::new(),
            toolbelt: Toolbelt::default(),
            config,
            gate: PermissionGate::new(weft_protocol::PermissionMode::Default),
            rate_card: Arc::new(RateCard::new()),
            events: EventSink::detached(),
            cancel: CancellationToken::new(),
            memory: AgentMemory::new(),
            user_id: Arc::from(""),
            workspace_root: None,
            recorder: Arc::new(crate::record::NoRecord),
            planner: None,
            context_window: 128_000,
            artifacts: None,
            resume: None,
            pace: None,
            chunk_interval: Duration::ZERO,
        }
    }

    pub fn system_prompt(mut self, system_prompt: impl Into<Arc<str>>) -> TurnSpec {
        self.system_prompt = system_prompt.into();
        self
    }

    pub fn history(mut self, history: Vec<ChatMessage>) -> TurnSpec {
        self.history = history;
        self
    }

    pub fn toolbelt(mut self, toolbelt: Toolbelt) -> TurnSpec {
        self.toolbelt = toolbelt;
        self
    }

    pub fn gate(mut self, gate: PermissionGate) -> TurnSpec {
        self.gate = gate;
        self
    }

    pub fn rate_card(mut self, rate_card: Arc<RateCard>) -> TurnSpec {
        self.rate_card = rate_card;
        self
    }

    pub fn events(mut self, events: EventSink) -> TurnSpec {
        self.events = events;
        self
    }

    pub fn cancel(mut self, cancel: CancellationToken) -> TurnSpec {
        self.cancel = cancel;
        self
    }

    pub fn memory(mut self, memory: AgentMemory) -> TurnSpec {
        self.memory = memory;
        self
    }

    /// The user the turn runs for, and their workspace.
    pub fn user(mut self, user_id: &str, workspace_root: Option<Arc<Path>>) -> TurnSpec {
        self.user_id = Arc::from(user_id);
        self.workspace_root = workspace_root;
        self
    }

    pub fn recorder(mut self, recorder: Arc<dyn Recorder>) -> TurnSpec {
        self.recorder = recorder;
        self
    }

    pub fn planner(mut self, planner: Option<PlannerSpec>) -> TurnSpec {
        self.planner = planner;
        self
    }

    pub fn context_window(mut self, tokens: u64) -> TurnSpec {
        self.context_window = tokens;
        self
    }

    pub fn artifacts(mut self, artifacts: Option<Arc<dyn Artifacts>>) -> TurnSpec {
        self.artifacts = artifacts;
        self
    }

    /// Hold the turn back between rounds as `pace` says.
    pub fn pace(mut self, pace: Option<Arc<dyn Pace>>) -> TurnSpec {
        self.pace = pace;
        self
    }

    /// Send a response's text at most once per `interval` (the first piece at once, the last
    /// as soon as the response ends).
    pub fn chunk_interval(mut self, interval: Duration) -> TurnSpec {
        self.chunk_interval = interval;
        self
    }

    /// Take the turn up where it was cut (the history holds its completed rounds, and the
    /// cut round's response last when it has calls to settle).
    pub fn resume(mut self, resume: Option<Resume>) -> TurnSpec {
        self.resume = resume;
        self
    }
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
    /// Provider calls this run of the turn made (their records went to the recorder).
    pub model_calls: u32,
    /// The root history after the turn: the input history plus every message the turn added.
    pub history: Vec<ChatMessage>,
    /// The planner's plan, when the agent plans first.
    pub plan: Option<String>,
    /// Media the answer carries after its text (generated images and audio).
    pub attachments: Vec<weft_protocol::ContentPart>,
}
