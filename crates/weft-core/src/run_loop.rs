//! The unified loop, one function for every depth: budget check → provider call → dispatch
//! the tool calls → append results → again, until a text-only answer.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use weft_protocol::{BudgetReason, ServerEvent, ToolErrorMode, ToolResultStatus};

use crate::awareness;
use crate::budget::BudgetTrip;
use crate::compact::{self, Unfit};
use crate::dispatch::{dispatch, maybe_ran, runs_again, CallResult, Effect};
use crate::level::Level;
use crate::message::{ChatMessage, Role, ToolCallRequest};
use crate::pace;
use crate::prompts;
use crate::record::{identify, job_parent, Call};
use crate::repetition::RepetitionGuard;
use crate::resume::{ChildEnded, CutCall};
use crate::sample::{sample, SampleError};
use crate::spec::TurnEnd;
use crate::turn::Turn;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LevelEnd {
    /// A text-only answer: the text of that final response.
    Answer(String),
    /// A structured subtask finished via `finish_subtask`.
    Structured(Value),
    /// This level failed (iteration limit, schema not satisfied, provider error in a subtask).
    Failed(String),
    /// The turn is stopping (cancel, budget, abort).
    Stopped,
}

pub(crate) struct LevelResult {
    pub end: LevelEnd,
    /// All text streamed at this level, partial text included.
    pub all_text: String,
    pub history: Vec<ChatMessage>,
}

/// Run the loop at one level. Boxed because subtasks recurse into it.
pub(crate) fn run_level(
    turn: Arc<Turn>,
    level: Level,
    history: Vec<ChatMessage>,
) -> BoxFuture<'static, LevelResult> {
    async move {
        let mut history = history;
        let start = starting_point(&turn, &level, &mut history);
        let mut history = Arc::new(history);
        let mut all_text = start.text;
        let mut guard = RepetitionGuard::new(turn.config.max_identical_calls);
        if start.resumed {
            guard.replay(completed_calls(&history, !start.cut.is_empty()));
        }
        let end = match start.ended {
            Some(end) => end,
            // A cut round is settled on the heap (a resumed turn's, once): its future would
            // otherwise size every level's.
            None if !start.cut.is_empty() => {
                let settled = settle_cut_round(&turn, &level, start.cut, &mut history, &mut guard);
                match Box::pin(settled).await {
                    Some(end) => end,
                    None => drive(&turn, &level, &mut history, &mut all_text, guard).await,
                }
            }
            None => drive(&turn, &level, &mut history, &mut all_text, guard).await,
        };
        let history = Arc::try_unwrap(history).unwrap_or_else(|shared| (*shared).clone());
        LevelResult {
            end,
            all_text,
            history,
        }
    }
    .boxed()
}

/// Where a level starts: afresh, or (a resumed turn's root, a cut subtask) with the text it
/// had streamed, its cut round, or the end it had reached.
#[derive(Default)]
struct StartingPoint {
    /// The level goes on from a former life's record.
    resumed: bool,
    text: String,
    cut: Vec<CutCall>,
    ended: Option<LevelEnd>,
}

/// The calls of a resumed level's completed rounds, in order: those of its responses after
/// its last user message, its cut round's response (the last one, when `cut`) left out.
fn completed_calls(history: &[ChatMessage], cut: bool) -> impl Iterator<Item = &ToolCallRequest> {
    let start = history
        .iter()
        .rposition(|m| m.role == Role::User)
        .map_or(0, |i| i + 1);
    let mut responses: Vec<&ChatMessage> = history[start..]
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .collect();
    if cut {
        responses.pop();
    }
    responses.into_iter().flat_map(|m| m.tool_calls.iter())
}

/// The level's starting point; a cut subtask's rounds join its `history` (a resumed root's
/// are in it already).
fn starting_point(turn: &Turn, level: &Level, history: &mut Vec<ChatMessage>) -> StartingPoint {
    if level.is_root() {
        return turn
            .take_resume()
            .map(|r| StartingPoint {
                resumed: true,
                text: r.text,
                cut: r.cut,
                ended: None,
            })
            .unwrap_or_default();
    }
    // Keyed by its place in the record (a parallel job's names its job).
    let Some(child) = level.place().parent_id.and_then(|id| turn.take_child(id)) else {
        return StartingPoint::default();
    };
    history.extend(child.tail);
    StartingPoint {
        resumed: true,
        text: child.text,
        cut: child.cut,
        ended: child.ended.map(|ended| match ended {
            ChildEnded::Answer(text) => LevelEnd::Answer(text),
            ChildEnded::Structured(payload) => LevelEnd::Structured(payload),
        }),
    }
}

