//! The engine's services for execution modes other than `classic` (code mode): model calls,
//! text for the user, the mode's own calls (`code.execute`) as events and record, and tool
//! calls made from inside them through the very path classic calls take — validation, the
//! gate and approvals, budget, timeouts, truncation or offloading, metadata, events, record.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::Value;
use weft_protocol::{
    AgentConfig, ApprovalStatus, PermissionMode, ServerEvent, ToolCallStatus, ToolResultMetadata,
    ToolResultStatus,
};

use crate::calls::CallSite;
use crate::clock::{millis, unix_now};
use crate::level::Level;
use crate::message::{ChatMessage, ToolCallRequest};
use crate::record::{new_call_id, Call, Place, RecordedResult};
use crate::recursion::ENGINE;
use crate::resume::{CutCall, MadeCall, Resume};
use crate::sample::{sample, SampleError};
use crate::spec::{TurnEnd, TurnOutcome, TurnSpec};
use crate::tool::{ModelError, ToolOutcome};
use crate::toolbelt::Toolbelt;
use crate::turn::{finish, Turn};

/// A turn driven by a mode of its own.
pub struct HostedTurn {
    turn: Arc<Turn>,
    root: Level,
    /// Everything said to the user, in order: the turn's answer.
    text: Mutex<String>,
    /// Media the answer carries after its text.
    attachments: Mutex<Vec<weft_protocol::ContentPart>>,
}

/// A call the mode runs itself (`code.execute`), open until [`HostedTurn::close_call`].
pub struct OpenCall {
    pub wire_id: String,
    name: String,
    started_at: f64,
    started: Instant,
    /// Where its inner calls are made (depth 1, under this call).
    inner: CallSite,
}

impl HostedTurn {
    pub fn start(spec: &TurnSpec) -> HostedTurn {
        let turn = Arc::new(Turn::new(spec, &ENGINE));
        let root = Level::root(&turn.config, &turn.llm, spec, None);
        // A resumed turn's answer goes on from what it had said.
        let said = spec
            .resume
            .as_ref()
            .map(|r| r.text.clone())
            .unwrap_or_default();
        HostedTurn {
            turn,
            root,
            text: Mutex::new(said),
            attachments: Mutex::new(Vec::new()),
        }
    }

    pub fn config(&self) -> &AgentConfig {
        &self.turn.config
    }

    /// The tools calls may use.
    pub fn toolbelt(&self) -> &Toolbelt {
        &self.root.toolbelt
    }

    pub fn permission_mode(&self) -> PermissionMode {
        self.turn.gate.mode()
    }

    pub fn is_stopped(&self) -> bool {
        self.turn.is_stopped()
    }

    /// Resolves when the turn stops.
    pub async fn stopped(&self) {
        self.turn.cancel.cancelled().await
    }

    /// Resolves once the turn's wall clock has run out (waits for a person left out).
    pub async fn wall_clock_out(&self) {
        self.turn.budget.wall_clock_out().await
    }

    /// End the turn for running out of wall clock (if it has).
    pub fn check_wall_clock(&self) {
        if let Err(trip) = self.turn.budget.check_wall_clock() {
            self.turn.trip(trip);
        }
    }

    /// One model call without tools; its text is not streamed. Charges the budget.
    pub async fn complete(
        &self,
        system: &str,
        messages: Vec<ChatMessage>,
    ) -> Result<String, ModelError> {
        let level = Level {
            depth: 0,
            parent_id: None,
            record_parent: None,
            system: system.into(),
            toolbelt: Toolbelt::default(),
            specs: Arc::from([]),
            output_schema: None,
            llm: self.root.llm.clone(),
            quiet: true,
            response_schema: None,
        };
        let mut ignored = String::new();
        match sample(&self.turn, &level, Arc::new(messages), &mut ignored).await {
            Ok(sampled) => Ok(sampled.text),
            Err(SampleError::Stopped) => Err(ModelError::Stopped),
            Err(SampleError::Provider(message)) => {
                self.turn.stop(TurnEnd::ProviderError(message.clone()));
                Err(ModelError::Provider(message))
            }
        }
    }

