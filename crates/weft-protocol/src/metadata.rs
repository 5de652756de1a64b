//! `ToolResultMetadata`: the canonical runtime record of one tool call.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolResultStatus {
    Success,
    Error,
    Rejected,
    TimedOut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    NotRequired,
    Approved,
    Rejected,
    TimedOut,
    /// It was still waiting when the server stopped.
    Expired,
}

impl ToolResultStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolResultStatus::Success => "success",
            ToolResultStatus::Error => "error",
            ToolResultStatus::Rejected => "rejected",
            ToolResultStatus::TimedOut => "timed_out",
        }
    }
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::NotRequired => "not_required",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Rejected => "rejected",
            ApprovalStatus::TimedOut => "timed_out",
            ApprovalStatus::Expired => "expired",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolResultMetadata {
    pub status: ToolResultStatus,
    /// Unix seconds.
    pub started_at: f64,
    /// Unix seconds.
    pub completed_at: f64,
    pub execution_time_ms: f64,
    pub approval_status: ApprovalStatus,
    #[serde(default)]
    pub approval_id: Option<String>,
    #[serde(default)]
    pub injected_args: Map<String, Value>,
    #[serde(default)]
    pub offloaded_artifact_id: Option<String>,
}

impl ToolResultMetadata {
    /// A call answered at `at` (Unix seconds) without running: an error that took no time
    /// and needed no approval (a call cut by a crash, answered rather than run again).
    pub fn not_run(at: f64) -> ToolResultMetadata {
        ToolResultMetadata {
            status: ToolResultStatus::Error,
            started_at: at,
            completed_at: at,
            execution_time_ms: 0.0,
            approval_status: ApprovalStatus::NotRequired,
            approval_id: None,
            injected_args: Map::new(),
            offloaded_artifact_id: None,
        }
    }
}
