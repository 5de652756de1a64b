//! Route 1: a saved workflow run as a turn of its thread — the message names the workflow,
//! the thread's permission mode gates its tool nodes, its frames and record are the turn's,
//! the run is kept with the thread and message, and the answer names the outputs. Its nodes'
//! progress is in the turn's record, so a run taken up after a crash goes on from its
//! completed nodes. A REST run is the same turn, started by the REST door.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use weft_core::{ExecutionMode, HostedTurn, TurnOutcome, TurnSpec};
use weft_frames::ChannelSink;
use weft_protocol::{
    AgentConfig, ApprovalDecision, ErrorCode, MessageContent, RecordEntry, RecordedCall,
    ServerEvent,
};
use weft_store::now_ms;
use weft_workflow::{
    execute_from, validate_within, Checkpoints, EarlierRun, Job, NodeLog, RunRecord, RunResult,
    SavedWorkflow, WorkflowLibrary,
};

use super::request::{Route, TurnRequest};
use super::start::ModeChoice;
use crate::runtime::Runtime;
use weft_frames::Refusal;
use weft_record::entries;
use weft_services::workflows::{saved, StoreLibrary};

/// The run of a turn is kept as `run_<message id>`.
pub fn run_id_of(message_id: &str) -> String {
    format!("run_{message_id}")
}

impl Runtime {
    /// The workflow `workflow_id` names (the user's own, valid within this server's bounds)
    /// as the turn's mode; its params are `params`, else the message's text as `input`.
    pub(super) async fn workflow_mode(
        self: &Arc<Self>,
        user: &str,
        workflow_id: Option<String>,
        params: Option<Map<String, Value>>,
        content: &MessageContent,
    ) -> Result<ModeChoice, Refusal> {
        let registry = self.registry()?.clone();
        let id = workflow_id.ok_or_else(|| {
            Refusal::invalid("workflow_id is required with workflow_target \"workflow\"")
        })?;
        let row = self
            .store
            .workflow(user, &id)
            .await
            .map_err(Refusal::internal)?
            .ok_or_else(|| {
                Refusal::new(
                    ErrorCode::WorkflowNotFound,
                    format!(
                        "no workflow `{}`; see GET /workflows",
                        weft_protocol::clip(&id, 64)
                    ),
                )
            })?;
        let workflow = saved(&row).map_err(Refusal::internal)?;
        validate_within(&workflow.graph, &registry, &self.config.workflow.limits()).map_err(
            |errors| {
                let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                Refusal::new(ErrorCode::InvalidGraph, errors.join("; "))
            },
        )?;
        let params = params.unwrap_or_else(|| {
            Map::from_iter([("input".to_owned(), Value::String(content.text()))])
        });
        let (runtime, owner) = (self.clone(), user.to_owned());
        Ok(ModeChoice::Made {
            name: "workflow",
            make: Box::new(move |thread_id, message_id| {
                Arc::new(WorkflowTurn {
                    runtime,
                    workflow,
                    params,
                    owner,
                    thread_id: thread_id.to_owned(),
                    message_id: message_id.to_owned(),
                }) as Arc<dyn ExecutionMode>
            }),
        })
    }
}

/// A workflow run as a turn.
struct WorkflowTurn {
    runtime: Arc<Runtime>,
    workflow: SavedWorkflow,
    params: Map<String, Value>,
    owner: String,
    thread_id: String,
    message_id: String,
}

#[async_trait]
impl ExecutionMode for WorkflowTurn {
    fn name(&self) -> &str {
        "workflow"
    }

    fn display_name(&self) -> &str {
        "Workflow run"
    }

    fn max_rounds(&self, config: &AgentConfig) -> u32 {
        config.iterations_per_level()
    }

    async fn run(&self, spec: TurnSpec) -> TurnOutcome {
        let hosted = HostedTurn::start(&spec);
        let run_id = run_id_of(&self.message_id);
        let started_at = now_ms();
        let earlier = match hosted.take_resume() {
            Some(_) => self.earlier_run(&hosted).await,
            None => EarlierRun::default(),
        };
        let checkpoints = Checkpoints {
            earlier,
            log: &TurnNodes(&hosted),
        };
        let result = run_hosted(
            &self.runtime,
            &hosted,
            &self.workflow,
            &self.params,
            &run_id,
            &checkpoints,
        )
        .await;
        hosted.say(&summary(&self.workflow.name, &result));
        let library = StoreLibrary {
            store: self.runtime.store.clone(),
        };
        let record = RunRecord {
            run_id: &run_id,
            owner: &self.owner,
            workflow_id: &self.workflow.id,
            thread_id: Some(&self.thread_id),
            message_id: Some(&self.message_id),
            params: &self.params,
            result: &result,
            started_at,
        };
        if let Err(e) = library.record_run(record).await {
            tracing::error!(error = %e, "cannot record a workflow run");
        }
        let mut outcome = hosted.finish(Vec::new());
        if let Some(error) = result
            .error
            .filter(|_| result.status == weft_workflow::RunStatus::Failed)
        {
            outcome.end = weft_core::TurnEnd::Failed(error);
        }
        outcome
    }
}