    /// Text for the user: a root `chunk`, and part of the turn's answer, charged to the
    /// turn's `max_output_bytes`. Past it only what fits is said and the turn stops
    /// (`budget_exceeded`, reason `bytes`); false when nothing more may be said.
    pub fn say(&self, text: &str) -> bool {
        if text.is_empty() {
            return true;
        }
        let text = match self.turn.budget.take_output_bytes(text.len()) {
            Ok(()) => text,
            Err((fits, trip)) => {
                self.say_unbudgeted(cut_at_char(text, fits));
                self.turn.trip(trip);
                return false;
            }
        };
        self.say_unbudgeted(text);
        true
    }

    fn say_unbudgeted(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.text.lock().push_str(text);
        self.turn.events.emit(ServerEvent::Chunk {
            content: text.to_owned(),
            done: false,
            parent_id: None,
            depth: 0,
        });
    }

    /// Open a call of the mode's own at the root: its `start` event and, in the record, the
    /// model's `response` carrying it. Counts as a tool call.
    pub fn open_call(&self, response: &str, name: &str, args: Value) -> Result<OpenCall, String> {
        let wire_id = new_call_id(name);
        let request = ToolCallRequest {
            id: wire_id.clone(),
            name: name.to_owned(),
            arguments: args.to_string().into(),
        };
        let call = Call {
            wire_id: wire_id.clone(),
            request,
        };
        self.turn
            .recorder
            .assistant(self.root.place(), response, std::slice::from_ref(&call));
        self.open(wire_id, name, args, Vec::new())
    }

    /// Open again the call a resumed turn was cut in (its response is on record already):
    /// its `start` event again, same id. The calls it had made are met again while the same
    /// ones are made: a result on record is given back, a read (or idempotent call) or one
    /// that waited for its approval runs (or is asked for) again, and any other is answered
    /// that it may or may not have taken effect.
    pub fn reopen_call(&self, cut: &CutCall) -> Result<OpenCall, String> {
        let args = serde_json::from_str(&cut.call.request.arguments)
            .unwrap_or_else(|_| Value::String(cut.call.request.arguments.to_string()));
        let made = cut
            .child
            .as_ref()
            .map(|c| c.made_calls())
            .unwrap_or_default();
        self.open(cut.call.wire_id.clone(), &cut.call.request.name, args, made)
    }

    fn open(
        &self,
        wire_id: String,
        name: &str,
        args: Value,
        made: Vec<MadeCall>,
    ) -> Result<OpenCall, String> {
        self.turn.events.emit(ServerEvent::ToolCallUpdate {
            tool_call_id: wire_id.clone(),
            name: name.to_owned(),
            status: ToolCallStatus::Start,
            args: Some(args),
            result: None,
            is_error: None,
            parent_id: None,
            depth: 0,
            metadata: None,
        });
        if let Err(trip) = self.turn.budget.take_tool_call() {
            self.turn.trip(trip);
            return Err(trip.to_string());
        }
        let inner = CallSite::new(
            self.turn.clone(),
            1,
            Some(wire_id.clone()),
            &self.root.toolbelt,
        )
        .replaying(made);
        Ok(OpenCall {
            wire_id,
            name: name.to_owned(),
            started_at: unix_now(),
            started: Instant::now(),
            inner,
        })
    }

    /// A resumed turn's starting point, once: what it had said, spent, and the round it was
    /// cut in.
    pub fn take_resume(&self) -> Option<Resume> {
        self.turn.take_resume()
    }

    /// Calls made at the root (a workflow run's nodes).
    pub fn root_site(&self) -> CallSite {
        CallSite::new(self.turn.clone(), 0, None, &self.root.toolbelt)
    }

    /// One tool call from inside `parent`, exactly as the classic loop runs one.
    pub async fn call_tool(&self, parent: &OpenCall, name: &str, arguments: String) -> ToolOutcome {
        parent.inner.call_tool(name, arguments).await
    }

