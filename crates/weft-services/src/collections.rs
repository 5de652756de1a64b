//! Knowledge collections as their owners manage them: create, list (their own, then shared
//! ones), delete, add a document (text with its format, or a URL fetched through the SSRF
//! guard), list a collection's documents. Names are checked here; collections whose name
//! starts with `_` (a user's `_memory`) are the server's and never shown.

use weft_protocol::rest::{Collection, Document, NewCollection, NewDocumentBody};
use weft_store::{rfc3339, CollectionRow, DocumentRow, Store, StoreError};

use crate::knowledge::{Body, Knowledge};

/// Longest collection name.
const MAX_NAME: usize = 64;
/// Largest document text accepted (bytes).
const MAX_TEXT: usize = 5 * 1024 * 1024;

/// Why a collection request was refused.
#[derive(Debug, thiserror::Error)]
pub enum CollectionError {
    #[error("{0}")]
    Invalid(&'static str),
    #[error("no such collection of yours")]
    NotFound,
    #[error("you already have a collection of that name")]
    Exists,
    /// The document could not be taken in (fetched, split, embedded).
    #[error("{0}")]
    Rejected(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

type Result<T> = std::result::Result<T, CollectionError>;

/// Names are 1–64 letters, digits, `-`, `_`, `.`, not starting with `_` (reserved).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Create `owner`'s collection.
pub async fn create(store: &Store, owner: &str, new: &NewCollection) -> Result<Collection> {
    if !valid_name(&new.name) {
        return Err(CollectionError::Invalid(
            "name: 1 to 64 letters, digits, '-', '_' or '.', not starting with '_'",
        ));
    }
    store
        .create_collection(owner, &new.name, &new.description, new.shared)
        .await?
        .map(|row| collection_json(&row))
        .ok_or(CollectionError::Exists)
}

/// `owner`'s collections, then shared ones.
pub async fn visible(store: &Store, owner: &str) -> Result<Vec<Collection>> {
    let rows = store.visible_collections(owner).await?;
    Ok(rows
        .iter()
        .filter(|c| !c.name.starts_with('_'))
        .map(collection_json)
        .collect())
}

/// `owner`'s collection `name`.
async fn own(store: &Store, owner: &str, name: &str) -> Result<CollectionRow> {
    if !valid_name(name) {
        return Err(CollectionError::NotFound);
    }
    store
        .own_collection(owner, name)
        .await?
        .filter(|c| !c.name.starts_with('_'))
        .ok_or(CollectionError::NotFound)
}

/// Delete `owner`'s collection `name`, with its documents.
pub async fn delete(store: &Store, owner: &str, name: &str) -> Result<()> {
    own(store, owner, name).await?;
    store.delete_collection(owner, name).await?;
    Ok(())
}

/// Add a document to `owner`'s collection `name`: `text` (with its format) or a `url`.
pub async fn add_document(
    knowledge: &Knowledge,
    owner: &str,
    name: &str,
    new: NewDocumentBody,
) -> Result<Document> {
    let collection = own(&knowledge.store, owner, name).await?;
    let body = match (new.text, new.url) {
        (Some(text), None) if text.len() > MAX_TEXT => {
            return Err(CollectionError::Invalid("text: at most 5 MiB"));
        }
        (Some(text), None) if !text.trim().is_empty() => Body::Text {
            text,
            format: new.format,
        },
        (None, Some(url)) => Body::Url(url),
        _ => {
            return Err(CollectionError::Invalid(
                "give exactly one of `text` (not empty) and `url`",
            ))
        }
    };
    let title = match (&body, new.title.trim()) {
        (_, t) if !t.is_empty() => t.to_owned(),
        (Body::Url(url), _) => url.clone(),
        _ => return Err(CollectionError::Invalid("title is required")),
    };
    let metadata = match new.metadata {
        None => "{}".to_owned(),
        Some(serde_json::Value::Object(m)) => serde_json::Value::Object(m).to_string(),
        Some(_) => return Err(CollectionError::Invalid("metadata must be an object")),
    };
    let row = knowledge
        .ingest(&collection, &title, body, &metadata)
        .await
        .map_err(CollectionError::Rejected)?;
    Ok(document_json(&row))
}

/// The documents of collection `name`: `owner`'s, or a shared one.
pub async fn documents(store: &Store, owner: &str, name: &str) -> Result<Vec<Document>> {
    if !valid_name(name) {
        return Err(CollectionError::NotFound);
    }
    let collection = store
        .visible_collection(owner, name)
        .await?
        .filter(|c| !c.name.starts_with('_'))
        .ok_or(CollectionError::NotFound)?;
    let rows = store.documents(&collection.id).await?;
    Ok(rows.iter().map(document_json).collect())
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
