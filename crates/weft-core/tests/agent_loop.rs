//! The unified loop at depth 0: answers, tool calls, parallelism, failures, cancellation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use support::tools::{Behaviour, TestTool};
use support::{assert_no_orphans, lines, result_of, Harness, ModelCalls};
use weft_core::{Role, TurnEnd};
use weft_protocol::{ApprovalStatus, ServerEvent, ToolCategory, ToolResultStatus};

fn calls(list: &[(&str, &str, serde_json::Value)]) -> serde_json::Value {
    json!({"tool_calls": list.iter().map(|(id, name, args)| json!({"id": id, "name": name, "arguments": args})).collect::<Vec<_>>()})
}

#[tokio::test]
async fn a_trivial_question_is_answered_directly() {
    let h = Harness::new(
        json!({"conversations": [{"match": "*", "steps": [{"chunks": ["Hel", "lo"]}]}]}),
    );
    let (outcome, events) = h.run().await;
    assert_eq!(
        lines(&events),
        vec!["chunk d0 \"Hello\"", "cost llm=1 tools=0"]
    );
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(outcome.text, "Hello");
    assert!(outcome.tree.nodes.is_empty());
    assert_eq!(outcome.history.len(), 2);
    assert_eq!(outcome.model_calls, 1);
}

#[tokio::test]
async fn a_tool_call_result_feeds_the_next_round() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("c1", "echo", json!({"x": 1}))]),
        {"text": "done"}
    ]}]}))
    .tool(TestTool::new("echo"));
    let (outcome, events) = h.run().await;
    assert_eq!(
        lines(&events),
        vec![
            "start d0 echo#c1",
            "end d0 echo#c1",
            "chunk d0 \"done\"",
            "cost llm=2 tools=1"
        ]
    );
    assert_eq!(result_of(&events, "c1"), ("{\"x\":1}".to_owned(), false));
    let second = &h.provider.requests.lock()[1];
    let last = second.messages.last().unwrap();
    assert_eq!(
        (last.role, last.tool_call_id.as_deref(), last.text()),
        (Role::Tool, Some("c1"), "{\"x\":1}".to_owned())
    );
    assert_eq!(outcome.tree.nodes.len(), 1);
    assert_eq!(
        outcome.tree.nodes[0].args_preview.as_deref(),
        Some("{\"x\":1}")
    );
    let meta = support::metadata_of(&events, "c1");
    assert_eq!(
        (meta.status, meta.approval_status),
        (ToolResultStatus::Success, ApprovalStatus::NotRequired)
    );
    assert!(meta.completed_at >= meta.started_at);
}

#[tokio::test]
async fn parallel_safe_calls_run_concurrently() {
    let tool = TestTool::new("slow").delay_ms(50);
    let probe = tool.probe();
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("a", "slow", json!({"i": 0})), ("b", "slow", json!({"i": 1})), ("c", "slow", json!({"i": 2}))]),
        {"text": "ok"}
    ]}]}))
    .tool(tool);
    let (outcome, events) = h.run().await;
    assert_eq!(probe.peak(), 3);
    assert_eq!(outcome.end, TurnEnd::Completed);
    // Results go back in the order the model emitted the calls.
    let ids: Vec<_> = outcome
        .history
        .iter()
        .filter_map(|m| m.tool_call_id.clone())
        .collect();
    assert_eq!(ids, vec!["a", "b", "c"]);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, ServerEvent::ToolCallUpdate { .. }))
            .count(),
        6
    );
}

#[tokio::test]
async fn surplus_beyond_max_parallel_is_queued() {
    let tool = TestTool::new("slow").delay_ms(20);
    let probe = tool.probe();
    let five: Vec<_> = (0..5).map(|i| (format!("c{i}"), json!({"i": i}))).collect();
    let list: Vec<(&str, &str, serde_json::Value)> = five
        .iter()
        .map(|(id, a)| (id.as_str(), "slow", a.clone()))
        .collect();
    let h = Harness::new(
        json!({"conversations": [{"match": "*", "steps": [calls(&list), {"text": "ok"}]}]}),
    )
    .tool(tool)
    .config(|c| c.max_parallel_per_turn = 2);
    let (outcome, _) = h.run().await;
    assert_eq!(probe.peak(), 2);
    assert_eq!(probe.count(), 5);
    assert_eq!(outcome.end, TurnEnd::Completed);
}

