//! A turn taken up after its process died: the cut round is settled before the next model
//! call (a read runs again, a call that may have changed something does not and says so, a
//! call still waiting for its approval is asked again), the text so far and the spending so
//! far carry on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::tools::TestTool;
use support::{result_of, Harness};
use weft_core::{
    prompts, Call, ChatMessage, ChildResume, CutCall, Resume, Spent, ToolCallRequest, TurnEnd,
};
use weft_protocol::{BudgetReason, PermissionMode, ServerEvent, ToolCategory};

fn call(id: &str, name: &str) -> Call {
    Call {
        wire_id: format!("{id}~w"),
        request: ToolCallRequest {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments: json!({"n": id}).to_string().into(),
        },
    }
}

/// The turn was cut after its first response: `calls` were emitted, none has a result.
fn cut_after(h: Harness, calls: &[(Call, Option<i64>)], spent: Spent) -> Harness {
    let mut h = h;
    h.earlier = Vec::new();
    let requests = calls.iter().map(|(c, _)| c.request.clone()).collect();
    h.resume = Some(Resume {
        text: "before ".to_owned(),
        spent,
        cut: calls
            .iter()
            .map(|(call, asked_at_ms)| CutCall {
                call: call.clone(),
                asked_at_ms: *asked_at_ms,
                started: false,
                child: None,
                jobs: Vec::new(),
            })
            .collect(),
        memory: vec![("note".to_owned(), "kept".to_owned())],
        plan: None,
    });
    h.extra_history = vec![ChatMessage::assistant("before ", requests)];
    h
}

fn two_step_script() -> serde_json::Value {
    json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["before "], "tool_calls": [{"name": "look", "arguments": {}}]},
        {"chunks": ["final"]}
    ]}]})
}

#[tokio::test]
async fn a_cut_round_runs_reads_again_and_never_reruns_a_call_that_may_have_acted() {
    let look = TestTool::new("look");
    let write = TestTool::new("write").category(ToolCategory::Write);
    let asked = TestTool::new("asked").category(ToolCategory::Write);
    let (looked, wrote, ran_asked) = (look.probe(), write.probe(), asked.probe());
    let h = Harness::new(two_step_script())
        .tool(look)
        .tool(write)
        .tool(asked)
        .mode(PermissionMode::Auto);
    let calls = [
        (call("a", "look"), None),
        (call("b", "write"), None),
        (call("c", "asked"), Some(1)),
    ];
    let h = cut_after(h, &calls, Spent::default());
    let (outcome, events) = h.run().await;

    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(
        outcome.text, "before final",
        "the text so far, then the rest"
    );
    assert_eq!(
        (looked.count(), wrote.count(), ran_asked.count()),
        (1, 0, 1)
    );
    let (maybe, is_error) = result_of(&events, "b");
    assert_eq!(
        (maybe.as_str(), is_error),
        (prompts::MAYBE_RAN_RESULT, true)
    );
    assert!(!result_of(&events, "a").1);
    // The history holds each call's result once, in the order the calls were emitted.
    let results: Vec<&str> = outcome
        .history
        .iter()
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    assert_eq!(results, ["a", "b", "c"]);
    assert_eq!(outcome.totals.tool_calls, 3);
    assert_eq!(
        h.memory.get("note").as_deref(),
        Some("kept"),
        "its memory is set again"
    );
    assert_eq!(
        h.provider.requests.lock().len(),
        1,
        "one model call after the resume"
    );
}

#[tokio::test]
async fn a_resumed_turn_counts_identical_calls_on_from_its_first_life_once() {
    // At most 3 identical calls in a row. The first life completed one `look` round and was
    // cut in its second (a read: it runs again, the second in a row); the model then asks a
    // third time: refused, as it would have been without the crash, and not before.
    let look = TestTool::new("look");
    let looked = look.probe();
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "look", "arguments": {"n": "a"}}]},
        {"tool_calls": [{"name": "look", "arguments": {"n": "a"}}]},
        {"tool_calls": [{"name": "look", "arguments": {"n": "a"}}]},
        {"chunks": ["final"]}]}]});
    let mut h = Harness::new(script).tool(look);
    h.config.max_identical_calls = 3;
    let first = call("a", "look");
    let second = Call {
        wire_id: "a2~w".to_owned(),
        request: ToolCallRequest {
            id: "a2".to_owned(),
            ..first.request.clone()
        },
    };
    let mut h = cut_after(h, &[(second.clone(), None)], Spent::default());
    h.extra_history = vec![
        ChatMessage::assistant("", vec![first.request.clone()]),
        ChatMessage::tool_result("a", "looked", false),
        ChatMessage::assistant("before ", vec![second.request.clone()]),
    ];
    let (outcome, events) = h.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(
        looked.count(),
        1,
        "the cut read ran again; the third did not run"
    );
    assert!(!result_of(&events, "a2").1, "the second in a row runs");
    let refused: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::ToolCallUpdate {
                result: Some(result),
                is_error: Some(true),
                ..
            } => Some(result.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].contains("identical"), "{refused:?}");
}

