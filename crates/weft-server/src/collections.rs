//! REST for knowledge collections: `POST /collections`, `GET /collections`,
//! `DELETE /collections/{name}`, `POST /collections/{name}/documents` (text, Markdown, HTML,
//! or a URL fetched through the SSRF guard), `GET /collections/{name}/documents`. A caller
//! changes only their own collections; shared ones are listed and searchable by everyone.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_store::{CollectionRow, DocumentRow};

use crate::knowledge::{Body, Format};
use crate::persist::rfc3339;
use crate::rest::{internal, problem, user, KeyQuery, Rest};
use crate::state::AppState;

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

fn invalid(message: &str) -> Response {
    problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", message)
}

fn not_found() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "collection_not_found",
        "no such collection of yours",
    )
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
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    Json(body): Json<NewCollection>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    if !valid_name(&body.name) {
        return Ok(invalid(
            "name: 1 to 64 letters, digits, '-', '_' or '.', not starting with '_'",
        ));
    }
    let created = state
        .store
        .create_collection(&user.id, &body.name, &body.description, body.shared)
        .await
        .map_err(internal)?;
    Ok(match created {
        Some(row) => (StatusCode::CREATED, Json(collection_json(&row))).into_response(),
        None => problem(
            StatusCode::CONFLICT,
            "collection_exists",
            "you already have a collection of that name",
        ),
    })
}

/// `GET /collections`: the caller's, then shared ones.
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let rows = state
        .store
        .visible_collections(&user.id)
        .await
        .map_err(internal)?;
    let list: Vec<Value> = rows
        .iter()
        .filter(|c| !c.name.starts_with('_'))
        .map(collection_json)
        .collect();
    Ok(Json(list).into_response())
}

async fn own(state: &AppState, owner: &str, name: &str) -> Rest<CollectionRow> {
    if !valid_name(name) {
        return Err(not_found());
    }
    state
        .store
        .own_collection(owner, name)
        .await
        .map_err(internal)?
        .filter(|c| !c.name.starts_with('_'))
        .ok_or_else(not_found)
}

/// `DELETE /collections/{name}`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    own(&state, &user.id, &name).await?;
    state
        .store
        .delete_collection(&user.id, &name)
        .await
        .map_err(internal)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /collections/{name}/documents`: `text` (with `format`) or `url`.
pub async fn add_document(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
    Json(body): Json<NewDocumentBody>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    let collection = own(&state, &user.id, &name).await?;
    let doc_body = match (body.text, body.url) {
        (Some(text), None) if text.len() > MAX_TEXT => {
            return Ok(invalid("text: at most 5 MiB"));
        }
        (Some(text), None) if !text.trim().is_empty() => Body::Text {
            text,
            format: body.format,
        },
        (None, Some(url)) => Body::Url(url),
        _ => return Ok(invalid("give exactly one of `text` (not empty) and `url`")),
    };
    let title = match (&doc_body, body.title.trim()) {
        (_, t) if !t.is_empty() => t.to_owned(),
        (Body::Url(url), _) => url.clone(),
        _ => return Ok(invalid("title is required")),
    };
    let metadata = match body.metadata {
        None => "{}".to_owned(),
        Some(Value::Object(m)) => Value::Object(m).to_string(),
        Some(_) => return Ok(invalid("metadata must be an object")),
    };
    match state
        .knowledge
        .ingest(&collection, &title, doc_body, &metadata)
        .await
    {
        Ok(row) => Ok((StatusCode::CREATED, Json(document_json(&row))).into_response()),
        Err(message) => Ok(problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "document_rejected",
            &message,
        )),
    }
}

/// `GET /collections/{name}/documents` (the caller's collection, or a shared one).
pub async fn documents(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(q): Query<KeyQuery>,
) -> Rest<Response> {
    let user = user(&state, &headers, &q).await?;
    if !valid_name(&name) {
        return Err(not_found());
    }
    let collection = state
        .store
        .visible_collection(&user.id, &name)
        .await
        .map_err(internal)?
        .filter(|c| !c.name.starts_with('_'))
        .ok_or_else(not_found)?;
    let rows = state
        .store
        .documents(&collection.id)
        .await
        .map_err(internal)?;
    let list: Vec<Value> = rows.iter().map(document_json).collect();
    Ok(Json(list).into_response())
}
