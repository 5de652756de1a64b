//! The `code` execution mode: the model answers with JavaScript, run in a QuickJS
//! sandbox where `tools.<name>(args)` reaches the same tools — through the same gate,
//! approvals, budget and record — as a classic turn.

pub mod catalogue;
mod executor;
pub mod history;
pub mod interpreter;
pub mod prompt;
mod run_result;
pub mod sandbox;

use async_trait::async_trait;
use weft_core::{prompts, ExecutionMode, Toolbelt, TurnOutcome, TurnSpec};
use weft_protocol::{AgentConfig, PermissionMode};

pub use interpreter::{InterpreterRun, INTERPRETER_RUN};
pub use prompt::{code_result_message, CODE_EXECUTE};
pub use run_result::{ended_in, said_in};
pub use sandbox::Limits;

/// The mode's name in `chat_message.data.mode`.
pub const CODE: &str = "code";

/// Rounds (model calls) of a code turn unless the agent sets `max_steps`.
pub const DEFAULT_MAX_ROUNDS: u32 = 10;

pub struct CodeMode {
    limits: Limits,
}

impl CodeMode {
    pub fn new(limits: Limits) -> Self {
        CodeMode { limits }
    }
}

/// The tools code may call: the session's, without delegation (nor `interpreter_run`: the
/// code runs in that sandbox already).
pub fn code_tools(tools: &Toolbelt) -> Toolbelt {
    tools
        .without(prompts::RUN_SUBTASK)
        .without(prompts::RUN_PARALLEL_SUBAGENTS)
        .without(INTERPRETER_RUN)
}

#[async_trait]
impl ExecutionMode for CodeMode {
    fn name(&self) -> &str {
        CODE
    }

    fn display_name(&self) -> &str {
        "Code (JavaScript sandbox)"
    }

    fn max_rounds(&self, config: &AgentConfig) -> u32 {
        config.max_steps.unwrap_or(DEFAULT_MAX_ROUNDS)
    }

    fn system_prompt(&self, tools: &Toolbelt, mode: PermissionMode, _can_delegate: bool) -> String {
        prompt::system_prompt(&code_tools(tools), mode)
    }

    async fn run(&self, spec: TurnSpec) -> TurnOutcome {
        let rounds = self.max_rounds(&spec.config);
        executor::run_turn(spec, self.limits, rounds).await
    }
}
