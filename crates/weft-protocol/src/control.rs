//! Control frames (not enveloped): approvals, client tools, client tool results, ping.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::ToolCategory;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    Allow,
    AllowForChat,
    Deny,
}

/// How an approval request ended (`tool_approval_resolved.decision`): the user's decision,
/// or that it timed out or was cancelled with its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalOutcome {
    Allow,
    AllowForChat,
    Deny,
    TimedOut,
    Cancelled,
}

impl From<ApprovalDecision> for ApprovalOutcome {
    fn from(decision: ApprovalDecision) -> Self {
        match decision {
            ApprovalDecision::Allow => ApprovalOutcome::Allow,
            ApprovalDecision::AllowForChat => ApprovalOutcome::AllowForChat,
            ApprovalDecision::Deny => ApprovalOutcome::Deny,
        }
    }
}

impl ApprovalOutcome {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalOutcome::Allow => "allow",
            ApprovalOutcome::AllowForChat => "allow_for_chat",
            ApprovalOutcome::Deny => "deny",
            ApprovalOutcome::TimedOut => "timed_out",
            ApprovalOutcome::Cancelled => "cancelled",
        }
    }

    /// The approval record's status: `approved`, `rejected` or `timed_out`.
    pub fn status(self) -> &'static str {
        match self {
            ApprovalOutcome::Allow | ApprovalOutcome::AllowForChat => "approved",
            ApprovalOutcome::TimedOut => "timed_out",
            ApprovalOutcome::Deny | ApprovalOutcome::Cancelled => "rejected",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlFrame {
    ToolApprovalResponse {
        tool_call_id: String,
        decision: ApprovalDecision,
        /// Why (a denial's reason reaches the model with the call's result).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

impl std::fmt::Display for ApprovalOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
