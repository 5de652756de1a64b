//! Properties over random scripted turns: whatever the model asks for (tools of every
//! category, unknown tools, malformed arguments, subtasks, repeated calls, failures) and
//! whatever the permission mode, Plan never executes a non-read tool, and every call the
//! model emitted gets exactly one result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{json, Value};
use support::tools::{Behaviour, TestTool};
use support::{assert_no_orphans, Harness};
use weft_protocol::{PermissionMode, ServerEvent, ToolCallStatus, ToolCategory};

const TOOLS: [(&str, ToolCategory); 5] = [
    ("look", ToolCategory::Read),
    ("save", ToolCategory::Write),
    ("run", ToolCategory::Execute),
    ("fetch", ToolCategory::External),
    ("broken", ToolCategory::Write),
];

/// One call the model might emit.
fn call() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0..TOOLS.len(), 0..3u8)
            .prop_map(|(t, n)| json!({"name": TOOLS[t].0, "arguments": {"n": n}})),
        Just(json!({"name": "nonexistent", "arguments": {}})),
        Just(json!({"name": "look", "arguments": "not an object"})),
        Just(
            json!({"name": "run_subtask", "arguments": {"title": "sub", "instructions": "subtask work"}})
        ),
    ]
}

/// A response: some text and zero to four calls.
fn step() -> impl Strategy<Value = Value> {
    (prop::collection::vec(call(), 0..5), any::<bool>()).prop_map(|(calls, talk)| {
        let mut step = json!({"tool_calls": calls});
        if talk {
            step["chunks"] = json!(["thinking "]);
        }
        step
    })
}

fn mode() -> impl Strategy<Value = PermissionMode> {
    prop_oneof![
        Just(PermissionMode::Plan),
        Just(PermissionMode::Default),
        Just(PermissionMode::Auto)
    ]
}

fn run(steps: Vec<Value>, sub_steps: Vec<Value>, mode: PermissionMode) {
    let mut main = steps;
    main.push(json!({"text": "done"}));
    let mut sub = sub_steps;
    sub.push(json!({"text": "sub done"}));
    let script = json!({"conversations": [
        {"match": "subtask work", "steps": sub},
        {"match": "*", "steps": main}
    ]});
    let mut h = Harness::new(script)
        .config(|c| {
            c.max_iterations_per_level = 10;
            c.max_identical_calls = 3;
            // Default mode asks: nobody answers, so approvals time out quickly.
            c.approval_timeout_ms = Some(5);
        })
        .mode(mode);
    let mut probes = HashMap::new();
    for (name, category) in TOOLS {
        let mut tool = TestTool::new(name).category(category);
        if name == "broken" {
            tool = tool.behaviour(Behaviour::Fail("broken on purpose"));
        }
        probes.insert(name, (category, tool.probe()));
        h = h.tool(tool);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (outcome, events) = runtime.block_on(h.run());

    if mode == PermissionMode::Plan {
        for (name, (category, probe)) in &probes {
            if *category != ToolCategory::Read {
                assert_eq!(probe.count(), 0, "Plan mode executed `{name}`");
            }
        }
    }
    // Every start has exactly one end, at every depth.
    let mut open: HashMap<String, usize> = HashMap::new();
    for e in &events {
        if let ServerEvent::ToolCallUpdate {
            tool_call_id,
            status,
            ..
        } = e
        {
            let n = open.entry(tool_call_id.clone()).or_default();
            match status {
                ToolCallStatus::Start => *n += 1,
                ToolCallStatus::End => *n -= 1,
            }
        }
    }
    assert!(
        open.values().all(|n| *n == 0),
        "a call without a result: {open:?}"
    );
    assert_no_orphans(&outcome.history);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn plan_never_executes_a_non_read_tool_and_no_call_is_left_without_a_result(
        steps in prop::collection::vec(step(), 0..5),
        sub_steps in prop::collection::vec(step(), 0..3),
        mode in mode(),
    ) {
        run(steps, sub_steps, mode);
    }
}
