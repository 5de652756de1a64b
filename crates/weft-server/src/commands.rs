//! Handling one decoded frame for a connection: commands and control frames. Every bad
//! input gets an `error` frame with its stable code; the socket stays open.

use std::sync::Arc;

use serde_json::Value;
use weft_protocol::{
    decode_inbound, ApprovalDecision, ChatMessageData, ClientCommand, ControlFrame, ErrorCode,
    InboundFrame, ServerEvent, ServerFrame,
};
use weft_store::ThreadRow;

use crate::auth::User;
use crate::connection::detach_orphans;
use crate::runner;
use crate::state::AppState;
use crate::threads::{ConnId, Outbound, OutboundTx};

/// A refusal: the code and a message for people.
pub type Refusal = (ErrorCode, String);

pub struct Connection {
    pub state: Arc<AppState>,
    pub user: User,
    pub id: ConnId,
    pub tx: OutboundTx,
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
        let _ = self
            .tx
            .send(Outbound::Frame(Arc::new(ServerFrame::bare(event))));
    }

    pub fn error(&self, code: ErrorCode, message: impl Into<String>, request_id: Option<String>) {
        self.state.metrics.error(code);
        self.send(ServerEvent::error(code, message, request_id));
    }

    pub fn detach(&self) {
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
                    Route::Workflow => Err((
                        ErrorCode::UnsupportedRoute,
                        "running saved workflows is not available on this server yet".into(),
                    )),
                    Route::Media => Err((
                        ErrorCode::UnsupportedRoute,
                        "media generation is not available on this server yet".into(),
                    )),
                    Route::Chat => runner::start_turn(self, data).await,
                }
            }
            ClientCommand::Stop(stop) => {
                self.owned_thread(&stop.thread_id).await?;
                if let Some(runtime) = self.state.hub.get(&stop.thread_id) {
                    runtime.stop();
                }
                Ok(())
            }
            ClientCommand::SetPermissionMode(change) => {
                let row = self.owned_thread(&change.thread_id).await?;
                let mode = change.permission_mode;
                let runtime = self.state.hub.get_or_insert(&row.id, &row.owner, mode);
                runtime.gate.set_mode(mode);
                self.state
                    .store
                    .set_thread_mode(&row.id, mode.as_str())
                    .await
                    .map_err(internal)?;
                Ok(())
            }
            ClientCommand::ResumeChat(resume) => {
                let row = self.owned_thread(&resume.thread_id).await?;
                let mode =
                    weft_protocol::PermissionMode::parse(&row.permission_mode).unwrap_or_default();
                let runtime = self.state.hub.get_or_insert(&row.id, &row.owner, mode);
                runtime.resume(self.id, self.tx.clone(), resume.last_seq);
                Ok(())
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
            ControlFrame::ClientToolsManifest { tools } => {
                // Client-run `ui_*` tools join the toolbelt only in the editor context,
                // which this server does not offer yet; the manifest is accepted.
                tracing::debug!(count = tools.len(), "client tools manifest received");
                Ok(())
            }
            ControlFrame::ToolResult { tool_call_id, .. } => Err((
                ErrorCode::InvalidField,
                format!("no client-run tool call `{tool_call_id}` is pending"),
            )),
        }
    }

    fn answer_approval(
        &self,
        tool_call_id: &str,
        decision: ApprovalDecision,
    ) -> Result<(), Refusal> {
        let not_pending = || {
            (
                ErrorCode::InvalidField,
                format!("no approval `{tool_call_id}` is pending"),
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

    /// The thread, if it exists and belongs to this user.
    pub async fn owned_thread(&self, thread_id: &str) -> Result<ThreadRow, Refusal> {
        match self.state.store.thread(thread_id).await.map_err(internal)? {
            None => Err((
                ErrorCode::ThreadNotFound,
                format!("no thread `{thread_id}`"),
            )),
            Some(row) if row.owner != self.user.id => Err((
                ErrorCode::Forbidden,
                "that thread belongs to another user".into(),
            )),
            Some(row) => Ok(row),
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
