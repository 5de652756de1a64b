//! Tool calls made by code rather than by the model — from a code-mode run, from a workflow's
//! nodes, from a tool that runs others — at one place in the turn (a depth, under a parent
//! call). Each goes through the very path a model's call takes: validation, the gate and
//! approvals, budget, timeout, truncation or offloading, metadata, events, record.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Semaphore;
use weft_protocol::{AgentConfig, PermissionMode, ServerEvent};

use crate::dispatch::{dispatch_one, maybe_ran, runs_again};
use crate::events::EventSink;
use crate::level::Level;
use crate::message::{ChatMessage, ToolCallRequest};
use crate::prompts;
use crate::record::{new_call_id, Call, Place};
use crate::repetition::RepetitionGuard;
use crate::resume::MadeCall;
use crate::sample::{sample, SampleError};
use crate::tool::{ModelError, NestedCalls, ToolOutcome};
use crate::toolbelt::Toolbelt;
use crate::turn::Turn;

/// Where calls are made from, and what they may use.
pub struct CallSite {
    turn: Arc<Turn>,
    level: Level,
    guard: Mutex<RepetitionGuard>,
    slots: Arc<Semaphore>,
    /// The calls a cut run made, met again in order while it is redone.
    replay: Mutex<VecDeque<MadeCall>>,
}

/// What a tool gets to make calls of its own: nested under its call, one level deeper.
/// Cheap to make for every call; the call site is built the first time a tool uses it.
pub(crate) struct Nested {
    turn: Arc<Turn>,
    parent_id: String,
    depth: u32,
    toolbelt: Toolbelt,
    site: OnceLock<CallSite>,
}

impl Nested {
    pub(crate) fn new(turn: &Arc<Turn>, parent_id: &str, depth: u32, toolbelt: &Toolbelt) -> Self {
        Nested {
            turn: turn.clone(),
            parent_id: parent_id.to_owned(),
            depth,
            toolbelt: toolbelt.clone(),
            site: OnceLock::new(),
        }
    }

    fn site(&self) -> &CallSite {
        self.site.get_or_init(|| {
            CallSite::new(
                self.turn.clone(),
                self.depth,
                Some(self.parent_id.clone()),
                &self.toolbelt,
            )
        })
    }
}

#[async_trait]
impl NestedCalls for Nested {
    async fn call_tool(&self, name: &str, arguments: String) -> ToolOutcome {
        self.site().call_tool(name, arguments).await
    }
    async fn complete(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
    ) -> Result<String, ModelError> {
        self.site().complete(system, messages).await
    }
    async fn complete_json(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
        schema: Arc<Value>,
    ) -> Result<String, ModelError> {
        self.site().complete_json(system, messages, schema).await
    }
    fn emit(&self, event: ServerEvent) {
        self.turn.events.emit(event);
    }
    fn is_stopped(&self) -> bool {
        self.turn.is_stopped()
    }
    async fn stopped(&self) {
        self.turn.cancel.cancelled().await
    }
    fn parent_id(&self) -> Option<&str> {
        Some(&self.parent_id)
    }
    fn depth(&self) -> u32 {
        self.depth
    }
}

#[async_trait]
impl NestedCalls for CallSite {
    async fn call_tool(&self, name: &str, arguments: String) -> ToolOutcome {
        CallSite::call_tool(self, name, arguments).await
    }
    async fn complete(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
    ) -> Result<String, ModelError> {
        CallSite::complete(self, system, messages).await
    }
    async fn complete_json(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
        schema: Arc<Value>,
    ) -> Result<String, ModelError> {
        CallSite::complete_json(self, system, messages, schema).await
    }
    fn emit(&self, event: ServerEvent) {
        self.turn.events.emit(event);
    }
    fn is_stopped(&self) -> bool {
        CallSite::is_stopped(self)
    }
    async fn stopped(&self) {
        CallSite::stopped(self).await
    }
    fn parent_id(&self) -> Option<&str> {
        CallSite::parent_id(self)
    }
    fn depth(&self) -> u32 {
        CallSite::depth(self)
    }
}

impl CallSite {
    /// Calls at `depth` under `parent_id` (none: the root), choosing among `toolbelt` without
    /// delegation (code and workflows call tools, not sub-agents).
    pub(crate) fn new(
        turn: Arc<Turn>,
        depth: u32,
        parent_id: Option<String>,
        toolbelt: &Toolbelt,
    ) -> CallSite {
        let toolbelt = toolbelt
            .without(prompts::RUN_SUBTASK)
            .without(prompts::RUN_PARALLEL_SUBAGENTS);
        let level = Level {
            depth,
            parent_id,
            record_parent: None,
            system: Arc::from(""),
            specs: toolbelt.specs(&turn.config.injected_tool_args),
            toolbelt,
            output_schema: None,
            llm: turn.llm.clone(),
            quiet: false,
            response_schema: None,
        };
        CallSite {
            guard: Mutex::new(RepetitionGuard::new(turn.config.max_identical_calls)),
            slots: Arc::new(Semaphore::new(turn.config.max_parallel_per_turn.max(1))),
            replay: Mutex::new(VecDeque::new()),
            turn,
            level,
        }
    }