impl WorkflowTurn {
    /// What this run's earlier life did, from the turn's record. The calls it had made and
    /// never had answered are answered `interrupted` (they are not made again: their node
    /// was cut, or it is a read and runs whole again), and approvals it was waiting for
    /// expire with them.
    async fn earlier_run(&self, hosted: &HostedTurn) -> EarlierRun {
        let store = &self.runtime.store;
        let items = match store.turn_items(&self.thread_id, &self.message_id).await {
            Ok(items) => items,
            Err(e) => {
                tracing::error!(error = %e, "cannot read a taken-up workflow run's record");
                return EarlierRun::default();
            }
        };
        let root: Vec<RecordEntry> = items
            .iter()
            .filter(|i| i.depth == 0)
            .flat_map(entries)
            .collect();
        if let Err(e) = store.expire_pending_approvals(&self.thread_id).await {
            tracing::warn!(error = %e, "cannot expire a taken-up workflow run's approvals");
        }
        for call in unanswered(&root) {
            hosted.close_interrupted(&call.id, &call.call_id, &call.name);
        }
        EarlierRun::read(&root)
    }
}

/// The calls in `root` with no result.
fn unanswered(root: &[RecordEntry]) -> Vec<&RecordedCall> {
    let answered: HashSet<&str> = root
        .iter()
        .filter_map(|e| match e {
            RecordEntry::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    root.iter()
        .filter_map(|e| match e {
            RecordEntry::Assistant { tool_calls, .. } => Some(tool_calls),
            _ => None,
        })
        .flatten()
        .filter(|c| !answered.contains(c.id.as_str()))
        .collect()
}

/// A run's checkpoints kept in its turn's record.
struct TurnNodes<'a>(&'a HostedTurn);

#[async_trait]
impl NodeLog for TurnNodes<'_> {
    async fn started(&self, node_id: &str) -> Result<(), String> {
        self.0.node_started(node_id).await
    }

    fn completed(&self, node_id: &str, outputs: &Map<String, Value>) {
        self.0.node_completed(node_id, outputs);
    }
}

/// Run `workflow` at the root of `hosted`, under its wall clock, going on from what an
/// earlier life of the run did.
async fn run_hosted(
    state: &Runtime,
    hosted: &HostedTurn,
    workflow: &SavedWorkflow,
    params: &Map<String, Value>,
    run_id: &str,
    checkpoints: &Checkpoints<'_>,
) -> RunResult {
    let site = hosted.root_site();
    let job = Job {
        job_id: run_id,
        workflow_id: &workflow.id,
        prefix: None,
    };
    let failed = RunResult::refused;
    let registry = match state.registry() {
        Ok(registry) => registry,
        Err(refusal) => return failed(refusal.message),
    };
    let limits = state.config.workflow.limits();
    let plan = match validate_within(&workflow.graph, registry, &limits) {
        Ok(plan) => plan,
        Err(errors) => {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return failed(format!("invalid_graph: {}", errors.join("; ")));
        }
    };
    let run = execute_from(
        &plan,
        params,
        &site,
        registry,
        &limits,
        job,
        Some(checkpoints),
    );
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => result,
        () = hosted.wall_clock_out() => {
            hosted.check_wall_clock();
            run.await
        }
    }
}

/// The turn's answer: how the run ended and its outputs by name.
fn summary(name: &str, result: &RunResult) -> String {
    let mut text = format!("Workflow “{name}” {}.", result.status.as_str());
    if let Some(error) = &result.error {
        text.push_str(&format!("\n\n{error}"));
    }
    for (output, value) in &result.outputs {
        let value = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        text.push_str(&format!("\n\n{output}: {value}"));
    }
    text
}

impl Runtime {
    /// Run `user`'s saved workflow `id` now, as a turn of a new thread in Auto mode, and
    /// answer with the finished run. Nobody is there to answer an approval a node asks for,
    /// so it is denied.
    pub async fn run_workflow_now(
        self: &Arc<Self>,
        user: &str,
        id: &str,
        params: Map<String, Value>,
    ) -> Result<weft_protocol::rest::WorkflowRun, Refusal> {
        let mut request = TurnRequest::chat(MessageContent::Text(format!("Run workflow {id}")));
        request.route = Route::Workflow {
            workflow_id: Some(id.to_owned()),
            params: Some(params),
        };
        request.permission_mode = Some(weft_protocol::PermissionMode::Auto);
        let (sink, mut frames) = ChannelSink::new(
            self.next_subscriber_id(),
            self.config.server.max_outbound_bytes,
        );
        let started = self.start_turn(user, request, sink).await?;
        let mut failure = None;
        while let Some(delivered) = frames.recv().await {
            match delivered.event {
                Some(ServerEvent::Error { code, message, .. }) => {
                    failure = Some(Refusal::new(code, message));
                }
                Some(ServerEvent::ToolApprovalRequest { tool_call_id, .. }) => {
                    let reason = "nobody is there to approve it in a REST run".to_owned();
                    let deny = ApprovalDecision::Deny;
                    let _ = self
                        .answer_approval(user, &tool_call_id, deny, Some(reason))
                        .await;
                }
                Some(ServerEvent::Chunk { done: true, .. }) => break,
                _ => {}
            }
        }
        let run = self
            .store
            .workflow_run(user, &run_id_of(&started.message_id))
            .await
            .map_err(Refusal::internal)?
            // The turn ended before its run was recorded: why, as the turn said it.
            .ok_or_else(|| {
                failure.unwrap_or_else(|| Refusal::internal("the run was not recorded"))
            })?;
        Ok(weft_services::saved_workflows::run_json(run))
    }
}
