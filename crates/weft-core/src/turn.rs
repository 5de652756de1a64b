//! One turn: its inputs (`TurnSpec`), shared runtime state (`Turn`), and what it hands back
//! (`TurnOutcome`). `run_classic_turn` runs the unified loop at depth 0 under the wall clock.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use weft_protocol::{AgentConfig, Amount, ExecutionTreeSnapshot, ServerEvent};

use crate::artifacts::Artifacts;
use crate::awareness::ContextBudget;
use crate::budget::{BudgetTrip, TurnBudget, UsageTotals};
use crate::cost::RateCard;
use crate::events::EventSink;
use crate::gate::PermissionGate;
use crate::memory::AgentMemory;
use crate::message::ChatMessage;
use crate::planner;
use crate::provider::Provider;
use crate::record::Recorder;
use crate::run_loop::{run_level, Level, LevelEnd};
use crate::sample::Llm;
use crate::scope::TurnScope;
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

/// Runtime state shared by every depth of one turn.
pub(crate) struct Turn {
    /// The executor's model.
    pub llm: Llm,
    pub config: Arc<AgentConfig>,
    pub budget: TurnBudget,
    pub gate: PermissionGate,
    pub hitl: HashSet<String>,
    pub rate_card: Arc<RateCard>,
    pub events: EventSink,
    pub memory: AgentMemory,
    /// Per-turn resources tools open, released when the turn is dropped.
    pub scope: TurnScope,
    pub user_id: Arc<str>,
    pub workspace_root: Option<Arc<Path>>,
    pub recorder: Arc<dyn Recorder>,
    pub artifacts: Option<Arc<dyn Artifacts>>,
    pub context: ContextBudget,
    /// Child of the caller's token: cancelled by the caller, a budget trip or a fatal error.
    pub cancel: CancellationToken,
    end: OnceLock<TurnEnd>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    model_calls: Mutex<Vec<ModelCallRecord>>,
}

impl Turn {
    pub(crate) fn new(spec: &TurnSpec) -> Self {
        Turn {
            llm: Llm::new(spec.provider.clone(), &spec.model),
            config: spec.config.clone(),
            budget: TurnBudget::new(&spec.config),
            gate: spec.gate.clone(),
            hitl: spec.config.hitl_tools.iter().cloned().collect(),
            rate_card: spec.rate_card.clone(),
            events: spec.events.clone(),
            memory: spec.memory.clone(),
            scope: TurnScope::new(),
            user_id: spec.user_id.clone(),
            workspace_root: spec.workspace_root.clone(),
            recorder: spec.recorder.clone(),
            artifacts: spec.artifacts.clone(),
            context: ContextBudget::new(&spec.config, &spec.model, spec.context_window),
            cancel: spec.cancel.child_token(),
            end: OnceLock::new(),
            locks: Mutex::new(HashMap::new()),
            model_calls: Mutex::new(Vec::new()),
        }
    }

    /// End the turn for `end` (the first reason wins) and cancel everything in flight.
    pub fn stop(&self, end: TurnEnd) {
        if let TurnEnd::BudgetExceeded(trip) = &end {
            if self.end.get().is_none() {
                self.emit_budget_exceeded(trip, true, None, 0);
            }
        }
        let _ = self.end.set(end);
        self.cancel.cancel();
    }

    pub fn trip(&self, trip: BudgetTrip) {
        self.stop(TurnEnd::BudgetExceeded(trip));
    }

    pub fn emit_budget_exceeded(
        &self,
        trip: &BudgetTrip,
        ends_turn: bool,
        parent_id: Option<String>,
        depth: u32,
    ) {
        self.events.emit(ServerEvent::BudgetExceeded {
            reason: trip.reason,
            limit: Amount(trip.limit),
            observed: Amount(trip.observed),
            ends_turn,
            parent_id,
            depth,
        });
    }

    pub fn is_stopped(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Why the turn stopped, if it did for a reason of its own.
    pub fn end(&self) -> Option<TurnEnd> {
        self.end.get().cloned()
    }

    /// The named exclusive lock, shared by every depth of the turn.
    pub fn lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    pub fn record_model_call(&self, record: ModelCallRecord) {
        self.model_calls.lock().push(record);
    }
}

/// Run one turn of the unified loop (the `classic` execution mode): the planner pre-pass
/// when the agent plans, then the loop at depth 0, under the wall clock.
pub async fn run_classic_turn(mut spec: TurnSpec) -> TurnOutcome {
    let turn = Arc::new(Turn::new(&spec));
    let history = std::mem::take(&mut spec.history);
    let deadline = tokio::time::Instant::from_std(turn.budget.deadline());
    let run = async {
        let plan = match &spec.planner {
            Some(planner) => planner::plan(&turn, planner, &history, &spec.toolbelt).await,
            None => None,
        };
        let root = Level::root(&turn, &spec, plan.as_deref());
        (run_level(turn.clone(), root, history).await, plan)
    };
    tokio::pin!(run);
    let (result, plan) = tokio::select! {
        result = &mut run => result,
        () = tokio::time::sleep_until(deadline) => {
            if let Err(trip) = turn.budget.check_wall_clock() {
                turn.trip(trip);
            }
            run.await
        }
    };
    let end = match turn.end.get() {
        Some(end) => end.clone(),
        None if spec.cancel.is_cancelled() => TurnEnd::Cancelled,
        None => match result.end {
            LevelEnd::Answer(_) | LevelEnd::Structured(_) => TurnEnd::Completed,
            LevelEnd::Failed(message) => TurnEnd::Failed(message),
            LevelEnd::Stopped => TurnEnd::Cancelled,
        },
    };
    let mut outcome = finish(&turn, end, result.all_text, result.history);
    outcome.plan = plan;
    outcome
}

/// Emit the cost summary and gather the outcome.
pub(crate) fn finish(
    turn: &Turn,
    end: TurnEnd,
    text: String,
    history: Vec<ChatMessage>,
) -> TurnOutcome {
    let totals = turn.budget.totals();
    turn.events.emit(ServerEvent::CostSummary {
        llm_calls: totals.llm_calls,
        tool_calls: totals.tool_calls,
        input_tokens: totals.input_tokens,
        output_tokens: totals.output_tokens,
        cost_usd: totals.cost_usd,
    });
    let (tree, tool_calls) = turn.events.take_tree();
    TurnOutcome {
        text,
        end,
        tree,
        tool_calls,
        totals,
        provider: turn.llm.provider.name().to_owned(),
        model: turn.llm.model.to_string(),
        model_calls: std::mem::take(&mut *turn.model_calls.lock()),
        history,
        plan: None,
        attachments: Vec::new(),
    }
}
