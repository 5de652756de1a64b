//! `Turn`: the runtime state every depth of one turn shares — budget, gate, cancellation,
//! events, record, the first reason it stopped — and [`Recursion`], what the loop hands back
//! up for calls that recurse (sub-agents, nested call sites), so the loop's modules need not
//! know each other.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use weft_protocol::{AgentConfig, Amount, ServerEvent};

use crate::artifacts::Artifacts;
use crate::budget::{BudgetTrip, TurnBudget};
use crate::context::ContextBudget;
use crate::cost::RateCard;
use crate::events::EventSink;
use crate::gate::PermissionGate;
use crate::level::Level;
use crate::llm::Llm;
use crate::memory::AgentMemory;
use crate::message::ChatMessage;
use crate::pace::Pace;
use crate::record::{Call, ModelCallRecord, Recorder};
use crate::resume::{ChildResume, Resume};
use crate::scope::TurnScope;
use crate::spec::{TurnEnd, TurnOutcome, TurnSpec};
use crate::tool::NestedCalls;
use crate::toolbelt::Toolbelt;

/// Which delegation a call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delegation {
    /// `run_subtask`.
    Subtask,
    /// `run_parallel_subagents`.
    Parallel,
}

/// What dispatch hands back up: calls that run a child level, and call sites for tools that
/// make calls of their own. Implemented where the loop is (the `recursion` module).
pub(crate) trait Recursion: Send + Sync {
    /// Run `call` as a delegation; `Ok` its result, `Err` its error result.
    fn delegate<'a>(
        &'a self,
        turn: &'a Arc<Turn>,
        level: &'a Level,
        call: &'a Call,
        kind: Delegation,
        args: &'a Value,
    ) -> BoxFuture<'a, Result<String, String>>;

    /// Where the tool of call `parent_id` makes calls of its own, at `depth`.
    fn nested(
        &self,
        turn: &Arc<Turn>,
        parent_id: &str,
        depth: u32,
        toolbelt: &Toolbelt,
    ) -> Arc<dyn NestedCalls>;
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
    /// What the turn waits for between rounds.
    pub pace: Option<Arc<dyn Pace>>,
    /// The least time between two text chunks of one response.
    pub chunk_interval: std::time::Duration,
    pub context: ContextBudget,
    /// Calls that recurse go back up through it.
    pub recursion: &'static dyn Recursion,
    /// Child of the caller's token: cancelled by the caller, a budget trip or a fatal error.
    pub cancel: CancellationToken,
    end: OnceLock<TurnEnd>,
    locks: Mutex<HashMap<&'static str, Arc<tokio::sync::RwLock<()>>>>,
    /// Provider calls this run made (their records go to the recorder, not kept here).
    model_calls: AtomicU32,
    /// A resumed turn's text so far and cut round, taken by the root level when it starts.
    resume: Mutex<Option<Resume>>,
    /// Cut subtasks waiting to go on, by the id of the call that runs them.
    children: Mutex<HashMap<String, ChildResume>>,
    /// When each call the turn was still asking about before its process died was asked
    /// (Unix ms): its approval's timeout counts from then.
    asked_before: HashMap<String, i64>,
}

impl Turn {
    pub(crate) fn new(spec: &TurnSpec, recursion: &'static dyn Recursion) -> Self {
        for (key, value) in spec.resume.iter().flat_map(|r| &r.memory) {
            spec.memory.set(key.clone(), value.clone());
        }
        Turn {
            recursion,
            llm: Llm::new(spec.provider.clone(), &spec.model),
            config: spec.config.clone(),
            budget: budget(spec),
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
            pace: spec.pace.clone(),
            chunk_interval: spec.chunk_interval,
            context: ContextBudget::new(&spec.config, &spec.model, spec.context_window),
            cancel: spec.cancel.child_token(),
            end: OnceLock::new(),
            locks: Mutex::new(HashMap::new()),
            model_calls: AtomicU32::new(0),
            asked_before: spec
                .resume
                .iter()
                .flat_map(Resume::all_cut)
                .filter_map(|c| Some((c.call.wire_id.clone(), c.asked_at_ms?)))
                .collect(),
            resume: Mutex::new(spec.resume.clone()),
            children: Mutex::new(HashMap::new()),
        }
    }

    /// A resumed turn's starting point, once (the root level takes it).
    pub fn take_resume(&self) -> Option<Resume> {
        self.resume.lock().take()
    }

    /// The subtask run by call `call_id` goes on from `child` when it starts.
    pub(crate) fn stash_child(&self, call_id: &str, child: ChildResume) {
        self.children.lock().insert(call_id.to_owned(), child);
    }

    /// Whether the subtask run by call `call_id` goes on from a record that was already
    /// charged to the subtask budget.
    pub(crate) fn child_charged(&self, call_id: &str) -> bool {
        self.children.lock().get(call_id).is_some_and(|c| c.charged)
    }

    /// Where the subtask run by call `call_id` goes on from, once.
    pub(crate) fn take_child(&self, call_id: &str) -> Option<ChildResume> {
        self.children.lock().remove(call_id)
    }

    /// When the user was first asked about call `id`, if that was before a restart.
    pub fn asked_before(&self, id: &str) -> Option<i64> {
        self.asked_before.get(id).copied()
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

    /// The read-write lock of a resource calls claim, shared by every depth of the turn.
    pub fn lock(&self, resource: &'static str) -> Arc<tokio::sync::RwLock<()>> {
        self.locks.lock().entry(resource).or_default().clone()
    }

    pub fn record_model_call(&self, record: ModelCallRecord) {
        self.recorder.model_call(&record);
        self.model_calls.fetch_add(1, Ordering::Relaxed);
    }
}

/// The turn's budget: fresh, or charged with what a resumed turn had spent.
fn budget(spec: &TurnSpec) -> TurnBudget {
    let mut budget = TurnBudget::new(&spec.config);
    if let Some(resume) = &spec.resume {
        budget.restore(&resume.spent);
    }
    budget
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
        model_calls: turn.model_calls.load(Ordering::Relaxed),
        history,
        plan: None,
        attachments: Vec::new(),
    }
}
