//! The compact execution tree persisted with an assistant message.

use serde::{Deserialize, Serialize};

/// Previews in the tree are at most this many characters.
pub const PREVIEW_MAX_CHARS: usize = 500;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecutionTreeSnapshot {
    pub version: u32,
    pub nodes: Vec<ExecutionTreeNode>,
}

impl Default for ExecutionTreeSnapshot {
    fn default() -> Self {
        ExecutionTreeSnapshot {
            version: 1,
            nodes: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecutionTreeNode {
    /// The tool call id.
    pub id: String,
    pub parent_id: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_preview: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_preview: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    pub duration_ms: f64,
}

/// Cut `text` to at most [`PREVIEW_MAX_CHARS`] characters, ending with `…` when cut.
pub fn preview(text: &str) -> String {
    if text.chars().count() <= PREVIEW_MAX_CHARS {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(PREVIEW_MAX_CHARS - 1).collect();
    out.push('…');
    out
}
