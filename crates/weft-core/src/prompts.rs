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

pub fn denied(tool: &str) -> String {
    format!("denied: the user did not approve this {tool} call. Do not retry it unchanged; ask the user or take another approach.")
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
