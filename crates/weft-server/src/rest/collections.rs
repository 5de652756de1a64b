//! REST for knowledge collections: `POST /collections`, `GET /collections`,
//! `DELETE /collections/{name}`, `POST /collections/{name}/documents` (text, Markdown, HTML,
//! or a URL fetched through the SSRF guard), `GET /collections/{name}/documents`. A caller
//! changes only their own collections; shared ones are listed and searchable by everyone.
//! The rules are the services' (`weft_services::collections`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::NoContent;
use axum::Json;
use weft_protocol::rest::{Collection, Document, NewCollection, NewDocumentBody};
use weft_protocol::ErrorCode;
use weft_services::collections::{self, CollectionError};

use super::openapi::Created;
use super::paths::CollectionPath;
use super::{ApiError, JsonBody, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

impl From<CollectionError> for ApiError {
    fn from(error: CollectionError) -> ApiError {
        let code = match &error {
            CollectionError::Invalid(_) => ErrorCode::InvalidField,
            CollectionError::NotFound => ErrorCode::CollectionNotFound,
            CollectionError::Exists => ErrorCode::CollectionExists,
            CollectionError::Rejected(_) => ErrorCode::DocumentRejected,
            CollectionError::Store(e) => return ApiError::internal(e),
        };
        ApiError::new(code, error.to_string())
    }
}

/// `POST /collections`.
pub async fn create(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    JsonBody(body): JsonBody<NewCollection>,
) -> Rest<Created<Collection>> {
    let store = &state.runtime.store;
    Ok(Created(collections::create(store, &user.id, &body).await?))
}

/// `GET /collections`: the caller's, then shared ones.
pub async fn list(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
) -> Rest<Json<Vec<Collection>>> {
    let store = &state.runtime.store;
    Ok(Json(collections::visible(store, &user.id).await?))
}

/// `DELETE /collections/{name}`.
pub async fn delete(
    State(state): State<Arc<ServerState>>,
    Path(CollectionPath { name }): Path<CollectionPath>,
    user: AuthUser,
) -> Rest<NoContent> {
    collections::delete(&state.runtime.store, &user.id, &name).await?;
    Ok(NoContent)
}

/// `POST /collections/{name}/documents`: `text` (with `format`) or `url`.
pub async fn add_document(
    State(state): State<Arc<ServerState>>,
    Path(CollectionPath { name }): Path<CollectionPath>,
    user: AuthUser,
    JsonBody(body): JsonBody<NewDocumentBody>,
) -> Rest<Created<Document>> {
    let knowledge = &state.runtime.knowledge;
    let document = collections::add_document(knowledge, &user.id, &name, body).await?;
    Ok(Created(document))
}

/// `GET /collections/{name}/documents` (the caller's collection, or a shared one).
pub async fn documents(
    State(state): State<Arc<ServerState>>,
    Path(CollectionPath { name }): Path<CollectionPath>,
    user: AuthUser,
) -> Rest<Json<Vec<Document>>> {
    let store = &state.runtime.store;
    Ok(Json(collections::documents(store, &user.id, &name).await?))
}
