//! Dispatch one response's tool calls: preflight in emitted order (parse, lookup, validate,
//! repetition), then parallel-safe calls concurrently (at most `max_parallel_per_turn`) and
//! the rest serially; calls whose claims conflict (one writes what the other touches) take
//! effect in the order the model emitted them. Every call gets exactly one result, whatever
//! happens.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use futures::FutureExt;
use serde_json::{Map, Value};
use tracing::Instrument;
use weft_protocol::{
    ApprovalDecision, ApprovalOutcome, ApprovalStatus, ServerEvent, ToolCallStatus, ToolCategory,
    ToolParallelism, ToolResultMetadata, ToolResultStatus,
};

use crate::clock::{millis, unix_now, unix_now_ms};
use crate::gate::{Answer, GateDecision};
use crate::level::Level;
use crate::prompts;
use crate::record::{ApprovalRequest, Call, RecordedResult};
use crate::repetition::RepetitionGuard;
use crate::resume::CutCall;
use crate::telemetry;
use crate::tool::{claims_conflict, Access, Claim, ToolContext, ToolError};
use crate::toolbelt::ToolEntry;
use crate::truncate::{cut_with_marker, truncate_result};
use crate::turn::{Delegation, Turn};
use crate::validate::{compact, compact_sharing, parse_arguments, prepare_parsed};

/// What the loop must do beyond appending a call's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    None,
    /// `finish_subtask` with a valid payload: the level ends with it.
    Finish(Value),
    /// `finish_subtask` with an invalid payload (counts toward `max_schema_retries`).
    SchemaInvalid(String),
    /// The tool reported a fatal error: the turn ends.
    Fatal(String),
}

/// The result of one tool call, as it goes back to the model.
pub(crate) struct CallResult {
    pub wire_id: String,
    /// The call's id in history.
    pub call_id: String,
    pub name: String,
    pub content: String,
    pub is_error: bool,
    pub status: ToolResultStatus,
    pub effect: Effect,
    pub metadata: ToolResultMetadata,
}

impl CallResult {
    pub fn recorded(&self) -> RecordedResult<'_> {
        RecordedResult {
            id: &self.wire_id,
            call_id: &self.call_id,
            name: &self.name,
            content: &self.content,
            is_error: self.is_error,
            metadata: &self.metadata,
        }
    }
}

enum Action {
    /// Settled at preflight (unknown tool, bad arguments, repetition, depth limit).
    Refuse(String),
    Finish(Result<Value, String>),
    Delegate(Delegation, Value),
    Tool {
        entry: Arc<ToolEntry>,
        args: Value,
    },
}

struct Planned<'a> {
    call: &'a Call,
    /// Arguments as shown on the card (parsed when possible, else the raw text).
    shown_args: Value,
    /// The same as compact JSON (the model's own text when it is that): the tree's preview.
    shown_text: Arc<str>,
    injected: Map<String, Value>,
    action: Action,
}

impl Planned<'_> {
    /// Whether the call may run beside its siblings. A tool that is not parallel-safe joins
    /// the serial queue, so such calls run in the order the model emitted them (an approval
    /// wait included).
    fn runs_concurrently(&self) -> bool {
        match &self.action {
            Action::Tool { entry, .. } => entry.tool.parallel_safe(),
            Action::Delegate(..) => true,
            Action::Refuse(_) | Action::Finish(_) => true,
        }
    }

    /// What the call's tool claims (see [`crate::tool::Claim`]).
    fn claim(&self) -> Option<Claim> {
        match &self.action {
            Action::Tool { entry, .. } => entry.tool.claim(),
            _ => None,
        }
    }

    fn does_work(&self) -> bool {
        matches!(self.action, Action::Tool { .. } | Action::Delegate(..))
    }
}

