//! `GET /node-types`, `/workflows` CRUD (a graph is validated on save: 422 `invalid_graph`
//! naming node and port) and `POST /workflows/{id}/runs`: the run is a turn of a new thread
//! in Auto mode, started like any turn (the user's limits apply; an approval a node asks for
//! is denied, nobody being there to answer it), and the answer is the finished run.
//! Everything is the caller's own.

use super::JsonBody;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::NoContent;
use axum::Json;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use weft_protocol::{ApprovalDecision, ErrorCode, MessageContent, PermissionMode, ServerEvent};
use weft_record::persist::rfc3339;
use weft_runtime::turn::run_id_of;
use weft_runtime::{ChannelSink, Route, TurnRequest};
use weft_store::{new_id, now_ms, WorkflowRow, WorkflowRunRow};
use weft_workflow::{CatalogueEntry, Graph, GraphError};

use super::openapi::Created;
use super::paths::IdPath;
use super::{identifier, ApiError, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

fn invalid_graph(errors: &[GraphError]) -> ApiError {
    let message = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    ApiError::new(ErrorCode::InvalidGraph, message)
        .with("node", json!(errors.first().map(|e| e.node.clone())))
        .with("port", json!(errors.first().and_then(|e| e.port.clone())))
        .with("errors", json!(errors))
}

/// Workflows are switched off on this server.
fn disabled(message: String) -> ApiError {
    ApiError::new(ErrorCode::WorkflowsDisabled, message)
}

fn not_found() -> ApiError {
    ApiError::new(ErrorCode::WorkflowNotFound, "no such workflow")
}

/// A saved workflow.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Workflow {
    pub id: String,
    pub name: String,
    pub description: String,
    pub graph: Graph,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

fn workflow_json(row: &WorkflowRow) -> Rest<Workflow> {
    Ok(Workflow {
        id: row.id.clone(),
        name: row.name.clone(),
        description: row.description.clone(),
        graph: serde_json::from_str(&row.graph).map_err(ApiError::internal)?,
        created_at: rfc3339(row.created_at),
        updated_at: rfc3339(row.updated_at),
    })
}

/// A workflow to save: its graph is validated (422 `invalid_graph` naming node and port).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WorkflowBody {
    /// 1 to 200 bytes.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub graph: Graph,
}

/// The body's graph as JSON text if the body is a valid workflow, else why not.
fn checked(state: &ServerState, body: &WorkflowBody) -> Rest<String> {
    if body.name.trim().is_empty() || body.name.len() > 200 {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            "name must be 1 to 200 bytes",
        ));
    }
    let runtime = &state.runtime;
    let registry = runtime.registry().map_err(|r| disabled(r.message))?;
    weft_workflow::validate_within(&body.graph, registry, &runtime.config.workflow.limits())
        .map_err(|errors| invalid_graph(&errors))?;
    serde_json::to_string(&body.graph).map_err(ApiError::internal)
}

/// `?query=`: node types whose name or description holds it.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Search {
    query: Option<String>,
}

/// `GET /node-types?query=`.
pub async fn node_types(
    State(state): State<Arc<ServerState>>,
    _user: AuthUser,
    Query(search): Query<Search>,
) -> Rest<Json<Vec<CatalogueEntry>>> {
    let registry = state.runtime.registry().map_err(|r| disabled(r.message))?;
    Ok(Json(registry.catalogue(search.query.as_deref())))
}

/// `POST /workflows`.
pub async fn create(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    JsonBody(body): JsonBody<WorkflowBody>,
) -> Rest<Created<Workflow>> {
    let graph = checked(&state, &body)?;
    let now = now_ms();
    let row = WorkflowRow {
        id: format!("wf_{}", new_id()),
        owner: user.id.clone(),
        name: body.name.trim().to_owned(),
        description: body.description,
        graph,
        created_at: now,
        updated_at: now,
    };
    state
        .runtime
        .store
        .create_workflow(&row)
        .await
        .map_err(ApiError::internal)?;
    Ok(Created(workflow_json(&row)?))
}