    /// Redo a cut run here: the calls it made are met again, in order, as long as the run
    /// makes the same ones (see [`CallSite::call_tool`]).
    pub(crate) fn replaying(self, made: Vec<MadeCall>) -> CallSite {
        *self.replay.lock() = made.into();
        self
    }

    /// The call the redone run made before, if this one (`name`, `arguments`) is the next
    /// it made; a different call ends the replay (the run went another way).
    fn made_before(&self, name: &str, arguments: &str) -> Option<MadeCall> {
        let mut replay = self.replay.lock();
        let same = replay
            .front()
            .is_some_and(|m| m.request().name == name && &*m.request().arguments == arguments);
        if same {
            replay.pop_front()
        } else {
            replay.clear();
            None
        }
    }

    /// A call a cut run made before, met again: its result on record is given back; one
    /// without runs again when it is a read or idempotent or was waiting for its approval,
    /// and otherwise is answered that it may or may not have taken effect.
    async fn meet_again(&self, made: MadeCall) -> ToolOutcome {
        let cut = match made {
            MadeCall::Answered {
                content, is_error, ..
            } => return ToolOutcome { content, is_error },
            MadeCall::Cut(cut) => cut,
        };
        let result = if runs_again(&self.level, &cut) {
            dispatch_one(&self.turn, &self.level, &cut.call, &self.guard).await
        } else {
            maybe_ran(&self.turn, &self.level, &cut.call)
        };
        self.turn
            .recorder
            .results(self.level.place(), &[result.recorded()]);
        ToolOutcome {
            content: result.content,
            is_error: result.is_error,
        }
    }

    /// One tool call (its `arguments` are the raw JSON text), exactly as the classic loop runs
    /// one. Calls run concurrently up to `max_parallel_per_turn`; a tool that is not
    /// parallel-safe runs alone.
    pub async fn call_tool(&self, name: &str, arguments: String) -> ToolOutcome {
        let alone = self
            .level
            .toolbelt
            .get(name)
            .is_some_and(|t| !t.parallel_safe());
        let wanted = if alone {
            u32::try_from(self.turn.config.max_parallel_per_turn.max(1)).unwrap_or(u32::MAX)
        } else {
            1
        };
        let _slot = self.slots.acquire_many(wanted).await;
        if let Some(made) = self.made_before(name, &arguments) {
            return self.meet_again(made).await;
        }
        let wire_id = new_call_id(name);
        let call = Call {
            wire_id: wire_id.clone(),
            request: ToolCallRequest {
                id: wire_id,
                name: name.to_owned(),
                arguments: arguments.into(),
            },
        };
        let place = self.level.place();
        self.turn
            .recorder
            .assistant(place, "", std::slice::from_ref(&call));
        let result = dispatch_one(&self.turn, &self.level, &call, &self.guard).await;
        self.turn.recorder.results(place, &[result.recorded()]);
        ToolOutcome {
            content: result.content,
            is_error: result.is_error,
        }
    }

    /// One model call without tools, its text not streamed, on the turn's model and budget.
    pub async fn complete(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
    ) -> Result<String, ModelError> {
        self.complete_with(system, messages, None).await
    }

    /// Like [`CallSite::complete`], asking for JSON matching `schema` (structured output
    /// where the provider supports it; the caller still checks what comes back).
    pub async fn complete_json(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
        schema: Arc<serde_json::Value>,
    ) -> Result<String, ModelError> {
        self.complete_with(system, messages, Some(schema)).await
    }

    async fn complete_with(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
        response_schema: Option<Arc<serde_json::Value>>,
    ) -> Result<String, ModelError> {
        let level = Level {
            depth: self.level.depth,
            parent_id: self.level.parent_id.clone(),
            record_parent: self.level.record_parent.clone(),
            system: system.into(),
            toolbelt: Toolbelt::default(),
            specs: Arc::from([]),
            output_schema: None,
            llm: self.level.llm.clone(),
            quiet: true,
            response_schema,
        };
        let mut ignored = String::new();
        match sample(&self.turn, &level, Arc::new(messages), &mut ignored).await {
            Ok(sampled) => Ok(sampled.text),
            Err(SampleError::Stopped) => Err(ModelError::Stopped),
            Err(SampleError::Provider(message)) => Err(ModelError::Provider(message)),
        }
    }

    /// The tools calls may use.
    pub fn toolbelt(&self) -> &Toolbelt {
        &self.level.toolbelt
    }

    pub fn config(&self) -> &AgentConfig {
        &self.turn.config
    }

    pub fn permission_mode(&self) -> PermissionMode {
        self.turn.gate.mode()
    }

    /// Where calls from here sit.
    pub fn place(&self) -> Place<'_> {
        self.level.place()
    }

    pub fn parent_id(&self) -> Option<&str> {
        self.level.parent_id.as_deref()
    }

    pub fn depth(&self) -> u32 {
        self.level.depth
    }

    /// The turn's events (frames to the user).
    pub fn events(&self) -> &EventSink {
        &self.turn.events
    }

    pub fn is_stopped(&self) -> bool {
        self.turn.is_stopped()
    }

    /// Resolves when the turn stops.
    pub async fn stopped(&self) {
        self.turn.cancel.cancelled().await
    }
}
