//! The executor: runs a plan's ready nodes concurrently (at most `max_parallel` across the
//! run and the runs nested in it), passes outputs along edges, skips whatever depends on a
//! node that failed or was skipped (or on a port a branch did not produce), applies the
//! per-node timeout and the run's node-run bound, stops when the host stops, and reports
//! every node and the run as `node_update` / `job_update` frames. Runs nested in a node
//! (`list.map`) go through [`Nested`], inside the same bounds.

use std::collections::VecDeque;
use std::time::Instant;

use async_trait::async_trait;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde_json::{Map, Value};
use weft_core::NestedCalls;
use weft_protocol::tree::preview;
use weft_protocol::ServerEvent;

use crate::checkpoint::{may_act, Checkpoints, CUT_NODE};
use crate::graph::Graph;
use crate::node::{NodeContext, Ports, Subgraphs};
use crate::nodes::io::OUTPUT;
use crate::registry::NodeRegistry;
use crate::run::{Job, NodeRun, NodeStatus, RunBudget, RunLimits, RunResult, RunStatus};
use crate::validate::{validate, Plan, PlanNode};

/// Run `plan` with `params` (what `input.*` nodes read), within `limits`.
pub async fn execute(
    plan: &Plan,
    params: &Map<String, Value>,
    host: &dyn NestedCalls,
    registry: &NodeRegistry,
    limits: &RunLimits,
    job: Job<'_>,
) -> RunResult {
    execute_from(plan, params, host, registry, limits, job, None).await
}

/// [`execute`], keeping each top-level node's progress in `checkpoints` and going on from
/// what an earlier life of the run had done (its completed nodes are not run again, and a
/// node that may have acted when it was cut fails rather than run twice).
pub async fn execute_from(
    plan: &Plan,
    params: &Map<String, Value>,
    host: &dyn NestedCalls,
    registry: &NodeRegistry,
    limits: &RunLimits,
    job: Job<'_>,
    checkpoints: Option<&Checkpoints<'_>>,
) -> RunResult {
    if plan.nesting > limits.max_map_depth {
        let error = nested_too_deep(limits);
        if !job.inner() {
            job_update(host, job, "failed", Some(error.clone()));
        }
        return RunResult::refused(error);
    }
    let budget = RunBudget::new(limits);
    let run = Run {
        host,
        registry,
        budget: &budget,
        depth: 0,
    };
    run.execute(plan, params, job, checkpoints).await
}

fn nested_too_deep(limits: &RunLimits) -> String {
    format!(
        "list.map nested more than {} deep ([workflow] max_map_depth)",
        limits.max_map_depth
    )
}

/// One run (or a run nested in a node) and what it shares with the runs around it.
#[derive(Clone, Copy)]
struct Run<'a> {
    host: &'a dyn NestedCalls,
    registry: &'a NodeRegistry,
    budget: &'a RunBudget,
    /// How many `list.map`s this run is nested in.
    depth: u32,
}

