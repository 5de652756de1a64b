//! REST for knowledge collections: `POST /collections`, `GET /collections`,
//! `DELETE /collections/{name}`, `POST /collections/{name}/documents` (text, Markdown, HTML,
//! or a URL fetched through the SSRF guard), `GET /collections/{name}/documents`. A caller
//! changes only their own collections; shared ones are listed and searchable by everyone.

use super::JsonBody;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_protocol::ErrorCode;
use weft_runtime::knowledge::{Body, Format};
use weft_runtime::persist::rfc3339;
use weft_store::{CollectionRow, DocumentRow};

use super::{ApiError, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

/// Longest collection name.
const MAX_NAME: usize = 64;
/// Largest document text accepted (bytes).
const MAX_TEXT: usize = 5 * 1024 * 1024;

#[derive(Debug, Deserialize)]
pub struct NewCollection {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    shared: bool,
}

#[derive(Debug, Deserialize)]
pub struct NewDocumentBody {
    #[serde(default)]
    title: String,
    text: Option<String>,
    url: Option<String>,
    #[serde(default)]
    format: Format,
    #[serde(default)]
    metadata: Option<Value>,
}

fn collection_json(c: &CollectionRow) -> Value {
    json!({
        "id": c.id, "name": c.name, "description": c.description, "owner": c.owner,
        "shared": c.shared, "created_at": rfc3339(c.created_at),
    })
}

fn document_json(d: &DocumentRow) -> Value {
    json!({
        "id": d.id, "title": d.title, "source": d.source,
        "metadata": serde_json::from_str::<Value>(&d.metadata).unwrap_or(Value::Null),
        "chunks": d.chunks, "created_at": rfc3339(d.created_at),
    })
}

fn invalid(message: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidField, message)
}

fn not_found() -> ApiError {
    ApiError::new(ErrorCode::CollectionNotFound, "no such collection of yours")
}

/// Names are 1–64 letters, digits, `-`, `_`, `.`, not starting with `_` (reserved).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `POST /collections`.
pub async fn create(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    JsonBody(body): JsonBody<NewCollection>,
) -> Rest<Response> {
    if !valid_name(&body.name) {
        return Err(invalid(
            "name: 1 to 64 letters, digits, '-', '_' or '.', not starting with '_'",
        ));
    }
    let created = state
        .runtime
        .store
        .create_collection(&user.id, &body.name, &body.description, body.shared)
        .await
        .map_err(ApiError::internal)?;
    Ok(match created {
        Some(row) => (StatusCode::CREATED, Json(collection_json(&row))).into_response(),
        None => ApiError::new(
            ErrorCode::CollectionExists,
            "you already have a collection of that name",
        )
        .into_response(),
    })
}

/// `GET /collections`: the caller's, then shared ones.
pub async fn list(State(state): State<Arc<ServerState>>, user: AuthUser) -> Rest<Response> {
    let rows = state
        .runtime
        .store
        .visible_collections(&user.id)
        .await
        .map_err(ApiError::internal)?;
    let list: Vec<Value> = rows
        .iter()
        .filter(|c| !c.name.starts_with('_'))
        .map(collection_json)
        .collect();
    Ok(Json(list).into_response())
}

async fn own(state: &ServerState, owner: &str, name: &str) -> Rest<CollectionRow> {
    if !valid_name(name) {
        return Err(not_found());
    }
    state
        .runtime
        .store
        .own_collection(owner, name)
        .await
        .map_err(ApiError::internal)?
        .filter(|c| !c.name.starts_with('_'))
        .ok_or_else(not_found)
}

/// `DELETE /collections/{name}`.
pub async fn delete(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    user: AuthUser,
) -> Rest<Response> {
    own(&state, &user.id, &name).await?;
    state
        .runtime
        .store
        .delete_collection(&user.id, &name)
        .await
        .map_err(ApiError::internal)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /collections/{name}/documents`: `text` (with `format`) or `url`.
pub async fn add_document(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    user: AuthUser,
    JsonBody(body): JsonBody<NewDocumentBody>,
) -> Rest<Response> {
    let collection = own(&state, &user.id, &name).await?;
    let doc_body = match (body.text, body.url) {
        (Some(text), None) if text.len() > MAX_TEXT => {
            return Err(invalid("text: at most 5 MiB"));
        }
        (Some(text), None) if !text.trim().is_empty() => Body::Text {
            text,
            format: body.format,
        },
        (None, Some(url)) => Body::Url(url),
        _ => return Err(invalid("give exactly one of `text` (not empty) and `url`")),
    };
    let title = match (&doc_body, body.title.trim()) {
        (_, t) if !t.is_empty() => t.to_owned(),
        (Body::Url(url), _) => url.clone(),
        _ => return Err(invalid("title is required")),
    };
    let metadata = match body.metadata {
        None => "{}".to_owned(),
        Some(Value::Object(m)) => Value::Object(m).to_string(),
        Some(_) => return Err(invalid("metadata must be an object")),
    };
    match state
        .runtime
        .knowledge
        .ingest(&collection, &title, doc_body, &metadata)
        .await
    {
        Ok(row) => Ok((StatusCode::CREATED, Json(document_json(&row))).into_response()),
        Err(message) => Err(ApiError::new(ErrorCode::DocumentRejected, message)),
    }
}

/// `GET /collections/{name}/documents` (the caller's collection, or a shared one).
pub async fn documents(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    user: AuthUser,
) -> Rest<Response> {
    if !valid_name(&name) {
        return Err(not_found());
    }
    let collection = state
        .runtime
        .store
        .visible_collection(&user.id, &name)
        .await
        .map_err(ApiError::internal)?
        .filter(|c| !c.name.starts_with('_'))
        .ok_or_else(not_found)?;
    let rows = state
        .runtime
        .store
        .documents(&collection.id)
        .await
        .map_err(ApiError::internal)?;
    let list: Vec<Value> = rows.iter().map(document_json).collect();
    Ok(Json(list).into_response())
}
