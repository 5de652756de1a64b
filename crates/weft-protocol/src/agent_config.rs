//! `AgentConfig`: the serializable agent contract: who the agent is (name, model,
//! instructions), its runtime controls (planning, budget awareness, approvals, sub-agents),
//! and every limit of a turn.
//!
//! It round-trips through JSON and TOML: the documented example agent (`web-fixtures/agents/ops-supervisor.json`) loads as written and serializes
//! back to the same fields, every other field at its default.

use serde::{Deserialize, Serialize};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolParallelism {
    #[default]
    Parallel,
    Serial,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ArgValidation {
    #[default]
    Strict,
    Lenient,
    None,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorMode {
    #[default]
    Recover,
    Abort,
}

/// An agent: the agent contract's fields first (in its order), then Weft's tool allow-list and limits.
/// Missing keys take defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct AgentConfig {
    pub name: String,
    /// `provider:model`; absent: the server's default.
    pub model: Option<String>,
    /// Added to the system prompt.
    pub instructions: String,
    /// Iterations per level (overrides `max_iterations_per_level`).
    pub max_steps: Option<u32>,
    pub temperature: Option<f64>,
    /// The most tokens one model response may have (sent to the provider).
    pub max_tokens: Option<u64>,
    pub planning_enabled: bool,
    /// `provider:model` for the planner; absent: the executor's.
    pub planning_model: Option<String>,
    /// The planner's prompt; empty: the built-in one.
    pub planning_instructions: String,
    /// `per-message` or `limit:<0-100>`; absent: off.
    pub budget_awareness: Option<String>,
    /// Tools that always ask before running, in every mode but Plan.
    pub hitl_tools: Vec<String>,
    pub emit_mcp_progress: bool,
    /// Schema-only arguments added to every tool (name → description), split off before
    /// the tool runs and kept in the call's metadata.
    pub injected_tool_args: InjectedArgs,
    pub allow_parallel_subagents: bool,
    pub max_parallel_subagents: u32,
    /// The tools this agent may use (absent: every tool the session has).
    pub tools: Option<Vec<String>>,
    pub max_depth: u32,
    pub max_iterations_per_level: u32,
    pub max_parallel_per_turn: usize,
    pub max_total_subtasks: u64,
    pub max_total_llm_calls: u64,
    pub max_total_tool_calls: u64,
    pub max_wall_clock_ms: u64,
    pub tool_result_max_bytes: usize,
    /// The most bytes `read_file` reads in one call (a longer result is offloaded whole and
    /// paged with `read_artifact`; a bigger file is read in parts with `offset`/`length`).
    pub read_file_max_bytes: usize,
    /// Cumulative bytes of tool results fed back to the model in one turn.
    pub max_total_result_bytes: u64,
    pub max_history_tokens: u64,
    /// The cumulative token budget of a turn (input and output, every call).
    pub max_turn_tokens: Option<u64>,
    /// The most bytes of text and tool-call arguments the model may stream in one turn,
    /// checked while it streams.
    pub max_output_bytes: u64,
    pub max_cost_usd: Option<f64>,
    pub max_schema_retries: u32,
    pub max_identical_calls: u32,
    pub tool_parallelism: ToolParallelism,
    pub arg_validation: ArgValidation,
    pub tool_error_mode: ToolErrorMode,
    /// How long an approval may wait before it reads as `timed_out` (none: for ever). The
    /// time a person takes does not count against `max_wall_clock_ms`.
    pub approval_timeout_ms: Option<u64>,
    /// How long one tool call may run (approval waits excluded) before it is an error result.
    pub tool_timeout_ms: Option<u64>,
    /// How long a client-run (`ui_*`) tool call may wait for the client's `tool_result`.
    pub client_tool_timeout_ms: u64,
}

/// Schema-only argument names and their descriptions, in the order they were given.
pub type InjectedArgs = indexmap::IndexMap<String, String>;

/// The name of the server's own agent (its `[agent]` table).
pub const DEFAULT_AGENT: &str = "default";

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            name: DEFAULT_AGENT.to_owned(),
            model: None,
            instructions: String::new(),
            max_steps: None,
            temperature: None,
            max_tokens: None,
            planning_enabled: false,
            planning_model: None,
            planning_instructions: String::new(),
            budget_awareness: None,
            hitl_tools: Vec::new(),
            emit_mcp_progress: true,
            injected_tool_args: InjectedArgs::new(),
            allow_parallel_subagents: false,
            max_parallel_subagents: 3,
            tools: None,
            max_depth: 3,
            max_iterations_per_level: 20,
            max_parallel_per_turn: 8,
            max_total_subtasks: 32,
            max_total_llm_calls: 60,
            max_total_tool_calls: 200,
            max_wall_clock_ms: 180_000,
            tool_result_max_bytes: 50_000,
            read_file_max_bytes: 16 << 20,
            max_total_result_bytes: 4_000_000,
            max_history_tokens: 128_000,
            max_turn_tokens: None,
            max_output_bytes: 1 << 20,
            max_cost_usd: None,
            max_schema_retries: 3,
            max_identical_calls: 5,
            tool_parallelism: ToolParallelism::Parallel,
            arg_validation: ArgValidation::Strict,
            tool_error_mode: ToolErrorMode::Recover,
            approval_timeout_ms: Some(30 * 60 * 1000),
            tool_timeout_ms: Some(120_000),
            client_tool_timeout_ms: 60_000,
        }
    }
}

