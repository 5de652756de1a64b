//! REST for callers without a socket: threads, messages, health, metrics.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::{authenticate, User};
use crate::persist::{rfc3339, to_wire};
use crate::state::AppState;
use crate::trace::{thread_record, turn_trace};

#[derive(Debug, Deserialize)]
pub struct KeyQuery {
    api_key: Option<String>,
}

pub type Rest<T> = Result<T, Response>;

pub fn problem(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

pub fn internal(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "REST request failed");
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "internal error; see the server log",
    )
}

pub async fn user(state: &AppState, headers: &HeaderMap, query: &KeyQuery) -> Rest<User> {
    authenticate(state, headers, query.api_key.as_deref())
        .await
        .map_err(|status| problem(status, "unauthorized", "a valid API key is required"))
}

async fn owned(state: &AppState, user: &User, id: &str) -> Rest<()> {
    // A path that cannot be a thread's id names no thread (and never reaches the database).
    if !weft_protocol::is_identifier(id) {
        return Err(no_thread());
    }
    // A live thread is authoritative: its creation may still be on its way to the database.
    if let Some(runtime) = state.hub.get(id) {
        return if runtime.owner == user.id {
            Ok(())
        } else {
            Err(problem(
                StatusCode::FORBIDDEN,
                "forbidden",
                "that thread belongs to another user",
            ))
        };
    }
    match state.store.thread(id).await.map_err(internal)? {
        None => Err(no_thread()),
        Some(row) if row.owner != user.id => Err(problem(
            StatusCode::FORBIDDEN,
            "forbidden",
            "that thread belongs to another user",
        )),
        Some(_) => Ok(()),
    }
}

fn no_thread() -> Response {
    problem(StatusCode::NOT_FOUND, "thread_not_found", "no such thread")
}

pub async fn list_threads(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let threads = state.store.threads_of(&user.id).await.map_err(internal)?;
    let body: Vec<_> = threads
        .iter()
        .map(|t| {
            json!({
                "id": t.id,
                "title": t.title,
                "permission_mode": t.permission_mode,
                "agent": t.agent.as_deref().unwrap_or(weft_protocol::DEFAULT_AGENT),
                "created_at": rfc3339(t.created_at),
                "updated_at": rfc3339(t.updated_at),
                "active": state.hub.get(&t.id).is_some_and(|r| r.is_active()),
            })
        })
        .collect();
    Ok(Json(body).into_response())
}

pub async fn thread_messages(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    owned(&state, &user, &id).await?;
    let rows = state.store.messages(&id).await.map_err(internal)?;
    Ok(Json(rows.iter().map(to_wire).collect::<Vec<_>>()).into_response())
}

/// The thread's whole conversation record: user messages, assistant messages with their
/// tool calls, and tool results, in order.
pub async fn thread_items(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    owned(&state, &user, &id).await?;
    let messages = state.store.messages(&id).await.map_err(internal)?;
    let items = state.store.root_items(&id).await.map_err(internal)?;
    Ok(Json(thread_record(&messages, &items)).into_response())
}

/// One turn's trace: every response and full result, subtasks nested under their calls.
pub async fn message_trace(
    State(state): State<Arc<AppState>>,
    Path((id, message_id)): Path<(String, String)>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    owned(&state, &user, &id).await?;
    let message = match weft_protocol::is_identifier(&message_id) {
        true => state.store.message(&id, &message_id).await.map_err(internal)?,
        false => None,
    };
    let Some(message) = message else {
        return Err(problem(
            StatusCode::NOT_FOUND,
            "message_not_found",
            "no such message in this thread",
        ));
    };
    let items = if message.role == "assistant" {
        state
            .store
            .turn_items(&id, &message_id)
            .await
            .map_err(internal)?
    } else {
        Vec::new()
    };
    Ok(Json(json!({
        "message_id": message.id,
        "status": message.status,
        "trace": turn_trace(&items),
    }))
    .into_response())
}

/// How long `DELETE /threads/{id}` waits for a running turn to stop and persist.
const DELETE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

pub async fn delete_thread(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    owned(&state, &user, &id).await?;
    if let Some(runtime) = state.hub.remove(&id) {
        // The turn's last writes must land before the delete, or they would bring the
        // thread back: stop it and wait for it to end (it persists what it has first).
        runtime.stop();
        if tokio::time::timeout(DELETE_WAIT, runtime.idle()).await.is_err() {
            tracing::warn!(thread = %id, "a stopped turn did not end in time; deleting anyway");
        }
    }
    // Its files first: they are found through the thread's record.
    state
        .assets
        .delete_for_thread(&user.id, &id)
        .await
        .map_err(internal)?;
    state.store.delete_thread(&id).await.map_err(internal)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /modes`: the execution modes, with how many rounds each allows the server's agent.
pub async fn modes(State(state): State<Arc<AppState>>) -> Response {
    let modes: Vec<Value> = state
        .modes
        .list()
        .iter()
        .map(|m| {
            json!({
                "name": m.name(),
                "display_name": m.display_name(),
                "max_rounds": m.max_rounds(&state.agent),
            })
        })
        .collect();
    Json(modes).into_response()
}

/// Healthy means the database answers and has the schema this build needs.
pub async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.store.schema_versions().await {
        Ok((applied, needed)) if applied >= needed => {
            // MCP servers that are down do not make Weft unhealthy; they are reported.
            let mcp: serde_json::Map<String, serde_json::Value> = state
                .mcp_status()
                .into_iter()
                .map(|(name, connected, tools)| {
                    (name, json!({"connected": connected, "tools": tools}))
                })
                .collect();
            Json(json!({
                "status": "ok",
                "provider": state.providers.default_name(),
                "demo": state.providers.is_demo(),
                "schema": applied,
                "mcp": mcp,
            }))
            .into_response()
        }
        Ok((applied, needed)) => {
            tracing::warn!(
                applied,
                needed,
                "health check: the database schema is out of date"
            );
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "database schema out of date", "schema": applied, "needed": needed})),
            )
                .into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "health check: database unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "database unavailable"})),
            )
                .into_response()
        }
    }
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}
