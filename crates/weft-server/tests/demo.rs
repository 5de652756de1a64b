//! The built-in demo script (`config/demo-script.json`, what answers when no model is
//! configured) shows what it says it does: in classic mode subtasks and an approved write, in
//! code mode JavaScript calling tools in parallel, and with a planning agent a plan of what
//! then happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use support::{of_type, text_of, TestServer};

fn demo() -> Value {
    serde_json::from_str(include_str!("../../../config/demo-script.json")).unwrap()
}

/// `tool_call_update` starts as `name@depth`.
fn started(frames: &[Value]) -> Vec<String> {
    of_type(frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["status"] == "start")
        .map(|f| format!("{}@{}", f["name"].as_str().unwrap(), f["depth"]))
        .collect()
}

#[tokio::test]
async fn the_classic_demo_runs_two_subtasks_and_a_write() {
    let server = TestServer::start(demo()).await;
    let mut c = server.client().await;
    c.chat(None, "hello", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    assert_eq!(
        started(&frames),
        ["run_subtask@0", "run_subtask@0", "write_file@0"]
    );
    assert!(text_of(&frames).contains("Watch two subtasks run in parallel"));
    assert!(server.workspace.join("demo-note.md").exists());
    server.stop().await;
}

#[tokio::test]
async fn the_code_mode_demo_runs_code_that_calls_tools_in_parallel() {
    let server = TestServer::start(demo()).await;
    let mut c = server.client().await;
    c.chat(None, "hello", json!({"mode": "code"})).await;
    let frames = c.turn().await;
    let calls = started(&frames);
    assert_eq!(calls[0], "code.execute@0");
    let mut nested = calls[1..].to_vec();
    nested.sort();
    assert_eq!(nested, ["memory_list@1", "memory_read@1", "memory_write@1"]);
    let text = text_of(&frames);
    assert!(text.contains("demo in code mode"), "{text}");
    assert!(
        text.contains(
            "Two calls ran in parallel: memory holds demo, which says \"written from code\""
        ),
        "{text}"
    );
    assert!(
        !text.contains("subtasks"),
        "code mode promises no subtasks: {text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn with_a_planning_agent_the_demo_plans_what_then_happens() {
    let server = TestServer::start(demo()).await;
    let (status, _) = server
        .call(
            reqwest::Method::POST,
            "/agents",
            None,
            Some(json!({"name": "planner", "planning_enabled": true})),
        )
        .await;
    assert_eq!(status, 201);
    let mut c = server.client().await;
    c.chat(
        None,
        "hello",
        json!({"agent": "planner", "permission_mode": "auto"}),
    )
    .await;
    let frames = c.turn().await;
    let plan = of_type(&frames, "planning_update")
        .into_iter()
        .filter(|f| f["status"] == "done")
        .map(|f| f["content"].as_str().unwrap().to_owned())
        .next()
        .expect("a plan");
    assert!(
        plan.starts_with("1. Survey the workspace and draft a note"),
        "{plan}"
    );
    assert_eq!(
        started(&frames),
        ["run_subtask@0", "run_subtask@0", "write_file@0"],
        "the plan is what happens"
    );
    server.stop().await;
}
