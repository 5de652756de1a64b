//! The executor: runs a plan's ready nodes concurrently (at most `max_parallel`), passes
//! outputs along edges, skips whatever depends on a node that failed or was skipped (or on
//! a port a branch did not produce), applies the per-node timeout, stops when the host
//! stops, and reports every node and the run as `node_update` / `job_update` frames.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde::Serialize;
use serde_json::{Map, Value};
use weft_protocol::tree::preview;
use weft_protocol::ServerEvent;

use crate::host::RunHost;
use crate::node::{NodeContext, Ports};
use crate::nodes::io::OUTPUT;
use crate::registry::NodeRegistry;
use crate::validate::Plan;

/// Bounds of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunLimits {
    pub max_parallel: usize,
    pub node_timeout: Duration,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_parallel: 8,
            node_timeout: Duration::from_secs(60),
        }
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
    fn inner(&self) -> bool {
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
    fn as_str(self) -> &'static str {
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

/// Run `plan` with `params` (what `input.*` nodes read).
pub async fn execute(
    plan: &Plan,
    params: &Map<String, Value>,
    host: &dyn RunHost,
    registry: &NodeRegistry,
    limits: &RunLimits,
    job: Job<'_>,
) -> RunResult {
    let n = plan.nodes.len();
    let mut waiting: Vec<usize> = plan.nodes.iter().map(|p| p.upstream).collect();
    let mut results: Vec<Option<Ports>> = vec![None; n];
    let mut runs: Vec<NodeRun> = plan
        .nodes
        .iter()
        .map(|p| NodeRun {
            node_id: p.id.clone(),
            node_type: p.node_type.type_name().to_owned(),
            status: NodeStatus::Pending,
            output: None,
            error: None,
            duration_ms: 0.0,
        })
        .collect();
    let mut ready: VecDeque<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut running = FuturesUnordered::new();
    let mut stopping = host.is_stopped();
    if !job.inner() {
        job_update(host, job, "running", None);
    }

    loop {
        while !stopping && running.len() < limits.max_parallel.max(1) {
            let Some(i) = ready.pop_front() else { break };
            let node = &plan.nodes[i];
            let Some(inputs) = gather(plan, i, &runs, &results) else {
                runs[i].status = NodeStatus::Skipped;
                node_update(host, job, &runs[i]);
                release(plan, i, &mut waiting, &mut ready);
                continue;
            };
            node_started(host, job, &runs[i]);
            running.push(async move {
                let started = Instant::now();
                let node_path = node_id(job, &node.id);
                let ctx = NodeContext {
                    host,
                    registry,
                    params,
                    limits,
                    job,
                    node_path: &node_path,
                };
                let outcome = if node.node_type.timed() {
                    match tokio::time::timeout(
                        limits.node_timeout,
                        node.node_type.run(inputs, &ctx),
                    )
                    .await
                    {
                        Ok(outcome) => outcome,
                        Err(_) => Err(format!(
                            "timed out after {} ms",
                            limits.node_timeout.as_millis()
                        )),
                    }
                } else {
                    node.node_type.run(inputs, &ctx).await
                };
                (i, outcome, started.elapsed())
            });
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            Some((i, outcome, took)) = running.next() => {
                let run = &mut runs[i];
                run.duration_ms = took.as_secs_f64() * 1000.0;
                match outcome {
                    Ok(ports) => {
                        run.status = NodeStatus::Completed;
                        run.output = Some(Value::Object(ports.clone()));
                        results[i] = Some(ports);
                    }
                    Err(error) => {
                        run.status = NodeStatus::Failed;
                        run.error = Some(error);
                    }
                }
                node_update(host, job, &runs[i]);
                release(plan, i, &mut waiting, &mut ready);
            }
            () = host.stopped(), if !stopping => stopping = true,
        }
    }

    for run in runs.iter_mut().filter(|r| r.status == NodeStatus::Pending) {
        run.status = NodeStatus::Skipped;
        node_update(host, job, run);
    }
    let failed = runs.iter().find(|r| r.status == NodeStatus::Failed);
    let status = if stopping || host.is_stopped() {
        RunStatus::Cancelled
    } else if failed.is_some() {
        RunStatus::Failed
    } else {
        RunStatus::Completed
    };
    let error = failed.map(|r| {
        format!(
            "node `{}` failed: {}",
            r.node_id,
            r.error.as_deref().unwrap_or_default()
        )
    });
    let mut outputs = Map::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        if node.node_type.type_name() != OUTPUT {
            continue;
        }
        if let Some(ports) = &results[i] {
            if let (Some(Value::String(name)), Some(value)) =
                (ports.get("name"), ports.get("value"))
            {
                outputs.insert(name.clone(), value.clone());
            }
        }
    }
    if !job.inner() {
        job_update(host, job, status.as_str(), error.clone());
    }
    RunResult {
        status,
        outputs,
        nodes: runs,
        error,
    }
}

/// A node's inputs, or `None` when it must be skipped: an upstream node failed or was
/// skipped, or a required input's port was not produced (an untaken branch).
fn gather(plan: &Plan, i: usize, runs: &[NodeRun], results: &[Option<Ports>]) -> Option<Ports> {
    let node = &plan.nodes[i];
    let mut inputs = node.static_inputs.clone();
    for (from, output, input) in &node.incoming {
        if runs[*from].status != NodeStatus::Completed {
            return None;
        }
        match results[*from].as_ref().and_then(|r| r.get(output)) {
            Some(value) => {
                inputs.insert(input.clone(), value.clone());
            }
            None if node.required.contains(input) => return None,
            None => {}
        }
    }
    Some(inputs)
}

/// Node `i` is done: its dependants wait for one node fewer.
fn release(plan: &Plan, i: usize, waiting: &mut [usize], ready: &mut VecDeque<usize>) {
    for &d in &plan.nodes[i].dependants {
        waiting[d] -= 1;
        if waiting[d] == 0 {
            ready.push_back(d);
        }
    }
}

fn node_id(job: Job<'_>, node_id: &str) -> String {
    match job.prefix {
        Some(prefix) => format!("{prefix}/{node_id}"),
        None => node_id.to_owned(),
    }
}

fn node_started(host: &dyn RunHost, job: Job<'_>, run: &NodeRun) {
    host.emit(ServerEvent::NodeUpdate {
        job_id: job.job_id.to_owned(),
        node_id: node_id(job, &run.node_id),
        node_type: run.node_type.clone(),
        status: "running".to_owned(),
        result_preview: None,
        error: None,
        parent_id: host.parent_id(),
        depth: host.depth(),
    });
}

fn node_update(host: &dyn RunHost, job: Job<'_>, run: &NodeRun) {
    host.emit(ServerEvent::NodeUpdate {
        job_id: job.job_id.to_owned(),
        node_id: node_id(job, &run.node_id),
        node_type: run.node_type.clone(),
        status: run.status.as_str().to_owned(),
        result_preview: run.output.as_ref().map(|o| preview(&o.to_string())),
        error: run.error.clone(),
        parent_id: host.parent_id(),
        depth: host.depth(),
    });
}

fn job_update(host: &dyn RunHost, job: Job<'_>, status: &str, error: Option<String>) {
    host.emit(ServerEvent::JobUpdate {
        job_id: job.job_id.to_owned(),
        workflow_id: job.workflow_id.to_owned(),
        status: status.to_owned(),
        error,
        parent_id: host.parent_id(),
        depth: host.depth(),
    });
}
