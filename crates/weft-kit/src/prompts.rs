//! Every model-facing string: system prompts, refusals and error results, in one place.

use weft_protocol::PermissionMode;

pub const RUN_SUBTASK: &str = "run_subtask";
pub const FINISH_SUBTASK: &str = "finish_subtask";

pub const RUN_SUBTASK_DESCRIPTION: &str = "Delegate a self-contained piece of work to a sub-agent that \
sees only your instructions (plus shared memory) and returns its result. Emit several run_subtask calls \
in one response to run them concurrently; siblings cannot see each other's results.";

pub const FINISH_SUBTASK_DESCRIPTION: &str =
    "Finish this subtask with its structured result. The arguments must satisfy the output schema.";

pub const ROOT_PROMPT_BASE: &str = "You are Weft, a helpful agent. Answer directly when you can. \
Call tools when they help; independent calls can go in one response and run in parallel.";

pub const SUBTASK_DELEGATION_LINE: &str = "For work that splits into independent parts, call \
run_subtask once per part in the same response; they run concurrently. Siblings spawned together cannot \
read each other's results: if one part depends on another, sequence them across responses.";

pub const SUBTASK_PROMPT_BASE: &str =
    "You are a sub-agent working on one subtask. Do exactly what \
the instructions ask, using your tools if needed, and reply with the result.";

pub const SUBTASK_SCHEMA_LINE: &str = "You must end this subtask by calling finish_subtask with \
arguments that satisfy its schema; a plain text reply does not finish it.";

pub const FINISH_SUBTASK_REMINDER: &str =
    "You have not finished: call finish_subtask with a result that satisfies its schema.";

pub const CANCELLED_RESULT: &str = "cancelled: the turn was stopped before this tool call finished";

pub const STOPPED_RESULT: &str = "not run: the turn was stopped";

/// The result of a call the server was running when it stopped, given when the turn is taken
/// up again: the call is not run twice.
pub const MAYBE_RAN_RESULT: &str = "interrupted: the server stopped while this call was running, \
     so it may or may not have taken effect; check before running it again";

pub const REPETITION_RESULT: &str = "refused: you have called this tool with identical arguments \
too many times in a row. The result will not change; change course (different arguments, another tool, \
or answer with what you have).";

pub fn mode_line(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::Plan => {
            "Permission mode: PLAN. Only read tools run. Do not call write, execute or \
external tools; instead propose a step-by-step plan of what you would do."
        }
        PermissionMode::Default => {
            "Permission mode: DEFAULT. Read tools run at once; write, execute and \
external tools ask the user for approval first, and a denial is final for that call."
        }
        PermissionMode::Auto => {
            "Permission mode: AUTO. Tools run without asking (except tools that always \
require approval)."
        }
    }
}

pub fn plan_mode_refusal(tool: &str) -> String {
    format!(
        "refused: {tool} is unavailable in plan mode, which only runs read tools. Do not retry; \
propose the change instead and let the user switch modes."
    )
}

pub fn denied(tool: &str, reason: Option<&str>) -> String {
    let why = reason
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| format!(" Their reason: {r}"))
        .unwrap_or_default();
    format!("denied: the user did not approve this {tool} call.{why} Do not retry it unchanged; ask the user or take another approach.")
}

pub fn approval_timed_out(tool: &str) -> String {
    format!("denied: the approval request for this {tool} call timed out.")
}

pub fn unknown_tool(name: &str, available: &[&str]) -> String {
    format!(
        "error: unknown tool `{name}`. Available tools: {}.",
        available.join(", ")
    )
}

pub fn invalid_arguments(name: &str, detail: &str) -> String {
    format!("error: invalid arguments for `{name}`: {detail}. Fix the arguments and call again.")
}

pub fn tool_panicked(name: &str) -> String {
    format!("error: tool `{name}` crashed while running; its result is unavailable.")
}

pub fn depth_limit(max_depth: u32) -> String {
    format!("error: depth limit reached (max_depth = {max_depth}); do this work directly instead of delegating.")
}

pub fn subtask_tools_unavailable(missing: &[String], available: &[&str]) -> String {
    format!(
        "error: a subtask can only use tools you have; not available: {}. Available: {}.",
        missing.join(", "),
        available.join(", ")
    )
}

pub fn iteration_limit(max: u32) -> String {
    format!(
        "error: iteration limit reached ({max} model calls at this level) without a final answer."
    )
}

pub fn schema_invalid(detail: &str) -> String {
    format!("error: finish_subtask payload does not satisfy the output schema: {detail}")
}

pub fn budget_stop(detail: &str) -> String {
    format!("not run: {detail}")
}

/// The root system prompt: base, the tools, the active permission mode.
pub fn root_system_prompt(tool_names: &[&str], mode: PermissionMode, can_delegate: bool) -> String {
    let mut prompt = String::from(ROOT_PROMPT_BASE);
    if !tool_names.is_empty() {
        prompt.push_str("\n\nYour tools: ");
        prompt.push_str(&tool_names.join(", "));
        prompt.push('.');
    }
    if can_delegate {
        prompt.push_str("\n\n");
        prompt.push_str(SUBTASK_DELEGATION_LINE);
    }
    prompt.push_str("\n\n");
    prompt.push_str(mode_line(mode));
    prompt
}

/// A subtask's system prompt.
pub fn subtask_system_prompt(mode: PermissionMode, can_delegate: bool, structured: bool) -> String {
    let mut prompt = String::from(SUBTASK_PROMPT_BASE);
    if can_delegate {
        prompt.push(' ');
        prompt.push_str(SUBTASK_DELEGATION_LINE);
    }
    if structured {
        prompt.push(' ');
        prompt.push_str(SUBTASK_SCHEMA_LINE);
    }
    prompt.push(' ');
    prompt.push_str(mode_line(mode));
    prompt
}

