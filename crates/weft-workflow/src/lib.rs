//! Workflows: every tool is a node. The node registry (built-in types plus every non-agentic
//! tool), graphs and their validation, and a parallel executor whose nodes reach tools and the
//! model through the turn they run in — gated, budgeted and recorded like tool calls.

pub mod builder;
pub mod checkpoint;
pub mod config;
pub mod editor_prompt;
pub mod executor;
pub mod graph;
pub mod host;
pub mod node;
pub mod nodes;
pub mod registry;
pub mod run;
pub mod tool_node;
pub mod tools;
pub mod validate;

pub use builder::{BuildWorkflow, BUILD_WORKFLOW};
pub use checkpoint::{Checkpoints, EarlierRun, NodeLog, CUT_NODE};
pub use config::WorkflowConfig;
pub use editor_prompt::editor_prompt;
pub use executor::{execute, execute_from};
pub use graph::{Edge, Graph, Node};
pub use node::{NodeContext, NodeType, Ports, Subgraphs};
pub use registry::{CatalogueEntry, NodeRegistry};
pub use run::{Job, NodeRun, NodeStatus, RunBudget, RunLimits, RunResult, RunStatus};
pub use tools::{RunRecord, SavedWorkflow, WorkflowLibrary, Workflows};
pub use validate::{validate, validate_within, GraphError, Plan};