pub(crate) async fn dispatch(
    turn: &Arc<Turn>,
    level: &Level,
    calls: &[Call],
    guard: &mut RepetitionGuard,
) -> Vec<CallResult> {
    if !level.quiet {
        turn.events.expect_calls(calls.len());
    }
    let mut planned: Vec<Option<Planned<'_>>> = calls
        .iter()
        .map(|call| Some(preflight(turn, level, call, guard)))
        .collect();

    let mut concurrent = Vec::new();
    let mut serial = Vec::new();
    let mut working = 0usize;
    for (i, p) in planned.iter().enumerate() {
        // Every slot holds its plan until the plan runs, below.
        let Some(p) = p else { continue };
        // A model without parallel tool calls gets its results one at a time, as it asked.
        let parallel = turn.config.tool_parallelism == ToolParallelism::Parallel
            && level.llm.capabilities.parallel_tool_calls
            && p.runs_concurrently();
        let fits = !p.does_work() || working < turn.config.max_parallel_per_turn;
        // A call that conflicts with one queued before it queues behind it.
        let after_serial = serial
            .iter()
            .any(|&j: &usize| claims_conflict(claim_of(&planned[j]), p.claim()));
        if parallel && fits && !after_serial {
            working += usize::from(p.does_work());
            concurrent.push(i);
        } else {
            serial.push(i);
        }
    }

    let mut results: Vec<Option<CallResult>> = (0..planned.len()).map(|_| None).collect();
    // Each call's plan is moved into its run: the card's arguments and the tool's go
    // where they are used, not copied there.
    let batch: Vec<Planned<'_>> = concurrent
        .iter()
        .filter_map(|&i| planned[i].take())
        .collect();
    let batch = run_batch(turn, level, batch).await;
    for (i, result) in concurrent.into_iter().zip(batch) {
        results[i] = Some(result);
    }
    for i in serial {
        if let Some(p) = planned[i].take() {
            // Boxed: a call's future is far larger than the rest of the round's, and kept
            // inline it would size every turn's future for as long as the turn lives.
            results[i] = Some(Box::pin(execute(turn, level, p)).await);
        }
    }
    results.into_iter().flatten().collect()
}

fn claim_of(planned: &Option<Planned<'_>>) -> Option<Claim> {
    planned.as_ref().and_then(Planned::claim)
}

/// Run a batch of calls concurrently, each one that conflicts with an earlier one (by their
/// claims) once that one has finished, so they take effect in the order the model emitted
/// them; the results in the batch's order.
async fn run_batch(turn: &Arc<Turn>, level: &Level, batch: Vec<Planned<'_>>) -> Vec<CallResult> {
    let claims: Vec<Option<Claim>> = batch.iter().map(Planned::claim).collect();
    let (finished, done): (Vec<_>, Vec<_>) = (0..batch.len())
        .map(|_| {
            let (finished, done) = tokio::sync::oneshot::channel::<()>();
            (finished, done.shared())
        })
        .unzip();
    let runs = batch
        .into_iter()
        .zip(finished)
        .enumerate()
        .map(|(k, (p, finished))| {
            let earlier: Vec<_> = (0..k)
                .filter(|&j| claims_conflict(claims[j], claims[k]))
                .map(|j| done[j].clone())
                .collect();
            async move {
                // A dropped sender (its call finished) ends the wait as a sent one does.
                join_all(earlier).await;
                let result = execute(turn, level, p).await;
                let _ = finished.send(());
                result
            }
        });
    join_all(runs).await
}

/// One call on its own (a call made from code): preflight under the level's guard, then run.
pub(crate) async fn dispatch_one(
    turn: &Arc<Turn>,
    level: &Level,
    call: &Call,
    guard: &parking_lot::Mutex<RepetitionGuard>,
) -> CallResult {
    let planned = preflight(turn, level, call, &mut guard.lock());
    execute(turn, level, planned).await
}

