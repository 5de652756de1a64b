//! `GET /node-types`, `/workflows` CRUD (a graph is validated on save: 422 `invalid_graph`
//! naming node and port) and `POST /workflows/{id}/runs`: the run is a turn of a new thread
//! in Auto mode, started like any turn (the user's limits apply; an approval a node asks for
//! is denied, nobody being there to answer it), and the answer is the finished run.
//! Everything is the caller's own. The rules are the services' (`saved_workflows`) and the
//! runtime's (`run_workflow_now`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::NoContent;
use axum::Json;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use weft_protocol::rest::{RunBody, Workflow, WorkflowBody, WorkflowRun};
use weft_protocol::ErrorCode;
use weft_services::saved_workflows::{self, Bounds, WorkflowError};
use weft_workflow::CatalogueEntry;

use super::openapi::Created;
use super::paths::IdPath;
use super::{ApiError, JsonBody, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

impl From<WorkflowError> for ApiError {
    fn from(error: WorkflowError) -> ApiError {
        match &error {
            WorkflowError::Invalid(message) => ApiError::new(ErrorCode::InvalidField, *message),
            WorkflowError::Graph(errors) => {
                ApiError::new(ErrorCode::InvalidGraph, error.to_string())
                    .with("node", json!(errors.first().map(|e| e.node.clone())))
                    .with("port", json!(errors.first().and_then(|e| e.port.clone())))
                    .with("errors", json!(errors))
            }
            WorkflowError::NotFound => {
                ApiError::new(ErrorCode::WorkflowNotFound, error.to_string())
            }
            WorkflowError::Store(_) | WorkflowError::Stored(_) => ApiError::internal(error),
        }
    }
}

/// What a graph is checked against here (workflows switched off: `workflows_disabled`).
fn bounds(state: &ServerState) -> Rest<Bounds<'_>> {
    let runtime = &state.runtime;
    let registry = runtime
        .registry()
        .map_err(|r| ApiError::new(ErrorCode::WorkflowsDisabled, r.message))?;
    Ok(Bounds {
        registry,
        limits: runtime.config.workflow.limits(),
    })
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
    let bounds = bounds(&state)?;
    Ok(Json(bounds.registry.catalogue(search.query.as_deref())))
}

/// `POST /workflows`.
pub async fn create(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    JsonBody(body): JsonBody<WorkflowBody>,
) -> Rest<Created<Workflow>> {
    let store = &state.runtime.store;
    let saved = saved_workflows::create(store, &bounds(&state)?, &user.id, body).await?;
    Ok(Created(saved))
}

/// `GET /workflows`.
pub async fn list(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
) -> Rest<Json<Vec<Workflow>>> {
    Ok(Json(
        saved_workflows::list(&state.runtime.store, &user.id).await?,
    ))
}

/// `GET /workflows/{id}`.
pub async fn get(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
) -> Rest<Json<Workflow>> {
    Ok(Json(
        saved_workflows::get(&state.runtime.store, &user.id, &id).await?,
    ))
}

/// `PUT /workflows/{id}`.
pub async fn replace(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
    JsonBody(body): JsonBody<WorkflowBody>,
) -> Rest<Json<Workflow>> {
    let store = &state.runtime.store;
    let saved = saved_workflows::replace(store, &bounds(&state)?, &user.id, &id, body).await?;
    Ok(Json(saved))
}

/// `DELETE /workflows/{id}`.
pub async fn delete(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
) -> Rest<NoContent> {
    saved_workflows::delete(&state.runtime.store, &user.id, &id).await?;
    Ok(NoContent)
}

/// `POST /workflows/{id}/runs`: run it now, as a turn, and answer with the finished run.
pub async fn run(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
    body: Option<JsonBody<RunBody>>,
) -> Rest<Json<WorkflowRun>> {
    saved_workflows::owned(&state.runtime.store, &user.id, &id).await?;
    let params = body.map(|b| b.0.params).unwrap_or_default();
    Ok(Json(
        state
            .runtime
            .run_workflow_now(&user.id, &id, params)
            .await?,
    ))
}
