//! `TurnRequest`: what a caller asks a turn for, typed — built from a socket's
//! `chat_message`, by the prompt API, or by a workflow run.

use std::sync::Arc;

use serde_json::{Map, Value};
use weft_protocol::{
    ChatContext, ChatMessageData, MediaGeneration, MessageContent, PermissionMode,
};

use weft_frames::Refusal;
use weft_tools::client::ClientToolset;

/// Where a request goes: in this order, the saved workflow it names, the media it asks for,
/// else the chat agent.
#[derive(Debug, Clone)]
pub enum Route {
    /// The agent, in an execution mode (`classic` when none is named).
    Chat { mode: Option<String> },
    /// A saved workflow, run as the turn (its `params`, else the message's text as `input`).
    Workflow {
        workflow_id: Option<String>,
        params: Option<Map<String, Value>>,
    },
    /// An image or speech file generated directly.
    Media(MediaGeneration),
}

#[derive(Clone)]
pub struct TurnRequest {
    /// An existing thread of the caller's, or the id of a new one; none: a new thread.
    pub thread_id: Option<String>,
    pub content: MessageContent,
    pub route: Route,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub agent: Option<String>,
    /// Set on the thread before the turn runs.
    pub permission_mode: Option<PermissionMode>,
    pub context: ChatContext,
    /// Long-term memory for this message.
    pub memory: bool,
    /// The `ui_*` tools of the client that asked (editor turns).
    pub client_tools: Option<Arc<ClientToolset>>,
    /// An earlier answer whose exchange (and everything after) this turn replaces.
    pub replaces: Option<String>,
}

impl TurnRequest {
    /// What the turn is started with beyond the defaults, kept for a life that takes it up
    /// after a crash (see [`weft_record::persist::started_with`]).
    pub(crate) fn started_with(&self) -> Option<Value> {
        let client_tools = self
            .client_tools
            .as_ref()
            .map(|tools| tools.current())
            .unwrap_or_default();
        let with = weft_record::persist::started_with(&self.context, self.memory, &client_tools);
        let Route::Workflow {
            workflow_id,
            params,
        } = &self.route
        else {
            return with;
        };
        // A workflow turn: which workflow, on which params (absent: the message's text).
        let mut with = with.unwrap_or_else(|| Value::Object(Map::new()));
        with["workflow"] = serde_json::json!({"id": workflow_id, "params": params});
        Some(with)
    }

    /// A chat turn on `content`, with everything else left to the defaults.
    pub fn chat(content: impl Into<MessageContent>) -> TurnRequest {
        TurnRequest {
            thread_id: None,
            content: content.into(),
            route: Route::Chat { mode: None },
            provider: None,
            model: None,
            agent: None,
            permission_mode: None,
            context: ChatContext::Thread,
            memory: false,
            client_tools: None,
            replaces: None,
        }
    }

    /// A socket's `chat_message`, routed: `workflow_target: "workflow"` is a workflow run,
    /// `media_generation` with a mode other than `chat` is media, anything else the agent.
    /// Only a user speaks through it: any other `role` is refused.
    pub fn from_chat(data: ChatMessageData) -> Result<TurnRequest, Refusal> {
        if data.role != "user" {
            return Err(Refusal::invalid(format!(
                "role must be \"user\", not {:?}: a chat message is the user's",
                weft_protocol::clip(&data.role, 32)
            )));
        }
        let context = data.chat_context();
        let route = if data.workflow_target.as_deref() == Some("workflow") {
            Route::Workflow {
                workflow_id: data.workflow_id,
                params: data.params,
            }
        } else if let Some(media) = data.media_generation.filter(|m| m.mode != "chat") {
            Route::Media(media)
        } else {
            Route::Chat { mode: data.mode }
        };
        Ok(TurnRequest {
            thread_id: data.thread_id,
            content: data.content,
            route,
            provider: data.provider,
            model: data.model,
            agent: data.agent,
            permission_mode: data.permission_mode,
            context,
            memory: data.memory_enabled == Some(true),
            client_tools: None,
            replaces: data.replaces,
        })
    }
}
