//! `/threads`: the caller's threads, a thread's messages, its whole record (`/items`), one
//! turn's trace, renaming a thread, and deleting one (its running turn stopped first, its
//! files with it).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::NoContent;
use axum::Json;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use weft_protocol::{ErrorCode, PermissionMode, RecordEntry, RecordItem, StoredMessage};
use weft_record::persist::rfc3339;
use weft_record::views::{thread_messages, thread_record, turn_trace};
use weft_runtime::Runtime;
use weft_store::ThreadRow;

use super::paths::{MessagePath, ThreadPath};
use super::{identifier, ApiError, JsonBody, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

/// A thread as `GET /threads` lists it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ThreadSummary {
    pub id: String,
    pub title: String,
    pub permission_mode: PermissionMode,
    /// The agent its turns run (`default`: the server's own).
    pub agent: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// Whether a turn of it is running (on this replica).
    pub active: bool,
}

/// One turn's trace.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Trace {
    pub message_id: String,
    /// The message's status (`running`, `completed`, …).
    pub status: String,
    /// Root entries in order, each subtask's under the call that ran it.
    pub trace: Vec<RecordEntry>,
}

/// `GET /threads`.
pub async fn list(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
) -> Rest<Json<Vec<ThreadSummary>>> {
    let runtime = &state.runtime;
    let threads = runtime
        .store
        .threads_of(&user.id)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(threads.iter().map(|t| summary(runtime, t)).collect()))
}

fn summary(runtime: &Runtime, t: &ThreadRow) -> ThreadSummary {
    ThreadSummary {
        id: t.id.clone(),
        title: t.title.clone(),
        permission_mode: PermissionMode::parse(&t.permission_mode).unwrap_or_default(),
        agent: t
            .agent
            .as_deref()
            .unwrap_or(weft_protocol::DEFAULT_AGENT)
            .to_owned(),
        created_at: rfc3339(t.created_at),
        updated_at: rfc3339(t.updated_at),
        active: runtime.hub.get(&t.id).is_some_and(|r| r.is_active()),
    }
}

/// What `PATCH /threads/{id}` changes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ThreadChange {
    /// Its new title: 1 to 200 characters (trimmed).
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
}

/// `PATCH /threads/{id}`: rename one of the caller's threads.
pub async fn rename(
    State(state): State<Arc<ServerState>>,
    Path(ThreadPath { id }): Path<ThreadPath>,
    user: AuthUser,
    JsonBody(change): JsonBody<ThreadChange>,
) -> Rest<Json<ThreadSummary>> {
    let runtime = &state.runtime;
    runtime.check_owner(&user.id, &id).await?;
    let title = change.title.trim();
    if title.is_empty() || title.chars().count() > 200 {
        return Err(ApiError::invalid_field(
            "title",
            "a title is 1 to 200 characters",
        ));
    }
    let store = &runtime.store;
    store
        .set_thread_title(&id, title)
        .await
        .map_err(ApiError::internal)?;
    let row = store
        .thread(&id)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::new(ErrorCode::ThreadNotFound, "no such thread"))?;
    Ok(Json(summary(runtime, &row)))
}

/// `GET /threads/{id}/messages`.
pub async fn messages(
    State(state): State<Arc<ServerState>>,
    Path(ThreadPath { id }): Path<ThreadPath>,
    user: AuthUser,
) -> Rest<Json<Vec<StoredMessage>>> {
    state.runtime.check_owner(&user.id, &id).await?;
    let messages = thread_messages(&state.runtime.store, &id)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(messages))
}

/// `GET /threads/{id}/items`: the thread's whole conversation record: user messages,
/// assistant messages with their tool calls, and tool results, in order.
pub async fn items(
    State(state): State<Arc<ServerState>>,
    Path(ThreadPath { id }): Path<ThreadPath>,
    user: AuthUser,
) -> Rest<Json<Vec<RecordItem>>> {
    state.runtime.check_owner(&user.id, &id).await?;
    let store = &state.runtime.store;
    let messages = store.messages(&id).await.map_err(ApiError::internal)?;
    let items = store.root_items(&id).await.map_err(ApiError::internal)?;
    Ok(Json(thread_record(&messages, &items)))
}

/// `GET /threads/{id}/messages/{message_id}/trace`: one turn's trace, every response and
/// full result, subtasks nested under their calls; of a running turn, everything its clients
/// have been shown.
pub async fn trace(
    State(state): State<Arc<ServerState>>,
    Path(MessagePath { id, message_id }): Path<MessagePath>,
    user: AuthUser,
) -> Rest<Json<Trace>> {
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
    Ok(Json(Trace {
        message_id: message.id,
        status: message.status,
        trace: turn_trace(&items),
    }))
}

/// `DELETE /threads/{id}`.
pub async fn delete(
    State(state): State<Arc<ServerState>>,
    Path(ThreadPath { id }): Path<ThreadPath>,
    user: AuthUser,
) -> Rest<NoContent> {
    state.runtime.delete_thread(&user.id, &id).await?;
    Ok(NoContent)
}
