//! Handling one decoded frame for a connection: commands and control frames. Every bad
//! input gets an `error` frame with its stable code; the socket stays open.

use std::sync::Arc;

use serde_json::Value;
use weft_protocol::{
    decode_inbound, ApprovalDecision, ChatMessageData, ClientCommand, ControlFrame, ErrorCode,
    InboundFrame, ServerEvent, ServerFrame,
};
use weft_protocol::{echo, PermissionMode};
use weft_store::WriteOp;

use crate::auth::User;
use crate::client_tools::ClientToolset;
use crate::connection::detach_orphans;
use crate::outbox::{Outbox, SharedFrame};
use crate::persist::to_wire;
use crate::runner;
use crate::state::AppState;
use crate::threads::{ConnId, ThreadRuntime};
use crate::trace::{root_text, tree_from_items};

/// A refusal: the code and a message for people.
pub type Refusal = (ErrorCode, String);

pub struct Connection {
    pub state: Arc<AppState>,
    pub user: User,
    pub id: ConnId,
    pub outbox: Outbox,
    /// The `ui_*` tools this client runs (editor context).
    pub client_tools: ClientToolset,
}

/// Where a chat frame goes (seed 000's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Workflow,
    Media,
    Chat,
}

pub fn route(data: &ChatMessageData) -> Route {
    if data.workflow_target.as_deref() == Some("workflow") {
        return Route::Workflow;
    }
    if data
        .media_generation
        .as_ref()
        .is_some_and(|m| m.mode != "chat")
    {
        return Route::Media;
    }
    Route::Chat
}

impl Connection {
    pub fn send(&self, event: ServerEvent) {
        self.outbox
            .send(SharedFrame::encode(&ServerFrame::bare(event)));
    }

    pub fn error(&self, code: ErrorCode, message: impl Into<String>, request_id: Option<String>) {
        self.state.metrics.error(code);
        self.send(ServerEvent::error(code, message, request_id));
    }

    pub fn detach(&self) {
        self.client_tools.close();
        detach_orphans(&self.state, self.id);
    }

    pub async fn key_still_valid(&self) -> bool {
        match &self.user.key {
            None => true,
            Some(key) => !matches!(self.state.store.user_for_key(key).await, Ok(None)),
        }
    }

    pub async fn handle(&self, decoded: Result<Value, String>) {
        let value = match decoded {
            Ok(value) => value,
            Err(message) => return self.error(ErrorCode::InvalidJson, message, None),
        };
        match decode_inbound(value) {
            Err(e) => self.error(e.code, e.message, e.request_id),
            Ok(InboundFrame::Command(envelope)) => {
                let request_id = envelope.request_id.clone();
                if let Err((code, message)) = self.command(envelope.command).await {
                    self.error(code, message, request_id);
                }
            }
            Ok(InboundFrame::Control(frame)) => {
                if let Err((code, message)) = self.control(frame).await {
                    self.error(code, message, None);
                }
            }
        }
    }

    async fn command(&self, command: ClientCommand) -> Result<(), Refusal> {
        match command {
            ClientCommand::ChatMessage(data) => {
                if data.agent_mode.is_some() || data.tools.is_some() || data.collections.is_some() {
                    tracing::debug!("ignoring deprecated agent_mode/tools/collections");
                }
                match route(&data) {
                    Route::Workflow => crate::workflow_run::start(self, data).await,
                    Route::Media => crate::media_route::start(self, data).await,
                    Route::Chat => runner::start_turn(self, data).await,
                }
            }
            ClientCommand::Stop(stop) => {
                self.owned_runtime(&stop.thread_id).await?.stop();
                Ok(())
            }
            ClientCommand::SetPermissionMode(change) => {
                let runtime = self.owned_runtime(&change.thread_id).await?;
                let mode = change.permission_mode;
                runtime.gate.set_mode(mode);
                // Queued behind the thread's own creation, which may still be in flight.
                self.state
                    .store
                    .write(WriteOp::SetThreadMode {
                        id: runtime.id.to_string(),
                        mode: mode.as_str().to_owned(),
                    })
                    .await
                    .map_err(internal)?;
                Ok(())
            }
            ClientCommand::ResumeChat(resume) => {
                self.resume(&resume.thread_id, resume.last_seq).await
            }
        }
    }

    async fn control(&self, frame: ControlFrame) -> Result<(), Refusal> {
        match frame {
            ControlFrame::Ping => {
                self.send(ServerEvent::Pong);
                Ok(())
            }
            ControlFrame::ToolApprovalResponse {
                tool_call_id,
                decision,
            } => self.answer_approval(&tool_call_id, decision),
            // Client-run `ui_*` tools join the toolbelt of this connection's editor turns.
            ControlFrame::ClientToolsManifest { tools } => self
                .client_tools
                .set(tools)
                .map_err(|message| (ErrorCode::InvalidField, message)),
            ControlFrame::ToolResult {
                tool_call_id,
                ok,
                result,
                error,
            } => {
                let answer = if ok {
                    Ok(result)
                } else {
                    Err(error.unwrap_or_else(|| "the client reported a failure".to_owned()))
                };
                if self
                    .state
                    .client_calls
                    .answer(&self.user.id, &tool_call_id, answer)
                {
                    Ok(())
                } else {
                    Err((
                        ErrorCode::InvalidField,
                        format!(
                            "no client-run tool call `{}` is pending",
                            echo(&tool_call_id)
                        ),
                    ))
                }
            }
        }
    }

