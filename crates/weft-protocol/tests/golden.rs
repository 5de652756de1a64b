//! Golden frames under `web-fixtures/frames/` round-trip through the protocol types exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use weft_protocol::{
    decode_inbound, AgentConfig, ClientCommand, ErrorCode, InboundFrame, PermissionMode,
    ServerEvent, ServerFrame, ToolAvailability,
};

fn fixtures() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../web-fixtures/frames");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (
                name,
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn round_trip(name: &str, value: &Value) -> Value {
    if name.starts_with("server_") {
        let frame: ServerFrame =
            serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        serde_json::to_value(frame).unwrap()
    } else {
        match decode_inbound(value.clone()).unwrap_or_else(|e| panic!("{name}: {e:?}")) {
            InboundFrame::Command(c) => serde_json::to_value(c).unwrap(),
            InboundFrame::Control(c) => serde_json::to_value(c).unwrap(),
        }
    }
}

#[test]
fn every_golden_frame_round_trips() {
    let all = fixtures();
    assert!(all.len() >= 20, "fixtures found: {}", all.len());
    for (name, value) in all {
        assert_eq!(round_trip(&name, &value), value, "{name}");
    }
}

#[test]
fn unknown_fields_are_ignored() {
    for (name, value) in fixtures() {
        let mut extended = value.clone();
        extended
            .as_object_mut()
            .unwrap()
            .insert("from_the_future".into(), json!({"x": 1}));
        if let Some(data) = extended.get_mut("data").and_then(Value::as_object_mut) {
            data.insert("also_new".into(), json!(true));
        }
        assert_eq!(round_trip(&name, &extended), value, "{name}");
    }
}

#[test]
fn optional_fields_are_omitted_when_empty() {
    let frame = ServerFrame::bare(ServerEvent::error(ErrorCode::Internal, "x", None));
    assert_eq!(
        serde_json::to_value(frame).unwrap(),
        json!({"type": "error", "code": "internal", "message": "x"})
    );
}

#[test]
fn a_minimal_chat_message_gets_defaults() {
    let InboundFrame::Command(env) =
        decode_inbound(json!({"command": "chat_message", "data": {"content": "hi"}})).unwrap()
    else {
        panic!("a command");
    };
    let ClientCommand::ChatMessage(data) = env.command else {
        panic!("chat_message")
    };
    assert_eq!(data.role, "user");
    assert_eq!(data.chat_context(), weft_protocol::ChatContext::Thread);
    assert_eq!(data.permission_mode, None);
    assert_eq!(data.mode, None);
}

#[test]
fn bad_frames_get_stable_codes() {
    let cases = [
        (json!([1, 2]), ErrorCode::InvalidJson),
        (
            json!({"command": "fly", "request_id": "r9"}),
            ErrorCode::UnknownCommand,
        ),
        (json!({"type": "teleport"}), ErrorCode::UnknownCommand),
        (json!({"hello": 1}), ErrorCode::UnknownCommand),
        (
            json!({"command": "stop", "data": {}}),
            ErrorCode::InvalidField,
        ),
        (
            json!({"command": "set_permission_mode", "data": {"thread_id": "t", "permission_mode": "yolo"}}),
            ErrorCode::InvalidField,
        ),
        (
            json!({"type": "tool_approval_response", "tool_call_id": "c", "decision": "maybe"}),
            ErrorCode::InvalidField,
        ),
    ];
    for (frame, code) in cases {
        let err = decode_inbound(frame.clone()).unwrap_err();
        assert_eq!(err.code, code, "{frame}");
    }
    let err = decode_inbound(json!({"command": "fly", "request_id": "r9"})).unwrap_err();
    assert_eq!(err.request_id.as_deref(), Some("r9"));
}

#[test]
fn agent_config_round_trips_with_seed_004_fields() {
    let configured = json!({
        "planning_enabled": true,
        "planning_model": "openai:gpt-4o-mini",
        "planning_instructions": "Return a short numbered execution plan before acting.",
        "budget_awareness": "limit:70",
        "hitl_tools": ["deploy_service", "rotate_credentials"],
        "emit_mcp_progress": true,
        "injected_tool_args": {"ui_request_id": "Opaque UI correlation id.", "run_origin": "Caller surface."},
        "allow_parallel_subagents": true,
        "max_parallel_subagents": 4,
        "max_total_tool_calls": 50
    });
    let config: AgentConfig = serde_json::from_value(configured).unwrap();
    config.validate().unwrap();
    assert_eq!(config.max_depth, 3, "unset fields take defaults");
    let again: AgentConfig =
        serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
    assert_eq!(again, config);
    assert!(config
        .validate_tools(|n| known(n, &["deploy_service", "rotate_credentials"]))
        .is_ok());
    assert!(config
        .validate_tools(|n| known(n, &["deploy_service"]))
        .is_err());
}

#[test]
fn agent_config_validation_rejects_bad_values() {
    let bad = [
        json!({"max_parallel_subagents": 8}),
        json!({"max_parallel_subagents": 0}),
        json!({"budget_awareness": "sometimes"}),
        json!({"budget_awareness": "limit:101"}),
        json!({"injected_tool_args": {"has space": "x"}}),
        json!({"max_iterations_per_level": 0}),
    ];
    for value in bad {
        let config: AgentConfig = serde_json::from_value(value.clone()).unwrap();
        assert!(config.validate().is_err(), "{value}");
    }
    let ok: AgentConfig =
        serde_json::from_value(json!({"budget_awareness": "per-message"})).unwrap();
    assert!(ok.validate().is_ok());
}

#[test]
fn permission_modes_parse_by_name() {
    assert_eq!(PermissionMode::parse("plan"), Some(PermissionMode::Plan));
    assert_eq!(
        PermissionMode::parse("auto").map(PermissionMode::as_str),
        Some("auto")
    );
    assert_eq!(PermissionMode::parse("yolo"), None);
}

fn known(name: &str, names: &[&str]) -> ToolAvailability {
    if names.contains(&name) {
        ToolAvailability::Configured
    } else {
        ToolAvailability::Unknown
    }
}
