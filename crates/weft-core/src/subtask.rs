//! `run_subtask`: recurse into the loop at depth + 1 with an isolated history (the
//! instructions only) and a toolset that can only narrow the parent's.

use std::sync::Arc;

use serde_json::Value;

use crate::message::ChatMessage;
use crate::prompts;
use crate::provider::ToolSpec;
use crate::run_loop::{run_level, Level, LevelEnd, OutputSchema};
use crate::turn::Turn;

/// Run one subtask to its end. `Ok` is its result; `Err` its error result. Either way the
/// result is written to shared memory as `task:<id>`.
pub(crate) async fn run(
    turn: &Arc<Turn>,
    parent: &Level,
    call_id: &str,
    args: &Value,
) -> Result<String, String> {
    let result = spawn(turn, parent, call_id, args).await;
    let text = match &result {
        Ok(text) | Err(text) => text.clone(),
    };
    turn.memory.set(format!("task:{call_id}"), text);
    result
}

async fn spawn(
    turn: &Arc<Turn>,
    parent: &Level,
    call_id: &str,
    args: &Value,
) -> Result<String, String> {
    let instructions = args
        .get("instructions")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let requested_tools: Option<Vec<String>> =
        args.get("tools").and_then(Value::as_array).map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        });
    let output_schema = args.get("output_schema").filter(|s| !s.is_null()).cloned();

    if let Err(trip) = turn.budget.take_subtask() {
        turn.trip(trip);
        return Err(prompts::budget_stop(&trip.to_string()));
    }

    let mut toolbelt = match &requested_tools {
        Some(names) => parent.toolbelt.narrow(names).map_err(|missing| {
            prompts::subtask_tools_unavailable(&missing, &parent.toolbelt.names())
        })?,
        None => parent.toolbelt.clone(),
    };
    let depth = parent.depth + 1;
    let can_delegate = depth < turn.config.max_depth && toolbelt.contains(prompts::RUN_SUBTASK);
    if !can_delegate {
        toolbelt = toolbelt.without(prompts::RUN_SUBTASK);
    }

    let mut specs = toolbelt.specs(&turn.config.injected_tool_args).to_vec();
    let output_schema = match output_schema {
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
    let system =
        prompts::subtask_system_prompt(turn.gate.mode(), can_delegate, output_schema.is_some());
    let level = Level {
        depth,
        parent_id: Some(call_id.to_owned()),
        system: system.into(),
        toolbelt,
        specs: specs.into(),
        output_schema,
    };

    let result = run_level(
        turn.clone(),
        level,
        vec![ChatMessage::user(instructions.as_str())],
    )
    .await;
    match result.end {
        LevelEnd::Answer(text) => Ok(text),
        LevelEnd::Structured(payload) => Ok(payload.to_string()),
        LevelEnd::Failed(message) => Err(message),
        LevelEnd::Stopped => Err(prompts::STOPPED_RESULT.to_owned()),
    }
}