/// `GET /workflows`.
pub async fn list(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
) -> Rest<Json<Vec<Workflow>>> {
    let rows = state
        .runtime
        .store
        .workflows_of(&user.id)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(rows.iter().map(workflow_json).collect::<Rest<_>>()?))
}

async fn owned(state: &ServerState, owner: &str, id: &str) -> Rest<WorkflowRow> {
    identifier(id, ErrorCode::WorkflowNotFound, "workflow")?;
    state
        .runtime
        .store
        .workflow(owner, id)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(not_found)
}

/// `GET /workflows/{id}`.
pub async fn get(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
) -> Rest<Json<Workflow>> {
    let row = owned(&state, &user.id, &id).await?;
    Ok(Json(workflow_json(&row)?))
}

/// `PUT /workflows/{id}`.
pub async fn replace(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
    JsonBody(body): JsonBody<WorkflowBody>,
) -> Rest<Json<Workflow>> {
    owned(&state, &user.id, &id).await?;
    let graph = checked(&state, &body)?;
    state
        .runtime
        .store
        .update_workflow(&user.id, &id, body.name.trim(), &body.description, &graph)
        .await
        .map_err(ApiError::internal)?;
    let row = owned(&state, &user.id, &id).await?;
    Ok(Json(workflow_json(&row)?))
}

/// `DELETE /workflows/{id}`.
pub async fn delete(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
) -> Rest<NoContent> {
    identifier(&id, ErrorCode::WorkflowNotFound, "workflow")?;
    let deleted = state
        .runtime
        .store
        .delete_workflow(&user.id, &id)
        .await
        .map_err(ApiError::internal)?;
    if !deleted {
        return Err(not_found());
    }
    Ok(NoContent)
}

/// A run's parameters (the body may be left out).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct RunBody {
    #[serde(default)]
    pub params: Map<String, Value>,
}

/// A finished run.
#[derive(Debug, Serialize, JsonSchema)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /workflows/{id}/runs`: run it now, as a turn, and answer with the finished run.
pub async fn run(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
    body: Option<JsonBody<RunBody>>,
) -> Rest<Json<WorkflowRun>> {
    owned(&state, &user.id, &id).await?;
    let runtime = &state.runtime;
    let mut request = TurnRequest::chat(MessageContent::Text(format!("Run workflow {id}")));
    request.route = Route::Workflow {
        workflow_id: Some(id),
        params: Some(body.map(|b| b.0.params).unwrap_or_default()),
    };
    request.permission_mode = Some(PermissionMode::Auto);
    let (sink, mut frames) = ChannelSink::new(
        runtime.next_subscriber_id(),
        runtime.config.server.max_outbound_bytes,
    );
    let started = runtime.start_turn(&user.id, request, sink).await?;
    let mut failure = None;
    while let Some(delivered) = frames.recv().await {
        match delivered.event {
            Some(ServerEvent::Error { code, message, .. }) => failure = Some((code, message)),
            Some(ServerEvent::ToolApprovalRequest { tool_call_id, .. }) => {
                let _ = runtime
                    .answer_approval(
                        &user.id,
                        &tool_call_id,
                        ApprovalDecision::Deny,
                        Some("nobody is there to approve it in a REST run".to_owned()),
                    )
                    .await;
            }
            Some(ServerEvent::Chunk { done: true, .. }) => break,
            _ => {}
        }
    }
    let run = runtime
        .store
        .workflow_run(&user.id, &run_id_of(&started.message_id))
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| match failure {
            // The turn ended before its run was recorded: why, as the turn said it.
            Some((code, message)) => ApiError::new(code, message),
            None => ApiError::internal("the run was not recorded"),
        })?;
    Ok(Json(run_json(run)))
}

/// A run as REST answers it.
fn run_json(run: WorkflowRunRow) -> WorkflowRun {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    WorkflowRun {
        outputs: parse(&run.outputs),
        nodes: parse(&run.nodes),
        id: run.id,
        status: run.status,
        thread_id: run.thread_id,
        error: run.error,
    }
}
