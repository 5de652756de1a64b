//! REST for knowledge collections: `POST /collections`, `GET /collections`,
//! `DELETE /collections/{name}`, `POST /collections/{name}/documents` (text, Markdown, HTML,
//! or a URL fetched through the SSRF guard), `GET /collections/{name}/documents`. A caller
//! changes only their own collections; shared ones are listed and searchable by everyone.

use super::JsonBody;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::NoContent;
use axum::Json;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_protocol::ErrorCode;
use weft_record::persist::rfc3339;
use weft_services::knowledge::{Body, Format};
use weft_store::{CollectionRow, DocumentRow};

use super::openapi::Created;
use super::paths::CollectionPath;
use super::{ApiError, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

/// Longest collection name.
const MAX_NAME: usize = 64;
/// Largest document text accepted (bytes).
const MAX_TEXT: usize = 5 * 1024 * 1024;

/// A collection to create.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NewCollection {
    /// 1–64 letters, digits, `-`, `_`, `.`, not starting with `_`.
    #[schemars(pattern(super::paths::COLLECTION_NAME_PATTERN))]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    shared: bool,
}

/// A document to add: `text` (with its `format`) or a `url` to fetch.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NewDocumentBody {
    /// Required with `text`; a URL's title defaults to the URL.
    #[serde(default)]
    title: String,
    /// At most 5 MiB.
    text: Option<String>,
    /// Fetched through the SSRF guard.
    url: Option<String>,
    #[serde(default)]
    format: Format,
    /// An object kept with the document.
    #[serde(default)]
    metadata: Option<Value>,
}

/// A knowledge collection.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Collection {
    pub id: String,
    pub name: String,
    pub description: String,
    /// Its owner's user id.
    pub owner: String,
    /// Listed and searchable by everyone.
    pub shared: bool,
    /// RFC 3339.
    pub created_at: String,
}

/// A document of a collection.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Document {
    pub id: String,
    pub title: String,
    /// Where it came from (a URL), or empty.
    pub source: String,
    pub metadata: Map<String, Value>,
    /// How many chunks it was split into.
    pub chunks: i64,
    /// RFC 3339.
    pub created_at: String,
}

fn collection_json(c: &CollectionRow) -> Collection {
    Collection {
        id: c.id.clone(),
        name: c.name.clone(),
        description: c.description.clone(),
        owner: c.owner.clone(),
        shared: c.shared,
        created_at: rfc3339(c.created_at),
    }
}

fn document_json(d: &DocumentRow) -> Document {
    Document {
        id: d.id.clone(),
        title: d.title.clone(),
        source: d.source.clone(),
        metadata: serde_json::from_str(&d.metadata).unwrap_or_default(),
        chunks: d.chunks,
        created_at: rfc3339(d.created_at),
    }
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
) -> Rest<Created<Collection>> {
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
    match created {
        Some(row) => Ok(Created(collection_json(&row))),
        None => Err(ApiError::new(
            ErrorCode::CollectionExists,
            "you already have a collection of that name",
        )),
    }
}

/// `GET /collections`: the caller's, then shared ones.
pub async fn list(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
) -> Rest<Json<Vec<Collection>>> {
    let rows = state
        .runtime
        .store
        .visible_collections(&user.id)
        .await
        .map_err(ApiError::internal)?;
    let list = rows
        .iter()
        .filter(|c| !c.name.starts_with('_'))
        .map(collection_json)
        .collect();
    Ok(Json(list))
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
    Path(CollectionPath { name }): Path<CollectionPath>,
    user: AuthUser,
) -> Rest<NoContent> {
    own(&state, &user.id, &name).await?;
    state
        .runtime
        .store
        .delete_collection(&user.id, &name)
        .await
        .map_err(ApiError::internal)?;
    Ok(NoContent)
}

/// `POST /collections/{name}/documents`: `text` (with `format`) or `url`.
pub async fn add_document(
    State(state): State<Arc<ServerState>>,
    Path(CollectionPath { name }): Path<CollectionPath>,
    user: AuthUser,
    JsonBody(body): JsonBody<NewDocumentBody>,
) -> Rest<Created<Document>> {
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
        Ok(row) => Ok(Created(document_json(&row))),
        Err(message) => Err(ApiError::new(ErrorCode::DocumentRejected, message)),
    }
}

/// `GET /collections/{name}/documents` (the caller's collection, or a shared one).
pub async fn documents(
    State(state): State<Arc<ServerState>>,
    Path(CollectionPath { name }): Path<CollectionPath>,
    user: AuthUser,
) -> Rest<Json<Vec<Document>>> {
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
    Ok(Json(rows.iter().map(document_json).collect()))
}
