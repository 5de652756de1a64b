//! Route 1: a saved workflow run as a turn of its thread — the message names the workflow,
//! the thread's permission mode gates its tool nodes, its frames and record are the turn's,
//! the run is kept with the thread and message, and the answer names the outputs. A REST run
//! is the same turn, started by the REST door.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use weft_core::{ExecutionMode, HostedTurn, TurnOutcome, TurnSpec};
use weft_protocol::{AgentConfig, ErrorCode, MessageContent};
use weft_store::now_ms;
use weft_workflow::{
    execute, validate_within, Job, RunRecord, RunResult, SavedWorkflow, WorkflowLibrary,
};

use super::start::ModeChoice;
use crate::error::Refusal;
use crate::runtime::Runtime;
use crate::workflows::{saved, StoreLibrary};

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
        let result = run_hosted(
            &self.runtime,
            &hosted,
            &self.workflow,
            &self.params,
            &run_id,
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

/// Run `workflow` at the root of `hosted`, under its wall clock.
async fn run_hosted(
    state: &Runtime,
    hosted: &HostedTurn,
    workflow: &SavedWorkflow,
    params: &Map<String, Value>,
    run_id: &str,
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
    let run = execute(&plan, params, &site, registry, &limits, job);
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
