//! Classifying an inbound frame: an enveloped command or a control frame, with the error code
//! a bad one deserves (`unknown_command` or `invalid_field`). Identifiers are checked here
//! (at most 128 characters of `[A-Za-z0-9._:-]`, never empty), and no error message echoes
//! more than [`ECHO_MAX_BYTES`] of the input.

use serde_json::Value;

use crate::command::{ClientCommand, CommandEnvelope};
use crate::control::ControlFrame;
use crate::event::ErrorCode;

const COMMANDS: [&str; 4] = ["chat_message", "stop", "set_permission_mode", "resume_chat"];
const CONTROLS: [&str; 4] = [
    "tool_approval_response",
    "client_tools_manifest",
    "tool_result",
    "ping",
];

#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // decoded once per frame; boxing buys nothing
pub enum InboundFrame {
    Command(CommandEnvelope),
    Control(ControlFrame),
}

/// Why a frame was refused, with the `request_id` to echo when one was readable.
#[derive(Debug, Clone, PartialEq)]
pub struct InboundError {
    pub code: ErrorCode,
    pub message: String,
    pub request_id: Option<String>,
}

/// The longest identifier (thread, request, workflow, agent, collection) the server takes.
pub const IDENTIFIER_MAX_CHARS: usize = 128;

/// [`is_identifier`] as a JSON Schema pattern (for the OpenAPI document).
pub const IDENTIFIER_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";

/// The most bytes of a client's input an error message repeats.
pub const ECHO_MAX_BYTES: usize = 200;

/// Whether `id` is a valid identifier: 1 to 128 characters of `[A-Za-z0-9._:-]`.
pub fn is_identifier(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= IDENTIFIER_MAX_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Whether `name` can name a user: an identifier that does not start with `.` (user names
/// name workspace directories, so `.`, `..` and hidden names are refused).
pub fn is_user_name(name: &str) -> bool {
    is_identifier(name) && !name.starts_with('.')
}

/// `text` cut to at most `max` bytes (at a character boundary), `…` marking a cut.
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut cut = max.saturating_sub('…'.len_utf8());
    while cut > 0 && !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

/// Input shown back in an error message: at most [`ECHO_MAX_BYTES`].
pub fn echo(text: &str) -> String {
    clip(text, ECHO_MAX_BYTES)
}

fn check_identifier(field: &str, value: Option<&str>) -> Result<(), String> {
    match value {
        Some(id) if !is_identifier(id) => Err(format!(
            "{field} must be 1 to {IDENTIFIER_MAX_CHARS} characters of A-Z a-z 0-9 . _ : - (got {:?})",
            clip(id, 64)
        )),
        _ => Ok(()),
    }
}

/// Every identifier a command carries.
fn check_identifiers(command: &ClientCommand) -> Result<(), String> {
    match command {
        ClientCommand::ChatMessage(data) => check_identifiers_of(data),
        ClientCommand::Stop(d) => check_identifier("thread_id", Some(&d.thread_id)),
        ClientCommand::SetPermissionMode(d) => check_identifier("thread_id", Some(&d.thread_id)),
        ClientCommand::ResumeChat(d) => check_identifier("thread_id", Some(&d.thread_id)),
    }
}

/// Every identifier a chat message carries (also for callers that build one from elsewhere,
/// such as the REST prompt API).
pub fn check_identifiers_of(data: &crate::ChatMessageData) -> Result<(), String> {
    check_identifier("thread_id", data.thread_id.as_deref())?;
    check_identifier("workflow_id", data.workflow_id.as_deref())?;
    check_identifier("agent", data.agent.as_deref())?;
    check_identifier("replaces", data.replaces.as_deref())?;
    for (field, value, max) in [
        ("provider", data.provider.as_deref(), 64),
        ("model", data.model.as_deref(), 256),
        ("mode", data.mode.as_deref(), 64),
    ] {
        if value.is_some_and(|v| v.is_empty() || v.len() > max) {
            return Err(format!("{field} must be 1 to {max} bytes"));
        }
    }
    Ok(())
}

/// Decode an already-parsed JSON (or MessagePack) value into a frame.
pub fn decode_inbound(value: Value) -> Result<InboundFrame, InboundError> {
    // A request id is echoed only when it is a valid identifier.
    let request_id = value
        .get("request_id")
        .and_then(Value::as_str)
        .filter(|id| is_identifier(id))
        .map(str::to_owned);
    if let Some(bad) = value
        .get("request_id")
        .filter(|id| !id.as_str().is_some_and(is_identifier) && !id.is_null())
    {
        let shown = bad.as_str().map_or_else(|| bad.to_string(), str::to_owned);
        return Err(InboundError {
            code: ErrorCode::InvalidField,
            message: format!(
                "request_id must be 1 to {IDENTIFIER_MAX_CHARS} characters of A-Z a-z 0-9 . _ : - (got {:?})",
                clip(&shown, 64)
            ),
            request_id: None,
        });
    }
    let fail = |code, message: String| InboundError {
        code,
        message,
        request_id: request_id.clone(),
    };
    if !value.is_object() {
        return Err(fail(
            ErrorCode::InvalidJson,
            "a frame must be a JSON object".to_owned(),
        ));
    }
    if let Some(command) = value.get("command") {
        let Some(name) = command.as_str().filter(|n| COMMANDS.contains(n)) else {
            return Err(fail(
                ErrorCode::UnknownCommand,
                format!(
                    "unknown command {}; known: {}",
                    clip(&command.to_string(), 64),
                    COMMANDS.join(", ")
                ),
            ));
        };
        let name = name.to_owned();
        let envelope = serde_json::from_value::<CommandEnvelope>(value).map_err(|e| {
            fail(
                ErrorCode::InvalidField,
                format!("invalid {name}: {}", echo(&e.to_string())),
            )
        })?;
        check_identifiers(&envelope.command).map_err(|m| fail(ErrorCode::InvalidField, m))?;
        return Ok(InboundFrame::Command(envelope));
    }
    if let Some(kind) = value.get("type") {
        let Some(name) = kind.as_str().filter(|n| CONTROLS.contains(n)) else {
            return Err(fail(
                ErrorCode::UnknownCommand,
                format!(
                    "unknown frame type {}; known: {}",
                    clip(&kind.to_string(), 64),
                    CONTROLS.join(", ")
                ),
            ));
        };
        let name = name.to_owned();
        return serde_json::from_value::<ControlFrame>(value)
            .map(InboundFrame::Control)
            .map_err(|e| {
                fail(
                    ErrorCode::InvalidField,
                    format!("invalid {name}: {}", echo(&e.to_string())),
                )
            });
    }
    Err(fail(
        ErrorCode::UnknownCommand,
        "a frame needs a \"command\" or a \"type\"".to_owned(),
    ))
}