#[tokio::test]
async fn a_resumed_planning_turn_acts_on_the_plan_its_first_life_made() {
    let mut h = Harness::new(two_step_script()).tool(TestTool::new("look"));
    h.planner = Some(weft_core::PlannerSpec {
        provider: h.provider.clone(),
        model: "planner-model".into(),
        instructions: String::new(),
    });
    let mut h = cut_after(h, &[(call("a", "look"), None)], Spent::default());
    if let Some(resume) = &mut h.resume {
        resume.plan = Some("1. look\n2. answer".to_owned());
    }
    let (outcome, _) = h.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    let requests = h.provider.requests.lock();
    assert_eq!(requests.len(), 1, "no second planning call");
    assert!(
        requests[0].system.contains("1. look\n2. answer"),
        "{}",
        requests[0].system
    );
    assert_eq!(outcome.plan.as_deref(), Some("1. look\n2. answer"));
}

#[tokio::test]
async fn a_resumed_turn_cannot_escape_its_budget() {
    // Cut after 3 of its 5 tool calls: the resumed turn runs at most 2 more.
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["before "], "tool_calls": [{"name": "echo", "arguments": {"n": 0}}]},
        {"chunks": ["step "], "tool_calls": [{"name": "echo", "arguments": {"n": 1}}]},
        {"chunks": ["step "], "tool_calls": [{"name": "echo", "arguments": {"n": 2}}]},
        {"chunks": ["step "], "tool_calls": [{"name": "echo", "arguments": {"n": 3}}]},
        {"text": "final"}
    ]}]});
    let echo = TestTool::new("echo");
    let ran = echo.probe();
    let h = Harness::new(script)
        .tool(echo)
        .config(|c| c.max_total_tool_calls = 5);
    let spent = Spent {
        tool_calls: 3,
        llm_calls: 1,
        ..Spent::default()
    };
    let h = cut_after(h, &[(call("e", "echo"), None)], spent);
    let (outcome, events) = h.run().await;
    assert!(
        matches!(&outcome.end, TurnEnd::BudgetExceeded(t) if t.reason == BudgetReason::ToolCalls),
        "{:?}",
        outcome.end
    );
    assert_eq!(ran.count(), 2, "the cut call and one more");
    assert!(events
        .iter()
        .any(|e| matches!(e, ServerEvent::BudgetExceeded { .. })));
}

#[tokio::test]
async fn a_resumed_turn_keeps_its_wall_clock() {
    let h = Harness::new(two_step_script())
        .tool(TestTool::new("look"))
        .config(|c| c.max_wall_clock_ms = 1_000);
    let spent = Spent {
        elapsed: Duration::from_secs(5),
        ..Spent::default()
    };
    let h = cut_after(h, &[], spent);
    let (outcome, _) = h.run().await;
    assert!(
        matches!(&outcome.end, TurnEnd::BudgetExceeded(t) if t.reason == BudgetReason::WallClock),
        "{:?}",
        outcome.end
    );
    assert!(h.provider.requests.lock().is_empty(), "no model call");
}

#[tokio::test]
async fn a_subtask_cut_mid_way_goes_on_from_its_own_last_round() {
    // The child had written once and its result is on record; it writes again and answers.
    let script = json!({"conversations": [
        {"match": "careful", "steps": [
            {"tool_calls": [{"name": "write", "arguments": {"n": 0}}]},
            {"tool_calls": [{"name": "write", "arguments": {"n": 1}}]},
            {"text": "child done"}]},
        {"match": "*", "steps": [
            {"chunks": ["before "], "tool_calls": [{"name": "run_subtask", "arguments": {"instructions": "careful"}}]},
            {"chunks": ["final"]}]}]});
    let write = TestTool::new("write").category(ToolCategory::Write);
    let wrote = write.probe();
    let h = Harness::new(script)
        .tool(write)
        .mode(PermissionMode::Auto)
        .config(|c| c.max_total_subtasks = 1);
    let mut subtask = call("s", "run_subtask");
    subtask.request.arguments = json!({"title": "t", "instructions": "careful"})
        .to_string()
        .into();
    let first = call("w0", "write");
    let mut h = cut_after(
        h,
        &[(subtask, None)],
        Spent {
            subtasks: 1,
            tool_calls: 1,
            ..Spent::default()
        },
    );
    let resume = h.resume.as_mut().unwrap();
    resume.cut[0].started = true;
    resume.cut[0].child = Some(Box::new(ChildResume {
        tail: vec![
            ChatMessage::assistant("", vec![first.request.clone()]),
            ChatMessage::tool_result(first.request.id.clone(), "wrote".to_owned(), false),
        ],
        charged: true,
        ..ChildResume::default()
    }));
    let (outcome, events) = h.run().await;

    assert_eq!(
        outcome.end,
        TurnEnd::Completed,
        "the subtask was not charged twice"
    );
    assert_eq!(outcome.text, "before final");
    assert_eq!(wrote.count(), 1, "only the write it had not made");
    assert_eq!(result_of(&events, "s"), ("child done".to_owned(), false));
    let requests = h.provider.requests.lock();
    assert_eq!(requests.len(), 3, "the child's two rounds, then the root's");
    assert_eq!(
        requests[0].messages.len(),
        3,
        "the child goes on from its instructions and its first round"
    );
}