#[tokio::test]
async fn exclusive_calls_run_serially_in_emitted_order() {
    let tool = TestTool::new("exclusive").serial().delay_ms(10);
    let probe = tool.probe();
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("a", "exclusive", json!({"i": 0})), ("b", "exclusive", json!({"i": 1})), ("c", "exclusive", json!({"i": 2}))]),
        {"text": "ok"}
    ]}]}))
    .tool(tool);
    h.run().await;
    assert_eq!(probe.peak(), 1);
    assert_eq!(
        *probe.calls.lock(),
        vec![json!({"i": 0}), json!({"i": 1}), json!({"i": 2})]
    );
}

#[tokio::test]
async fn calls_writing_one_resource_never_overlap() {
    let locked = TestTool::new("locked")
        .claim(weft_core::Claim::write("workspace_fs"))
        .delay_ms(20);
    let probe = locked.probe();
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("a", "locked", json!({"i": 0})), ("b", "locked", json!({"i": 1}))]),
        {"text": "ok"}
    ]}]}))
    .tool(locked);
    h.run().await;
    assert_eq!(probe.peak(), 1);
    assert_eq!(probe.count(), 2);
}

#[tokio::test]
async fn a_mixed_round_runs_reads_together_and_conflicts_in_emitted_order() {
    // Two reads, a write of what they read, a read after it, and a call that claims
    // nothing: the reads and the free call start together, the write once both reads are
    // done, the last read once the write is.
    use weft_core::Claim;
    let reader = TestTool::new("reader")
        .claim(Claim::read("res"))
        .delay_ms(40);
    let probe = reader.probe();
    let mut writer = TestTool::new("writer")
        .claim(Claim::write("res"))
        .delay_ms(40);
    writer.probe = probe.clone();
    let mut free = TestTool::new("free").delay_ms(40);
    free.probe = probe.clone();
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[
            ("r1", "reader", json!({"c": "r1"})),
            ("r2", "reader", json!({"c": "r2"})),
            ("w", "writer", json!({"c": "w"})),
            ("r3", "reader", json!({"c": "r3"})),
            ("x", "free", json!({"c": "x"}))
        ]),
        {"text": "ok"}
    ]}]}))
    .tool(reader)
    .tool(writer)
    .tool(free);
    let (outcome, _) = h.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    let order: Vec<String> = probe
        .calls
        .lock()
        .iter()
        .map(|a| a["c"].as_str().unwrap().to_owned())
        .collect();
    let mut first: Vec<&str> = order[..3].iter().map(String::as_str).collect();
    first.sort_unstable();
    assert_eq!(first, ["r1", "r2", "x"], "{order:?}");
    assert_eq!(&order[3..], ["w", "r3"], "{order:?}");
    assert_eq!(
        probe.peak(),
        3,
        "the reads and the free call overlapped, nothing else"
    );
    // Results go back in the order the model emitted the calls.
    let ids: Vec<_> = outcome
        .history
        .iter()
        .filter_map(|m| m.tool_call_id.clone())
        .collect();
    assert_eq!(ids, ["r1", "r2", "w", "r3", "x"]);
}

#[tokio::test]
async fn serial_parallelism_runs_everything_in_order() {
    let tool = TestTool::new("slow").delay_ms(10);
    let probe = tool.probe();
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("a", "slow", json!({"i": 0})), ("b", "slow", json!({"i": 1})), ("c", "slow", json!({"i": 2}))]),
        {"text": "ok"}
    ]}]}))
    .tool(tool)
    .config(|c| c.tool_parallelism = weft_protocol::ToolParallelism::Serial);
    h.run().await;
    assert_eq!(probe.peak(), 1);
    assert_eq!(
        *probe.calls.lock(),
        vec![json!({"i": 0}), json!({"i": 1}), json!({"i": 2})]
    );
}

