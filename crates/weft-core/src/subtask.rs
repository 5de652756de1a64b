//! `run_subtask`: recurse into the loop at depth + 1 with an isolated history (the
//! instructions only) and a toolset that can only narrow the parent's. `Child` is the one way
//! a child level starts, for `run_subtask` and each job of `run_parallel_subagents`.

use std::sync::Arc;

use serde_json::Value;

use crate::level::{Level, OutputSchema};
use crate::message::ChatMessage;
use crate::prompts;
use crate::provider::ToolSpec;
use crate::record::{job_parent, Call};
use crate::run_loop::{run_level, LevelEnd};
use crate::toolbelt::Toolbelt;
use crate::turn::Turn;

/// A child level to run under a call.
pub(crate) struct Child {
    /// What the child is asked (its only user message).
    pub task: String,
    /// Framing added to the child's system prompt.
    pub system_extra: String,
    /// The tools to narrow to; `None`: all of `base`.
    pub tools: Option<Vec<String>>,
    /// JSON Schema of a structured result (ended by `finish_subtask`).
    pub output_schema: Option<Value>,
    /// The tools the child may choose from.
    pub base: Toolbelt,
}

/// A child's result: `Ok` its answer (structured results as JSON), `Err` its error.
pub(crate) enum ChildEnd {
    Text(String),
    Structured(Value),
}

/// Run one subtask to its end. `Ok` is its result; `Err` its error result. Either way the
/// result is written to shared memory as `task:<id>`.
pub(crate) async fn run(
    turn: &Arc<Turn>,
    parent: &Level,
    call: &Call,
    args: &Value,
) -> Result<String, String> {
    let child = Child {
        task: str_arg(args, "instructions"),
        system_extra: String::new(),
        tools: names_arg(args, "tools"),
        output_schema: args.get("output_schema").filter(|s| !s.is_null()).cloned(),
        base: parent.toolbelt.clone(),
    };
    let result = spawn(turn, parent, &call.wire_id, None, child)
        .await
        .map(|end| match end {
            ChildEnd::Text(text) => text,
            ChildEnd::Structured(payload) => payload.to_string(),
        });
    let text = match &result {
        Ok(text) | Err(text) => text.clone(),
    };
    // The model knows the call by its history id.
    turn.memory.set(format!("task:{}", call.request.id), text);
    result
}

pub(crate) fn str_arg(args: &Value, key: &str) -> String {
    args.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

pub(crate) fn names_arg(args: &Value, key: &str) -> Option<Vec<String>> {
    args.get(key).and_then(Value::as_array).map(|names| {
        names
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    })
}

/// Run a child level at `parent.depth + 1` under the call `call_id` (as its job number
/// `job` for a parallel call), charging one subtask.
pub(crate) async fn spawn(
    turn: &Arc<Turn>,
    parent: &Level,
    call_id: &str,
    job: Option<usize>,
    child: Child,
) -> Result<ChildEnd, String> {
    // A subtask taken up after a crash was charged in its first life.
    let record_parent = job.map(|j| job_parent(call_id, j));
    if !turn.child_charged(record_parent.as_deref().unwrap_or(call_id)) {
        if let Err(trip) = turn.budget.take_subtask() {
            turn.trip(trip);
            return Err(prompts::budget_stop(&trip.to_string()));
        }
    }

    let mut toolbelt = match &child.tools {
        Some(names) => child
            .base
            .narrow(names)
            .map_err(|missing| prompts::subtask_tools_unavailable(&missing, &child.base.names()))?,
        None => child.base.clone(),
    };
    let depth = parent.depth + 1;
    let can_delegate = depth < turn.config.max_depth && toolbelt.contains(prompts::RUN_SUBTASK);
    if depth >= turn.config.max_depth {
        toolbelt = toolbelt
            .without(prompts::RUN_SUBTASK)
            .without(prompts::RUN_PARALLEL_SUBAGENTS);
    }

    let mut specs = toolbelt.specs(&turn.config.injected_tool_args).to_vec();
    let output_schema = match child.output_schema {
        Some(schema) => {
            let validator = jsonschema::validator_for(&schema)
                .map_err(|e| format!("error: output_schema is not a valid JSON Schema: {e}"))?;
            specs.push(ToolSpec {
                name: prompts::FINISH_SUBTASK.to_owned(),
                description: prompts::FINISH_SUBTASK_DESCRIPTION.to_owned(),
                parameters: schema,
            });
            Some(OutputSchema { validator })
        }
        None => None,
    };
    let mut system =
        prompts::subtask_system_prompt(turn.gate.mode(), can_delegate, output_schema.is_some());
    if !child.system_extra.trim().is_empty() {
        system.push_str("\n\n");
        system.push_str(child.system_extra.trim());
    }
    let level = Level {
        depth,
        parent_id: Some(call_id.to_owned()),
        record_parent,
        system: system.into(),
        toolbelt,
        specs: specs.into(),
        output_schema,
        llm: parent.llm.clone(),
        quiet: parent.quiet,
        response_schema: None,
    };

    let result = run_level(
        turn.clone(),
        level,
        vec![ChatMessage::user(child.task.as_str())],
    )
    .await;
    match result.end {
        LevelEnd::Answer(text) => Ok(ChildEnd::Text(text)),
        LevelEnd::Structured(payload) => Ok(ChildEnd::Structured(payload)),
        LevelEnd::Failed(message) => Err(message),
        LevelEnd::Stopped => Err(prompts::STOPPED_RESULT.to_owned()),
    }
}