    pub(crate) fn answer_approval(
        &self,
        tool_call_id: &str,
        decision: ApprovalDecision,
    ) -> Result<(), Refusal> {
        let not_pending = || {
            (
                ErrorCode::InvalidField,
                format!("no approval `{}` is pending", echo(tool_call_id)),
            )
        };
        let thread_id = self
            .state
            .hub
            .approval_thread(tool_call_id)
            .ok_or_else(not_pending)?;
        let runtime = self.state.hub.get(&thread_id).ok_or_else(not_pending)?;
        if runtime.owner != self.user.id {
            return Err((
                ErrorCode::Forbidden,
                "that approval belongs to another user's thread".into(),
            ));
        }
        if runtime.gate.respond(tool_call_id, decision) {
            Ok(())
        } else {
            Err(not_pending())
        }
    }

    /// Replay what the client missed of a turn in memory (after the stored snapshot when it
    /// missed more than is kept), then follow it live. With no turn in memory, or a turn that
    /// ended after the client missed more of it than is kept, answer from the store: the
    /// thread's last assistant message (the whole answer) and `chunk {done: true}`.
    pub(crate) async fn resume(&self, thread_id: &str, last_seq: u64) -> Result<(), Refusal> {
        let runtime = self.owned_runtime(thread_id).await?;
        let store = &self.state.store;
        let (missed, active) = runtime.missed(last_seq);
        if active || (!missed.frames.is_empty() && !missed.needs_snapshot) {
            let snapshot = match runtime.active_message().filter(|_| missed.needs_snapshot) {
                Some(message_id) => self.snapshot(&runtime.id, &message_id).await?,
                None => None,
            };
            runtime.resume(self.id, self.outbox.clone(), last_seq, snapshot);
            return Ok(());
        }
        let mut events = Vec::new();
        if let Some(message) = store
            .last_assistant_message(&runtime.id)
            .await
            .map_err(internal)?
        {
            events.push(ServerEvent::Message {
                message: to_wire(&message),
            });
        }
        events.push(ServerEvent::Chunk {
            content: String::new(),
            done: true,
            parent_id: None,
            depth: 0,
        });
        runtime.send_to(&self.outbox, last_seq, events);
        runtime.subscribe(self.id, self.outbox.clone());
        Ok(())
    }

    /// A running turn as stored so far: its text and its tree rebuilt from the record.
    async fn snapshot(
        &self,
        thread_id: &str,
        message_id: &str,
    ) -> Result<Option<ServerEvent>, Refusal> {
        let store = &self.state.store;
        let Some(mut message) = store
            .message(thread_id, message_id)
            .await
            .map_err(internal)?
        else {
            return Ok(None);
        };
        let items = store
            .turn_items(thread_id, message_id)
            .await
            .map_err(internal)?;
        message.content = serde_json::json!(root_text(&items));
        message.execution_tree = Some(std::sync::Arc::new(tree_from_items(&items)));
        Ok(Some(ServerEvent::Message {
            message: to_wire(&message),
        }))
    }

    /// The live runtime of a thread this user owns. A thread in memory is authoritative (its
    /// creation may not be committed yet); otherwise it is read from the store.
    pub async fn owned_runtime(&self, thread_id: &str) -> Result<Arc<ThreadRuntime>, Refusal> {
        let forbidden = || {
            (
                ErrorCode::Forbidden,
                "that thread belongs to another user".to_owned(),
            )
        };
        if let Some(runtime) = self.state.hub.get(thread_id) {
            return if runtime.owner == self.user.id {
                Ok(runtime)
            } else {
                Err(forbidden())
            };
        }
        match self.state.store.thread(thread_id).await.map_err(internal)? {
            None => Err((
                ErrorCode::ThreadNotFound,
                format!("no thread `{thread_id}`"),
            )),
            Some(row) if row.owner != self.user.id => Err(forbidden()),
            Some(row) => {
                let mode = PermissionMode::parse(&row.permission_mode).unwrap_or_default();
                Ok(self.state.hub.get_or_insert(&row.id, &row.owner, mode))
            }
        }
    }
}

pub fn internal(e: impl std::fmt::Display) -> Refusal {
    tracing::error!(error = %e, "internal error");
    (
        ErrorCode::Internal,
        "internal error; see the server log".into(),
    )
}
