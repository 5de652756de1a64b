//! Agents: the server's own (`[agent]`, named `default`) and each user's stored ones (seed
//! 004's config as JSON); which agent a turn runs; and the REST CRUD, where an invalid config
//! is HTTP 422 naming the field.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use weft_protocol::{clip, is_identifier, AgentConfig, AgentConfigError, ErrorCode, DEFAULT_AGENT};

use crate::commands::{internal, Refusal};
use crate::rest::{problem, user, KeyQuery, Rest};
use crate::state::AppState;

/// The agent a turn runs: the one the message names, else the thread's, else the default.
pub async fn resolve(
    state: &AppState,
    user: &str,
    requested: Option<&str>,
    thread_agent: Option<&str>,
) -> Result<Arc<AgentConfig>, Refusal> {
    let name = requested.or(thread_agent).unwrap_or(DEFAULT_AGENT);
    if name == DEFAULT_AGENT {
        return Ok(state.agent.clone());
    }
    let row = state
        .store
        .agent(user, name)
        .await
        .map_err(internal)?
        .ok_or_else(|| {
            (
                ErrorCode::AgentNotFound,
                format!("no agent `{}`; see GET /agents", clip(name, 64)),
            )
        })?;
    let mut config = serde_json::from_str::<AgentConfig>(&row.config).map_err(internal)?;
    // The operator may have lowered `[agent]` since the agent was stored.
    let lowered = config.clamp_to(&state.agent);
    if !lowered.is_empty() {
        tracing::info!(agent = %config.name, ?lowered, "a stored agent's limits lowered to [agent]");
    }
    Ok(Arc::new(config))
}

/// A config from a request body: unknown fields and invalid values are errors naming the
/// field; tool names must be tools this server has. The operator's `[agent]` is the ceiling:
/// a limit left out is the operator's, one above it is an error naming the field.
fn parse(state: &AppState, body: &Value) -> Result<AgentConfig, (String, String)> {
    let mut unknown = Vec::new();
    let mut config: AgentConfig =
        serde_ignored::deserialize(body, |path| unknown.push(path.to_string()))
            .map_err(|e| ("body".to_owned(), e.to_string()))?;
    if let Some(field) = unknown.into_iter().next() {
        return Err((field.clone(), format!("unknown field `{field}`")));
    }
    let check = |e: AgentConfigError| (e.field().to_owned(), e.to_string());
    config.inherit_limits(&state.agent, |field| body.get(field).is_some());
    config.validate().map_err(check)?;
    config.check_within(&state.agent).map_err(check)?;
    config.validate_tools(&state.tool_names()).map_err(check)?;
    Ok(config)
}

fn invalid(field: &str, message: &str) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({"error": {"code": "invalid_field", "message": message, "field": field}})),
    )
        .into_response()
}

fn config_json(config: &AgentConfig) -> Value {
    serde_json::to_value(config).unwrap_or(Value::Null)
}

fn stored(text: &str) -> serde_json::Result<Value> {
    serde_json::from_str(text)
}

/// `GET /agents`: the default agent, then the caller's own.
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let mut out = vec![config_json(&state.agent)];
    for row in state
        .store
        .agents_of(&user.id)
        .await
        .map_err(crate::rest::internal)?
    {
        out.push(stored(&row.config).map_err(crate::rest::internal)?);
    }
    Ok(Json(out).into_response())
}

/// `POST /agents`: create one (409 if the name is taken).
pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    Json(body): Json<Value>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let config = match parse(&state, &body) {
        Ok(config) => config,
        Err((field, message)) => return Ok(invalid(&field, &message)),
    };
    if config.name == DEFAULT_AGENT {
        return Ok(invalid("name", "`default` is the server's own agent"));
    }
    let text = serde_json::to_string(&config).map_err(crate::rest::internal)?;
    let created = state
        .store
        .create_agent(&user.id, &config.name, &text)
        .await
        .map_err(crate::rest::internal)?;
    if !created {
        return Err(problem(
            StatusCode::CONFLICT,
            "invalid_field",
            "an agent of that name exists; PUT /agents/{name} replaces it",
        ));
    }
    Ok((StatusCode::CREATED, Json(config_json(&config))).into_response())
}

fn no_such_agent() -> Response {
    problem(StatusCode::NOT_FOUND, "agent_not_found", "no such agent")
}

/// `GET /agents/{name}`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    // A name that cannot be an agent's reads as a missing agent.
    if !is_identifier(&name) {
        return Err(no_such_agent());
    }
    if name == DEFAULT_AGENT {
        return Ok(Json(config_json(&state.agent)).into_response());
    }
    match state
        .store
        .agent(&user.id, &name)
        .await
        .map_err(crate::rest::internal)?
    {
        Some(row) => Ok(Json(stored(&row.config).map_err(crate::rest::internal)?).into_response()),
        None => Err(no_such_agent()),
    }
}

/// `PUT /agents/{name}`: replace one (its name is the path's).
pub async fn replace(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    Json(mut body): Json<Value>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    // A name that cannot be an agent's reads as a missing agent.
    if !is_identifier(&name) {
        return Err(no_such_agent());
    }
    if name == DEFAULT_AGENT {
        return Err(problem(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the default agent is the server's [agent] config",
        ));
    }
    if let Some(obj) = body.as_object_mut() {
        match obj.get("name").and_then(Value::as_str) {
            Some(other) if other != name => {
                return Ok(invalid(
                    "name",
                    "the name in the body differs from the path",
                ))
            }
            _ => {
                obj.insert("name".into(), json!(name));
            }
        }
    }
    let config = match parse(&state, &body) {
        Ok(config) => config,
        Err((field, message)) => return Ok(invalid(&field, &message)),
    };
    let text = serde_json::to_string(&config).map_err(crate::rest::internal)?;
    if !state
        .store
        .update_agent(&user.id, &name, &text)
        .await
        .map_err(crate::rest::internal)?
    {
        return Err(no_such_agent());
    }
    Ok(Json(config_json(&config)).into_response())
}

/// `DELETE /agents/{name}`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    // A name that cannot be an agent's reads as a missing agent.
    if !is_identifier(&name) {
        return Err(no_such_agent());
    }
    if state
        .store
        .delete_agent(&user.id, &name)
        .await
        .map_err(crate::rest::internal)?
    {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(no_such_agent())
    }
}
