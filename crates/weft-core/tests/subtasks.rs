//! `run_subtask` / `finish_subtask`: recursion, nesting, narrowing, depth, structured output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::tools::TestTool;
use support::{assert_no_orphans, lines, result_of, Harness};
use weft_core::TurnEnd;
use weft_protocol::ServerEvent;

fn compare_script() -> serde_json::Value {
    json!({"conversations": [
        {"match": "compare", "steps": [
            {"tool_calls": [
                {"id": "sa", "name": "run_subtask", "arguments": {"title": "A", "instructions": "research A"}},
                {"id": "sb", "name": "run_subtask", "arguments": {"title": "B", "instructions": "research B"}}]},
            {"chunks": ["A and B ", "differ."], "usage": {"input_tokens": 50, "output_tokens": 5}}]},
        {"match": "research A", "steps": [{"text": "A is old.", "delay_ms": 20}]},
        {"match": "research B", "steps": [{"text": "B is new.", "delay_ms": 80}]},
        {"match": "*", "steps": [{"text": "ok"}]}
    ]})
}

#[tokio::test]
async fn parallel_subtasks_nest_their_events_and_results() {
    let h = Harness::new(compare_script()).user("compare A and B");
    let (outcome, events) = h.run().await;
    assert_eq!(
        lines(&events),
        vec![
            "start d0 run_subtask#sa",
            "start d0 run_subtask#sb",
            "chunk d1 <sa> \"A is old.\"",
            "end d0 run_subtask#sa",
            "chunk d1 <sb> \"B is new.\"",
            "end d0 run_subtask#sb",
            "chunk d0 \"A and B differ.\"",
            "cost llm=4 tools=2",
        ]
    );
    assert_eq!(result_of(&events, "sa"), ("A is old.".to_owned(), false));
    assert_eq!(outcome.text, "A and B differ.");
    assert_eq!(h.memory.get("task:sa").as_deref(), Some("A is old."));
    assert_eq!(h.memory.get("task:sb").as_deref(), Some("B is new."));
    let titles: Vec<_> = outcome
        .tree
        .nodes
        .iter()
        .map(|n| {
            (
                support::hint(&n.id),
                n.title.as_deref(),
                n.parent_id.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        titles,
        vec![("sa", Some("A"), None), ("sb", Some("B"), None)]
    );
    assert_no_orphans(&outcome.history);
}

#[tokio::test]
async fn a_subtask_sees_only_its_instructions() {
    let h = Harness::new(compare_script()).user("compare A and B");
    h.run().await;
    let requests = h.provider.requests.lock();
    let child = requests
        .iter()
        .find(|r| r.messages[0].text() == "research A")
        .unwrap();
    assert_eq!(child.messages.len(), 1);
    assert!(child.system.contains("sub-agent"));
}

#[tokio::test]
async fn nested_tool_calls_carry_the_enclosing_subtask_as_parent() {
    let h = Harness::new(json!({"conversations": [
        {"match": "outer", "steps": [
            {"tool_calls": [{"id": "s1", "name": "run_subtask", "arguments": {"title": "T", "instructions": "inner work"}}]},
            {"text": "done"}]},
        {"match": "inner", "steps": [
            {"tool_calls": [{"id": "e1", "name": "echo", "arguments": {"q": 1}}]},
            {"text": "inner done"}]}
    ]}))
    .user("outer")
    .tool(TestTool::new("echo"));
    let (outcome, events) = h.run().await;
    assert_eq!(
        lines(&events),
        vec![
            "start d0 run_subtask#s1",
            "start d1 <s1> echo#e1",
            "end d1 <s1> echo#e1",
            "chunk d1 <s1> \"inner done\"",
            "end d0 run_subtask#s1",
            "chunk d0 \"done\"",
            "cost llm=4 tools=2",
        ]
    );
    let nodes: Vec<_> = outcome
        .tree
        .nodes
        .iter()
        .map(|n| {
            (
                support::hint(&n.id),
                n.parent_id.as_deref().map(support::hint),
            )
        })
        .collect();
    assert_eq!(nodes, vec![("s1", None), ("e1", Some("s1"))]);
}

#[tokio::test]
async fn every_round_of_every_level_is_recorded_in_order() {
    let record = std::sync::Arc::new(support::RecordLines::default());
    let mut h = Harness::new(json!({"conversations": [
        {"match": "outer", "steps": [
            {"chunks": ["let me "], "tool_calls": [{"id": "s1", "name": "run_subtask", "arguments": {"title": "T", "instructions": "inner work"}}]},
            {"text": "done"}]},
        {"match": "inner", "steps": [
            {"tool_calls": [{"id": "e1", "name": "echo", "arguments": {"q": 1}}, {"id": "nope", "name": "missing", "arguments": {}}]},
            {"text": "inner done"}]}
    ]}))
    .user("outer")
    .tool(TestTool::new("echo"));
    h.recorder = record.clone();
    h.run().await;
    assert_eq!(
        *record.0.lock(),
        vec![
            "d0 assistant \"let me \" run_subtask",
            "d1 assistant \"\" echo,missing",
            "d1 results echo,missing!",
            "d1 assistant \"inner done\" ",
            "d0 results run_subtask",
            "d0 assistant \"done\" ",
        ]
    );
}

#[tokio::test]
async fn run_subtask_at_the_depth_limit_returns_a_depth_error() {
    // Every level delegates again; the level at depth 3 is refused.
    let h = Harness::new(json!({"conversations": [
        {"match": "*", "steps": [
            {"tool_calls": [{"name": "run_subtask", "arguments": {"title": "deeper", "instructions": "go deeper"}}]},
            {"text": "bottom"}]}
    ]}));
    let (outcome, events) = h.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    let depth_errors: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::ToolCallUpdate {
                depth,
                result: Some(r),
                is_error: Some(true),
                ..
            } => Some((*depth, r.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(depth_errors, vec![(3, weft_core::prompts::depth_limit(3))]);
    assert!(lines(&events).contains(&"budget depth 4/3".to_owned()));
    let max_depth = outcome.tree.nodes.len();
    assert_eq!(max_depth, 4, "three nested subtasks plus the refused call");
    // A subtask level is told to delegate exactly when it is offered run_subtask; the level
    // at the depth limit is offered neither.
    let requests = h.provider.requests.lock();
    let offered: Vec<(bool, bool)> = requests
        .iter()
        .filter(|r| {
            r.system
                .starts_with(weft_core::prompts::SUBTASK_PROMPT_BASE)
        })
        .map(|r| {
            (
                r.tools.iter().any(|t| t.name == "run_subtask"),
                r.system
                    .contains(weft_core::prompts::SUBTASK_DELEGATION_LINE),
            )
        })
        .collect();
    assert!(
        offered.iter().all(|(tool, line)| tool == line),
        "{offered:?}"
    );
    assert!(
        offered.contains(&(true, true)) && offered.contains(&(false, false)),
        "{offered:?}"
    );
}

#[tokio::test]
async fn a_subtask_toolset_can_only_narrow_the_parents() {
    let h = Harness::new(json!({"conversations": [
        {"match": "outer", "steps": [
            {"tool_calls": [
                {"id": "ok", "name": "run_subtask", "arguments": {"title": "T", "instructions": "narrow", "tools": ["echo"]}},
                {"id": "bad", "name": "run_subtask", "arguments": {"title": "T", "instructions": "wide", "tools": ["echo", "rm_rf"]}}]},
            {"text": "done"}]},
        {"match": "narrow", "steps": [
            {"tool_calls": [{"id": "w", "name": "writer", "arguments": {}}]},
            {"text": "could not write"}]}
    ]}))
    .user("outer")
    .tool(TestTool::new("echo"))
    .tool(TestTool::new("writer"));
    let (_, events) = h.run().await;
    let (text, is_error) = result_of(&events, "w");
    assert!(is_error);
    assert_eq!(text, "error: unknown tool `writer`. Available tools: echo.");
    let (text, is_error) = result_of(&events, "bad");
    assert!(is_error && text.contains("not available: rm_rf"), "{text}");
    let requests = h.provider.requests.lock();
    let child = requests
        .iter()
        .find(|r| r.messages[0].text() == "narrow")
        .unwrap();
    let names: Vec<_> = child.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["echo"]);
}

fn schema_script(payloads: serde_json::Value) -> serde_json::Value {
    json!({"conversations": [
        {"match": "outer", "steps": [
            {"tool_calls": [{"id": "s", "name": "run_subtask", "arguments": {
                "title": "structured", "instructions": "structured work",
                "output_schema": {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}}}]},
            {"text": "done"}]},
        {"match": "structured", "steps": payloads}
    ]})
}

#[tokio::test]
async fn finish_subtask_with_a_valid_payload_returns_it() {
    let h = Harness::new(schema_script(json!([
        {"text": "thinking"},
        {"tool_calls": [{"id": "f1", "name": "finish_subtask", "arguments": {"score": "high"}}]},
        {"tool_calls": [{"id": "f2", "name": "finish_subtask", "arguments": {"score": 7}}]}
    ])))
    .user("outer");
    let (outcome, events) = h.run().await;
    assert_eq!(result_of(&events, "s"), ("{\"score\":7}".to_owned(), false));
    assert!(
        result_of(&events, "f1").1,
        "the invalid payload is an error result"
    );
    assert_eq!(outcome.end, TurnEnd::Completed);
    let requests = h.provider.requests.lock();
    let child = requests
        .iter()
        .find(|r| r.messages[0].text() == "structured work")
        .unwrap();
    assert!(child.tools.iter().any(|t| t.name == "finish_subtask"));
}

#[tokio::test]
async fn finish_subtask_is_absent_without_an_output_schema() {
    let h = Harness::new(json!({"conversations": [
        {"match": "outer", "steps": [
            {"tool_calls": [{"id": "s", "name": "run_subtask", "arguments": {"title": "t", "instructions": "free work"}}]},
            {"text": "done"}]},
        {"match": "free", "steps": [
            {"tool_calls": [{"id": "f", "name": "finish_subtask", "arguments": {}}]}, {"text": "plain"}]}
    ]}))
    .user("outer");
    let (_, events) = h.run().await;
    assert!(result_of(&events, "f")
        .0
        .starts_with("error: unknown tool `finish_subtask`"));
    assert_eq!(result_of(&events, "s"), ("plain".to_owned(), false));
}

#[tokio::test]
async fn invalid_payloads_are_retried_up_to_the_limit_then_schema_not_satisfied() {
    let h = Harness::new(schema_script(json!([
        {"tool_calls": [{"name": "finish_subtask", "arguments": {"score": "bad"}}], "repeat": true}
    ])))
    .user("outer");
    let (outcome, events) = h.run().await;
    let (text, is_error) = result_of(&events, "s");
    assert!(is_error);
    let error: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"], "schema_not_satisfied");
    let finish_attempts = events
        .iter()
        .filter(|e| matches!(e, ServerEvent::ToolCallUpdate { name, status: weft_protocol::ToolCallStatus::End, .. } if name == "finish_subtask"))
        .count();
    assert_eq!(
        finish_attempts, 4,
        "three retries fed back, the fourth failure ends it"
    );
    assert_eq!(outcome.end, TurnEnd::Completed);
}

#[tokio::test]
async fn a_structured_subtask_that_never_finishes_ends_at_its_iteration_limit() {
    let h = Harness::new(schema_script(
        json!([{"text": "still thinking", "repeat": true}]),
    ))
    .user("outer")
    .config(|c| c.max_iterations_per_level = 4);
    let (outcome, events) = h.run().await;
    let (text, is_error) = result_of(&events, "s");
    assert!(is_error, "{text}");
    let error: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"], "schema_not_satisfied", "{text}");
    // Each plain answer was met with the reminder, up to the limit; the turn goes on.
    let requests = h.provider.requests.lock();
    let child: Vec<_> = requests
        .iter()
        .filter(|r| r.messages[0].text() == "structured work")
        .collect();
    assert_eq!(child.len(), 4);
    let reminders = child[3]
        .messages
        .iter()
        .filter(|m| m.text() == weft_core::prompts::FINISH_SUBTASK_REMINDER)
        .count();
    assert_eq!(reminders, 3);
    assert!(
        lines(&events).contains(&"budget iterations 5/4".to_owned()),
        "{:?}",
        lines(&events)
    );
    assert_eq!(outcome.end, TurnEnd::Completed);
}

#[tokio::test]
async fn a_subtask_provider_error_is_its_error_result() {
    let h = Harness::new(json!({"conversations": [
        {"match": "outer", "steps": [
            {"tool_calls": [{"id": "s", "name": "run_subtask", "arguments": {"title": "t", "instructions": "flaky"}}]},
            {"text": "handled"}]},
        {"match": "flaky", "steps": [{"error": {"kind": "timeout"}}]}
    ]}))
    .user("outer");
    let (outcome, events) = h.run().await;
    let (text, is_error) = result_of(&events, "s");
    assert!(is_error && text.contains("timed out"), "{text}");
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(outcome.text, "handled");
}
