//! `AgentConfig`: the serializable agent contract (limits, seed 004 runtime controls).
//!
//! It round-trips through JSON and TOML so a turn can be rebuilt from config alone.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolParallelism {
    #[default]
    Parallel,
    Serial,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgValidation {
    #[default]
    Strict,
    Lenient,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorMode {
    #[default]
    Recover,
    Abort,
}

/// Every limit and runtime control of a turn. Unknown keys are ignored; missing keys take defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    pub max_depth: u32,
    pub max_iterations_per_level: u32,
    pub max_parallel_per_turn: usize,
    pub max_total_subtasks: u64,
    pub max_total_llm_calls: u64,
    pub max_total_tool_calls: u64,
    pub max_wall_clock_ms: u64,
    pub tool_result_max_bytes: usize,
    /// Cumulative bytes of tool results fed back to the model in one turn.
    pub max_total_result_bytes: u64,
    pub max_history_tokens: u64,
    pub max_tokens: Option<u64>,
    pub max_cost_usd: Option<f64>,
    pub max_schema_retries: u32,
    pub max_identical_calls: u32,
    pub tool_parallelism: ToolParallelism,
    pub arg_validation: ArgValidation,
    pub tool_error_mode: ToolErrorMode,
    /// How long an approval may wait before it reads as `timed_out`; none waits for the turn's wall clock.
    pub approval_timeout_ms: Option<u64>,
    pub planning_enabled: bool,
    pub planning_model: Option<String>,
    pub planning_instructions: String,
    pub budget_awareness: Option<String>,
    pub hitl_tools: Vec<String>,
    pub emit_mcp_progress: bool,
    pub injected_tool_args: BTreeMap<String, String>,
    pub allow_parallel_subagents: bool,
    pub max_parallel_subagents: u32,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            max_depth: 3,
            max_iterations_per_level: 20,
            max_parallel_per_turn: 8,
            max_total_subtasks: 32,
            max_total_llm_calls: 60,
            max_total_tool_calls: 200,
            max_wall_clock_ms: 180_000,
            tool_result_max_bytes: 50_000,
            max_total_result_bytes: 4_000_000,
            max_history_tokens: 128_000,
            max_tokens: None,
            max_cost_usd: None,
            max_schema_retries: 3,
            max_identical_calls: 5,
            tool_parallelism: ToolParallelism::Parallel,
            arg_validation: ArgValidation::Strict,
            tool_error_mode: ToolErrorMode::Recover,
            approval_timeout_ms: None,
            planning_enabled: false,
            planning_model: None,
            planning_instructions: String::new(),
            budget_awareness: None,
            hitl_tools: Vec::new(),
            emit_mcp_progress: true,
            injected_tool_args: BTreeMap::new(),
            allow_parallel_subagents: false,
            max_parallel_subagents: 3,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentConfigError {
    ParallelSubagents(u32),
    BudgetAwareness(String),
    InjectedArgName(String),
    UnknownHitlTool(String),
    ZeroLimit(&'static str),
}

impl std::fmt::Display for AgentConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentConfigError::ParallelSubagents(n) => {
                write!(f, "max_parallel_subagents must be 1..7, got {n}")
            }
            AgentConfigError::BudgetAwareness(v) => {
                write!(
                    f,
                    "budget_awareness must be \"per-message\" or \"limit:<0-100>\", got {v:?}"
                )
            }
            AgentConfigError::InjectedArgName(k) => {
                write!(
                    f,
                    "injected_tool_args key {k:?} is not a valid property name"
                )
            }
            AgentConfigError::UnknownHitlTool(t) => {
                write!(
                    f,
                    "hitl_tools names {t:?}, which is not a tool of this agent"
                )
            }
            AgentConfigError::ZeroLimit(field) => write!(f, "{field} must be at least 1"),
        }
    }
}

impl std::error::Error for AgentConfigError {}

impl AgentConfig {
    /// Check the values that make sense on their own (seed 004's validation rules).
    pub fn validate(&self) -> Result<(), AgentConfigError> {
        if !(1..=7).contains(&self.max_parallel_subagents) {
            return Err(AgentConfigError::ParallelSubagents(
                self.max_parallel_subagents,
            ));
        }
        if let Some(mode) = &self.budget_awareness {
            let ok = mode == "per-message"
                || mode
                    .strip_prefix("limit:")
                    .and_then(|n| n.parse::<u8>().ok())
                    .is_some_and(|n| n <= 100);
            if !ok {
                return Err(AgentConfigError::BudgetAwareness(mode.clone()));
            }
        }
        for key in self.injected_tool_args.keys() {
            let valid = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                return Err(AgentConfigError::InjectedArgName(key.clone()));
            }
        }
        for (field, value) in [
            (
                "max_iterations_per_level",
                u64::from(self.max_iterations_per_level),
            ),
            ("max_parallel_per_turn", self.max_parallel_per_turn as u64),
            ("max_identical_calls", u64::from(self.max_identical_calls)),
        ] {
            if value == 0 {
                return Err(AgentConfigError::ZeroLimit(field));
            }
        }
        Ok(())
    }

    /// Check that every `hitl_tools` name exists among the agent's tools.
    pub fn validate_tools(&self, tool_names: &[&str]) -> Result<(), AgentConfigError> {
        match self
            .hitl_tools
            .iter()
            .find(|name| !tool_names.contains(&name.as_str()))
        {
            Some(missing) => Err(AgentConfigError::UnknownHitlTool(missing.clone())),
            None => Ok(()),
        }
    }
}