fn preflight<'a>(
    turn: &Turn,
    level: &Level,
    call: &'a Call,
    guard: &mut RepetitionGuard,
) -> Planned<'a> {
    let request = &call.request;
    let parsed = parse_arguments(&request.arguments);
    let shown_args = match &parsed {
        Ok(map) => Value::Object(map.clone()),
        Err(_) => Value::String(request.arguments.to_string()),
    };
    // Written out once: the card's preview, and the repetition guard's key below.
    let shown_text = compact_sharing(&shown_args, &request.arguments);
    let guard_key = shown_text.clone();
    let planned = move |action, injected| Planned {
        call,
        shown_args,
        shown_text,
        injected,
        action,
    };
    let name = request.name.as_str();

    if name == prompts::FINISH_SUBTASK {
        if let Some(schema) = &level.output_schema {
            let verdict = parsed.and_then(|map| {
                let payload = Value::Object(map);
                let errors: Vec<String> = schema
                    .validator
                    .iter_errors(&payload)
                    .map(|e| e.to_string())
                    .collect();
                if errors.is_empty() {
                    Ok(payload)
                } else {
                    Err(errors.join("; "))
                }
            });
            return planned(Action::Finish(verdict), Map::new());
        }
    }
    let delegates = name == prompts::RUN_SUBTASK || name == prompts::RUN_PARALLEL_SUBAGENTS;
    if delegates && level.depth >= turn.config.max_depth {
        let trip = crate::budget::BudgetTrip {
            reason: weft_protocol::BudgetReason::Depth,
            limit: f64::from(turn.config.max_depth),
            observed: f64::from(level.depth + 1),
        };
        turn.emit_budget_exceeded(&trip, false, level.parent_id.clone(), level.depth);
        return planned(
            Action::Refuse(prompts::depth_limit(turn.config.max_depth)),
            Map::new(),
        );
    }
    let Some(entry) = level.toolbelt.entry(name) else {
        let mut available = level.toolbelt.names();
        if level.output_schema.is_some() {
            available.push(prompts::FINISH_SUBTASK);
        }
        return planned(
            Action::Refuse(prompts::unknown_tool(name, &available)),
            Map::new(),
        );
    };
    // Parsed once: the card's copy above, the tool's here.
    let prepared = parsed.and_then(|map| {
        prepare_parsed(
            map,
            &entry.schema,
            entry.validator.as_ref(),
            turn.config.arg_validation,
            &turn.config.injected_tool_args,
        )
    });
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(detail) => {
            return planned(
                Action::Refuse(prompts::invalid_arguments(name, &detail)),
                Map::new(),
            )
        }
    };
    // The guard keys on what the tool gets: the card's text unless something was split off
    // or coerced.
    let runaway = if prepared.as_sent {
        guard.is_runaway(name, &guard_key)
    } else {
        guard.is_runaway(name, &compact(&prepared.args))
    };
    if runaway {
        return planned(
            Action::Refuse(prompts::REPETITION_RESULT.to_owned()),
            prepared.injected,
        );
    }
    let action = match name {
        prompts::RUN_SUBTASK => Action::Delegate(Delegation::Subtask, prepared.args),
        prompts::RUN_PARALLEL_SUBAGENTS => Action::Delegate(Delegation::Parallel, prepared.args),
        _ => Action::Tool {
            entry: entry.clone(),
            args: prepared.args,
        },
    };
    planned(action, prepared.injected)
}

/// What one executed call came to, before truncation and reporting.
struct Settled {
    content: String,
    status: ToolResultStatus,
    approval: ApprovalStatus,
    effect: Effect,
    /// The tool ran and may have changed something: its result goes on record before the
    /// client sees it.
    had_effect: bool,
}

impl Settled {
    fn ok(content: String) -> Self {
        Settled {
            content,
            status: ToolResultStatus::Success,
            approval: ApprovalStatus::NotRequired,
            effect: Effect::None,
            had_effect: false,
        }
    }

    fn error(content: String) -> Self {
        Settled {
            content,
            status: ToolResultStatus::Error,
            approval: ApprovalStatus::NotRequired,
            effect: Effect::None,
            had_effect: false,
        }
    }

    fn with_approval(mut self, approval: ApprovalStatus) -> Self {
        self.approval = approval;
        self
    }
}

/// Run one planned call under its `execute_tool` span (a subtask's work nests under it).
async fn execute(turn: &Arc<Turn>, level: &Level, planned: Planned<'_>) -> CallResult {
    let call = planned.call;
    let span =
        telemetry::tool_call_span(&call.request.name, &call.wire_id, &call.request.arguments);
    let result = execute_call(turn, level, planned)
        .instrument(span.clone())
        .await;
    telemetry::tool_call_ended(&span, &result.metadata, &result.content);
    result
}

