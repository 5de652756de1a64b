//! One decoded frame of a socket, turned into a runtime call: a chat message starts a turn,
//! `stop`, `set_permission_mode` and `resume_chat` act on a thread, control frames answer
//! approvals and client-run calls. Every bad input gets an `error` frame with its stable
//! code; the socket stays open.

use std::sync::Arc;

use serde_json::Value;
use weft_protocol::{
    decode_inbound, ClientCommand, ControlFrame, ErrorCode, InboundFrame, ServerEvent, ServerFrame,
};
use weft_runtime::{FrameSink, Refusal, TurnRequest};
use weft_tools::client::ClientToolset;

use crate::auth::AuthUser;
use crate::codec::DecodeError;
use crate::outbox::Outbox;
use crate::state::ServerState;

/// A socket as the commands see it.
pub struct Connection {
    pub state: Arc<ServerState>,
    pub user: AuthUser,
    pub outbox: Arc<Outbox>,
    /// The `ui_*` tools this client runs (editor context).
    pub client_tools: Arc<ClientToolset>,
}

impl Connection {
    pub fn send(&self, event: ServerEvent) {
        self.outbox.push_frame(&ServerFrame::bare(event));
    }

    pub fn error(&self, code: ErrorCode, message: impl Into<String>, request_id: Option<String>) {
        self.state.runtime.metrics.error(code);
        self.send(ServerEvent::error(code, message, request_id));
    }

    /// The socket closed: its client-run calls fail, and turns it leaves unwatched stop
    /// after the grace period.
    pub fn detach(&self) {
        self.client_tools.close();
        self.state.runtime.detach(self.outbox.id());
    }

    pub async fn key_still_valid(&self) -> bool {
        match &self.user.key {
            None => true,
            Some(key) => !matches!(self.state.runtime.store.user_for_key(key).await, Ok(None)),
        }
    }

    pub async fn handle(&self, decoded: Result<Value, DecodeError>) {
        let value = match decoded {
            Ok(value) => value,
            Err(e) => return self.error(ErrorCode::InvalidJson, e.to_string(), None),
        };
        match decode_inbound(value) {
            Err(e) => self.error(e.code, e.message, e.request_id),
            Ok(InboundFrame::Command(envelope)) => {
                let request_id = envelope.request_id.clone();
                if let Err(refusal) = self.command(envelope.command).await {
                    self.error(refusal.code, refusal.message, request_id);
                }
            }
            Ok(InboundFrame::Control(frame)) => {
                if let Err(refusal) = self.control(frame).await {
                    self.error(refusal.code, refusal.message, None);
                }
            }
        }
    }

    async fn command(&self, command: ClientCommand) -> Result<(), Refusal> {
        let runtime = &self.state.runtime;
        let user = &self.user.id;
        match command {
            ClientCommand::ChatMessage(data) => {
                if data.agent_mode.is_some() || data.tools.is_some() || data.collections.is_some() {
                    tracing::debug!("ignoring deprecated agent_mode/tools/collections");
                }
                let mut request = TurnRequest::from_chat(data)?;
                request.client_tools = Some(self.client_tools.clone());
                let sink: Arc<dyn FrameSink> = self.outbox.clone();
                runtime.start_turn(user, request, sink).await.map(|_| ())
            }
            ClientCommand::Stop(stop) => runtime.stop(user, &stop.thread_id).await,
            ClientCommand::SetPermissionMode(change) => {
                runtime
                    .set_permission_mode(user, &change.thread_id, change.permission_mode)
                    .await
            }
            ClientCommand::ResumeChat(resume) => {
                let sink: Arc<dyn FrameSink> = self.outbox.clone();
                runtime
                    .resume(user, &resume.thread_id, resume.last_seq, sink)
                    .await
            }
        }
    }

    async fn control(&self, frame: ControlFrame) -> Result<(), Refusal> {
        let runtime = &self.state.runtime;
        match frame {
            ControlFrame::Ping => {
                self.send(ServerEvent::Pong);
                Ok(())
            }
            ControlFrame::ToolApprovalResponse {
                tool_call_id,
                decision,
                reason,
            } => {
                runtime
                    .answer_approval(&self.user.id, &tool_call_id, decision, reason)
                    .await
            }
            // Client-run `ui_*` tools join the toolbelt of this connection's editor turns.
            ControlFrame::ClientToolsManifest { tools } => {
                self.client_tools.set(tools).map_err(Refusal::invalid)
            }
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
                runtime.answer_client_call(&self.user.id, &tool_call_id, answer)
            }
        }
    }
}