impl Run<'_> {
    async fn execute(
        &self,
        plan: &Plan,
        params: &Map<String, Value>,
        job: Job<'_>,
        checkpoints: Option<&Checkpoints<'_>>,
    ) -> RunResult {
        let host = self.host;
        let mut progress = Progress::new(plan);
        let mut running = FuturesUnordered::new();
        let mut stopping = host.is_stopped();
        if !job.inner() {
            job_update(host, job, "running", None);
        }
        loop {
            while !stopping && running.len() < self.budget.limits.max_parallel.max(1) {
                let Some(i) = progress.ready.pop_front() else {
                    break;
                };
                let settled = checkpoints.is_some_and(|c| progress.earlier(i, c));
                let inputs = if settled {
                    None
                } else {
                    gather(plan, i, &progress.runs, &progress.results)
                };
                // Settled by the run's earlier life, or skipped.
                let Some(inputs) = inputs else {
                    if !settled {
                        progress.runs[i].status = NodeStatus::Skipped;
                    }
                    node_update(host, job, &progress.runs[i]);
                    progress.release(plan, i);
                    continue;
                };
                node_started(host, job, &progress.runs[i]);
                running.push(async move {
                    let started = Instant::now();
                    let node = &plan.nodes[i];
                    let outcome = match keep_start(checkpoints, node).await {
                        Ok(()) => self.run_node(node, inputs, params, job).await,
                        Err(e) => Err(e),
                    };
                    (i, outcome, started.elapsed())
                });
            }
            if running.is_empty() {
                break;
            }
            tokio::select! {
                Some((i, outcome, took)) = running.next() => {
                    progress.settle(i, outcome, took);
                    if let (Some(c), Some(outputs)) = (checkpoints, &progress.results[i]) {
                        c.log.completed(&plan.nodes[i].id, outputs);
                    }
                    node_update(host, job, &progress.runs[i]);
                    progress.release(plan, i);
                }
                () = host.stopped(), if !stopping => stopping = true,
            }
        }
        let cancelled = stopping || host.is_stopped();
        progress.conclude(plan, cancelled, host, job)
    }

    /// One node: counted against the run's node runs, in a run slot (unless it runs graphs
    /// of its own), under the node timeout.
    async fn run_node(
        &self,
        node: &PlanNode,
        inputs: Ports,
        params: &Map<String, Value>,
        job: Job<'_>,
    ) -> Result<Ports, String> {
        self.budget.take_node_run()?;
        let _slot = match node.node_type.graph_port() {
            None => Some(self.budget.slot().await),
            Some(_) => None,
        };
        let node_path = node_id(job, &node.id);
        let nested = Nested {
            run: Run {
                depth: self.depth + 1,
                ..*self
            },
            job,
            node_path: &node_path,
        };
        let limits = &self.budget.limits;
        let ctx = NodeContext {
            host: self.host,
            params,
            limits,
            node_path: &node_path,
            subgraphs: &nested,
        };
        if !node.node_type.timed() {
            return node.node_type.run(inputs, &ctx).await;
        }
        tokio::time::timeout(limits.node_timeout, node.node_type.run(inputs, &ctx))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "timed out after {} ms",
                    limits.node_timeout.as_millis()
                ))
            })
    }
}

/// Keep the start of a node that may act before it runs (with checkpoints).
async fn keep_start(checkpoints: Option<&Checkpoints<'_>>, node: &PlanNode) -> Result<(), String> {
    match checkpoints {
        Some(c) if may_act(node.node_type.as_ref()) => c.log.started(&node.id).await,
        _ => Ok(()),
    }
}

/// Where a run stands: each node's state and output, and what is ready to run.
struct Progress {
    waiting: Vec<usize>,
    results: Vec<Option<Ports>>,
    runs: Vec<NodeRun>,
    ready: VecDeque<usize>,
}

impl Progress {
    fn new(plan: &Plan) -> Progress {
        let waiting: Vec<usize> = plan.nodes.iter().map(|p| p.upstream).collect();
        Progress {
            ready: (0..waiting.len()).filter(|&i| waiting[i] == 0).collect(),
            results: vec![None; waiting.len()],
            runs: plan
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
                .collect(),
            waiting,
        }
    }

    fn settle(&mut self, i: usize, outcome: Result<Ports, String>, took: std::time::Duration) {
        let run = &mut self.runs[i];
        run.duration_ms = weft_core::clock::millis(took);
        match outcome {
            Ok(ports) => {
                run.status = NodeStatus::Completed;
                run.output = Some(Value::Object(ports.clone()));
                self.results[i] = Some(ports);
            }
            Err(error) => {
                run.status = NodeStatus::Failed;
                run.error = Some(error);
            }
        }
    }

    /// Settle node `i` as the run's earlier life left it, if it got anywhere: completed (its
    /// outputs given back) or cut (failed). False when it is to run.
    fn earlier(&mut self, i: usize, checkpoints: &Checkpoints<'_>) -> bool {
        let id = &self.runs[i].node_id;
        let outcome = match checkpoints.earlier.completed.get(id) {
            Some(outputs) => Ok(outputs.clone()),
            None if checkpoints.earlier.cut.contains(id) => Err(CUT_NODE.to_owned()),
            None => return false,
        };
        self.settle(i, outcome, std::time::Duration::ZERO);
        true
    }

