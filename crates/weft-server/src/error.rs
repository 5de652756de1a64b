//! [`ApiError`]: every REST error — a stable [`ErrorCode`] (the same codes the socket uses),
//! its HTTP status, a message for people, and for some a field or the graph errors — as
//! `{"error": {"code", "message", …}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use weft_protocol::ErrorCode;
use weft_runtime::Refusal;

/// A REST error: `{"error": {"code", "message", …}}` with its status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
    /// More of `error` (a `field`, graph `errors`).
    extra: Map<String, Value>,
}

pub type Rest<T> = Result<T, ApiError>;

impl ApiError {
    /// An error with the status its code has over HTTP.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status: status_of(code),
            code,
            message: message.into(),
            extra: Map::new(),
        }
    }

    /// A body that is not valid, naming the field at fault.
    pub fn invalid_field(field: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidField, message).with("field", json!(field))
    }

    /// A failure of the server's own: logged, answered without its details.
    pub fn internal(error: impl std::fmt::Display) -> ApiError {
        Refusal::internal(error).into()
    }

    pub fn status(mut self, status: StatusCode) -> ApiError {
        self.status = status;
        self
    }

    pub fn with(mut self, key: &str, value: Value) -> ApiError {
        self.extra.insert(key.to_owned(), value);
        self
    }
}

/// The HTTP status of each code.
fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::ThreadNotFound
        | ErrorCode::AgentNotFound
        | ErrorCode::AssetNotFound
        | ErrorCode::WorkflowNotFound
        | ErrorCode::MessageNotFound
        | ErrorCode::CollectionNotFound
        | ErrorCode::WorkflowsDisabled => StatusCode::NOT_FOUND,
        ErrorCode::TurnInProgress | ErrorCode::CollectionExists => StatusCode::CONFLICT,
        ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::InvalidJson
        | ErrorCode::UnknownCommand
        | ErrorCode::InvalidField
        | ErrorCode::UnknownMode
        | ErrorCode::UnsupportedRoute
        | ErrorCode::ProviderError
        | ErrorCode::InvalidGraph
        | ErrorCode::DocumentRejected => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> ApiError {
        ApiError::new(refusal.code, refusal.message)
    }
}

/// The body of every REST error.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: a stable code, a message for people, and for some errors more (the
/// `field` at fault; a graph's `node`, `port` and `errors`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                extra: self.extra,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

/// A path segment that must be an identifier; anything else names nothing (`code`).
pub fn identifier(id: &str, code: ErrorCode, what: &str) -> Rest<()> {
    if weft_protocol::is_identifier(id) {
        Ok(())
    } else {
        Err(ApiError::new(code, format!("no such {what}")))
    }
}