/// Why a config is not valid, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentConfigError {
    Name(String),
    Model(&'static str, String),
    Temperature(String),
    ParallelSubagents(u32),
    BudgetAwareness(String),
    InjectedArgName(String),
    UnknownHitlTool(String),
    UnknownTool(String),
    ZeroLimit(&'static str),
    /// A limit above the operator's `[agent]` value (the ceiling of every stored agent).
    AboveCeiling {
        field: &'static str,
        value: String,
        ceiling: String,
    },
}

/// How a server knows a tool name an agent config uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolAvailability {
    /// No tool of that name could reach a turn.
    Unknown,
    /// A tool of the server's (built in, configured, or of an allowed MCP server): an
    /// agent has it when its allow-list does.
    Configured,
    /// A tool that joins a turn beside the agent's allow-list when the turn asks for it
    /// (memory, the client's `ui_*` tools, parallel sub-agents).
    PerTurn,
}

impl AgentConfigError {
    /// The field at fault.
    pub fn field(&self) -> &str {
        match self {
            AgentConfigError::Name(_) => "name",
            AgentConfigError::Model(field, _) => field,
            AgentConfigError::Temperature(_) => "temperature",
            AgentConfigError::ParallelSubagents(_) => "max_parallel_subagents",
            AgentConfigError::BudgetAwareness(_) => "budget_awareness",
            AgentConfigError::InjectedArgName(_) => "injected_tool_args",
            AgentConfigError::UnknownHitlTool(_) => "hitl_tools",
            AgentConfigError::UnknownTool(_) => "tools",
            AgentConfigError::ZeroLimit(field) => field,
            AgentConfigError::AboveCeiling { field, .. } => field,
        }
    }
}

impl std::fmt::Display for AgentConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentConfigError::Name(n) => write!(
                f,
                "name must be 1 to 128 characters of A-Z a-z 0-9 . _ : -, got {n:?}"
            ),
            AgentConfigError::Model(field, m) => write!(
                f,
                "{field} must be `provider:model` (for example openai:gpt-4o-mini), got {m:?}"
            ),
            AgentConfigError::Temperature(t) => {
                write!(f, "temperature must be between 0 and 2, got {t}")
            }
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
            AgentConfigError::UnknownTool(t) => {
                write!(f, "tools names {t:?}, which this server does not have")
            }
            AgentConfigError::ZeroLimit(field) => write!(f, "{field} must be at least 1"),
            AgentConfigError::AboveCeiling {
                field,
                value,
                ceiling,
            } => write!(
                f,
                "{field} is {value}, above this server's limit of {ceiling} ([agent] {field})"
            ),
        }
    }
}

impl std::error::Error for AgentConfigError {}

