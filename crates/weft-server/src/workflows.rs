//! Workflows on the server: the store as the workflow library, and the REST endpoints —
//! `GET /node-types`, `/workflows` CRUD (a graph is validated on save: 422 `invalid_graph`
//! naming node and port), `POST /workflows/{id}/runs` (runs it and answers with the run).
//! Everything is the caller's own.

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use weft_protocol::ServerEvent;
use weft_store::{new_id, now_ms, Store, WorkflowRow, WorkflowRunRow};
use weft_workflow::{
    Graph, GraphError, RunRecord, RunResult, SavedWorkflow, WorkflowLibrary,
};

use crate::persist::rfc3339;
use crate::rest::{internal, problem, user, KeyQuery, Rest};
use crate::state::AppState;

/// The store as the workflow tools' library.
pub struct StoreLibrary {
    pub store: Store,
}

pub fn saved(row: &WorkflowRow) -> Result<SavedWorkflow, String> {
    Ok(SavedWorkflow {
        id: row.id.clone(),
        name: row.name.clone(),
        description: row.description.clone(),
        graph: serde_json::from_str(&row.graph).map_err(|e| format!("stored graph: {e}"))?,
    })
}

#[async_trait]
impl WorkflowLibrary for StoreLibrary {
    async fn list(&self, owner: &str) -> Result<Vec<Value>, String> {
        let rows = self
            .store
            .workflows_of(owner)
            .await
            .map_err(|e| e.to_string())?;
        Ok(rows
            .iter()
            .map(|r| json!({"id": r.id, "name": r.name, "description": r.description}))
            .collect())
    }

    async fn get(&self, owner: &str, id: &str) -> Result<Option<SavedWorkflow>, String> {
        if !weft_protocol::is_identifier(id) {
            return Ok(None);
        }
        match self
            .store
            .workflow(owner, id)
            .await
            .map_err(|e| e.to_string())?
        {
            Some(row) => saved(&row).map(Some),
            None => Ok(None),
        }
    }

    async fn record_run(&self, run: RunRecord<'_>) -> Result<(), String> {
        let row = WorkflowRunRow {
            id: run.run_id.to_owned(),
            workflow_id: run.workflow_id.to_owned(),
            owner: run.owner.to_owned(),
            thread_id: run.thread_id.map(str::to_owned),
            message_id: run.message_id.map(str::to_owned),
            status: run.result.status.as_str().to_owned(),
            params: Value::Object(run.params.clone()).to_string(),
            outputs: Value::Object(run.result.outputs.clone()).to_string(),
            nodes: serde_json::to_string(&run.result.nodes).unwrap_or_else(|_| "[]".into()),
            error: run.result.error.clone(),
            started_at: run.started_at,
            finished_at: now_ms(),
        };
        self.store
            .insert_workflow_run(&row)
            .await
            .map_err(|e| e.to_string())
    }
}

fn invalid_graph(errors: &[GraphError]) -> Response {
    let message = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({"error": {
            "code": "invalid_graph",
            "message": message,
            "node": errors.first().map(|e| e.node.clone()),
            "port": errors.first().and_then(|e| e.port.clone()),
            "errors": errors,
        }})),
    )
        .into_response()
}

/// Workflows are switched off on this server.
fn disabled(message: &str) -> Response {
    problem(StatusCode::NOT_FOUND, "workflows_disabled", message)
}

fn not_found() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "workflow_not_found",
        "no such workflow",
    )
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

/// The body's graph as JSON text if the body is a valid workflow, else the 422 that says
/// why not.
fn checked(state: &AppState, body: &WorkflowBody) -> Result<String, Box<Response>> {
    if body.name.trim().is_empty() || body.name.len() > 200 {
        return Err(Box::new(problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            "name must be 1 to 200 bytes",
        )));
    }
    let registry = state
        .registry()
        .map_err(|(_, message)| Box::new(disabled(&message)))?;
    weft_workflow::validate_within(&body.graph, registry, &state.config.workflow.limits())
        .map_err(|errors| Box::new(invalid_graph(&errors)))?;
    serde_json::to_string(&body.graph).map_err(|e| Box::new(internal(e)))
}

/// `GET /node-types?query=`.
pub async fn node_types(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    Query(search): Query<Search>,
) -> Rest<Response> {
    user(&state, &headers, &q).await?;
    Ok(match state.registry() {
        Ok(registry) => Json(registry.catalogue(search.query.as_deref())).into_response(),
        Err((_, message)) => disabled(&message),
    })
}

