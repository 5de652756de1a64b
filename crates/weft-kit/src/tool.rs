//! The `Tool` trait: a schema, what the tool may touch, and an async call; what a call may
//! use ([`ToolContext`]), calls of its own included ([`NestedCalls`]).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use weft_protocol::{Amount, ServerEvent};
pub use weft_protocol::{PolicyClass, ToolCategory};

use crate::events::EventSink;
use crate::memory::AgentMemory;
use crate::message::ChatMessage;
use crate::scope::TurnScope;

/// Everything a tool call may use: who it runs for, where, how to stop, where to report,
/// shared memory.
#[derive(Clone)]
pub struct ToolContext {
    pub tool_call_id: String,
    pub parent_id: Option<String>,
    pub depth: u32,
    /// The user the turn runs for.
    pub user_id: Arc<str>,
    /// This user's workspace; workspace tools must stay inside it.
    pub workspace_root: Option<Arc<Path>>,
    /// The most bytes of a result the model sees at once (a longer one is offloaded whole
    /// and paged, or cut).
    pub result_max_bytes: usize,
    /// The most bytes a tool reads in one call (`read_file`).
    pub read_max_bytes: usize,
    pub cancel: CancellationToken,
    pub events: EventSink,
    pub memory: AgentMemory,
    /// Whether progress reports reach the client (the agent's `emit_mcp_progress`).
    pub emit_progress: bool,
    /// For a tool that runs others (a workflow): calls nested under this one, through the
    /// same gate, budget and record. `None` outside a turn.
    pub nested: Option<Arc<dyn NestedCalls>>,
    /// The turn this call belongs to: per-turn state and closers run at its end.
    pub scope: TurnScope,
}

impl ToolContext {
    /// Report how far a long call has got (`mcp_progress`); dropped unless the agent emits
    /// progress.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if !self.emit_progress {
            return;
        }
        self.events.emit(ServerEvent::McpProgress {
            tool_call_id: self.tool_call_id.clone(),
            progress: Amount(progress),
            total: total.map(Amount),
            message,
            parent_id: self.parent_id.clone(),
            depth: self.depth,
        });
    }
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("tool_call_id", &self.tool_call_id)
            .field("parent_id", &self.parent_id)
            .field("depth", &self.depth)
            .field("user_id", &self.user_id)
            .finish_non_exhaustive()
    }
}

/// A tool call made by code rather than by the model, as it came back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub content: String,
    pub is_error: bool,
}

/// Why a model call gave no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelError {
    /// The turn is stopping (cancelled, a budget tripped).
    Stopped,
    Provider(String),
}

/// Calls a tool makes of its own (a workflow's nodes, a build's model calls): nested under
/// its call, one level deeper, through the same gate, budget, events and record as any.
#[async_trait]
pub trait NestedCalls: Send + Sync {
    /// One tool call (`arguments` are JSON text), exactly as the loop runs one.
    async fn call_tool(&self, name: &str, arguments: String) -> ToolOutcome;
    /// One model call without tools, on the turn's model and budget; nothing streamed.
    async fn complete(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
    ) -> Result<String, ModelError>;
    /// Like `complete`, asking for JSON matching `schema` (the caller still checks it).
    async fn complete_json(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
        schema: Arc<Value>,
    ) -> Result<String, ModelError>;
    /// A frame for the user, at this place of the turn.
    fn emit(&self, event: ServerEvent);
    fn is_stopped(&self) -> bool;
    /// Resolves when the turn stops.
    async fn stopped(&self);
    /// The call these calls nest under (none at the root).
    fn parent_id(&self) -> Option<&str>;
    fn depth(&self) -> u32;
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

/// Declares the data half of a [`Tool`] once, inside its `impl Tool for …` block: its name,
/// description, JSON Schema, policy class and category.
///
/// ```ignore
/// tool_meta! {
///     name: "todo_write",
///     description: "Replace your todo list.",
///     class: Safe,
///     category: Read,
///     parameters: json!({"type": "object"}),
/// }
/// ```
#[macro_export]
macro_rules! tool_meta {
    (
        name: $name:expr,
        description: $description:expr,
        class: $class:ident,
        category: $category:ident,
        parameters: $parameters:expr $(,)?
    ) => {
        fn name(&self) -> &str {
            $name
        }
        fn description(&self) -> &str {
            $description
        }
        fn parameters(&self) -> ::serde_json::Value {
            $parameters
        }
        fn policy_class(&self) -> $crate::tool::PolicyClass {
            $crate::tool::PolicyClass::$class
        }
        fn category(&self) -> $crate::tool::ToolCategory {
            $crate::tool::ToolCategory::$category
        }
    };
}

/// How a call touches a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// A resource a tool's calls touch (`workspace_fs`: the user's workspace files) and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub resource: &'static str,
    pub access: Access,
}

impl Claim {
    pub const fn read(resource: &'static str) -> Claim {
        Claim {
            resource,
            access: Access::Read,
        }
    }

    pub const fn write(resource: &'static str) -> Claim {
        Claim {
            resource,
            access: Access::Write,
        }
    }

    /// Two calls conflict when they touch the same resource and one of them writes it.
    pub fn conflicts(&self, other: &Claim) -> bool {
        self.resource == other.resource
            && (self.access == Access::Write || other.access == Access::Write)
    }
}

/// Whether two calls' claims conflict.
pub fn claims_conflict(a: Option<Claim>, b: Option<Claim>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a.conflicts(&b))
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
    /// The resource its calls touch and how, the way a read-write lock is taken: calls that
    /// conflict (one of them writes) run in the order the model emitted them and never
    /// overlap, even across subtasks; calls that only read it run together.
    fn claim(&self) -> Option<Claim> {
        None
    }
    /// Running a call twice does no more than running it once, so a call the server was
    /// running when it stopped runs again when its turn is taken up (reads always do).
    fn idempotent(&self) -> bool {
        false
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError>;
}
