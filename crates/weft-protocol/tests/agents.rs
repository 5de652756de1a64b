//! Seed 004's agent config: its example loads as written and serializes back to the same
//! fields (plus Weft's, at their defaults), byte for byte against a golden file; every default
//! is the one the seed lists; invalid values are refused naming the field.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use weft_protocol::{AgentConfig, ToolAvailability};

const EXAMPLE: &str = include_str!("../../../web-fixtures/agents/ops-supervisor.json");
const GOLDEN: &str = include_str!("../../../web-fixtures/agents/ops-supervisor.full.json");

fn pretty(config: &AgentConfig) -> String {
    let mut text = serde_json::to_string_pretty(config).unwrap();
    text.push('\n');
    text
}

#[test]
fn the_seed_example_round_trips_byte_for_byte() {
    let config: AgentConfig = serde_json::from_str(EXAMPLE).unwrap();
    config.validate().unwrap();
    assert_eq!(
        pretty(&config),
        GOLDEN,
        "serialization drifted from the golden file"
    );
    // Every field of the example comes back exactly as written (the golden file, compared as
    // bytes above, pins the order: the example's fields first, as the seed lists them).
    let example: Value = serde_json::from_str(EXAMPLE).unwrap();
    let full: Value = serde_json::from_str(GOLDEN).unwrap();
    let example = example.as_object().unwrap();
    let full = full.as_object().unwrap();
    for (key, value) in example {
        assert_eq!(full.get(key), Some(value), "{key}");
    }
    let golden_start = GOLDEN.find("\"tools\"").unwrap();
    for key in example.keys() {
        let at = GOLDEN.find(&format!("\n  \"{key}\":")).unwrap();
        assert!(at < golden_start, "{key} comes before Weft's own fields");
    }
    assert!(GOLDEN.find("ui_request_id").unwrap() < GOLDEN.find("run_origin").unwrap());
    // And the golden file itself round-trips unchanged.
    let again: AgentConfig = serde_json::from_str(GOLDEN).unwrap();
    assert_eq!(pretty(&again), GOLDEN);
    assert_eq!(again, config);
}

#[test]
fn every_default_is_the_one_seed_004_lists() {
    let config: AgentConfig = serde_json::from_str("{}").unwrap();
    let value = serde_json::to_value(&config).unwrap();
    for (key, expected) in [
        ("planning_enabled", json!(false)),
        ("planning_model", json!(null)),
        ("planning_instructions", json!("")),
        ("budget_awareness", json!(null)),
        ("hitl_tools", json!([])),
        ("emit_mcp_progress", json!(true)),
        ("injected_tool_args", json!({})),
        ("allow_parallel_subagents", json!(false)),
        ("max_parallel_subagents", json!(3)),
        ("max_tokens", json!(null)),
        ("max_turn_tokens", json!(null)),
        ("max_depth", json!(3)),
        ("max_total_tool_calls", json!(200)),
    ] {
        assert_eq!(value[key], expected, "{key}");
    }
    config.validate().unwrap();
}

#[test]
fn invalid_values_name_their_field() {
    for (patch, field) in [
        (
            json!({"max_parallel_subagents": 8}),
            "max_parallel_subagents",
        ),
        (
            json!({"max_parallel_subagents": 0}),
            "max_parallel_subagents",
        ),
        (json!({"budget_awareness": "sometimes"}), "budget_awareness"),
        (json!({"budget_awareness": "limit:101"}), "budget_awareness"),
        (json!({"planning_model": "gpt-4o"}), "planning_model"),
        (json!({"model": ":gpt-4o"}), "model"),
        (json!({"temperature": 3.5}), "temperature"),
        (json!({"name": "no spaces allowed"}), "name"),
        (
            json!({"injected_tool_args": {"bad key": "x"}}),
            "injected_tool_args",
        ),
        (json!({"max_steps": 0}), "max_steps"),
    ] {
        let config: AgentConfig = serde_json::from_value(patch.clone()).unwrap();
        let e = config.validate().unwrap_err();
        assert_eq!(e.field(), field, "{patch}");
    }
    let config: AgentConfig =
        serde_json::from_value(json!({"hitl_tools": ["deploy_service"]})).unwrap();
    assert_eq!(
        config
            .validate_tools(among(&["read_file"]))
            .unwrap_err()
            .field(),
        "hitl_tools"
    );
    let config: AgentConfig =
        serde_json::from_value(json!({"tools": ["read_file"], "hitl_tools": ["write_file"]}))
            .unwrap();
    assert_eq!(
        config
            .validate_tools(among(&["read_file", "write_file"]))
            .unwrap_err()
            .field(),
        "hitl_tools",
        "a hitl tool must be one of the agent's own"
    );
}

/// The server's tools are `names`, with `remember` joining turns beside the allow-list.
fn among<'a>(names: &'a [&'a str]) -> impl Fn(&str) -> ToolAvailability + 'a {
    move |name| {
        if name == "remember" {
            ToolAvailability::PerTurn
        } else if names.contains(&name) {
            ToolAvailability::Configured
        } else {
            ToolAvailability::Unknown
        }
    }
}

#[test]
fn hitl_may_name_a_per_turn_tool_the_allow_list_leaves_out() {
    let config: AgentConfig =
        serde_json::from_value(json!({"tools": ["read_file"], "hitl_tools": ["remember"]}))
            .unwrap();
    assert!(config.validate_tools(among(&["read_file"])).is_ok());
    let config: AgentConfig = serde_json::from_value(json!({"tools": ["remember"]})).unwrap();
    assert!(config.validate_tools(among(&[])).is_ok());
}
