//! The conversation as providers see it: roles, text or image content, tool calls and results.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weft_protocol::MessageContent;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    Tool,
}

/// A tool call exactly as the model emitted it; `arguments` is raw JSON text and may be
/// malformed. Shared: the history and the turn's execution tree hold the same text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    pub id: String,
    pub name: String,
    pub arguments: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: MessageContent,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// For `Role::Tool`: the call this result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ChatMessage {
    pub fn user(content: impl Into<MessageContent>) -> Self {
        ChatMessage {
            role: Role::User,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
        }
    }

    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCallRequest>) -> Self {
        ChatMessage {
            role: Role::Assistant,
            content: MessageContent::Text(text.into()),
            tool_calls,
            tool_call_id: None,
            is_error: false,
        }
    }

    pub fn tool_result(
        tool_call_id: impl Into<String>,
        text: impl Into<String>,
        is_error: bool,
    ) -> Self {
        ChatMessage {
            role: Role::Tool,
            content: MessageContent::Text(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(tool_call_id.into()),
            is_error,
        }
    }

    /// The text content (image parts skipped).
    pub fn text(&self) -> String {
        self.content.text()
    }
}
