//! Bodies of the REST API (`docs/openapi.json`) that are Weft's own: what a request sends
//! and a response returns, beside the frames and the record the socket shares with it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// How a document's text is written, for splitting it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Format")]
pub enum DocumentFormat {
    #[default]
    Text,
    Markdown,
    Html,
}

/// A collection to create.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NewCollection {
    /// 1–64 letters, digits, `-`, `_`, `.`, not starting with `_`.
    #[schemars(pattern(COLLECTION_NAME_PATTERN))]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub shared: bool,
}

/// What a collection's name may be (as `GET /collections/{name}` and `POST /collections` check it).
pub const COLLECTION_NAME_PATTERN: &str = "^[A-Za-z0-9.-][A-Za-z0-9._-]{0,63}$";

/// A document to add: `text` (with its `format`) or a `url` to fetch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NewDocumentBody {
    /// Required with `text`; a URL's title defaults to the URL.
    #[serde(default)]
    pub title: String,
    /// At most 5 MiB.
    pub text: Option<String>,
    /// Fetched through the SSRF guard.
    pub url: Option<String>,
    #[serde(default)]
    pub format: DocumentFormat,
    /// An object kept with the document.
    #[serde(default)]
    pub metadata: Option<Value>,
}

/// A knowledge collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Collection {
    pub id: String,
    pub name: String,
    pub description: String,
    /// Its owner's user id.
    pub owner: String,
    /// Listed and searchable by everyone.
    pub shared: bool,
    /// RFC 3339.
    pub created_at: String,
}

/// A document of a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Document {
    pub id: String,
    pub title: String,
    /// Where it came from (a URL), or empty.
    pub source: String,
    pub metadata: Map<String, Value>,
    /// How many chunks it was split into.
    pub chunks: i64,
    /// RFC 3339.
    pub created_at: String,
}

/// A saved workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Workflow {
    pub id: String,
    pub name: String,
    pub description: String,
    pub graph: crate::graph::Graph,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// A workflow to save: its graph is validated (422 `invalid_graph` naming node and port).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowBody {
    /// 1 to 200 bytes.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub graph: crate::graph::Graph,
}

/// A run's parameters (the body may be left out).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunBody {
    #[serde(default)]
    pub params: Map<String, Value>,
}

/// A finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkflowRun {
    pub id: String,
    /// `completed`, `failed`, …
    pub status: String,
    /// The graph's outputs.
    pub outputs: Value,
    /// Each node's run.
    pub nodes: Value,
    /// The thread it ran in.
    pub thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
