//! `/threads`: the caller's threads, a thread's messages, its whole record (`/items`), one
//! turn's trace, and deleting a thread (its running turn stopped first, its files with it).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use weft_protocol::ErrorCode;
use weft_runtime::persist::{rfc3339, to_wire};
use weft_runtime::record::views::{thread_record, turn_trace};

use super::{identifier, ApiError, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

/// `GET /threads`.
pub async fn list(State(state): State<Arc<ServerState>>, user: AuthUser) -> Rest<Response> {
    let runtime = &state.runtime;
    let threads = runtime
        .store
        .threads_of(&user.id)
        .await
        .map_err(ApiError::internal)?;
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
                "active": runtime.hub.get(&t.id).is_some_and(|r| r.is_active()),
            })
        })
        .collect();
    Ok(Json(body).into_response())
}

/// `GET /threads/{id}/messages`.
pub async fn messages(
    State(state): State<Arc<ServerState>>,
    Path(id): Path<String>,
    user: AuthUser,
) -> Rest<Response> {
    state.runtime.check_owner(&user.id, &id).await?;
    let rows = state
        .runtime
        .store
        .messages(&id)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(rows.iter().map(to_wire).collect::<Vec<_>>()).into_response())
}

/// `GET /threads/{id}/items`: the thread's whole conversation record: user messages,
/// assistant messages with their tool calls, and tool results, in order.
pub async fn items(
    State(state): State<Arc<ServerState>>,
    Path(id): Path<String>,
    user: AuthUser,
) -> Rest<Response> {
    state.runtime.check_owner(&user.id, &id).await?;
    let store = &state.runtime.store;
    let messages = store.messages(&id).await.map_err(ApiError::internal)?;
    let items = store.root_items(&id).await.map_err(ApiError::internal)?;
    Ok(Json(thread_record(&messages, &items)).into_response())
}

/// `GET /threads/{id}/messages/{message_id}/trace`: one turn's trace, every response and
/// full result, subtasks nested under their calls; of a running turn, everything its clients
/// have been shown.
pub async fn trace(
    State(state): State<Arc<ServerState>>,
    Path((id, message_id)): Path<(String, String)>,
    user: AuthUser,
) -> Rest<Response> {
    state.runtime.check_owner(&user.id, &id).await?;
    identifier(
        &message_id,
        ErrorCode::MessageNotFound,
        "message in this thread",
    )?;
    // A running turn's trace holds what its clients have seen, wherever it runs.
    state.runtime.settle(&user.id, &id).await?;
    let store = &state.runtime.store;
    let Some(message) = store
        .message(&id, &message_id)
        .await
        .map_err(ApiError::internal)?
    else {
        return Err(ApiError::new(
            ErrorCode::MessageNotFound,
            "no such message in this thread",
        ));
    };
    let items = if message.role == "assistant" {
        store
            .turn_items(&id, &message_id)
            .await
            .map_err(ApiError::internal)?
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

/// `DELETE /threads/{id}`.
pub async fn delete(
    State(state): State<Arc<ServerState>>,
    Path(id): Path<String>,
    user: AuthUser,
) -> Rest<Response> {
    state.runtime.delete_thread(&user.id, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
