//! Frame decoding (JSON text frames, or MessagePack binary frames with the same shapes) and
//! MessagePack encoding of an already-encoded JSON frame.

use axum::body::Bytes;
use serde_json::Value;

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

/// The MessagePack form of a JSON frame (same shape, named fields).
pub fn json_to_msgpack(json: &str) -> Bytes {
    let value: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    Bytes::from(rmp_serde::to_vec_named(&value).unwrap_or_default())
}
