//! The JSON Schema under `docs/schema/` is what the protocol types say (regenerate it with
//! `WEFT_WRITE_SCHEMA=1 cargo test -p weft-protocol --test schema`), and every golden frame
//! under `web-fixtures/frames/` fits it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn committed(name: &str) -> Value {
    let path = root().join("docs/schema").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_committed_schema_is_what_the_types_say() {
    let write = std::env::var_os("WEFT_WRITE_SCHEMA").is_some();
    for (name, schema) in weft_protocol::schema::documents() {
        let generated = serde_json::to_value(&schema).unwrap();
        if write {
            let dir = root().join("docs/schema");
            std::fs::create_dir_all(&dir).unwrap();
            let text = serde_json::to_string_pretty(&generated).unwrap() + "\n";
            std::fs::write(dir.join(name), text).unwrap();
        }
        assert!(
            committed(name) == generated,
            "docs/schema/{name} differs from the types: regenerate it with \
             WEFT_WRITE_SCHEMA=1 cargo test -p weft-protocol --test schema"
        );
    }
}

#[test]
fn every_golden_frame_fits_the_schema() {
    let client = jsonschema::validator_for(&committed("client_frame.json")).unwrap();
    let server = jsonschema::validator_for(&committed("server_frame.json")).unwrap();
    let dir = root().join("web-fixtures/frames");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".json") {
            continue;
        }
        let frame: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let validator = if name.starts_with("server_") {
            &server
        } else {
            &client
        };
        let errors: Vec<String> = validator
            .iter_errors(&frame)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} golden frames");
}

#[test]
fn the_schema_refuses_what_the_server_refuses() {
    let client = jsonschema::validator_for(&committed("client_frame.json")).unwrap();
    for bad in [
        serde_json::json!({"command": "chat_message", "data": {"content": 5}}),
        serde_json::json!({"command": "set_permission_mode", "data": {"thread_id": "t", "mode": "yolo"}}),
        serde_json::json!({"command": "launch_missiles"}),
        serde_json::json!({"type": "tool_approval_response", "tool_call_id": "c", "decision": "maybe"}),
    ] {
        assert!(!client.is_valid(&bad), "{bad}");
        assert!(weft_protocol::decode_inbound(bad.clone()).is_err(), "{bad}");
    }
}
