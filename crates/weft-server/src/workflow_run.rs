//! Running a saved workflow: as a turn of a thread (route 1: the message names the workflow,
//! the thread's permission mode gates its tool nodes, its frames and record are the turn's,
//! its answer names the outputs), or on its own for REST (nobody can answer an approval, so a
//! node that needs one is denied).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use weft_core::{
    AgentMemory, ChatMessage, EventSink, ExecutionMode, HostedTurn, NoRecord, PermissionGate,
    Toolbelt, TurnOutcome, TurnSpec,
};
use weft_protocol::{AgentConfig, ChatMessageData, ErrorCode, PermissionMode};
use weft_store::now_ms;
use weft_workflow::{
    execute, validate_within, Job, RunRecord, RunResult, SavedWorkflow, WorkflowLibrary,
};

use crate::commands::{internal, Connection, Refusal};
use crate::runner::{start_turn_with, CustomMode};
use crate::state::AppState;
use crate::workflows::{deny_approvals, StoreLibrary};

/// Route 1: run the workflow the message names, as a turn of its thread.
pub async fn start(conn: &Connection, data: ChatMessageData) -> Result<(), Refusal> {
    let state = conn.state.clone();
    let registry = state.registry()?.clone();
    let id = data.workflow_id.clone().ok_or_else(|| {
        (
            ErrorCode::InvalidField,
            "workflow_id is required with workflow_target \"workflow\"".to_owned(),
        )
    })?;
    let row = state
        .store
        .workflow(&conn.user.id, &id)
        .await
        .map_err(internal)?
        .ok_or_else(|| {
            (
                ErrorCode::WorkflowNotFound,
                format!(
                    "no workflow `{}`; see GET /workflows",
                    weft_protocol::clip(&id, 64)
                ),
            )
        })?;
    let workflow = crate::workflows::saved(&row).map_err(internal)?;
    validate_within(&workflow.graph, &registry, &state.config.workflow.limits()).map_err(|errors| {
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        (ErrorCode::InvalidGraph, errors.join("; "))
    })?;
    let params = data.params.clone().unwrap_or_else(|| {
        Map::from_iter([("input".to_owned(), Value::String(data.content.text()))])
    });
    let owner = conn.user.id.clone();
    let custom = CustomMode {
        name: "workflow".to_owned(),
        make: Box::new(move |thread_id, message_id| {
            Arc::new(WorkflowTurn {
                state,
                workflow,
                params,
                owner,
                thread_id: thread_id.to_owned(),
                message_id: message_id.to_owned(),
            }) as Arc<dyn ExecutionMode>
        }),
    };
    start_turn_with(conn, data, Some(custom)).await
}

/// A workflow run as a turn.
struct WorkflowTurn {
    state: Arc<AppState>,
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
        let run_id = format!("run_{}", self.message_id);
        let started_at = now_ms();
        let result = run_hosted(&self.state, &hosted, &self.workflow, &self.params, &run_id).await;
        hosted.say(&summary(&self.workflow.name, &result));
        let library = StoreLibrary {
            store: self.state.store.clone(),
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
    state: &AppState,
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
        Err((_, message)) => return failed(message),
    };
    let limits = state.config.workflow.limits();
    let plan = match validate_within(&workflow.graph, registry, &limits) {
        Ok(plan) => plan,
        Err(errors) => {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return failed(format!("invalid_graph: {}", errors.join("; ")));
        }
    };
    let deadline = tokio::time::Instant::from_std(hosted.deadline());
    let run = execute(&plan, params, &site, registry, &limits, job);
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => result,
        () = tokio::time::sleep_until(deadline) => {
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

/// Run `workflow` for REST: the server's default agent and model, Auto mode (the caller asked
/// for the run), approvals denied, nothing recorded but the run itself.
pub async fn run_detached(
    state: &Arc<AppState>,
    user: &str,
    workflow: &SavedWorkflow,
    params: &Map<String, Value>,
    run_id: &str,
) -> Result<RunResult, (&'static str, String)> {
    state
        .registry()
        .map_err(|(_, message)| ("workflows_disabled", message))?;
    let (_, provider) = state
        .providers
        .get(None)
        .map_err(|e| ("provider_error", e))?;
    let model = state
        .providers
        .model_for(state.providers.default_name(), None);
    let gate = PermissionGate::new(PermissionMode::Auto);
    let toolbelt: Toolbelt = state.toolbelt_for(&weft_protocol::ChatContext::Thread);
    let spec = TurnSpec {
        provider,
        context_window: state.context_windows.window(&model),
        model,
        system_prompt: String::new(),
        history: vec![ChatMessage::user("run the workflow")],
        toolbelt,
        config: state.agent.clone(),
        gate: gate.clone(),
        rate_card: state.rate_card.clone(),
        events: EventSink::callback(Box::new(deny_approvals(gate))),
        cancel: CancellationToken::new(),
        memory: AgentMemory::new(),
        user_id: Arc::from(user),
        workspace_root: state.workspace_of(user),
        recorder: Arc::new(NoRecord),
        planner: None,
        artifacts: Some(state.assets.clone()),
    };
    let hosted = HostedTurn::start(&spec);
    let result = run_hosted(state, &hosted, workflow, params, run_id).await;
    hosted.finish(Vec::new());
    Ok(result)
}
