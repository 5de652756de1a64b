//! Small shared vocabulary: permission modes, tool categories and classes, chat context, content.

use serde::{Deserialize, Serialize};

/// Per-thread trust level deciding what a gated tool call does.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Only `read` tools run; everything else is refused and the agent proposes instead.
    Plan,
    /// `read` tools run; every other call asks the user first.
    #[default]
    Default,
    /// Every call runs without asking (except `hitl_tools`).
    Auto,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Plan => "plan",
            PermissionMode::Default => "default",
            PermissionMode::Auto => "auto",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "plan" => Some(PermissionMode::Plan),
            "default" => Some(PermissionMode::Default),
            "auto" => Some(PermissionMode::Auto),
            _ => None,
        }
    }
}

/// What a tool call does to the world, deciding approval per mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolCategory {
    Read,
    Write,
    Execute,
    External,
}

impl ToolCategory {
    /// A client-run tool that does not say: it changes the client's state.
    pub fn client_default() -> Self {
        ToolCategory::Write
    }
}

/// Whether a tool exists in a session's toolbelt at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyClass {
    Safe,
    Knowledge,
    Network,
    WorkspaceWrite,
    EditorMutate,
    Subagent,
    Secrets,
}

/// Where the chat happens; `editor` unlocks editor-mutating tools.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChatContext {
    #[default]
    Thread,
    Editor {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workflow_id: Option<String>,
    },
}

/// A user message body: plain text or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl Default for MessageContent {
    fn default() -> Self {
        MessageContent::Text(String::new())
    }
}

impl From<&str> for MessageContent {
    fn from(s: &str) -> Self {
        MessageContent::Text(s.to_owned())
    }
}

impl From<String> for MessageContent {
    fn from(s: String) -> Self {
        MessageContent::Text(s)
    }
}

impl MessageContent {
    /// Whether there is nothing to send: no text but blanks, and no media.
    pub fn is_empty(&self) -> bool {
        match self {
            MessageContent::Text(t) => t.trim().is_empty(),
            MessageContent::Parts(parts) => parts.iter().all(|p| match p {
                ContentPart::Text { text } => text.trim().is_empty(),
                ContentPart::ImageUrl { .. } | ContentPart::AudioUrl { .. } => false,
            }),
        }
    }

    /// The text of the message, parts joined by newlines; images are skipped.
    pub fn text(&self) -> String {
        match self {
            MessageContent::Text(t) => t.clone(),
            MessageContent::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::ImageUrl { .. } | ContentPart::AudioUrl { .. } => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text {
        text: String,
    },
    ImageUrl {
        image_url: String,
    },
    /// Generated audio (route 2, `text_to_speech`); never sent to a model.
    AudioUrl {
        audio_url: String,
    },
}
