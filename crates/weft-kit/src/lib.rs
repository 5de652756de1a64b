//! The parts Weft's turns are built from, which the engine (`weft-core`) runs and its
//! plug-ins implement: messages and the [`Provider`] contract, [`Tool`]s and the
//! [`Toolbelt`], the [`PermissionGate`], budgets, the execution tree and its events, the
//! [`Recorder`] interface, a turn's [`TurnSpec`] and outcome, and what a resumed turn starts
//! from ([`Resume`]).

pub mod artifacts;
pub mod budget;
pub mod catalogue;
pub mod clock;
pub mod context;
pub mod cost;
pub mod events;
pub mod gate;
pub mod json_text;
pub mod llm;
pub mod memory;
pub mod message;
pub mod pace;
pub mod prompts;
pub mod provider;
pub mod record;
pub mod repetition;
pub mod resume;
pub mod scope;
pub mod spec;
pub mod telemetry;
pub mod tokens;
pub mod tool;
pub mod toolbelt;
pub mod tree;
pub mod truncate;
pub mod validate;

pub use artifacts::Artifacts;
pub use budget::{BudgetTrip, TurnBudget, UsageTotals};
pub use catalogue::ContextWindows;
pub use cost::{ModelRate, RateCard};
pub use events::{EventCallback, EventSink};
pub use gate::{decide, Answer, GateDecision, PermissionGate};
pub use memory::AgentMemory;
pub use message::{ChatMessage, Role, ToolCallRequest};
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
