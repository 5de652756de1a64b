//! One test per budget reason: each trip emits `budget_exceeded` and ends the turn keeping
//! what was produced (depth and sub-level iterations only fail their subtask).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::tools::{Behaviour, TestTool};
use support::{assert_no_orphans, lines, Harness};
use weft_core::TurnEnd;
use weft_protocol::{BudgetReason, ServerEvent};

fn looping_tool_script() -> serde_json::Value {
    // The model keeps calling a tool with fresh arguments (no repetition-guard trip).
    json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["step "], "tool_calls": [{"name": "echo", "arguments": {"n": 0}}]},
        {"chunks": ["step "], "tool_calls": [{"name": "echo", "arguments": {"n": 1}}]},
        {"chunks": ["step "], "tool_calls": [{"name": "echo", "arguments": {"n": 2}}]},
        {"chunks": ["step "], "tool_calls": [{"name": "echo", "arguments": {"n": 3}}]},
        {"chunks": ["step "], "tool_calls": [{"name": "echo", "arguments": {"n": 4}}]},
        {"text": "final"}
    ]}]})
}

fn trip_of(events: &[ServerEvent]) -> (BudgetReason, f64, f64, bool) {
    events
        .iter()
        .find_map(|e| match e {
            ServerEvent::BudgetExceeded {
                reason,
                limit,
                observed,
                ends_turn,
                ..
            } => Some((*reason, limit.0, observed.0, *ends_turn)),
            _ => None,
        })
        .expect("a budget_exceeded event")
}

fn assert_ended_by(outcome: &weft_core::TurnOutcome, reason: BudgetReason) {
    match &outcome.end {
        TurnEnd::BudgetExceeded(trip) => assert_eq!(trip.reason, reason),
        other => panic!("expected a {reason:?} trip, got {other:?}"),
    }
    assert_no_orphans(&outcome.history);
}

#[tokio::test]
async fn llm_calls() {
    let h = Harness::new(looping_tool_script())
        .tool(TestTool::new("echo"))
        .config(|c| c.max_total_llm_calls = 2);
    let (outcome, events) = h.run().await;
    assert_eq!(trip_of(&events), (BudgetReason::LlmCalls, 2.0, 3.0, true));
    assert_ended_by(&outcome, BudgetReason::LlmCalls);
    assert_eq!(outcome.text, "step step ", "text already produced is kept");
    assert_eq!(h.provider.requests.lock().len(), 2);
}

#[tokio::test]
async fn tool_calls() {
    let h = Harness::new(looping_tool_script())
        .tool(TestTool::new("echo"))
        .config(|c| c.max_total_tool_calls = 3);
    let (outcome, events) = h.run().await;
    assert_eq!(trip_of(&events), (BudgetReason::ToolCalls, 3.0, 4.0, true));
    assert_ended_by(&outcome, BudgetReason::ToolCalls);
    assert_eq!(outcome.totals.tool_calls, 3);
}

#[tokio::test]
async fn streamed_output_is_capped_while_it_streams() {
    // 40 chunks of 1 000 bytes against a 10 000-byte cap: the stream is cut inside the
    // eleventh chunk, at a character boundary, and the rest is never read.
    let chunks: Vec<String> = (0..40)
        .map(|i| format!("{i:02}{}", "é".repeat(499)))
        .collect();
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [{"chunks": chunks}]}]}))
        .config(|c| c.max_output_bytes = 10_000);
    let (outcome, events) = h.run().await;
    let (reason, limit, observed, ends) = trip_of(&events);
    assert_eq!((reason, limit, ends), (BudgetReason::Bytes, 10_000.0, true));
    assert!(observed > 10_000.0);
    assert_ended_by(&outcome, BudgetReason::Bytes);
    assert!(
        outcome.text.len() <= 10_000 && outcome.text.len() > 9_990,
        "{}",
        outcome.text.len()
    );
    let streamed: usize = events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::Chunk { content, .. } => Some(content.len()),
            _ => None,
        })
        .sum();
    assert_eq!(
        streamed,
        outcome.text.len(),
        "clients got exactly what was kept"
    );
}

#[tokio::test]
async fn huge_tool_arguments_count_toward_the_output_cap() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "echo", "arguments": {"blob": "x".repeat(50_000)}}]},
        {"text": "never"}]}]}))
    .tool(TestTool::new("echo"))
    .config(|c| c.max_output_bytes = 10_000);
    let (outcome, _) = h.run().await;
    assert_ended_by(&outcome, BudgetReason::Bytes);
    assert!(outcome.tree.nodes.is_empty(), "the call never ran");
}

#[tokio::test]
async fn refused_calls_count_toward_the_tool_call_limit() {
    // The model repeats one call to a tool that does not exist: every refused call counts, so
    // the turn ends on `tool_calls`, long before the iteration limit.
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "ghost", "arguments": {}}], "repeat": true}
    ]}]}))
    .config(|c| {
        c.max_total_tool_calls = 5;
        c.max_iterations_per_level = 20;
    });
    let (outcome, events) = h.run().await;
    assert_eq!(trip_of(&events), (BudgetReason::ToolCalls, 5.0, 6.0, true));
    assert_ended_by(&outcome, BudgetReason::ToolCalls);
    assert_eq!(h.provider.requests.lock().len(), 6);
}