#[tokio::test]
async fn a_model_without_parallel_tool_calls_gets_its_calls_run_one_at_a_time() {
    let tool = TestTool::new("slow").delay_ms(10);
    let probe = tool.probe();
    let h = Harness::new(
        json!({"parallel_tool_calls": false, "conversations": [{"match": "*", "steps": [
            calls(&[("a", "slow", json!({"i": 0})), ("b", "slow", json!({"i": 1}))]),
            {"text": "ok"}
        ]}]}),
    )
    .tool(tool);
    h.run().await;
    assert_eq!((probe.peak(), probe.count()), (1, 2));
    assert_eq!(*probe.calls.lock(), vec![json!({"i": 0}), json!({"i": 1})]);
}

#[tokio::test]
async fn a_failing_or_panicking_tool_never_takes_down_its_siblings() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("ok", "echo", json!({"v": 1})), ("bad", "fail", json!({})), ("boom", "panic", json!({}))]),
        {"text": "recovered"}
    ]}]}))
    .tool(TestTool::new("echo"))
    .tool(TestTool::new("fail").behaviour(Behaviour::Fail("disk on fire")))
    .tool(TestTool::new("panic").behaviour(Behaviour::Panic));
    let (outcome, events) = h.run().await;
    assert_eq!(result_of(&events, "ok"), ("{\"v\":1}".to_owned(), false));
    assert_eq!(result_of(&events, "bad"), ("disk on fire".to_owned(), true));
    let (boom, is_error) = result_of(&events, "boom");
    assert!(is_error && boom.contains("crashed"), "{boom}");
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(outcome.text, "recovered");
    assert_no_orphans(&outcome.history);
}

#[tokio::test]
async fn an_unknown_tool_is_an_error_result_listing_the_available_tools() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("x", "hallucinated_tool", json!({}))]), {"text": "sorry"}
    ]}]}))
    .tool(TestTool::new("echo"));
    let (outcome, events) = h.run().await;
    let (text, is_error) = result_of(&events, "x");
    assert!(is_error);
    assert_eq!(
        text,
        "error: unknown tool `hallucinated_tool`. Available tools: run_subtask, echo."
    );
    assert_eq!(outcome.end, TurnEnd::Completed);
}

#[tokio::test]
async fn malformed_json_arguments_are_an_error_result_not_a_crash() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"id": "m", "name": "echo", "arguments": {"a": 1}}], "error": {"kind": "malformed_tool_args"}},
        {"text": "fine"}
    ]}]}))
    .tool(TestTool::new("echo"));
    let (outcome, events) = h.run().await;
    let (text, is_error) = result_of(&events, "m");
    assert!(is_error && text.contains("not valid JSON"), "{text}");
    assert_eq!(outcome.text, "fine");
}

#[tokio::test]
async fn strict_validation_rejects_and_lenient_coerces() {
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let script = json!({"conversations": [{"match": "*", "steps": [
        calls(&[("v", "count", json!({"n": "3", "junk": true}))]), {"text": "ok"}
    ]}]});
    let strict = Harness::new(script.clone()).tool(TestTool::new("count").schema(schema.clone()));
    let (_, events) = strict.run().await;
    let (text, is_error) = result_of(&events, "v");
    assert!(
        is_error && text.starts_with("error: invalid arguments for `count`"),
        "{text}"
    );

    let lenient = Harness::new(script)
        .tool(TestTool::new("count").schema(schema))
        .config(|c| c.arg_validation = weft_protocol::ArgValidation::Lenient);
    let (_, events) = lenient.run().await;
    assert_eq!(result_of(&events, "v"), ("{\"n\":3}".to_owned(), false));
}

#[tokio::test]
async fn oversized_results_are_cut_at_a_utf8_boundary_with_the_marker() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("big", "big", json!({}))]), {"text": "ok"}
    ]}]}))
    .tool(TestTool::new("big").behaviour(Behaviour::Text("€".repeat(1000))))
    .config(|c| c.tool_result_max_bytes = 101);
    let (outcome, events) = h.run().await;
    let (text, _) = result_of(&events, "big");
    assert!(text.len() <= 101);
    assert!(
        text.ends_with("[…truncated; full result 3000 bytes]"),
        "{text}"
    );
    assert!(text
        .trim_end_matches("[…truncated; full result 3000 bytes]")
        .chars()
        .all(|c| c == '€'));
    let fed_back = outcome
        .history
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("big"))
        .unwrap();
    assert_eq!(fed_back.text(), text);
}