async fn execute_call(turn: &Arc<Turn>, level: &Level, planned: Planned<'_>) -> CallResult {
    let Planned {
        call,
        shown_args,
        shown_text,
        injected,
        action,
    } = planned;
    let name = &call.request.name;
    let started_at = unix_now();
    let started = Instant::now();
    if !level.quiet {
        let start = ServerEvent::ToolCallUpdate {
            tool_call_id: call.wire_id.clone(),
            name: name.clone(),
            status: ToolCallStatus::Start,
            args: Some(shown_args),
            result: None,
            is_error: None,
            parent_id: level.parent_id.clone(),
            depth: level.depth,
            metadata: None,
        };
        turn.events.emit_call_start(start, shown_text);
    }

    // Every call the model emits counts, refused ones included.
    let settled = if turn.is_stopped() {
        Settled::error(prompts::STOPPED_RESULT.to_owned())
    } else if let Some(stop) = take_tool_call(turn) {
        stop
    } else {
        match action {
            Action::Refuse(message) => Settled::error(message),
            Action::Finish(Ok(payload)) => Settled {
                effect: Effect::Finish(payload),
                ..Settled::ok("subtask finished".to_owned())
            },
            Action::Finish(Err(detail)) => {
                let message = prompts::schema_invalid(&detail);
                Settled {
                    effect: Effect::SchemaInvalid(detail),
                    ..Settled::error(message)
                }
            }
            Action::Delegate(kind, args) => {
                match turn
                    .recursion
                    .delegate(turn, level, call, kind, &args)
                    .await
                {
                    Ok(text) => Settled::ok(text),
                    Err(text) => Settled::error(text),
                }
            }
            Action::Tool { entry, args } => {
                run_gated(turn, level, call, &entry, args, &injected).await
            }
        }
    };

    let (content, offloaded) = fit_result(turn, call, settled.content).await;
    if let Err(trip) = turn.budget.record_result_bytes(content.len()) {
        turn.trip(trip);
    }
    let is_error = settled.status != ToolResultStatus::Success;
    let metadata = ToolResultMetadata {
        status: settled.status,
        started_at,
        completed_at: unix_now(),
        execution_time_ms: millis(started.elapsed()),
        approval_status: settled.approval,
        approval_id: (settled.approval != ApprovalStatus::NotRequired)
            .then(|| call.wire_id.clone()),
        injected_args: injected,
        offloaded_artifact_id: offloaded,
    };
    let mut result = CallResult {
        wire_id: call.wire_id.clone(),
        call_id: call.request.id.clone(),
        name: name.clone(),
        content,
        is_error,
        status: settled.status,
        effect: settled.effect,
        metadata,
    };
    if !level.quiet {
        if settled.had_effect {
            keep_effect_result(turn, level, &result).await;
        }
        emit_end(turn, level, &mut result);
    }
    result
}

/// A call's `end`: the result's id, name and content go out in the event and come back to
/// `result` once it is sent, rather than the event being sent copies of them.
fn emit_end(turn: &Turn, level: &Level, result: &mut CallResult) {
    let end = ServerEvent::ToolCallUpdate {
        tool_call_id: std::mem::take(&mut result.wire_id),
        name: std::mem::take(&mut result.name),
        status: ToolCallStatus::End,
        args: None,
        result: Some(std::mem::take(&mut result.content)),
        is_error: Some(result.is_error),
        parent_id: level.parent_id.clone(),
        depth: level.depth,
        metadata: Some(Box::new(result.metadata.clone())),
    };
    turn.events.emit_lent(&end);
    if let ServerEvent::ToolCallUpdate {
        tool_call_id,
        name,
        result: Some(content),
        ..
    } = end
    {
        result.wire_id = tool_call_id;
        result.name = name;
        result.content = content;
    }
}

