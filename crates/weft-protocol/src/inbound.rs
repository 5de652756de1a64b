//! Classifying an inbound frame: an enveloped command or a control frame, with the error code
//! a bad one deserves (`unknown_command` or `invalid_field`).

use serde_json::Value;

use crate::command::CommandEnvelope;
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

/// Decode an already-parsed JSON (or MessagePack) value into a frame.
pub fn decode_inbound(value: Value) -> Result<InboundFrame, InboundError> {
    let request_id = value
        .get("request_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
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
                format!("unknown command {command}; known: {}", COMMANDS.join(", ")),
            ));
        };
        let name = name.to_owned();
        return serde_json::from_value::<CommandEnvelope>(value)
            .map(InboundFrame::Command)
            .map_err(|e| fail(ErrorCode::InvalidField, format!("invalid {name}: {e}")));
    }
    if let Some(kind) = value.get("type") {
        let Some(name) = kind.as_str().filter(|n| CONTROLS.contains(n)) else {
            return Err(fail(
                ErrorCode::UnknownCommand,
                format!("unknown frame type {kind}; known: {}", CONTROLS.join(", ")),
            ));
        };
        let name = name.to_owned();
        return serde_json::from_value::<ControlFrame>(value)
            .map(InboundFrame::Control)
            .map_err(|e| fail(ErrorCode::InvalidField, format!("invalid {name}: {e}")));
    }
    Err(fail(
        ErrorCode::UnknownCommand,
        "a frame needs a \"command\" or a \"type\"".to_owned(),
    ))
}