#[tokio::test]
async fn abort_error_mode_ends_the_turn_on_a_tool_failure() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("bad", "fail", json!({}))]), {"text": "never"}
    ]}]}))
    .tool(TestTool::new("fail").behaviour(Behaviour::Fail("nope")))
    .config(|c| c.tool_error_mode = weft_protocol::ToolErrorMode::Abort);
    let (outcome, _) = h.run().await;
    assert_eq!(
        outcome.end,
        TurnEnd::ToolAborted("tool `fail` failed: nope".to_owned())
    );
    assert_eq!(h.provider.requests.lock().len(), 1);
}

#[tokio::test]
async fn a_fatal_tool_error_ends_the_turn() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("f", "fatal", json!({}))]), {"text": "never"}
    ]}]}))
    .tool(TestTool::new("fatal").behaviour(Behaviour::Fatal("store is gone")));
    let (outcome, _) = h.run().await;
    assert_eq!(outcome.end, TurnEnd::Failed("store is gone".to_owned()));
}

/// Whether each call that ended was an error, in the order they ended.
fn error_flags(events: &[ServerEvent]) -> Vec<bool> {
    events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::ToolCallUpdate {
                is_error: Some(err),
                ..
            } => Some(*err),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn repeated_identical_calls_are_refused() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "echo", "arguments": {"same": true}}], "repeat": true}
    ]}]}))
    .tool(TestTool::new("echo"))
    .config(|c| {
        c.max_identical_calls = 3;
        c.max_iterations_per_level = 4;
    });
    let (_, events) = h.run().await;
    assert_eq!(error_flags(&events), vec![false, false, true, true]);
    let last_error = events.iter().rev().find_map(|e| match e {
        ServerEvent::ToolCallUpdate {
            result: Some(r), ..
        } => Some(r.clone()),
        _ => None,
    });
    assert!(last_error.unwrap().contains("identical arguments"));
}

/// The guard compares what the tool would get: arguments that differ only in an injected
/// arg (split off before the tool runs) are the same call again.
#[tokio::test]
async fn calls_that_differ_only_in_injected_args_count_as_identical() {
    let tool = TestTool::new("echo")
        .schema(json!({"type": "object", "properties": {"x": {"type": "integer"}}}));
    let probe = tool.probe();
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("c1", "echo", json!({"x": 1, "run_origin": "a"}))]),
        calls(&[("c2", "echo", json!({"x": 1, "run_origin": "b"}))]),
        calls(&[("c3", "echo", json!({"x": 1, "run_origin": "c"}))]),
        {"text": "done"}
    ]}]}))
    .tool(tool)
    .config(|c| {
        c.max_identical_calls = 3;
        c.injected_tool_args
            .insert("run_origin".into(), "Caller surface.".into());
    });
    let (_, events) = h.run().await;
    assert_eq!(error_flags(&events), vec![false, false, true]);
    assert_eq!(probe.calls.lock().len(), 2);
    // The cards show what the model sent, injected arg and all.
    let shown: Vec<Value> = events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::ToolCallUpdate { args: Some(a), .. } => Some(a.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(shown[2], json!({"x": 1, "run_origin": "c"}));
}

#[tokio::test]
async fn cancelling_mid_tool_leaves_no_orphaned_call() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["working"], "tool_calls": [{"id": "slow", "name": "slow", "arguments": {}}, {"id": "q", "name": "queued", "arguments": {}}]},
        {"text": "never"}
    ]}]}))
    .tool(TestTool::new("slow").delay_ms(10_000))
    .tool(TestTool::new("queued").serial());
    let cancel = h.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let started = std::time::Instant::now();
    let (outcome, events) = h.run().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(outcome.end, TurnEnd::Cancelled);
    assert_eq!(outcome.text, "working");
    assert_eq!(
        result_of(&events, "slow"),
        (weft_core::prompts::CANCELLED_RESULT.to_owned(), true)
    );
    assert_eq!(result_of(&events, "q").1, true);
    assert_no_orphans(&outcome.history);
    assert_eq!(h.provider.requests.lock().len(), 1);
}

