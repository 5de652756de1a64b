//! The websocket handshake (RFC 6455 §4.2), answered here rather than by axum's extractor so
//! that the upgraded connection's raw stream is the server's own: its reads go to tungstenite,
//! its writes to the connection's writer (see `socket`).

use axum::extract::FromRequestParts;
use axum::http::header::{CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, UPGRADE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use sha1::{Digest, Sha1};

/// An upgraded connection, as tokio reads and writes it.
pub type Io = TokioIo<Upgraded>;

/// A valid websocket upgrade request, not yet answered.
pub struct WsUpgrade {
    accept: HeaderValue,
    on_upgrade: OnUpgrade,
}

impl<S: Send + Sync> FromRequestParts<S> for WsUpgrade {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        if parts.method != Method::GET {
            return Err(refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                "a websocket opens with GET",
            ));
        }
        let headers = &parts.headers;
        if !has_token(headers, CONNECTION, "upgrade") || !has_token(headers, UPGRADE, "websocket") {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "expected `Connection: upgrade` and `Upgrade: websocket`",
            ));
        }
        if headers
            .get("sec-websocket-version")
            .map(HeaderValue::as_bytes)
            != Some(b"13")
        {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "expected `Sec-WebSocket-Version: 13`",
            ));
        }
        let Some(key) = headers.get(SEC_WEBSOCKET_KEY) else {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "`Sec-WebSocket-Key` is missing",
            ));
        };
        let accept = accept_key(key.as_bytes());
        let Some(on_upgrade) = parts.extensions.remove::<OnUpgrade>() else {
            return Err(refuse(
                StatusCode::UPGRADE_REQUIRED,
                "this connection cannot be upgraded",
            ));
        };
        Ok(WsUpgrade { accept, on_upgrade })
    }
}

impl WsUpgrade {
    /// Answer `101 Switching Protocols` and run `serve` on the upgraded connection once the
    /// client has the answer.
    pub fn serve<F, Fut>(self, serve: F) -> Response
    where
        F: FnOnce(Io) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let WsUpgrade { accept, on_upgrade } = self;
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(upgraded) => serve(TokioIo::new(upgraded)).await,
                Err(e) => tracing::debug!(error = %e, "a websocket upgrade did not complete"),
            }
        });
        let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
        let headers = response.headers_mut();
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
        response
    }
}

fn refuse(status: StatusCode, why: &'static str) -> Response {
    (status, why).into_response()
}

/// Whether `name`'s comma-separated values include `token` (any case).
fn has_token(headers: &HeaderMap, name: axum::http::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|value| value.trim().eq_ignore_ascii_case(token))
}

/// `Sec-WebSocket-Accept` for a client's key.
fn accept_key(key: &[u8]) -> HeaderValue {
    const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let digest = Sha1::new().chain_update(key).chain_update(GUID).finalize();
    let encoded = base64::engine::general_purpose::STANDARD.encode(digest);
    // Base64 is always a valid header value.
    HeaderValue::from_str(&encoded).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_rfc_6455s() {
        // The example of RFC 6455 §1.3.
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn tokens_are_found_in_lists_in_any_case() {
        let mut headers = HeaderMap::new();
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
        assert!(has_token(&headers, CONNECTION, "upgrade"));
        assert!(!has_token(&headers, UPGRADE, "websocket"));
    }
}
