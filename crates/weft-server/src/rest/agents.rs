//! `/agents`: the server's own agent (`default`, its `[agent]` table) and each user's stored
//! ones. An invalid config is 422 naming the field; the operator's limits are the ceiling.

use super::JsonBody;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::NoContent;
use axum::Json;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_protocol::{is_identifier, AgentConfig, ErrorCode, DEFAULT_AGENT};
use weft_runtime::agents::parse;

use super::openapi::Created;
use super::paths::AgentPath;
use super::{ApiError, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

/// An agent's config as sent: read as JSON first, so a wrong field is a 422 naming it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct AgentBody(#[schemars(with = "AgentConfig")] pub Value);

fn stored(text: &str) -> Rest<AgentConfig> {
    serde_json::from_str(text).map_err(ApiError::internal)
}

fn no_such_agent() -> ApiError {
    ApiError::new(ErrorCode::AgentNotFound, "no such agent")
}

/// The config a body describes, or the 422 naming its field.
fn checked(state: &ServerState, body: &Value) -> Rest<AgentConfig> {
    parse(&state.runtime, body).map_err(|(field, message)| ApiError::invalid_field(&field, message))
}

/// `GET /agents`: the default agent, then the caller's own.
pub async fn list(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
) -> Rest<Json<Vec<AgentConfig>>> {
    let runtime = &state.runtime;
    let mut out = vec![(*runtime.agent).clone()];
    for row in runtime
        .store
        .agents_of(&user.id)
        .await
        .map_err(ApiError::internal)?
    {
        out.push(stored(&row.config)?);
    }
    Ok(Json(out))
}

/// `POST /agents`: create one (409 if the name is taken).
pub async fn create(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    JsonBody(AgentBody(body)): JsonBody<AgentBody>,
) -> Rest<Created<AgentConfig>> {
    let config = checked(&state, &body)?;
    if config.name == DEFAULT_AGENT {
        return Err(ApiError::invalid_field(
            "name",
            "`default` is the server's own agent",
        ));
    }
    let text = serde_json::to_string(&config).map_err(ApiError::internal)?;
    let created = state
        .runtime
        .store
        .create_agent(&user.id, &config.name, &text)
        .await
        .map_err(ApiError::internal)?;
    if !created {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            "an agent of that name exists; PUT /agents/{name} replaces it",
        )
        .status(StatusCode::CONFLICT));
    }
    Ok(Created(config))
}

/// `GET /agents/{name}`.
pub async fn get(
    State(state): State<Arc<ServerState>>,
    Path(AgentPath { name }): Path<AgentPath>,
    user: AuthUser,
) -> Rest<Json<AgentConfig>> {
    // A name that cannot be an agent's reads as a missing agent.
    if !is_identifier(&name) {
        return Err(no_such_agent());
    }
    if name == DEFAULT_AGENT {
        return Ok(Json((*state.runtime.agent).clone()));
    }
    match state
        .runtime
        .store
        .agent(&user.id, &name)
        .await
        .map_err(ApiError::internal)?
    {
        Some(row) => Ok(Json(stored(&row.config)?)),
        None => Err(no_such_agent()),
    }
}

/// `PUT /agents/{name}`: replace one (its name is the path's).
pub async fn replace(
    State(state): State<Arc<ServerState>>,
    Path(AgentPath { name }): Path<AgentPath>,
    user: AuthUser,
    JsonBody(AgentBody(mut body)): JsonBody<AgentBody>,
) -> Rest<Json<AgentConfig>> {
    if !is_identifier(&name) {
        return Err(no_such_agent());
    }
    if name == DEFAULT_AGENT {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "the default agent is the server's [agent] config",
        ));
    }
    if let Some(obj) = body.as_object_mut() {
        // Left out, the path's; given, it must be the path's (a name that is not even a
        // string included: schemathesis found one taken as the path's).
        match obj.get("name") {
            None => {
                obj.insert("name".into(), json!(name));
            }
            Some(Value::String(given)) if *given == name => {}
            Some(_) => {
                return Err(ApiError::invalid_field(
                    "name",
                    "the name in the body differs from the path",
                ))
            }
        }
    }
    let config = checked(&state, &body)?;
    let text = serde_json::to_string(&config).map_err(ApiError::internal)?;
    if !state
        .runtime
        .store
        .update_agent(&user.id, &name, &text)
        .await
        .map_err(ApiError::internal)?
    {
        return Err(no_such_agent());
    }
    Ok(Json(config))
}

/// `DELETE /agents/{name}`.
pub async fn delete(
    State(state): State<Arc<ServerState>>,
    Path(AgentPath { name }): Path<AgentPath>,
    user: AuthUser,
) -> Rest<NoContent> {
    let deleted = is_identifier(&name)
        && state
            .runtime
            .store
            .delete_agent(&user.id, &name)
            .await
            .map_err(ApiError::internal)?;
    if deleted {
        Ok(NoContent)
    } else {
        Err(no_such_agent())
    }
}
