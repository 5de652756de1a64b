//! Fuzz inbound frame decoding, JSON and MessagePack, as the server does it: never a panic,
//! and an error never repeats more than a few hundred bytes of the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use weft_protocol::decode_inbound;

fn check(value: Value) {
    if let Err(e) = decode_inbound(value) {
        assert!(
            e.message.len() < 600,
            "a {}-byte error message",
            e.message.len()
        );
        if let Some(id) = &e.request_id {
            assert!(weft_protocol::is_identifier(id));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        check(value);
    }
    if let Ok(value) = rmp_serde::from_slice::<Value>(data) {
        check(value);
    }
});