/// Split `provider:model`; both parts must be there.
pub fn parse_model(spec: &str) -> Option<(&str, &str)> {
    let (provider, model) = spec.split_once(':')?;
    let provider_ok = !provider.is_empty()
        && provider
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (provider_ok && !model.trim().is_empty() && model.len() <= 256).then_some((provider, model))
}

/// What `budget_awareness` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetAwareness {
    /// An advisory on every tool result and assistant message the model sees.
    PerMessage,
    /// Compact when the prompt passes this percentage of the context window.
    Limit(u8),
}

impl AgentConfig {
    /// Iterations the loop may run per level.
    pub fn iterations_per_level(&self) -> u32 {
        self.max_steps.unwrap_or(self.max_iterations_per_level)
    }

    pub fn budget_awareness(&self) -> Option<BudgetAwareness> {
        let mode = self.budget_awareness.as_deref()?;
        if mode == "per-message" {
            return Some(BudgetAwareness::PerMessage);
        }
        mode.strip_prefix("limit:")
            .and_then(|n| n.parse::<u8>().ok())
            .filter(|n| *n <= 100)
            .map(BudgetAwareness::Limit)
    }

    /// Check the values that make sense on their own (the agent contract's rules).
    pub fn validate(&self) -> Result<(), AgentConfigError> {
        if !crate::inbound::is_identifier(&self.name) {
            return Err(AgentConfigError::Name(crate::clip(&self.name, 64)));
        }
        for (field, value) in [
            ("model", &self.model),
            ("planning_model", &self.planning_model),
        ] {
            if let Some(spec) = value {
                if parse_model(spec).is_none() {
                    return Err(AgentConfigError::Model(field, crate::clip(spec, 64)));
                }
            }
        }
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(AgentConfigError::Temperature(t.to_string()));
            }
        }
        if !(1..=7).contains(&self.max_parallel_subagents) {
            return Err(AgentConfigError::ParallelSubagents(
                self.max_parallel_subagents,
            ));
        }
        if let Some(mode) = &self.budget_awareness {
            if self.budget_awareness().is_none() {
                return Err(AgentConfigError::BudgetAwareness(crate::clip(mode, 64)));
            }
        }
        for key in self.injected_tool_args.keys() {
            let valid = !key.is_empty()
                && key.len() <= 64
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                return Err(AgentConfigError::InjectedArgName(crate::clip(key, 64)));
            }
        }
        for (field, value) in [
            (
                "max_iterations_per_level",
                u64::from(self.max_iterations_per_level),
            ),
            ("max_steps", u64::from(self.max_steps.unwrap_or(1))),
            ("max_parallel_per_turn", self.max_parallel_per_turn as u64),
            ("max_identical_calls", u64::from(self.max_identical_calls)),
        ] {
            if value == 0 {
                return Err(AgentConfigError::ZeroLimit(field));
            }
        }
        Ok(())
    }

    /// Check the tool names against the tools the server could give (`known` says how a
    /// name is known): the allow-list must name such tools, and every `hitl_tools` name
    /// must be one the agent could be given: on its allow-list, or a tool that joins a turn
    /// beside it ([`ToolAvailability::PerTurn`]).
    pub fn validate_tools(
        &self,
        known: impl Fn(&str) -> ToolAvailability,
    ) -> Result<(), AgentConfigError> {
        if let Some(tools) = &self.tools {
            if let Some(missing) = tools.iter().find(|t| known(t) == ToolAvailability::Unknown) {
                return Err(AgentConfigError::UnknownTool(crate::clip(missing, 64)));
            }
        }
        let own = |name: &str| match known(name) {
            ToolAvailability::Unknown => false,
            ToolAvailability::PerTurn => true,
            ToolAvailability::Configured => self
                .tools
                .as_ref()
                .is_none_or(|tools| tools.iter().any(|t| t == name)),
        };
        match self.hitl_tools.iter().find(|name| !own(name)) {
            Some(missing) => Err(AgentConfigError::UnknownHitlTool(crate::clip(missing, 64))),
            None => Ok(()),
        }
    }
}
