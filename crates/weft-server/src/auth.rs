//! Authentication: an API key from `Authorization: Bearer …` or `?api_key=…`; with no keys
//! configured and a loopback bind, the local user.

use axum::http::{HeaderMap, StatusCode};

use crate::state::{AppState, LOCAL_USER};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: String,
    /// The key this user presented (re-checked for revocation on long-lived sockets).
    pub key: Option<String>,
}

pub fn presented_key(headers: &HeaderMap, query_key: Option<&str>) -> Option<String> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|k| k.trim().to_owned())
        .or_else(|| query_key.map(str::to_owned))
        .filter(|k| !k.is_empty())
}

pub async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    query_key: Option<&str>,
) -> Result<User, StatusCode> {
    match presented_key(headers, query_key) {
        Some(key) => match state.store.user_for_key(&key).await {
            Ok(Some(id)) => Ok(User { id, key: Some(key) }),
            Ok(None) => Err(StatusCode::UNAUTHORIZED),
            Err(e) => {
                tracing::error!(error = %e, "key lookup failed");
                Err(StatusCode::SERVICE_UNAVAILABLE)
            }
        },
        None if state.local_user_allowed => Ok(User {
            id: LOCAL_USER.to_owned(),
            key: None,
        }),
        None => Err(StatusCode::UNAUTHORIZED),
    }
}
