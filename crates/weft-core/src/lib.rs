//! Weft's engine: one agent loop for every depth, with tools, a permission gate and turn budgets.
//!
//! Nothing here touches sockets or SQL; events leave through an [`EventSink`] and the caller
//! persists what [`TurnOutcome`] hands back.

pub mod budget;
pub mod cost;
pub mod events;
pub mod gate;
pub mod memory;
pub mod message;
pub mod modes;
pub mod prompts;
pub mod provider;
pub mod tool;
pub mod toolbelt;
pub mod truncate;
pub mod turn;
pub mod validate;

mod dispatch;
mod repetition;
mod run_loop;
mod sample;
mod subtask;
pub mod tree;

pub use budget::{BudgetTrip, TurnBudget, UsageTotals};
pub use cost::{ModelRate, RateCard};
pub use events::EventSink;
pub use gate::{decide, GateDecision, PermissionGate};
pub use memory::AgentMemory;
pub use message::{ChatMessage, Role, ToolCallRequest};
pub use modes::{ClassicMode, ExecutionMode, ModeRegistry, UnknownMode};
pub use provider::{
    Capabilities, FinishReason, Provider, ProviderError, ProviderEvent, ProviderRequest,
    ProviderStream, ToolSpec, Usage,
};
pub use tool::{Tool, ToolContext, ToolError};
pub use toolbelt::{compose_toolbelt, RunSubtaskTool, ToolPolicy, Toolbelt};
pub use tree::{ToolCallRecord, TreeBuilder};
pub use turn::{run_classic_turn, ModelCallRecord, TurnEnd, TurnOutcome, TurnSpec};
