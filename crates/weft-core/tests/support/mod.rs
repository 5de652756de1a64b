//! Test harness: run a turn against the scripted provider and read its events back.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod tools;

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use weft_core::{
    AgentMemory, ChatMessage, EventSink, PermissionGate, Provider, ProviderError, ProviderRequest,
    ProviderStream, RateCard, Tool, Toolbelt, TurnOutcome, TurnSpec,
};
use weft_protocol::{AgentConfig, PermissionMode, ServerEvent, ToolCallStatus};
use weft_providers::ScriptedProvider;

/// A provider wrapper that records every request it is sent.
pub struct Recording {
    pub inner: Arc<dyn Provider>,
    pub requests: Mutex<Vec<ProviderRequest>>,
}

#[async_trait::async_trait]
impl Provider for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self, model: &str) -> weft_core::Capabilities {
        self.inner.capabilities(model)
    }
    async fn stream(
        &self,
        request: ProviderRequest,
        cancel: CancellationToken,
    ) -> Result<ProviderStream, ProviderError> {
        self.requests.lock().push(request.clone());
        self.inner.stream(request, cancel).await
    }
}

pub struct Harness {
    pub provider: Arc<Recording>,
    pub tools: Vec<Arc<dyn Tool>>,
    pub config: AgentConfig,
    pub gate: PermissionGate,
    pub cancel: CancellationToken,
    pub memory: AgentMemory,
    pub rate_card: RateCard,
    pub user: String,
    pub workspace: Option<std::path::PathBuf>,
    pub recorder: Arc<dyn weft_core::Recorder>,
    /// History before the user's message.
    pub earlier: Vec<ChatMessage>,
    pub planner: Option<weft_core::PlannerSpec>,
    pub context_window: u64,
    pub artifacts: Option<Arc<dyn weft_core::Artifacts>>,
    /// Take the turn up from here (the history is `earlier` and the user's message).
    pub resume: Option<weft_core::Resume>,
    /// History after the user's message (a resumed turn's rounds so far).
    pub extra_history: Vec<ChatMessage>,
    /// What the turn waits for between rounds.
    pub pace: Option<Arc<dyn weft_core::Pace>>,
    pub chunk_interval: std::time::Duration,
}

/// A recorder that keeps every provider call's record.
#[derive(Default)]
pub struct ModelCalls(pub Mutex<Vec<weft_core::ModelCallRecord>>);

impl weft_core::Recorder for ModelCalls {
    fn assistant(&self, _: weft_core::Place<'_>, _: &str, _: &[weft_core::Call]) {}
    fn results(&self, _: weft_core::Place<'_>, _: &[weft_core::RecordedResult<'_>]) {}
    fn model_call(&self, call: &weft_core::ModelCallRecord) {
        self.0.lock().push(call.clone());
    }
}

/// A recorder that keeps a line per recorded round, for asserting the record.
#[derive(Default)]
pub struct RecordLines(pub Mutex<Vec<String>>);

impl weft_core::Recorder for RecordLines {
    fn assistant(&self, place: weft_core::Place<'_>, text: &str, calls: &[weft_core::Call]) {
        let names: Vec<&str> = calls.iter().map(|c| c.request.name.as_str()).collect();
        self.0.lock().push(format!(
            "d{} assistant {text:?} {}",
            place.depth,
            names.join(",")
        ));
    }
    fn results(&self, place: weft_core::Place<'_>, results: &[weft_core::RecordedResult<'_>]) {
        let names: Vec<String> = results
            .iter()
            .map(|r| format!("{}{}", r.name, if r.is_error { "!" } else { "" }))
            .collect();
        self.0
            .lock()
            .push(format!("d{} results {}", place.depth, names.join(",")));
    }
    fn summary(&self, place: weft_core::Place<'_>, summary: &str, kept: usize) {
        self.0
            .lock()
            .push(format!("d{} summary {summary:?} kept {kept}", place.depth));
    }
}

impl Harness {
    pub fn new(script: Value) -> Self {
        let inner: Arc<dyn Provider> = Arc::new(ScriptedProvider::from_value(script).unwrap());
        Harness {
            provider: Arc::new(Recording {
                inner,
                requests: Mutex::new(Vec::new()),
            }),
            tools: vec![Arc::new(weft_core::RunSubtaskTool)],
            config: AgentConfig::default(),
            gate: PermissionGate::new(PermissionMode::Auto),
            cancel: CancellationToken::new(),
            memory: AgentMemory::new(),
            rate_card: RateCard::new(),
            user: "go".to_owned(),
            workspace: None,
            recorder: Arc::new(weft_core::NoRecord),
            earlier: Vec::new(),
            planner: None,
            context_window: 128_000,
            artifacts: None,
            resume: None,
            extra_history: Vec::new(),
            pace: None,
            chunk_interval: std::time::Duration::ZERO,
        }
    }

    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    pub fn config(mut self, f: impl FnOnce(&mut AgentConfig)) -> Self {
        f(&mut self.config);
        self
    }

    pub fn mode(self, mode: PermissionMode) -> Self {
        self.gate.set_mode(mode);
        self
    }

    pub fn user(mut self, text: &str) -> Self {
        self.user = text.to_owned();
        self
    }

