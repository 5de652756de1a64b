//! The `Tool` trait: a schema, what the tool may touch, and an async call.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use weft_protocol::{PolicyClass, ToolCategory};

use crate::events::EventSink;
use crate::memory::AgentMemory;

/// Everything a tool call may use: where it runs, how to stop, where to report, shared memory.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub tool_call_id: String,
    pub parent_id: Option<String>,
    pub depth: u32,
    /// The policy's workspace root; workspace tools must stay inside it.
    pub workspace_root: Option<Arc<Path>>,
    pub cancel: CancellationToken,
    pub events: EventSink,
    pub memory: AgentMemory,
}

/// Why a tool call failed, split by audience.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// Goes back to the model as an `is_error` result; the loop continues.
    #[error("{0}")]
    Model(String),
    /// Ends the turn.
    #[error("fatal: {0}")]
    Fatal(String),
}

impl ToolError {
    pub fn model(message: impl Into<String>) -> Self {
        ToolError::Model(message.into())
    }
}

#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    /// Whether the tool is in a session's toolbelt at all.
    fn policy_class(&self) -> PolicyClass;
    /// What the permission gate does with a call, per mode.
    fn category(&self) -> ToolCategory;
    /// Safe to run concurrently with its siblings of the same response.
    fn parallel_safe(&self) -> bool {
        true
    }
    /// Calls holding the same lock name never overlap, even across subtasks.
    fn exclusive_lock(&self) -> Option<&str> {
        None
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError>;
}
