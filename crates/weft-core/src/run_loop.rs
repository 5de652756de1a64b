//! The unified loop, one function for every depth: budget check → provider call → dispatch
//! the tool calls → append results → again, until a text-only answer.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use weft_protocol::{BudgetReason, ToolErrorMode, ToolResultStatus};

use crate::budget::BudgetTrip;
use crate::dispatch::{dispatch, Effect};
use crate::message::ChatMessage;
use crate::prompts;
use crate::provider::ToolSpec;
use crate::repetition::RepetitionGuard;
use crate::sample::{sample, SampleError};
use crate::toolbelt::Toolbelt;
use crate::turn::{Turn, TurnEnd, TurnSpec};

/// The JSON Schema a structured subtask must satisfy, compiled once.
pub(crate) struct OutputSchema {
    pub validator: jsonschema::Validator,
}

/// One level of the recursion: its place in the tree, prompt and tools.
pub(crate) struct Level {
    pub depth: u32,
    /// The `run_subtask` call this level runs under; `None` at the root.
    pub parent_id: Option<String>,
    pub system: Arc<str>,
    pub toolbelt: Toolbelt,
    pub specs: Arc<[ToolSpec]>,
    pub output_schema: Option<OutputSchema>,
}

impl Level {
    pub fn root(turn: &Turn, spec: &TurnSpec) -> Self {
        let toolbelt = if turn.config.max_depth == 0 {
            spec.toolbelt.without(prompts::RUN_SUBTASK)
        } else {
            spec.toolbelt.clone()
        };
        let specs = toolbelt.specs(&turn.config.injected_tool_args);
        Level {
            depth: 0,
            parent_id: None,
            system: spec.system_prompt.as_str().into(),
            toolbelt,
            specs,
            output_schema: None,
        }
    }

    pub fn is_root(&self) -> bool {
        self.depth == 0
    }
}

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
        let mut history = Arc::new(history);
        let mut all_text = String::new();
        let end = drive(&turn, &level, &mut history, &mut all_text).await;
        let history = Arc::try_unwrap(history).unwrap_or_else(|shared| (*shared).clone());
        LevelResult {
            end,
            all_text,
            history,
        }
    }
    .boxed()
}

async fn drive(
    turn: &Arc<Turn>,
    level: &Level,
    history: &mut Arc<Vec<ChatMessage>>,
    all_text: &mut String,
) -> LevelEnd {
    let config = turn.config.clone();
    let mut guard = RepetitionGuard::new(config.max_identical_calls);
    let mut schema_failures = 0u32;
    let mut iterations = 0u32;
    loop {
        if turn.is_stopped() {
            return LevelEnd::Stopped;
        }
        if iterations >= config.max_iterations_per_level {
            return iteration_limit(turn, level, iterations + 1);
        }
        iterations += 1;

        let sampled = match sample(turn, level, history.clone(), all_text).await {
            Ok(sampled) => sampled,
            Err(SampleError::Stopped) => return LevelEnd::Stopped,
            Err(SampleError::Provider(message)) if level.is_root() => {
                turn.stop(TurnEnd::ProviderError(message));
                return LevelEnd::Stopped;
            }
            Err(SampleError::Provider(message)) => return LevelEnd::Failed(message),
        };
        let calls = sampled.tool_calls;
        Arc::make_mut(history).push(ChatMessage::assistant(sampled.text.clone(), calls.clone()));

        if calls.is_empty() {
            if level.output_schema.is_some() && !turn.is_stopped() {
                Arc::make_mut(history).push(ChatMessage::user(prompts::FINISH_SUBTASK_REMINDER));
                continue;
            }
            return LevelEnd::Answer(sampled.text);
        }

        let results = dispatch(turn, level, &calls, &mut guard).await;
        let mut finished = None;
        let mut abort = None;
        for result in &results {
            match &result.effect {
                Effect::Finish(payload) if finished.is_none() => finished = Some(payload.clone()),
                Effect::SchemaInvalid(detail) => {
                    schema_failures += 1;
                    if schema_failures > config.max_schema_retries {
                        return LevelEnd::Failed(schema_not_satisfied(detail, schema_failures));
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
            history.push(ChatMessage::tool_result(
                result.id,
                result.content,
                result.is_error,
            ));
        }
        if let Some(payload) = finished {
            return LevelEnd::Structured(payload);
        }
        if let Some(message) = abort {
            turn.stop(TurnEnd::ToolAborted(message));
            return LevelEnd::Stopped;
        }
    }
}

/// At the root an iteration-limit trip ends the turn; in a subtask it is that subtask's error.
fn iteration_limit(turn: &Turn, level: &Level, observed: u32) -> LevelEnd {
    let max = turn.config.max_iterations_per_level;
    let trip = BudgetTrip {
        reason: BudgetReason::Iterations,
        limit: f64::from(max),
        observed: f64::from(observed),
    };
    if level.is_root() {
        turn.trip(trip);
        return LevelEnd::Stopped;
    }
    turn.emit_budget_exceeded(&trip, false, level.parent_id.clone(), level.depth);
    if level.output_schema.is_some() {
        return LevelEnd::Failed(schema_not_satisfied(
            "finish_subtask was never called with a valid payload",
            0,
        ));
    }
    LevelEnd::Failed(prompts::iteration_limit(max))
}

fn schema_not_satisfied(detail: &str, attempts: u32) -> String {
    json!({"error": "schema_not_satisfied", "detail": detail, "attempts": attempts}).to_string()
}