/// A resumed turn's cut round, settled before its next model call: the calls that run
/// again run, the others get a result saying they may have run; all their results go on
/// record and into the history, in the order the calls were emitted.
async fn settle_cut_round(
    turn: &Arc<Turn>,
    level: &Level,
    cut: Vec<CutCall>,
    history: &mut Arc<Vec<ChatMessage>>,
    guard: &mut RepetitionGuard,
) -> Option<LevelEnd> {
    if cut.is_empty() {
        return None;
    }
    for c in &cut {
        if let Some(child) = &c.child {
            turn.stash_child(&c.call.wire_id, (**child).clone());
        }
        for (job, child) in &c.jobs {
            turn.stash_child(&job_parent(&c.call.wire_id, *job), child.clone());
        }
    }
    let (again, settled): (Vec<_>, Vec<_>) = cut.iter().partition(|c| runs_again(level, c));
    let again: Vec<Call> = again.into_iter().map(|c| c.call.clone()).collect();
    let mut ran = dispatch(turn, level, &again, guard).await.into_iter();
    let mut settled = settled.into_iter().map(|c| maybe_ran(turn, level, &c.call));
    let results: Vec<CallResult> = cut
        .iter()
        .filter_map(|c| {
            if again.iter().any(|a| a.wire_id == c.call.wire_id) {
                ran.next()
            } else {
                settled.next()
            }
        })
        .collect();
    take_results(turn, level, results, history, &mut 0, None)
}

async fn drive(
    turn: &Arc<Turn>,
    level: &Level,
    history: &mut Arc<Vec<ChatMessage>>,
    all_text: &mut String,
    mut guard: RepetitionGuard,
) -> LevelEnd {
    let config = turn.config.clone();
    let mut schema_failures = 0u32;
    let mut iterations = 0u32;
    loop {
        if iterations > 0 {
            pace::between_rounds(turn.pace.as_deref()).await;
        } else {
            pace::before_first_round(turn.pace.as_deref()).await;
        }
        if turn.is_stopped() {
            return LevelEnd::Stopped;
        }
        if iterations >= config.iterations_per_level() {
            return iteration_limit(turn, level, iterations + 1);
        }
        iterations += 1;

        match compact::fit(turn, level, history).await {
            Ok(()) => {}
            Err(Unfit::Stopped) => return LevelEnd::Stopped,
            Err(Unfit::TooLarge(trip)) => return context_exceeded(turn, level, trip, all_text),
        }
        let sampled = match sample(turn, level, history.clone(), all_text).await {
            Ok(sampled) => sampled,
            Err(SampleError::Stopped) => return LevelEnd::Stopped,
            Err(SampleError::Provider(message)) if level.is_root() => {
                turn.stop(TurnEnd::ProviderError(message));
                return LevelEnd::Stopped;
            }
            Err(SampleError::Provider(message)) => return LevelEnd::Failed(message),
        };
        let taken = history
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()));
        let calls = identify(sampled.tool_calls, taken);
        if !level.quiet {
            if !sampled.reasoning.is_empty() {
                turn.recorder.reasoning(level.place(), &sampled.reasoning);
            }
            turn.recorder
                .assistant(level.place(), &sampled.text, &calls);
        }
        let advise = turn.context.per_message();
        let mut surfaced = sampled.text.clone();
        if advise {
            surfaced.push_str(&awareness::advisory(turn, sampled.usage));
        }
        if calls.is_empty() {
            Arc::make_mut(history).push(ChatMessage::assistant(surfaced, Vec::new()));
            if level.output_schema.is_some() && !turn.is_stopped() {
                Arc::make_mut(history).push(ChatMessage::user(prompts::FINISH_SUBTASK_REMINDER));
                continue;
            }
            return LevelEnd::Answer(sampled.text);
        }

        let results = dispatch(turn, level, &calls, &mut guard).await;
        // The response joins the history once its calls have run: its requests move there
        // rather than being copied for the length of the round. Room for it and its results,
        // no more: a turn holds its history while it runs, and doubling leaves up to half spare.
        let history_now = Arc::make_mut(history);
        history_now.reserve_exact(1 + results.len());
        history_now.push(ChatMessage::assistant(
            surfaced,
            calls.into_iter().map(|c| c.request).collect(),
        ));
        let advisory = advise.then(|| awareness::advisory(turn, sampled.usage));
        if let Some(end) = take_results(
            turn,
            level,
            results,
            history,
            &mut schema_failures,
            advisory,
        ) {
            return end;
        }
    }
}