/// A tool ran past `tool_timeout_ms`.
pub fn tool_timed_out(name: &str, after: std::time::Duration) -> String {
    format!(
        "error: tool `{name}` did not finish within {} ms and was stopped",
        after.as_millis()
    )
}

// The planner pre-pass.

/// The planner's system prompt when the agent gives none.
pub const PLANNER_PROMPT: &str = "You are the planning phase of an agent. Read the request and \
return a short numbered execution plan (at most 8 steps) that the agent will follow next. You may \
call read-only tools to look around first; do not try to carry out the plan or answer the request \
yourself. Reply with the plan only.";

/// How the planner's only user message begins (scripted tests match on it).
pub const PLANNER_REQUEST: &str = "Plan this request";

/// The planner's user message: the request and, for a thread with history, what came before.
pub fn planner_request(request: &str, earlier: &str) -> String {
    if earlier.is_empty() {
        return format!("{PLANNER_REQUEST}:\n\n{request}");
    }
    format!("{PLANNER_REQUEST}:\n\n{request}\n\nThe conversation so far:\n\n{earlier}")
}

/// What the executor's system prompt gains from the planner.
pub fn plan_section(plan: &str) -> String {
    format!(
        "\n\nA planning phase produced this plan for the current request. Follow it, adapting \
as you learn more:\n{plan}"
    )
}

pub fn planner_cannot_ask(tool: &str) -> String {
    format!(
        "refused: {tool} needs the user's approval, which the planning phase cannot ask for; \
leave it to the plan"
    )
}

// Budget awareness.

/// The advisory appended to every tool result and assistant message the model sees
/// (`budget_awareness = "per-message"`).
pub fn budget_advisory(
    context_tokens: u64,
    window: u64,
    llm_calls_left: u64,
    tool_calls_left: u64,
    cost_usd: f64,
) -> String {
    let percent = context_tokens.saturating_mul(100) / window.max(1);
    format!(
        "\n\n[budget: context {context_tokens} of {window} tokens ({percent}%); \
{llm_calls_left} model calls and {tool_calls_left} tool calls left; ${cost_usd:.4} spent]"
    )
}

/// The system prompt of a compaction call.
pub const COMPACT_PROMPT: &str = "You compress conversations. Summarize the transcript you are \
given so that an agent can continue the work without it: the user's requests, decisions made, facts \
and file contents learned (keep names, numbers and paths exact), and what is still open. Reply with \
the summary only.";

/// How a compaction call's user message begins (scripted tests match on it).
pub const COMPACT_REQUEST: &str = "Summarize this earlier part of the conversation";

pub fn compact_request(transcript: &str) -> String {
    format!("{COMPACT_REQUEST}:\n\n{transcript}")
}

/// How a summary reads in history, in place of the messages it replaced.
pub fn summary_message(summary: &str) -> String {
    format!("[Summary of the earlier conversation, compacted to fit the context window]\n{summary}")
}

/// The deterministic answer when the prompt cannot be brought under the limit.
pub fn context_limit_reached(limit_tokens: u64, observed_tokens: u64, window: u64) -> String {
    format!(
        "I have to stop here: this conversation needs about {observed_tokens} tokens of context, \
over this agent's limit of {limit_tokens} tokens (of a {window}-token window), even after \
compacting older messages. Start a new thread, or ask for less at once."
    )
}

// Parallel sub-agents.

pub const RUN_PARALLEL_SUBAGENTS: &str = "run_parallel_subagents";

pub const RUN_PARALLEL_SUBAGENTS_DESCRIPTION: &str = "Run several independent jobs at once, each \
by its own sub-agent that sees only its task, its additional context and its tools. Returns one \
entry per job: {\"job\", \"status\": \"success\", \"output\"} or {\"job\", \"status\": \"error\", \
\"error\"}. Give a job an output_schema to get structured output.";

pub fn too_many_jobs(got: usize, max: u32) -> String {
    format!(
        "error: run_parallel_subagents takes at most {max} jobs per call, got {got}; split the \
work across calls or run fewer jobs"
    )
}

pub const NO_JOBS: &str = "error: run_parallel_subagents needs at least one job";

pub fn job_tools_unavailable(missing: &[String], available: &[&str]) -> String {
    format!(
        "tool_names must name tools a sub-agent may use; not available: {}. Available: {}",
        missing.join(", "),
        available.join(", ")
    )
}

// Offloaded results.

pub const READ_ARTIFACT: &str = "read_artifact";

/// The marker ending a result cut to `tool_result_max_bytes` whose whole text was kept.
pub fn offloaded_marker(full_bytes: usize, artifact_id: &str) -> String {
    format!(
        "[…truncated; full result {full_bytes} bytes, kept as artifact {artifact_id}: \
call read_artifact with this id and an offset to read the rest]"
    )
}

// Code mode.

/// Heads the facts long-term memory recalled for a turn (then one `- fact` per line).
pub const REMEMBERED: &str =
    "What you remember about this user from earlier conversations (use it when relevant):";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_prompt_tells_a_delegating_model_that_siblings_cannot_see_each_other() {
        let delegating = root_system_prompt(&["run_subtask"], PermissionMode::Default, true);
        assert!(
            delegating.contains("Siblings spawned together cannot read each other's results"),
            "{delegating}"
        );
        let alone = root_system_prompt(&["read_file"], PermissionMode::Default, false);
        assert!(!alone.contains("Siblings"), "{alone}");
    }
}
