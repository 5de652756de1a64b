//! Bodies of the REST API (`docs/openapi.json`) that are Weft's own: what a request sends
//! and a response returns, beside the frames and the record the socket shares with it.

use serde::{Deserialize, Serialize};

use crate::record::RecordEntry;
use crate::types::PermissionMode;

/// A thread as `GET /threads` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadSummary {
    pub id: String,
    pub title: String,
    pub permission_mode: PermissionMode,
    /// The agent its turns run (`default`: the server's own).
    pub agent: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// Whether a turn of it is running (on this replica).
    pub active: bool,
}

/// What `PATCH /threads/{id}` changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadChange {
    /// Its new title: 1 to 200 characters (trimmed).
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
}

/// One turn's trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Trace {
    pub message_id: String,
    /// The message's status (`running`, `completed`, …).
    pub status: String,
    /// Root entries in order, each subtask's under the call that ran it.
    pub trace: Vec<RecordEntry>,
}