/// The result of a call that may have changed something goes on record before the client
/// is told of it: what a client saw finish is never reported as "may have run" after a
/// restart. If it cannot be kept, the record has failed and the turn is stopping.
async fn keep_effect_result(turn: &Turn, level: &Level, result: &CallResult) {
    if let Err(e) = turn
        .recorder
        .effect_result(level.place(), &result.recorded())
        .await
    {
        tracing::warn!(call = %result.wire_id, error = %e, "a tool result could not be kept at once");
    }
}

/// Cut a result to `tool_result_max_bytes`; a longer one is first kept whole as an
/// artifact (when the turn has somewhere to keep it), and its marker says how to read it.
async fn fit_result(turn: &Turn, call: &Call, content: String) -> (String, Option<String>) {
    let max = turn.config.tool_result_max_bytes;
    if content.len() <= max {
        return (content, None);
    }
    let Some(artifacts) = &turn.artifacts else {
        return (truncate_result(content, max), None);
    };
    match artifacts
        .offload(&turn.user_id, &call.wire_id, &content)
        .await
    {
        Ok(id) => {
            let marker = prompts::offloaded_marker(content.len(), &id);
            (cut_with_marker(content, max, &marker), Some(id))
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot keep a large tool result");
            (truncate_result(content, max), None)
        }
    }
}

/// Charge one tool call to the budget; a trip stops the turn and settles the call.
fn take_tool_call(turn: &Turn) -> Option<Settled> {
    match turn.budget.take_tool_call() {
        Ok(()) => None,
        Err(trip) => {
            turn.trip(trip);
            Some(Settled::error(prompts::budget_stop(&trip.to_string())))
        }
    }
}

/// The permission gate, then the budget, then the tool itself.
async fn run_gated(
    turn: &Arc<Turn>,
    level: &Level,
    call: &Call,
    entry: &ToolEntry,
    args: Value,
    injected: &Map<String, Value>,
) -> Settled {
    let tool = &entry.tool;
    let hitl = turn.hitl.contains(tool.name());
    let approval = match turn.gate.decide(tool.name(), tool.category(), hitl) {
        GateDecision::Run => ApprovalStatus::NotRequired,
        GateDecision::Block => {
            return Settled {
                status: ToolResultStatus::Rejected,
                ..Settled::error(prompts::plan_mode_refusal(tool.name()))
            }
        }
        GateDecision::Ask if level.quiet => {
            return Settled {
                status: ToolResultStatus::Rejected,
                ..Settled::error(prompts::planner_cannot_ask(tool.name()))
            }
        }
        GateDecision::Ask => match ask(turn, level, call, entry, &args, injected, hitl).await {
            Ok(approval) => approval,
            Err(settled) => return settled,
        },
    };
    run_tool(turn, level, call, entry, args)
        .await
        .with_approval(approval)
}

