//! `/agents`: the server's own agent (`default`, its `[agent]` table) and each user's stored
//! ones. An invalid config is 422 naming the field; the operator's limits are the ceiling.

use super::JsonBody;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use weft_protocol::{is_identifier, AgentConfig, ErrorCode, DEFAULT_AGENT};
use weft_runtime::agents::parse;

use super::{ApiError, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

fn config_json(config: &AgentConfig) -> Value {
    serde_json::to_value(config).unwrap_or(Value::Null)
}

fn stored(text: &str) -> Rest<Value> {
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
pub async fn list(State(state): State<Arc<ServerState>>, user: AuthUser) -> Rest<Response> {
    let runtime = &state.runtime;
    let mut out = vec![config_json(&runtime.agent)];
    for row in runtime
        .store
        .agents_of(&user.id)
        .await
        .map_err(ApiError::internal)?
    {
        out.push(stored(&row.config)?);
    }
    Ok(Json(out).into_response())
}

/// `POST /agents`: create one (409 if the name is taken).
pub async fn create(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    JsonBody(body): JsonBody<Value>,
) -> Rest<Response> {
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
    Ok((StatusCode::CREATED, Json(config_json(&config))).into_response())
}

/// `GET /agents/{name}`.
pub async fn get(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    user: AuthUser,
) -> Rest<Response> {
    // A name that cannot be an agent's reads as a missing agent.
    if !is_identifier(&name) {
        return Err(no_such_agent());
    }
    if name == DEFAULT_AGENT {
        return Ok(Json(config_json(&state.runtime.agent)).into_response());
    }
    match state
        .runtime
        .store
        .agent(&user.id, &name)
        .await
        .map_err(ApiError::internal)?
    {
        Some(row) => Ok(Json(stored(&row.config)?).into_response()),
        None => Err(no_such_agent()),
    }
}

/// `PUT /agents/{name}`: replace one (its name is the path's).
pub async fn replace(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    user: AuthUser,
    JsonBody(mut body): JsonBody<Value>,
) -> Rest<Response> {
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
        match obj.get("name").and_then(Value::as_str) {
            Some(other) if other != name => {
                return Err(ApiError::invalid_field(
                    "name",
                    "the name in the body differs from the path",
                ))
            }
            _ => {
                obj.insert("name".into(), json!(name));
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
    Ok(Json(config_json(&config)).into_response())
}

/// `DELETE /agents/{name}`.
pub async fn delete(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    user: AuthUser,
) -> Rest<Response> {
    let deleted = is_identifier(&name)
        && state
            .runtime
            .store
            .delete_agent(&user.id, &name)
            .await
            .map_err(ApiError::internal)?;
    if deleted {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(no_such_agent())
    }
}
