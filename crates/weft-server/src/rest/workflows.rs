//! `GET /node-types`, `/workflows` CRUD (a graph is validated on save: 422 `invalid_graph`
//! naming node and port) and `POST /workflows/{id}/runs`: the run is a turn of a new thread
//! in Auto mode, started like any turn (the user's limits apply; an approval a node asks for
//! is denied, nobody being there to answer it), and the answer is the finished run.
//! Everything is the caller's own.

use super::JsonBody;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use weft_protocol::{ApprovalDecision, ErrorCode, MessageContent, PermissionMode, ServerEvent};
use weft_runtime::persist::rfc3339;
use weft_runtime::turn::run_id_of;
use weft_runtime::{ChannelSink, Route, TurnRequest};
use weft_store::{new_id, now_ms, WorkflowRow, WorkflowRunRow};
use weft_workflow::{Graph, GraphError};

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

fn workflow_json(row: &WorkflowRow) -> Value {
    json!({
        "id": row.id,
        "name": row.name,
        "description": row.description,
        "graph": serde_json::from_str::<Value>(&row.graph).unwrap_or(Value::Null),
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    })
}

#[derive(Debug, Deserialize)]
pub struct WorkflowBody {
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

#[derive(Debug, Deserialize)]
pub struct Search {
    query: Option<String>,
}

/// `GET /node-types?query=`.
pub async fn node_types(
    State(state): State<Arc<ServerState>>,
    _user: AuthUser,
    Query(search): Query<Search>,
) -> Rest<Response> {
    let registry = state.runtime.registry().map_err(|r| disabled(r.message))?;
    Ok(Json(registry.catalogue(search.query.as_deref())).into_response())
}

/// `POST /workflows`.
pub async fn create(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    JsonBody(body): JsonBody<WorkflowBody>,
) -> Rest<Response> {
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
    Ok((StatusCode::CREATED, Json(workflow_json(&row))).into_response())
}

/// `GET /workflows`.
pub async fn list(State(state): State<Arc<ServerState>>, user: AuthUser) -> Rest<Response> {
    let rows = state
        .runtime
        .store
        .workflows_of(&user.id)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(rows.iter().map(workflow_json).collect::<Vec<_>>()).into_response())
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
    Path(id): Path<String>,
    user: AuthUser,
) -> Rest<Response> {
    let row = owned(&state, &user.id, &id).await?;
    Ok(Json(workflow_json(&row)).into_response())
}

/// `PUT /workflows/{id}`.
pub async fn replace(
    State(state): State<Arc<ServerState>>,
    Path(id): Path<String>,
    user: AuthUser,
    JsonBody(body): JsonBody<WorkflowBody>,
) -> Rest<Response> {
    owned(&state, &user.id, &id).await?;
    let graph = checked(&state, &body)?;
    state
        .runtime
        .store
        .update_workflow(&user.id, &id, body.name.trim(), &body.description, &graph)
        .await
        .map_err(ApiError::internal)?;
    let row = owned(&state, &user.id, &id).await?;
    Ok(Json(workflow_json(&row)).into_response())
}

/// `DELETE /workflows/{id}`.
pub async fn delete(
    State(state): State<Arc<ServerState>>,
    Path(id): Path<String>,
    user: AuthUser,
) -> Rest<Response> {
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
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct RunBody {
    #[serde(default)]
    pub params: Map<String, Value>,
}

/// `POST /workflows/{id}/runs`: run it now, as a turn, and answer with the finished run.
pub async fn run(
    State(state): State<Arc<ServerState>>,
    Path(id): Path<String>,
    user: AuthUser,
    body: Option<JsonBody<RunBody>>,
) -> Rest<Response> {
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
    while let Some(delivered) = frames.recv().await {
        match delivered.event {
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
        .ok_or_else(|| ApiError::internal("the run was not recorded"))?;
    Ok(Json(run_json(&run)).into_response())
}

/// A run as REST answers it.
fn run_json(run: &WorkflowRunRow) -> Value {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let mut value = json!({
        "id": run.id,
        "status": run.status,
        "outputs": parse(&run.outputs),
        "nodes": parse(&run.nodes),
        "thread_id": run.thread_id,
    });
    if let Some(error) = &run.error {
        value["error"] = json!(error);
    }
    value
}
