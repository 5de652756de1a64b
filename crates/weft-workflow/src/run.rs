//! What a run is bounded by and what it comes to: [`RunLimits`], the [`RunBudget`] one run
//! and every run nested in it share, the [`Job`] its frames name, and the [`RunResult`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bounds of one run, its nested runs (`list.map`) included.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunLimits {
    /// Nodes running at once, across the run and every run nested in it.
    pub max_parallel: usize,
    /// How long one node may run (tool nodes keep the tool timeout).
    pub node_timeout: Duration,
    /// Items one `list.map` takes.
    pub max_map_items: usize,
    /// How deep `list.map`s may nest.
    pub max_map_depth: u32,
    /// Node runs of one run, nested ones included.
    pub max_node_runs: u64,
    /// Work one `text.template` render may do (minijinja fuel: about one per instruction and
    /// one per 64 bytes it makes).
    pub template_fuel: u64,
    /// Bytes one `text.template` may render.
    pub max_template_bytes: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_parallel: 8,
            node_timeout: Duration::from_secs(60),
            max_map_items: 1_000,
            max_map_depth: 3,
            max_node_runs: 10_000,
            template_fuel: 1_000_000,
            max_template_bytes: 1 << 20,
        }
    }
}

/// What a run and the runs nested in it have used: node runs so far, and a slot for each
/// node running now (nodes that run graphs take none, so nesting cannot deadlock).
pub struct RunBudget {
    pub limits: RunLimits,
    node_runs: AtomicU64,
    slots: Arc<Semaphore>,
}

impl RunBudget {
    pub fn new(limits: &RunLimits) -> Self {
        RunBudget {
            limits: *limits,
            node_runs: AtomicU64::new(0),
            slots: Arc::new(Semaphore::new(limits.max_parallel.max(1))),
        }
    }

    /// Count one more node run; the error when that is past `max_node_runs`.
    pub fn take_node_run(&self) -> Result<(), String> {
        let runs = self.node_runs.fetch_add(1, Ordering::Relaxed) + 1;
        if runs > self.limits.max_node_runs {
            return Err(format!(
                "the run passed {} node runs ([workflow] max_node_runs)",
                self.limits.max_node_runs
            ));
        }
        Ok(())
    }

    /// Node runs so far.
    pub fn node_runs(&self) -> u64 {
        self.node_runs.load(Ordering::Relaxed)
    }

    /// A slot to run one node in, once one is free.
    pub async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().acquire_owned().await.ok()
    }
}

/// Which run this is, for its frames.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    pub job_id: &'a str,
    pub workflow_id: &'a str,
    /// A run inside a node (`list.map`): no job frames, and node ids under this prefix.
    pub prefix: Option<&'a str>,
}

impl Job<'_> {
    pub(crate) fn inner(&self) -> bool {
        self.prefix.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    Pending,
    Completed,
    Failed,
    Skipped,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Pending => "pending",
            NodeStatus::Completed => "completed",
            NodeStatus::Failed => "failed",
            NodeStatus::Skipped => "skipped",
        }
    }
}

/// What one node came to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRun {
    pub node_id: String,
    pub node_type: String,
    pub status: NodeStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

/// What a run came to: its `output` nodes' values by name, and every node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    pub status: RunStatus,
    pub outputs: Map<String, Value>,
    pub nodes: Vec<NodeRun>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunResult {
    /// A run that never started: its graph was refused.
    pub fn refused(error: String) -> RunResult {
        RunResult {
            status: RunStatus::Failed,
            outputs: Map::new(),
            nodes: Vec::new(),
            error: Some(error),
        }
    }
}