#[tokio::test]
async fn subtasks() {
    let h = Harness::new(json!({"conversations": [
        {"match": "root", "steps": [{"tool_calls": [
            {"name": "run_subtask", "arguments": {"title": "1", "instructions": "child 1"}},
            {"name": "run_subtask", "arguments": {"title": "2", "instructions": "child 2"}},
            {"name": "run_subtask", "arguments": {"title": "3", "instructions": "child 3"}}]},
            {"text": "never"}]},
        {"match": "child", "steps": [{"text": "done", "delay_ms": 10}]}
    ]}))
    .user("root")
    .config(|c| c.max_total_subtasks = 2);
    let (outcome, events) = h.run().await;
    assert_eq!(trip_of(&events), (BudgetReason::Subtasks, 2.0, 3.0, true));
    assert_ended_by(&outcome, BudgetReason::Subtasks);
}

#[tokio::test]
async fn wall_clock() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["thinking..."], "tool_calls": [{"id": "slow", "name": "slow", "arguments": {}}]},
        {"text": "never"}
    ]}]}))
    .tool(TestTool::new("slow").delay_ms(10_000))
    .config(|c| c.max_wall_clock_ms = 100);
    let started = std::time::Instant::now();
    let (outcome, events) = h.run().await;
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    let (reason, limit, observed, ends) = trip_of(&events);
    assert_eq!(
        (reason, limit, ends),
        (BudgetReason::WallClock, 100.0, true)
    );
    assert!(observed >= 100.0);
    assert_ended_by(&outcome, BudgetReason::WallClock);
    assert_eq!(outcome.text, "thinking...");
}

#[tokio::test]
async fn tokens() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["a"], "tool_calls": [{"name": "echo", "arguments": {"n": 1}}], "usage": {"input_tokens": 600, "output_tokens": 100}},
        {"text": "never"}
    ]}]}))
    .tool(TestTool::new("echo"))
    .config(|c| c.max_turn_tokens = Some(500));
    let (outcome, events) = h.run().await;
    assert_eq!(trip_of(&events), (BudgetReason::Tokens, 500.0, 700.0, true));
    assert_ended_by(&outcome, BudgetReason::Tokens);
    assert_eq!(h.provider.requests.lock().len(), 1);
}

#[tokio::test]
async fn cost() {
    let mut h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["a"], "tool_calls": [{"name": "echo", "arguments": {"n": 1}}], "usage": {"input_tokens": 1000000, "output_tokens": 0}},
        {"text": "never"}
    ]}]}))
    .tool(TestTool::new("echo"))
    .config(|c| c.max_cost_usd = Some(0.5));
    h.rate_card.set(
        "test-model",
        weft_core::ModelRate {
            input_per_mtok: 1.0,
            output_per_mtok: 1.0,
        },
    );
    let (outcome, events) = h.run().await;
    assert_eq!(trip_of(&events), (BudgetReason::Cost, 0.5, 1.0, true));
    assert_ended_by(&outcome, BudgetReason::Cost);
}

#[tokio::test]
async fn bytes() {
    let h = Harness::new(looping_tool_script())
        .tool(TestTool::new("echo").behaviour(Behaviour::Text("x".repeat(400))))
        .config(|c| c.max_total_result_bytes = 1000);
    let (outcome, events) = h.run().await;
    assert_eq!(
        trip_of(&events),
        (BudgetReason::Bytes, 1000.0, 1200.0, true)
    );
    assert_ended_by(&outcome, BudgetReason::Bytes);
}

#[tokio::test]
async fn iterations_at_the_root_end_the_turn() {
    let h = Harness::new(looping_tool_script())
        .tool(TestTool::new("echo"))
        .config(|c| c.max_iterations_per_level = 3);
    let (outcome, events) = h.run().await;
    assert_eq!(trip_of(&events), (BudgetReason::Iterations, 3.0, 4.0, true));
    assert_ended_by(&outcome, BudgetReason::Iterations);
}

#[tokio::test]
async fn iterations_in_a_subtask_fail_only_that_subtask() {
    let h = Harness::new(json!({"conversations": [
        {"match": "root", "steps": [
            {"tool_calls": [{"id": "s", "name": "run_subtask", "arguments": {"title": "loop", "instructions": "spin"}}]},
            {"text": "recovered"}]},
        {"match": "spin", "steps": [
            {"tool_calls": [{"name": "echo", "arguments": {"n": 1}}]},
            {"tool_calls": [{"name": "echo", "arguments": {"n": 2}}]},
            {"tool_calls": [{"name": "echo", "arguments": {"n": 3}}]}]}
    ]}))
    .user("root")
    .tool(TestTool::new("echo"))
    .config(|c| c.max_iterations_per_level = 2);
    let (outcome, events) = h.run().await;
    assert_eq!(
        trip_of(&events),
        (BudgetReason::Iterations, 2.0, 3.0, false)
    );
    let (text, is_error) = support::result_of(&events, "s");
    assert!(is_error && text.contains("iteration limit"), "{text}");
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(outcome.text, "recovered");
}

#[tokio::test]
async fn depth_is_a_subtask_error_not_a_turn_end() {
    let h = Harness::new(json!({"conversations": [
        {"match": "root", "steps": [
            {"tool_calls": [{"id": "s", "name": "run_subtask", "arguments": {"title": "t", "instructions": "nested"}}]},
            {"text": "fine"}]},
        {"match": "nested", "steps": [
            {"tool_calls": [{"id": "deep", "name": "run_subtask", "arguments": {"title": "t", "instructions": "nested"}}]},
            {"text": "gave up delegating"}]}
    ]}))
    .user("root")
    .config(|c| c.max_depth = 1);
    let (outcome, events) = h.run().await;
    assert_eq!(trip_of(&events), (BudgetReason::Depth, 1.0, 2.0, false));
    assert!(lines(&events).contains(&"end d1 <s> run_subtask#deep ERROR".to_owned()));
    assert_eq!(outcome.end, TurnEnd::Completed);
}