/// Ask the user; `Ok` carries the approval, `Err` the settled refusal.
async fn ask(
    turn: &Turn,
    level: &Level,
    call: &Call,
    entry: &ToolEntry,
    args: &Value,
    injected: &Map<String, Value>,
    hitl: bool,
) -> Result<ApprovalStatus, Settled> {
    let name = entry.tool.name();
    let id = &call.wire_id;
    // Register before announcing, so an instant answer finds its waiter.
    let reply = turn.gate.request(id, name, hitl);
    let stored = turn.recorder.approval_requested(&ApprovalRequest {
        id,
        tool: name,
        args,
        injected,
    });
    // Asked only once it is on record: an answer may come after a restart.
    let kept = tokio::select! {
        biased;
        () = turn.cancel.cancelled() => Err(prompts::CANCELLED_RESULT.to_owned()),
        kept = stored => kept.map_err(|e| format!("error: the approval could not be kept: {e}")),
    };
    if let Err(message) = kept {
        turn.gate.withdraw(id);
        return Err(Settled::error(message).with_approval(ApprovalStatus::Rejected));
    }
    turn.events.emit(ServerEvent::ToolApprovalRequest {
        tool_call_id: id.clone(),
        name: name.to_owned(),
        args: args.clone(),
        category: entry.tool.category(),
        injected_args: injected.clone(),
        parent_id: level.parent_id.clone(),
        depth: level.depth,
    });
    // Asked before a restart: the timeout counts from the first time.
    let asked_ago = turn.asked_before(id).map_or(0, |at| {
        u64::try_from(unix_now_ms().saturating_sub(at)).unwrap_or(0)
    });
    let timeout = turn
        .config
        .approval_timeout_ms
        .map(|ms| std::time::Duration::from_millis(ms.saturating_sub(asked_ago)));
    // A person's time is not the turn's: the wall clock stops while they decide.
    let person = turn.budget.wait_for_person();
    let waited = tokio::select! {
        biased;
        () = turn.cancel.cancelled() => None,
        () = sleep_or_forever(timeout) => Some(None),
        answer = reply => Some(Some(answer.unwrap_or(Answer {
            decision: ApprovalDecision::Deny,
            reason: None,
        }))),
    };
    drop(person);
    let resolved = |outcome: ApprovalOutcome| {
        turn.recorder.approval_resolved(id, outcome);
        turn.events.emit(ServerEvent::ToolApprovalResolved {
            tool_call_id: id.clone(),
            decision: outcome,
        });
    };
    match waited {
        None => {
            turn.gate.withdraw(id);
            resolved(ApprovalOutcome::Cancelled);
            Err(Settled::error(prompts::CANCELLED_RESULT.to_owned())
                .with_approval(ApprovalStatus::Rejected))
        }
        Some(None) => {
            turn.gate.withdraw(id);
            resolved(ApprovalOutcome::TimedOut);
            Err(Settled {
                status: ToolResultStatus::TimedOut,
                ..Settled::error(prompts::approval_timed_out(name))
                    .with_approval(ApprovalStatus::TimedOut)
            })
        }
        Some(Some(Answer {
            decision: ApprovalDecision::Deny,
            reason,
        })) => {
            resolved(ApprovalOutcome::Deny);
            Err(Settled {
                status: ToolResultStatus::Rejected,
                ..Settled::error(prompts::denied(name, reason.as_deref()))
            }
            .with_approval(ApprovalStatus::Rejected))
        }
        Some(Some(answer)) => {
            resolved(answer.decision.into());
            Ok(ApprovalStatus::Approved)
        }
    }
}