#[tokio::test]
async fn a_turn_stopped_while_its_model_is_asked_ends_cancelled_not_as_a_provider_failure() {
    // The scripted provider, like the HTTP ones, ends its call with an error of its own
    // ("cancelled") when the turn's token fires.
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"delay_ms": 10_000, "text": "never"}
    ]}]}));
    let cancel = h.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let (outcome, _) = h.run().await;
    assert_eq!(outcome.end, TurnEnd::Cancelled);
}

#[tokio::test]
async fn a_provider_error_ends_the_turn_keeping_partial_text() {
    let mut h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["partial ", "answer"], "error": {"kind": "http_status", "status": 500}}
    ]}]}));
    let model_calls = std::sync::Arc::new(ModelCalls::default());
    h.recorder = model_calls.clone();
    let (outcome, events) = h.run().await;
    assert_eq!(outcome.text, "partial answer");
    assert!(
        matches!(&outcome.end, TurnEnd::ProviderError(m) if m.contains("500")),
        "{:?}",
        outcome.end
    );
    assert_eq!(
        model_calls.0.lock()[0]
            .error
            .as_deref()
            .map(|e| e.contains("500")),
        Some(true)
    );
    assert_eq!(lines(&events).last().unwrap(), "cost llm=1 tools=0");
}

#[tokio::test]
async fn a_provider_without_tools_degrades_to_plain_chat() {
    let h = Harness::new(
        json!({"tools": false, "conversations": [{"match": "*", "steps": [{"text": "plain"}]}]}),
    )
    .tool(TestTool::new("echo"));
    let (outcome, _) = h.run().await;
    assert_eq!(outcome.text, "plain");
    assert!(h.provider.requests.lock()[0].tools.is_empty());
}

#[tokio::test]
async fn the_provider_sees_tool_specs_with_injected_args_and_tools_never_get_them() {
    let tool = TestTool::new("echo")
        .schema(json!({"type": "object", "properties": {"x": {"type": "integer"}}}));
    let probe = tool.probe();
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("c", "echo", json!({"x": 1, "run_origin": "playground"}))]), {"text": "ok"}
    ]}]}))
    .tool(tool)
    .config(|c| {
        c.injected_tool_args
            .insert("run_origin".into(), "Caller surface.".into());
    });
    let (_, events) = h.run().await;
    let spec = h.provider.requests.lock()[0]
        .tools
        .iter()
        .find(|t| t.name == "echo")
        .cloned()
        .unwrap();
    assert_eq!(
        spec.parameters["properties"]["run_origin"],
        json!({"type": "string", "description": "Caller surface."})
    );
    assert_eq!(*probe.calls.lock(), vec![json!({"x": 1})]);
    let meta = support::metadata_of(&events, "c");
    assert_eq!(
        meta.injected_args.get("run_origin"),
        Some(&json!("playground"))
    );
}

#[tokio::test]
async fn cost_comes_from_the_rate_card() {
    let mut h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"text": "hi", "usage": {"input_tokens": 1000, "output_tokens": 500}}
    ]}]}));
    h.rate_card.set(
        "test-model",
        weft_core::ModelRate {
            input_per_mtok: 2.0,
            output_per_mtok: 10.0,
        },
    );
    let (outcome, events) = h.run().await;
    assert!((outcome.totals.cost_usd - 0.007).abs() < 1e-9);
    assert!(events.iter().any(|e| matches!(e,
        ServerEvent::CostSummary { input_tokens: 1000, output_tokens: 500, cost_usd, .. } if (cost_usd - 0.007).abs() < 1e-9)));
}

