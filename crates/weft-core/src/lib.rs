//! Weft's engine: one agent loop for every depth, with tools, a permission gate and turn budgets.
//!
//! Nothing here touches sockets or SQL; events leave through an [`EventSink`] and the caller
//! persists what [`TurnOutcome`] hands back.

pub mod artifacts;
pub mod budget;
pub mod calls;
pub mod catalogue;
pub mod clock;
pub mod cost;
pub mod events;
pub mod gate;
pub mod hosted;
pub mod json_text;
pub mod memory;
pub mod message;
pub mod modes;
pub mod pace;
pub mod prompts;
pub mod provider;
pub mod record;
pub mod spec;
pub mod telemetry;
pub mod tokens;
pub mod tool;
pub mod toolbelt;
pub mod truncate;
pub mod validate;

mod awareness;
mod classic;
mod compact;
mod context;
mod dispatch;
mod level;
mod llm;
mod parallel;
mod planner;
mod recursion;
mod repetition;
pub mod resume;
mod run_loop;
mod sample;
mod scope;
mod subtask;
pub mod tree;
mod turn;

pub use artifacts::Artifacts;
pub use budget::{BudgetTrip, TurnBudget, UsageTotals};
pub use calls::CallSite;
pub use catalogue::ContextWindows;
pub use classic::run_classic_turn;
pub use cost::{ModelRate, RateCard};
pub use events::{EventCallback, EventSink};
pub use gate::{decide, Answer, GateDecision, PermissionGate};
pub use hosted::{HostedTurn, OpenCall};
pub use memory::AgentMemory;
pub use message::{ChatMessage, Role, ToolCallRequest};
pub use modes::{ClassicMode, ExecutionMode, ModeRegistry, UnknownMode};
pub use pace::Pace;
pub use provider::{
    Capabilities, FinishReason, Provider, ProviderError, ProviderEvent, ProviderRequest,
    ProviderStream, ToolSpec, Usage,
};
pub use record::{
    job_parent, new_call_id, parent_call, ApprovalRequest, Call, ModelCallRecord, NoRecord, Place,
    RecordedResult, Recorder, Stored,
};
pub use resume::{ChildEnded, ChildResume, CutCall, Resume, Spent};
pub use sample::CHUNK_MAX_BYTES;
pub use scope::TurnScope;
pub use spec::{PlannerSpec, TurnEnd, TurnOutcome, TurnSpec};
pub use tokens::{bytes_bound, TokenCounter};
pub use tool::{
    claims_conflict, Access, Claim, ModelError, NestedCalls, Tool, ToolContext, ToolError,
    ToolOutcome,
};
pub use toolbelt::{
    compose_toolbelt, RunParallelSubagentsTool, RunSubtaskTool, ToolPolicy, Toolbelt,
};
pub use tree::{ToolCallRecord, TreeBuilder};
