//! `run_parallel_subagents`: up to `max_parallel_subagents` jobs, each a child
//! level at depth + 1 under the call, run concurrently on one shared budget; the result is
//! one structured entry per job, in job order.

use std::sync::Arc;

use futures::future::join_all;
use serde_json::{json, Value};

use crate::level::Level;
use crate::prompts;
use crate::record::Call;
use crate::subtask::{self, names_arg, str_arg, Child, ChildEnd};
use crate::turn::Turn;

/// Run the call's jobs. `Err` is the call's error result (too many jobs, none at all);
/// a failing job is an `error` entry in an otherwise successful result.
pub(crate) async fn run(
    turn: &Arc<Turn>,
    parent: &Level,
    call: &Call,
    args: &Value,
) -> Result<String, String> {
    let jobs = args
        .get("jobs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if jobs.is_empty() {
        return Err(prompts::NO_JOBS.to_owned());
    }
    let max = turn.config.max_parallel_subagents;
    if jobs.len() > max as usize {
        return Err(prompts::too_many_jobs(jobs.len(), max));
    }
    // Children choose among the parent's tools, but never fan out again.
    let child_safe = parent.toolbelt.without(prompts::RUN_PARALLEL_SUBAGENTS);
    let runs = jobs.iter().enumerate().map(|(i, job)| {
        let child_safe = child_safe.clone();
        async move {
            let tools = names_arg(job, "tool_names");
            if let Some(names) = &tools {
                let missing: Vec<String> = names
                    .iter()
                    .filter(|n| !child_safe.contains(n))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    return failed(
                        i,
                        &prompts::job_tools_unavailable(&missing, &child_safe.names()),
                    );
                }
            }
            let child = Child {
                task: task_of(job),
                system_extra: str_arg(job, "system_prompt"),
                tools,
                output_schema: job.get("output_schema").filter(|s| !s.is_null()).cloned(),
                base: child_safe,
            };
            let end = subtask::spawn(turn, parent, &call.wire_id, Some(i), child).await;
            let entry = match end {
                Ok(ChildEnd::Text(text)) => {
                    json!({"job": i, "status": "success", "output": text})
                }
                Ok(ChildEnd::Structured(payload)) => {
                    json!({"job": i, "status": "success", "output": payload})
                }
                Err(error) => return failed(i, &error),
            };
            turn.memory.set(
                format!("task:{}:{i}", call.request.id),
                entry["output"].to_string(),
            );
            entry
        }
    });
    let results = join_all(runs).await;
    Ok(json!({ "results": results }).to_string())
}

fn failed(job: usize, error: &str) -> Value {
    json!({"job": job, "status": "error", "error": error})
}

/// A job's one message: its task, then its additional context if any.
fn task_of(job: &Value) -> String {
    let task = str_arg(job, "task");
    let context = str_arg(job, "additional_context");
    if context.trim().is_empty() {
        task
    } else {
        format!("{task}\n\nContext:\n{context}")
    }
}