#[tokio::test]
async fn write_tools_respect_the_category_in_events() {
    // In Default mode the write tool asks (its request says `write`); the read tool does not.
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("r", "reader", json!({})), ("w", "writer", json!({}))]), {"text": "ok"}
    ]}]}))
    .tool(TestTool::new("reader").category(ToolCategory::Read))
    .tool(TestTool::new("writer").category(ToolCategory::Write))
    .config(|c| c.approval_timeout_ms = Some(50))
    .mode(weft_protocol::PermissionMode::Default);
    let (_, events) = h.run().await;
    let asked: Vec<(&str, ToolCategory)> = events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::ToolApprovalRequest { name, category, .. } => {
                Some((name.as_str(), *category))
            }
            _ => None,
        })
        .collect();
    assert_eq!(asked, [("writer", ToolCategory::Write)]);
    assert_eq!(result_of(&events, "r").1, false, "the read tool ran");
    let (timed_out, is_error) = result_of(&events, "w");
    assert!(
        is_error,
        "nobody answered, so the write did not run: {timed_out}"
    );
}

#[tokio::test]
async fn tree_previews_are_capped_at_500_characters() {
    let long = "ü".repeat(2000);
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("p", "echo", json!({"text": long}))]), {"text": "ok"}
    ]}]}))
    .tool(TestTool::new("echo"));
    let (outcome, _) = h.run().await;
    let node = &outcome.tree.nodes[0];
    assert_eq!(node.args_preview.as_ref().unwrap().chars().count(), 500);
    assert_eq!(node.result_preview.as_ref().unwrap().chars().count(), 500);
    assert!(node.args_preview.as_ref().unwrap().ends_with('…'));
}

#[tokio::test]
async fn every_model_call_is_accounted() {
    let mut h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "echo", "arguments": {}}], "usage": {"input_tokens": 7, "output_tokens": 3}},
        {"text": "ok", "usage": {"input_tokens": 11, "output_tokens": 2}}
    ]}]}))
    .tool(TestTool::new("echo"));
    let model_calls = std::sync::Arc::new(ModelCalls::default());
    h.recorder = model_calls.clone();
    let (outcome, _) = h.run().await;
    assert_eq!(outcome.model_calls, 2);
    let calls: Vec<_> = model_calls
        .0
        .lock()
        .iter()
        .map(|c| (c.depth, c.input_tokens, c.output_tokens, c.error.clone()))
        .collect();
    assert_eq!(calls, vec![(0, 7, 3, None), (0, 11, 2, None)]);
    assert_eq!(
        (outcome.provider.as_str(), outcome.model.as_str()),
        ("scripted", "test-model")
    );
    assert_eq!(
        (
            outcome.totals.input_tokens,
            outcome.totals.output_tokens,
            outcome.totals.llm_calls
        ),
        (18, 5, 2)
    );
    assert_eq!(outcome.tool_calls.len(), outcome.tree.nodes.len());
    assert_eq!(
        outcome.tool_calls[0].status,
        Some(ToolResultStatus::Success)
    );
}

#[tokio::test]
async fn a_tool_running_past_its_timeout_is_a_timed_out_result() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("s1", "slow", json!({}))]),
        {"text": "moved on"}
    ]}]}))
    .tool(TestTool::new("slow").delay_ms(30_000))
    .config(|c| c.tool_timeout_ms = Some(50));
    let started = std::time::Instant::now();
    let (outcome, events) = h.run().await;
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let (text, is_error) = result_of(&events, "s1");
    assert!(
        is_error && text.contains("did not finish within 50 ms"),
        "{text}"
    );
    assert_eq!(
        support::metadata_of(&events, "s1").status,
        weft_protocol::ToolResultStatus::TimedOut
    );
    assert_eq!(outcome.text, "moved on");
}

fn chunk_texts(events: &[ServerEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::Chunk { content, done, .. } if !done => Some(content.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn text_that_has_already_arrived_goes_out_as_one_chunk() {
    // No pacing: every piece is there when the first is read, so the turn sends them once.
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["a", "b", "c"], "tool_calls": [{"name": "echo", "arguments": {}}]},
        {"text": "done"}]}]}))
    .tool(TestTool::new("echo"));
    let (outcome, events) = h.run().await;
    assert_eq!(chunk_texts(&events), vec!["abc", "done"]);
    assert_eq!(outcome.text, "abcdone");
    assert_eq!(
        outcome.totals.tool_calls, 1,
        "the call behind the text is kept"
    );
}

