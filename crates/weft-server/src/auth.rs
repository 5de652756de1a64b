//! Who is calling: an API key from `Authorization: Bearer …` or `?api_key=…`, or — with no
//! keys configured and a loopback bind — the local user. [`AuthUser`] is the extractor every
//! REST handler and the websocket upgrade take; a caller it lets in no longer counts as an
//! unauthenticated connection of their address.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use weft_protocol::ErrorCode;
use weft_runtime::LOCAL_USER;

use crate::error::ApiError;
use crate::listener::Ticket;
use crate::state::ServerState;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthUser {
    pub id: String,
    /// The key this user presented (re-checked for revocation on long-lived sockets).
    pub key: Option<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct KeyQuery {
    api_key: Option<String>,
}

/// The key a request presents: its bearer token, else its `api_key` query parameter.
pub fn presented_key(headers: &HeaderMap, uri: &axum::http::Uri) -> Option<String> {
    let from_query = axum::extract::Query::<KeyQuery>::try_from_uri(uri)
        .ok()
        .and_then(|q| q.0.api_key);
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|k| k.trim().to_owned())
        .or(from_query)
        .filter(|k| !k.is_empty())
}

/// The caller of a request with these headers and URI.
pub async fn authenticate(
    state: &ServerState,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
) -> Result<AuthUser, ApiError> {
    match presented_key(headers, uri) {
        Some(key) => match state.runtime.store.user_for_key(&key).await {
            Ok(Some(id)) => Ok(AuthUser { id, key: Some(key) }),
            Ok(None) => Err(unauthorized()),
            Err(e) => {
                tracing::error!(error = %e, "key lookup failed");
                Err(
                    ApiError::new(ErrorCode::Internal, "the key could not be checked")
                        .status(StatusCode::SERVICE_UNAVAILABLE),
                )
            }
        },
        None if state.local_user_allowed => Ok(AuthUser {
            id: LOCAL_USER.to_owned(),
            key: None,
        }),
        None => Err(unauthorized()),
    }
}

fn unauthorized() -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, "a valid API key is required")
}

impl FromRequestParts<Arc<ServerState>> for AuthUser {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ServerState>,
    ) -> Result<AuthUser, ApiError> {
        let user = authenticate(state, &parts.headers, &parts.uri).await?;
        if let Some(ticket) = parts.extensions.get::<Arc<Ticket>>() {
            ticket.authenticated();
        }
        Ok(user)
    }
}