/// A claim's lock, held while its call runs.
enum Held {
    Read(#[allow(dead_code)] tokio::sync::OwnedRwLockReadGuard<()>),
    Write(#[allow(dead_code)] tokio::sync::OwnedRwLockWriteGuard<()>),
}

async fn sleep_or_forever(timeout: Option<std::time::Duration>) {
    match timeout {
        Some(t) => tokio::time::sleep(t).await,
        None => std::future::pending().await,
    }
}

/// Run the tool holding its claim's lock (if it claims a resource), racing cancellation;
/// panics become errors.
async fn run_tool(
    turn: &Arc<Turn>,
    level: &Level,
    call: &Call,
    entry: &ToolEntry,
    args: Value,
) -> Settled {
    let tool = &entry.tool;
    let _held = match tool.claim() {
        Some(claim) => {
            let lock = turn.lock(claim.resource);
            let taken = async {
                match claim.access {
                    Access::Read => Held::Read(lock.read_owned().await),
                    Access::Write => Held::Write(lock.write_owned().await),
                }
            };
            tokio::select! {
                biased;
                () = turn.cancel.cancelled() => return Settled::error(prompts::CANCELLED_RESULT.to_owned()),
                held = taken => Some(held),
            }
        }
        None => None,
    };
    let had_effect = match keep_before_effect(turn, tool.as_ref()).await {
        Ok(had_effect) => had_effect,
        Err(settled) => return settled,
    };
    let ctx = ToolContext {
        tool_call_id: call.wire_id.clone(),
        parent_id: level.parent_id.clone(),
        depth: level.depth,
        user_id: turn.user_id.clone(),
        workspace_root: turn.workspace_root.clone(),
        result_max_bytes: turn.config.tool_result_max_bytes,
        read_max_bytes: turn.config.read_file_max_bytes,
        cancel: turn.cancel.clone(),
        events: turn.events.clone(),
        memory: turn.memory.clone(),
        scope: turn.scope.clone(),
        emit_progress: turn.config.emit_mcp_progress && !level.quiet,
        nested: Some(
            turn.recursion
                .nested(turn, &call.wire_id, level.depth + 1, &level.toolbelt),
        ),
    };
    let running = AssertUnwindSafe(tool.call(args, &ctx)).catch_unwind();
    let limit = turn
        .config
        .tool_timeout_ms
        .map(std::time::Duration::from_millis);
    // The tool is polled first; cancellation only registers a waiter while it is pending.
    let settled = tokio::select! {
        biased;
        outcome = running => match outcome {
            Ok(Ok(text)) => Settled::ok(text),
            Ok(Err(ToolError::Model(message))) => Settled::error(message),
            Ok(Err(ToolError::Fatal(message))) => Settled { effect: Effect::Fatal(message.clone()), ..Settled::error(message) },
            Err(_panic) => Settled::error(prompts::tool_panicked(tool.name())),
        },
        () = turn.cancel.cancelled() => Settled::error(prompts::CANCELLED_RESULT.to_owned()),
        () = sleep_or_forever(limit) => Settled {
            status: ToolResultStatus::TimedOut,
            ..Settled::error(prompts::tool_timed_out(tool.name(), limit.unwrap_or_default()))
        },
    };
    Settled {
        had_effect,
        ..settled
    }
}

/// A call that may change something waits until the response that asked for it is on
/// record, so a restart knows it may have run and never runs it again. `Ok(true)`: it may
/// change something and may run now; `Ok(false)`: it only reads or is idempotent.
async fn keep_before_effect(turn: &Turn, tool: &dyn crate::tool::Tool) -> Result<bool, Settled> {
    if tool.category() == ToolCategory::Read || tool.idempotent() {
        return Ok(false);
    }
    let stored = turn.recorder.before_effect();
    tokio::select! {
        biased;
        () = turn.cancel.cancelled() => Err(Settled::error(prompts::CANCELLED_RESULT.to_owned())),
        kept = stored => kept.map(|()| true).map_err(|e| {
            Settled::error(format!("error: not run, the call could not be recorded first: {e}"))
        }),
    }
}

/// Whether a call of a cut round runs again when its turn is taken up: it was waiting for
/// its approval, or its tool only reads or is idempotent (an unknown tool is refused again).
pub(crate) fn runs_again(level: &Level, cut: &CutCall) -> bool {
    let harmless = level
        .toolbelt
        .entry(&cut.call.request.name)
        .is_none_or(|entry| entry.tool.category() == ToolCategory::Read || entry.tool.idempotent());
    cut.runs_again(harmless)
}

/// The result of a cut round's call that may have run before the process died: it is not
/// run again; its card opens and closes with that result, and it counts as a call.
pub(crate) fn maybe_ran(turn: &Turn, level: &Level, call: &Call) -> CallResult {
    let name = call.request.name.clone();
    let content = prompts::MAYBE_RAN_RESULT.to_owned();
    if let Err(trip) = turn.budget.take_tool_call() {
        turn.trip(trip);
    }
    let metadata = ToolResultMetadata::not_run(unix_now());
    if !level.quiet {
        let args = parse_arguments(&call.request.arguments)
            .map(Value::Object)
            .unwrap_or_else(|_| Value::String(call.request.arguments.to_string()));
        for (status, args, result) in [
            (ToolCallStatus::Start, Some(args), None),
            (ToolCallStatus::End, None, Some(content.clone())),
        ] {
            let end = status == ToolCallStatus::End;
            turn.events.emit(ServerEvent::ToolCallUpdate {
                tool_call_id: call.wire_id.clone(),
                name: name.clone(),
                status,
                args,
                result,
                is_error: end.then_some(true),
                parent_id: level.parent_id.clone(),
                depth: level.depth,
                metadata: end.then(|| Box::new(metadata.clone())),
            });
        }
    }
    CallResult {
        wire_id: call.wire_id.clone(),
        call_id: call.request.id.clone(),
        name,
        content,
        is_error: true,
        status: ToolResultStatus::Error,
        effect: Effect::None,
        metadata,
    }
}
