//! `/threads`: the caller's threads, a thread's messages, its whole record (`/items`), one
//! turn's trace, renaming a thread, and deleting one (its running turn stopped first, its
//! files with it). The rules are the runtime's (`weft_runtime::conversations`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::NoContent;
use axum::Json;
use weft_protocol::rest::{ThreadChange, ThreadSummary, Trace};
use weft_protocol::{ErrorCode, RecordItem, StoredMessage};

use super::paths::{MessagePath, ThreadPath};
use super::{identifier, ApiError, JsonBody, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

/// `GET /threads`.
pub async fn list(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
) -> Rest<Json<Vec<ThreadSummary>>> {
    Ok(Json(state.runtime.threads_of(&user.id).await?))
}

/// `PATCH /threads/{id}`: rename one of the caller's threads.
pub async fn rename(
    State(state): State<Arc<ServerState>>,
    Path(ThreadPath { id }): Path<ThreadPath>,
    user: AuthUser,
    JsonBody(change): JsonBody<ThreadChange>,
) -> Rest<Json<ThreadSummary>> {
    let title = change.title.trim();
    if title.is_empty() || title.chars().count() > 200 {
        // The thread is checked first: another user's reads as missing, whatever the body.
        state.runtime.check_owner(&user.id, &id).await?;
        return Err(ApiError::invalid_field(
            "title",
            "a title is 1 to 200 characters",
        ));
    }
    Ok(Json(
        state.runtime.rename_thread(&user.id, &id, title).await?,
    ))
}

/// `GET /threads/{id}/messages`.
pub async fn messages(
    State(state): State<Arc<ServerState>>,
    Path(ThreadPath { id }): Path<ThreadPath>,
    user: AuthUser,
) -> Rest<Json<Vec<StoredMessage>>> {
    Ok(Json(state.runtime.messages_of(&user.id, &id).await?))
}

/// `GET /threads/{id}/items`: the thread's whole conversation record: user messages,
/// assistant messages with their tool calls, and tool results, in order.
pub async fn items(
    State(state): State<Arc<ServerState>>,
    Path(ThreadPath { id }): Path<ThreadPath>,
    user: AuthUser,
) -> Rest<Json<Vec<RecordItem>>> {
    Ok(Json(state.runtime.record_of(&user.id, &id).await?))
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
    Ok(Json(
        state.runtime.trace_of(&user.id, &id, &message_id).await?,
    ))
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
