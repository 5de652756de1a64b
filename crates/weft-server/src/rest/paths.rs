//! The REST paths' parameters, named as in the routes (so the OpenAPI document names them).

use schemars::JsonSchema;
use serde::Deserialize;
use weft_protocol::IDENTIFIER_PATTERN;

pub use weft_protocol::rest::COLLECTION_NAME_PATTERN;

/// `/threads/{id}…`
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ThreadPath {
    /// The thread's id.
    #[schemars(pattern(IDENTIFIER_PATTERN))]
    pub id: String,
}

/// `/threads/{id}/messages/{message_id}/trace`
#[derive(Debug, Deserialize, JsonSchema)]
pub struct MessagePath {
    /// The thread's id.
    #[schemars(pattern(IDENTIFIER_PATTERN))]
    pub id: String,
    /// The message's id.
    #[schemars(pattern(IDENTIFIER_PATTERN))]
    pub message_id: String,
}

/// `/agents/{name}`
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AgentPath {
    /// The agent's name.
    #[schemars(pattern(IDENTIFIER_PATTERN))]
    pub name: String,
}

/// `/collections/{name}…`
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CollectionPath {
    /// The collection's name.
    #[schemars(pattern(COLLECTION_NAME_PATTERN))]
    pub name: String,
}

/// `/assets/{id}`, `/workflows/{id}…`, `/prompts/{id}…`
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IdPath {
    /// The asset's, workflow's or prompt's id.
    #[schemars(pattern(IDENTIFIER_PATTERN))]
    pub id: String,
}
