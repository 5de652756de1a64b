//! Frame encoding: JSON text frames, or MessagePack binary frames with the same shapes.

use axum::extract::ws::Message;
use serde_json::Value;
use weft_protocol::ServerFrame;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Json,
    MsgPack,
}

pub fn decode_json(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("frame is not valid JSON: {e}"))
}

pub fn decode_msgpack(bytes: &[u8]) -> Result<Value, String> {
    rmp_serde::from_slice(bytes).map_err(|e| format!("frame is not valid MessagePack: {e}"))
}

pub fn encode(frame: &ServerFrame, wire: Wire) -> Option<Message> {
    match wire {
        Wire::Json => serde_json::to_string(frame)
            .ok()
            .map(|s| Message::Text(s.into())),
        Wire::MsgPack => rmp_serde::to_vec_named(frame)
            .ok()
            .map(|b| Message::Binary(b.into())),
    }
}