/// A round's results: on record, into the history (each with the budget advisory, when
/// there is one), and what they do to the level (a finished subtask, too many schema
/// failures, a fatal error, an abort).
fn take_results(
    turn: &Turn,
    level: &Level,
    results: Vec<CallResult>,
    history: &mut Arc<Vec<ChatMessage>>,
    schema_failures: &mut u32,
    advisory: Option<String>,
) -> Option<LevelEnd> {
    let config = &turn.config;
    if !level.quiet {
        let record: Vec<_> = results.iter().map(CallResult::recorded).collect();
        turn.recorder.results(level.place(), &record);
    }
    let mut finished = None;
    let mut abort = None;
    for result in &results {
        match &result.effect {
            Effect::Finish(payload) if finished.is_none() => finished = Some(payload.clone()),
            Effect::SchemaInvalid(detail) => {
                *schema_failures += 1;
                if *schema_failures > config.max_schema_retries {
                    return Some(LevelEnd::Failed(schema_not_satisfied(
                        detail,
                        *schema_failures,
                    )));
                }
            }
            Effect::Fatal(message) => turn.stop(TurnEnd::Failed(message.clone())),
            _ => {}
        }
        if result.status == ToolResultStatus::Error
            && config.tool_error_mode == ToolErrorMode::Abort
            && abort.is_none()
        {
            abort = Some(format!("tool `{}` failed: {}", result.name, result.content));
        }
    }
    let history = Arc::make_mut(history);
    for result in results {
        let mut content = result.content;
        if let Some(advisory) = &advisory {
            content.push_str(advisory);
        }
        history.push(ChatMessage::tool_result(
            result.call_id,
            content,
            result.is_error,
        ));
    }
    if let Some(payload) = finished {
        return Some(LevelEnd::Structured(payload));
    }
    if let Some(message) = abort {
        turn.stop(TurnEnd::ToolAborted(message));
        return Some(LevelEnd::Stopped);
    }
    None
}

/// At the root an iteration-limit trip ends the turn; in a subtask it is that subtask's error.
fn iteration_limit(turn: &Turn, level: &Level, observed: u32) -> LevelEnd {
    let max = turn.config.iterations_per_level();
    let trip = BudgetTrip {
        reason: BudgetReason::Iterations,
        limit: f64::from(max),
        observed: f64::from(observed),
    };
    if level.is_root() {
        turn.trip(trip);
        return LevelEnd::Stopped;
    }
    if !level.quiet {
        turn.emit_budget_exceeded(&trip, false, level.parent_id.clone(), level.depth);
    }
    if level.output_schema.is_some() {
        return LevelEnd::Failed(schema_not_satisfied(
            "finish_subtask was never called with a valid payload",
            0,
        ));
    }
    LevelEnd::Failed(prompts::iteration_limit(max))
}

/// The prompt cannot fit the context limit: a deterministic answer instead of another call.
/// At the root it is the turn's answer (status `budget_exceeded`, reason `context`);
/// elsewhere it is that level's error.
fn context_exceeded(
    turn: &Turn,
    level: &Level,
    trip: BudgetTrip,
    all_text: &mut String,
) -> LevelEnd {
    let message = prompts::context_limit_reached(
        trip.limit as u64,
        trip.observed as u64,
        turn.context.window,
    );
    if !level.is_root() {
        if !level.quiet {
            turn.emit_budget_exceeded(&trip, false, level.parent_id.clone(), level.depth);
        }
        return LevelEnd::Failed(message);
    }
    if !all_text.is_empty() {
        all_text.push_str("\n\n");
    }
    all_text.push_str(&message);
    turn.recorder.text(level.place(), &message);
    turn.events.emit(ServerEvent::Chunk {
        content: message,
        done: false,
        parent_id: None,
        depth: 0,
    });
    turn.trip(trip);
    LevelEnd::Stopped
}

fn schema_not_satisfied(detail: &str, attempts: u32) -> String {
    json!({"error": "schema_not_satisfied", "detail": detail, "attempts": attempts}).to_string()
}