    /// Node `i` is done: its dependants wait for one node fewer.
    fn release(&mut self, plan: &Plan, i: usize) {
        for &d in &plan.nodes[i].dependants {
            self.waiting[d] -= 1;
            if self.waiting[d] == 0 {
                self.ready.push_back(d);
            }
        }
    }

    /// Nodes that never ran are skipped; the run's status, error and outputs.
    fn conclude(
        mut self,
        plan: &Plan,
        cancelled: bool,
        host: &dyn NestedCalls,
        job: Job<'_>,
    ) -> RunResult {
        for run in self
            .runs
            .iter_mut()
            .filter(|r| r.status == NodeStatus::Pending)
        {
            run.status = NodeStatus::Skipped;
            node_update(host, job, run);
        }
        let failed = self.runs.iter().find(|r| r.status == NodeStatus::Failed);
        let status = if cancelled {
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
            if let Some(ports) = &self.results[i] {
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
            nodes: self.runs,
            error,
        }
    }
}

/// Runs nested under one node (`list.map`), one level deeper, in the run's bounds.
struct Nested<'a> {
    run: Run<'a>,
    job: Job<'a>,
    node_path: &'a str,
}

impl Nested<'_> {
    /// The run of item `i`, its node ids under `<node>[i]`.
    async fn item(&self, plan: &Plan, i: usize, item: Value) -> RunResult {
        let prefix = format!("{}[{i}]", self.node_path);
        let params = Map::from_iter([("item".to_owned(), item)]);
        let job = Job {
            prefix: Some(&prefix),
            ..self.job
        };
        self.run.execute(plan, &params, job, None).await
    }
}

#[async_trait]
impl Subgraphs for Nested<'_> {
    async fn map(&self, graph: &Graph, items: Vec<Value>) -> Result<Vec<Value>, String> {
        let limits = &self.run.budget.limits;
        let plan = validate(graph, self.run.registry).map_err(|errors| {
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        if self.run.depth + plan.nesting > limits.max_map_depth {
            return Err(nested_too_deep(limits));
        }
        let count = items.len();
        let plan = &plan;
        let mut runs = futures::stream::iter(items.into_iter().enumerate())
            .map(|(i, item)| self.item(plan, i, item))
            .buffered(limits.max_parallel.max(1));
        let mut results = Vec::with_capacity(count);
        while let Some(run) = runs.next().await {
            if run.status != RunStatus::Completed {
                // The items still running are dropped (stopped) with the stream.
                return Err(format!(
                    "item {}: {}",
                    results.len(),
                    run.error.unwrap_or_else(|| run.status.as_str().to_owned())
                ));
            }
            results.push(run.outputs.get("result").cloned().unwrap_or(Value::Null));
        }
        Ok(results)
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

fn node_id(job: Job<'_>, node_id: &str) -> String {
    match job.prefix {
        Some(prefix) => format!("{prefix}/{node_id}"),
        None => node_id.to_owned(),
    }
}

fn node_started(host: &dyn NestedCalls, job: Job<'_>, run: &NodeRun) {
    host.emit(ServerEvent::NodeUpdate {
        job_id: job.job_id.to_owned(),
        node_id: node_id(job, &run.node_id),
        node_type: run.node_type.clone(),
        status: "running".to_owned(),
        result_preview: None,
        error: None,
        parent_id: host.parent_id().map(str::to_owned),
        depth: host.depth(),
    });
}

fn node_update(host: &dyn NestedCalls, job: Job<'_>, run: &NodeRun) {
    host.emit(ServerEvent::NodeUpdate {
        job_id: job.job_id.to_owned(),
        node_id: node_id(job, &run.node_id),
        node_type: run.node_type.clone(),
        status: run.status.as_str().to_owned(),
        result_preview: run.output.as_ref().map(|o| preview(&o.to_string())),
        error: run.error.clone(),
        parent_id: host.parent_id().map(str::to_owned),
        depth: host.depth(),
    });
}

fn job_update(host: &dyn NestedCalls, job: Job<'_>, status: &str, error: Option<String>) {
    host.emit(ServerEvent::JobUpdate {
        job_id: job.job_id.to_owned(),
        workflow_id: job.workflow_id.to_owned(),
        status: status.to_owned(),
        error,
        parent_id: host.parent_id().map(str::to_owned),
        depth: host.depth(),
    });
}