#[derive(Debug, Deserialize)]
pub struct Search {
    query: Option<String>,
}

/// `POST /workflows`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    Json(body): Json<WorkflowBody>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let graph = match checked(&state, &body) {
        Ok(graph) => graph,
        Err(response) => return Ok(*response),
    };
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
    state.store.create_workflow(&row).await.map_err(internal)?;
    Ok((StatusCode::CREATED, Json(workflow_json(&row))).into_response())
}

/// `GET /workflows`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let rows = state.store.workflows_of(&user.id).await.map_err(internal)?;
    Ok(Json(rows.iter().map(workflow_json).collect::<Vec<_>>()).into_response())
}

async fn owned(state: &AppState, owner: &str, id: &str) -> Rest<WorkflowRow> {
    if !weft_protocol::is_identifier(id) {
        return Err(not_found());
    }
    state
        .store
        .workflow(owner, id)
        .await
        .map_err(internal)?
        .ok_or_else(not_found)
}

/// `GET /workflows/{id}`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let row = owned(&state, &user.id, &id).await?;
    Ok(Json(workflow_json(&row)).into_response())
}

/// `PUT /workflows/{id}`.
pub async fn replace(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    Json(body): Json<WorkflowBody>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    owned(&state, &user.id, &id).await?;
    let graph = match checked(&state, &body) {
        Ok(graph) => graph,
        Err(response) => return Ok(*response),
    };
    state
        .store
        .update_workflow(&user.id, &id, body.name.trim(), &body.description, &graph)
        .await
        .map_err(internal)?;
    let row = owned(&state, &user.id, &id).await?;
    Ok(Json(workflow_json(&row)).into_response())
}

/// `DELETE /workflows/{id}`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    if !weft_protocol::is_identifier(&id)
        || !state
            .store
            .delete_workflow(&user.id, &id)
            .await
            .map_err(internal)?
    {
        return Err(not_found());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct RunBody {
    #[serde(default)]
    pub params: Map<String, Value>,
}

/// `POST /workflows/{id}/runs`: run it now (nobody can answer an approval here: a node that
/// needs one is denied) and answer with the finished run.
pub async fn run(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    body: Option<Json<RunBody>>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let row = owned(&state, &user.id, &id).await?;
    let workflow = saved(&row).map_err(internal)?;
    // A run is a turn as far as the user's limits go: it counts as a message and holds one
    // of their running turns while it runs.
    let too_many = |message: String| problem(StatusCode::TOO_MANY_REQUESTS, "rate_limited", &message);
    state.limits.message(&user.id).map_err(too_many)?;
    let _slot = state.limits.start_turn(&user.id).map_err(too_many)?;
    let params = body.map(|b| b.0.params).unwrap_or_default();
    let started_at = now_ms();
    let run_id = format!("run_{}", new_id());
    let result = crate::workflow_run::run_detached(&state, &user.id, &workflow, &params, &run_id)
        .await
        .map_err(|(code, message)| problem(StatusCode::UNPROCESSABLE_ENTITY, code, &message))?;
    let library = StoreLibrary {
        store: state.store.clone(),
    };
    library
        .record_run(RunRecord {
            run_id: &run_id,
            owner: &user.id,
            workflow_id: &id,
            thread_id: None,
            message_id: None,
            params: &params,
            result: &result,
            started_at,
        })
        .await
        .map_err(internal)?;
    Ok(Json(run_json(&run_id, &result)).into_response())
}

/// A run as REST answers it.
pub fn run_json(run_id: &str, result: &RunResult) -> Value {
    let mut value = json!({
        "id": run_id,
        "status": result.status,
        "outputs": result.outputs,
        "nodes": result.nodes,
    });
    if let Some(error) = &result.error {
        value["error"] = json!(error);
    }
    value
}

/// Frames of a run nobody watches: an approval request is denied at once.
pub fn deny_approvals(gate: weft_core::PermissionGate) -> impl Fn(ServerEvent) + Send + Sync {
    move |event| {
        if let ServerEvent::ToolApprovalRequest { tool_call_id, .. } = event {
            gate.respond(&tool_call_id, weft_protocol::ApprovalDecision::Deny);
        }
    }
}
