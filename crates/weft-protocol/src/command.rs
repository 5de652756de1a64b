//! Client → server commands, each wrapped in `{command, request_id?, data}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::{ChatContext, MessageContent, PermissionMode};

/// The envelope every command travels in; `request_id` is echoed on the reply or error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CommandEnvelope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(flatten)]
    pub command: ClientCommand,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "command", content = "data", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // decoded once per frame; boxing buys nothing
pub enum ClientCommand {
    ChatMessage(ChatMessageData),
    Stop(StopData),
    SetPermissionMode(SetPermissionModeData),
    ResumeChat(ResumeChatData),
}

impl ClientCommand {
    pub fn name(&self) -> &'static str {
        match self {
            ClientCommand::ChatMessage(_) => "chat_message",
            ClientCommand::Stop(_) => "stop",
            ClientCommand::SetPermissionMode(_) => "set_permission_mode",
            ClientCommand::ResumeChat(_) => "resume_chat",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChatMessageData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(default = "user_role")]
    pub role: String,
    #[serde(default)]
    pub content: MessageContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    /// Execution mode (`classic`, `code`, …); absent means `classic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_context: Option<ChatContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_target: Option<String>,
    /// Route 1: the workflow's parameters (absent: the message text is the parameter `input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_generation: Option<MediaGeneration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_enabled: Option<bool>,
    /// An earlier answer of this thread (an assistant message's id) that this message
    /// replaces: the exchange it answered (the user message before it, the answer, and
    /// everything after) is dropped in the same write that starts this turn, and this message
    /// and its answer take their place. Regenerate sends the same content again; edit sends
    /// new content. A refused message drops nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    /// The agent for this turn (the thread remembers it); absent: the thread's, else the
    /// server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Deprecated: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<bool>,
    /// Deprecated: accepted and ignored; the server composes the toolbelt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Deprecated: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collections: Option<Vec<String>>,
}

fn user_role() -> String {
    "user".to_owned()
}

impl ChatMessageData {
    /// The context the chat happens in; absent means a plain thread.
    pub fn chat_context(&self) -> ChatContext {
        self.chat_context.clone().unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MediaGeneration {
    pub mode: String,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StopData {
    pub thread_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SetPermissionModeData {
    pub thread_id: String,
    pub permission_mode: PermissionMode,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResumeChatData {
    pub thread_id: String,
    #[serde(default)]
    pub last_seq: u64,
}