    pub fn spec(&self, events: EventSink) -> TurnSpec {
        TurnSpec {
            provider: self.provider.clone(),
            model: "test-model".to_owned(),
            system_prompt: "You are a test agent.".into(),
            history: self
                .earlier
                .iter()
                .cloned()
                .chain([ChatMessage::user(self.user.as_str())])
                .chain(self.extra_history.iter().cloned())
                .collect(),
            toolbelt: Toolbelt::new(self.tools.clone()),
            config: Arc::new(self.config.clone()),
            gate: self.gate.clone(),
            rate_card: Arc::new(self.rate_card.clone()),
            events,
            cancel: self.cancel.clone(),
            memory: self.memory.clone(),
            user_id: Arc::from("tester"),
            workspace_root: self.workspace.clone().map(|p| Arc::from(p.as_path())),
            recorder: self.recorder.clone(),
            planner: self.planner.clone(),
            context_window: self.context_window,
            artifacts: self.artifacts.clone(),
            resume: self.resume.clone(),
            pace: self.pace.clone(),
            chunk_interval: self.chunk_interval,
        }
    }

    /// Run the turn to its end and return the outcome and every event emitted.
    pub async fn run(&self) -> (TurnOutcome, Vec<ServerEvent>) {
        let (sink, mut rx) = EventSink::channel();
        let outcome = weft_core::run_classic_turn(self.spec(sink)).await;
        let mut events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            events.push(e);
        }
        (outcome, events)
    }
}

/// A compact, stable line per event, for asserting whole sequences.
pub fn line(event: &ServerEvent) -> String {
    match event {
        ServerEvent::Chunk {
            content,
            depth,
            parent_id,
            ..
        } => {
            format!("chunk d{depth}{} {content:?}", parent(parent_id))
        }
        ServerEvent::ToolCallUpdate {
            tool_call_id,
            name,
            status: ToolCallStatus::Start,
            depth,
            parent_id,
            ..
        } => {
            format!(
                "start d{depth}{} {name}#{}",
                parent(parent_id),
                hint(tool_call_id)
            )
        }
        ServerEvent::ToolCallUpdate {
            tool_call_id,
            name,
            status: ToolCallStatus::End,
            depth,
            parent_id,
            is_error,
            ..
        } => {
            let err = if *is_error == Some(true) {
                " ERROR"
            } else {
                ""
            };
            format!(
                "end d{depth}{} {name}#{}{err}",
                parent(parent_id),
                hint(tool_call_id)
            )
        }
        ServerEvent::ToolApprovalRequest {
            tool_call_id, name, ..
        } => format!("approval? {name}#{}", hint(tool_call_id)),
        ServerEvent::ToolApprovalResolved {
            tool_call_id,
            decision,
        } => format!("approval! {} {decision}", hint(tool_call_id)),
        ServerEvent::BudgetExceeded {
            reason,
            limit,
            observed,
            ends_turn,
            ..
        } => format!(
            "budget {} {}/{}{}",
            reason.as_str(),
            observed.0,
            limit.0,
            if *ends_turn { " END" } else { "" }
        ),
        ServerEvent::CostSummary {
            llm_calls,
            tool_calls,
            ..
        } => format!("cost llm={llm_calls} tools={tool_calls}"),
        other => format!("{other:?}"),
    }
}

fn parent(p: &Option<String>) -> String {
    p.as_ref()
        .map(|p| format!(" <{}>", hint(p)))
        .unwrap_or_default()
}

/// The provider's id inside a wire id (`c1~k3f9a21` → `c1`).
pub fn hint(wire_id: &str) -> &str {
    wire_id.split('~').next().unwrap_or(wire_id)
}

/// The wire id of the call the provider named `id`.
pub fn wire_id(events: &[ServerEvent], id: &str) -> String {
    events
        .iter()
        .find_map(|e| match e {
            ServerEvent::ToolCallUpdate { tool_call_id, .. } if hint(tool_call_id) == id => {
                Some(tool_call_id.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no call {id}"))
}

pub fn lines(events: &[ServerEvent]) -> Vec<String> {
    events.iter().map(line).collect()
}

/// The `end` event's result text for a call id.
pub fn result_of(events: &[ServerEvent], id: &str) -> (String, bool) {
    events
        .iter()
        .find_map(|e| match e {
            ServerEvent::ToolCallUpdate {
                tool_call_id,
                status: ToolCallStatus::End,
                result,
                is_error,
                ..
            } if hint(tool_call_id) == id => Some((
                result.clone().unwrap_or_default(),
                is_error.unwrap_or(false),
            )),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no end event for {id}"))
}

/// The metadata on the `end` event of a call.
pub fn metadata_of(events: &[ServerEvent], id: &str) -> weft_protocol::ToolResultMetadata {
    events
        .iter()
        .find_map(|e| match e {
            ServerEvent::ToolCallUpdate {
                tool_call_id,
                status: ToolCallStatus::End,
                metadata,
                ..
            } if hint(tool_call_id) == id => metadata.as_deref().cloned(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no metadata for {id}"))
}

/// Every tool call in the history has exactly one result.
pub fn assert_no_orphans(history: &[ChatMessage]) {
    use weft_core::Role;
    let calls: Vec<&str> = history
        .iter()
        .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
        .collect();
    let results: Vec<&str> = history
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    for id in &calls {
        assert_eq!(
            results.iter().filter(|r| *r == id).count(),
            1,
            "call {id} must have exactly one result"
        );
    }
}