#[tokio::test]
async fn text_paced_by_the_model_goes_out_as_it_comes() {
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["one ", "two ", "three"], "chunk_delay_ms": 200}]}]}));
    let (outcome, events) = h.run().await;
    let chunks = chunk_texts(&events);
    assert!(chunks.len() > 1, "{chunks:?}");
    assert_eq!(chunks.concat(), "one two three");
    assert_eq!(outcome.text, "one two three");
}

#[tokio::test(start_paused = true)]
async fn under_a_chunk_interval_text_goes_out_at_most_once_per_interval() {
    // Ten pieces 10 ms apart under a 50 ms interval: the first at once, then the pieces of
    // each 50 ms together, and the last as soon as the response ends.
    let pieces: Vec<String> = (0..10).map(|i| format!("p{i} ")).collect();
    let mut h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": pieces, "chunk_delay_ms": 10}]}]}));
    h.chunk_interval = Duration::from_millis(50);
    let began = tokio::time::Instant::now();
    let (outcome, events) = h.run().await;
    let chunks = chunk_texts(&events);
    assert_eq!(chunks[0], "p0 ", "the first piece goes at once");
    assert!((2..=4).contains(&chunks.len()), "{chunks:?}");
    assert_eq!(chunks.concat(), pieces.concat());
    assert_eq!(outcome.text, pieces.concat());
    assert!(
        began.elapsed() < Duration::from_millis(150),
        "the last piece was held: {:?}",
        began.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_chunk_interval_holds_only_text_and_never_the_end_of_a_response() {
    // An interval far longer than the turn: text behind the first piece waits only until a
    // tool call or the response's end comes, and the next response's first piece goes at once.
    let mut h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["a", "b"], "chunk_delay_ms": 10,
         "tool_calls": [{"id": "c1", "name": "echo", "arguments": {}}]},
        {"chunks": ["c", "d"], "chunk_delay_ms": 10}]}]}))
    .tool(TestTool::new("echo"));
    h.chunk_interval = Duration::from_secs(60);
    let began = tokio::time::Instant::now();
    let (outcome, events) = h.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(chunk_texts(&events), vec!["a", "b", "c", "d"]);
    assert_eq!(outcome.totals.tool_calls, 1);
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
}

/// A pace that holds each round back for a while and counts how often it was asked, before
/// a first round and between rounds.
struct SlowPace {
    asked_first: std::sync::atomic::AtomicUsize,
    asked: std::sync::atomic::AtomicUsize,
    hold: Duration,
}

impl weft_core::Pace for SlowPace {
    fn between_rounds(&self) -> Option<futures::future::BoxFuture<'static, ()>> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(Box::pin(tokio::time::sleep(self.hold)))
    }

    fn before_first_round(&self) -> Option<futures::future::BoxFuture<'static, ()>> {
        self.asked_first
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(Box::pin(tokio::time::sleep(self.hold)))
    }
}

#[tokio::test(start_paused = true)]
async fn the_pace_is_asked_before_and_between_rounds_and_holds_each_one_back() {
    let pace = std::sync::Arc::new(SlowPace {
        asked_first: Default::default(),
        asked: Default::default(),
        hold: Duration::from_secs(5),
    });
    let mut h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        calls(&[("c1", "echo", json!({"x": 1}))]),
        calls(&[("c2", "echo", json!({"x": 2}))]),
        {"text": "done"}
    ]}]}))
    .tool(TestTool::new("echo"));
    h.pace = Some(pace.clone());
    let began = tokio::time::Instant::now();
    let (outcome, _) = h.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    // Three rounds: asked once before the first, and between rounds before the second and
    // the third; each answer held its round back.
    assert_eq!(
        pace.asked_first.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert_eq!(pace.asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert!(began.elapsed() >= Duration::from_secs(15));
}
