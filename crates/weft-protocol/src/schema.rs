//! The wire contract as JSON Schema, generated from these types: what a client may send (an
//! enveloped command or a control frame) and what the server sends. The documents are
//! committed under `docs/schema/`; a test regenerates them and fails on any difference.

use schemars::{JsonSchema, Schema};
use serde::Serialize;

use crate::command::CommandEnvelope;
use crate::control::ControlFrame;
use crate::event::ServerFrame;

/// Any frame a client sends.
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, clippy::large_enum_variant)] // only its schema is used
enum ClientFrame {
    Command(CommandEnvelope),
    Control(ControlFrame),
}

/// Each schema document by its file name under `docs/schema/`.
pub fn documents() -> Vec<(&'static str, Schema)> {
    vec![
        ("client_frame.json", schemars::schema_for!(ClientFrame)),
        ("server_frame.json", schemars::schema_for!(ServerFrame)),
    ]
}