    /// Close a call of the mode's own: its `end` event and its result in the record. Returns
    /// the result as recorded (cut to `tool_result_max_bytes`).
    pub fn close_call(&self, call: OpenCall, content: String, is_error: bool) -> String {
        let metadata = ToolResultMetadata {
            status: if is_error {
                ToolResultStatus::Error
            } else {
                ToolResultStatus::Success
            },
            started_at: call.started_at,
            completed_at: unix_now(),
            execution_time_ms: millis(call.started.elapsed()),
            approval_status: ApprovalStatus::NotRequired,
            approval_id: None,
            injected_args: Default::default(),
            offloaded_artifact_id: None,
        };
        let content =
            crate::truncate::truncate_result(content, self.turn.config.tool_result_max_bytes);
        self.turn.events.emit(ServerEvent::ToolCallUpdate {
            tool_call_id: call.wire_id.clone(),
            name: call.name.clone(),
            status: ToolCallStatus::End,
            args: None,
            result: Some(content.clone()),
            is_error: Some(is_error),
            parent_id: None,
            depth: 0,
            metadata: Some(Box::new(metadata.clone())),
        });
        self.turn.recorder.results(
            self.root.place(),
            &[RecordedResult {
                id: &call.wire_id,
                call_id: &call.wire_id,
                name: &call.name,
                content: &content,
                is_error,
                metadata: &metadata,
            }],
        );
        content
    }

    /// A workflow node that may act is about to run: its start is on record once this
    /// returns (an error: it could not be kept).
    pub async fn node_started(&self, node_id: &str) -> Result<(), String> {
        self.turn.recorder.node(node_id, None);
        self.turn.recorder.before_effect().await
    }

    /// A workflow node completed: its outputs go in the turn's record.
    pub fn node_completed(&self, node_id: &str, outputs: &serde_json::Map<String, Value>) {
        self.turn.recorder.node(node_id, Some(outputs));
    }

    /// Answer a root call a cut run had made and never had answered: the call is not run
    /// again (it may or may not have taken effect), and the record says it was interrupted.
    pub fn close_interrupted(&self, wire_id: &str, call_id: &str, name: &str) {
        let metadata = ToolResultMetadata::not_run(unix_now());
        self.turn.recorder.results(
            self.root.place(),
            &[RecordedResult {
                id: wire_id,
                call_id,
                name,
                content: weft_protocol::INTERRUPTED_RESULT,
                is_error: true,
                metadata: &metadata,
            }],
        );
    }

    /// Record a final response with no call (a text-only answer) at the root.
    pub fn record_answer(&self, text: &str) {
        self.turn.recorder.assistant(self.root.place(), text, &[]);
    }

    /// End the turn for running out of rounds (`iterations`).
    pub fn out_of_rounds(&self, max: u32) {
        self.turn.trip(crate::budget::BudgetTrip {
            reason: weft_protocol::BudgetReason::Iterations,
            limit: f64::from(max),
            observed: f64::from(max) + 1.0,
        });
    }

    /// The turn's outcome: `cost_summary`, the tree, the totals, the answer.
    pub fn finish(self, history: Vec<ChatMessage>) -> TurnOutcome {
        let end = match self.turn.end() {
            Some(end) => end,
            None if self.turn.is_stopped() => TurnEnd::Cancelled,
            None => TurnEnd::Completed,
        };
        let text = std::mem::take(&mut *self.text.lock());
        let mut outcome = finish(&self.turn, end, text, history);
        outcome.attachments = std::mem::take(&mut *self.attachments.lock());
        outcome
    }

    /// Add media (an image, audio) to the answer, after its text.
    pub fn attach(&self, part: weft_protocol::ContentPart) {
        self.attachments.lock().push(part);
    }
}

impl OpenCall {
    /// Where inner calls sit in the record.
    pub fn place(&self) -> Place<'_> {
        self.inner.place()
    }
}

/// The longest start of `text` of at most `bytes` bytes that ends on a character.
fn cut_at_char(text: &str, bytes: usize) -> &str {
    let mut end = bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
