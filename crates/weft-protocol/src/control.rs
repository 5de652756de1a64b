//! Control frames (not enveloped): approvals, client tools, client tool results, ping.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::ToolCategory;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    Allow,
    AllowForChat,
    Deny,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlFrame {
    ToolApprovalResponse {
        tool_call_id: String,
        decision: ApprovalDecision,
    },
    ClientToolsManifest {
        tools: Vec<ClientTool>,
    },
    ToolResult {
        tool_call_id: String,
        ok: bool,
        #[serde(default)]
        result: Value,
        /// Why the call failed (`ok: false`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Ping,
}

/// A tool the client runs itself (`ui_*`), advertised by the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: Value,
    /// What a call does, for the gate (default `write`: it asks in Default mode).
    #[serde(default = "ToolCategory::client_default")]
    pub category: ToolCategory,
}
