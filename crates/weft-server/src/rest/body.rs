//! [`JsonBody`]: a REST request body read as JSON, its failures answered like every other
//! REST error: `too_large` (413) past `[server] max_request_bytes`, `invalid_json` (400) for
//! a body that is not JSON, `invalid_field` (422) for JSON of the wrong shape.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, OptionalFromRequest, Request};
use axum::http::{header, StatusCode};
use axum::Json;
use serde::de::DeserializeOwned;
use weft_protocol::ErrorCode;

use crate::error::ApiError;

/// A JSON request body.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match <Json<T> as FromRequest<S>>::from_request(request, state).await {
            Ok(Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(refused(rejection)),
        }
    }
}

/// A body that may be left out (no `Content-Type`, nothing sent).
impl<S: Send + Sync, T: DeserializeOwned> OptionalFromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Option<Self>, ApiError> {
        let empty = request.headers().get(header::CONTENT_TYPE).is_none()
            && request
                .headers()
                .get(header::CONTENT_LENGTH)
                .is_none_or(|length| length == "0");
        if empty {
            return Ok(None);
        }
        <JsonBody<T> as FromRequest<S>>::from_request(request, state)
            .await
            .map(Some)
    }
}

fn refused(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::JsonDataError(e) => ApiError::new(ErrorCode::InvalidField, e.body_text()),
        JsonRejection::JsonSyntaxError(e) => {
            ApiError::new(ErrorCode::InvalidJson, e.body_text()).status(StatusCode::BAD_REQUEST)
        }
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            ErrorCode::InvalidJson,
            "the body must be JSON, sent with Content-Type: application/json",
        )
        .status(StatusCode::UNSUPPORTED_MEDIA_TYPE),
        JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(
                ErrorCode::TooLarge,
                "the body is larger than this server accepts ([server] max_request_bytes)",
            )
        }
        other => ApiError::new(ErrorCode::InvalidJson, other.body_text()).status(other.status()),
    }
}
