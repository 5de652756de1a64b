//! `Refusal`: why the runtime would not do what it was asked — a stable [`ErrorCode`] for
//! programs and a message for people. Internal failures are logged where they happen and
//! reach the caller only as `internal`.

use weft_protocol::ErrorCode;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }

    /// A failure of the server's own (the database, a bug): logged, and answered without
    /// its details.
    pub fn internal(error: impl std::fmt::Display) -> Refusal {
        tracing::error!(error = %error, "internal error");
        Refusal::new(ErrorCode::Internal, "internal error; see the server log")
    }

    pub fn invalid(message: impl Into<String>) -> Refusal {
        Refusal::new(ErrorCode::InvalidField, message)
    }

    pub fn forbidden_thread() -> Refusal {
        Refusal::new(ErrorCode::Forbidden, "that thread belongs to another user")
    }

    /// A message for a thread whose turn is running (here or on another replica).
    pub fn turn_in_progress(thread_id: &str) -> Refusal {
        Refusal::new(
            ErrorCode::TurnInProgress,
            format!("thread `{thread_id}` already has a turn running; send stop first"),
        )
    }
}
