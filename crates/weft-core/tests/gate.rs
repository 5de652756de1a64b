//! The permission gate: the mode × category × decision matrix, and approvals end to end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::tools::TestTool;
use support::{result_of, Harness};
use weft_core::{decide, EventSink, GateDecision, TurnEnd};
use weft_protocol::{
    ApprovalDecision, ApprovalStatus, PermissionMode, ServerEvent, ToolCategory, ToolResultStatus,
};

#[test]
fn mode_by_category_matrix() {
    use GateDecision::{Ask, Block, Run};
    use PermissionMode::{Auto, Default, Plan};
    use ToolCategory::{Execute, External, Read, Write};
    // (mode, category, allowed for this chat, hitl) → decision
    let table = [
        (Plan, Read, false, false, Run),
        (Plan, Write, false, false, Block),
        (Plan, Execute, false, false, Block),
        (Plan, External, false, false, Block),
        (Plan, Write, true, false, Block),
        (Plan, Read, false, true, Ask),
        (Plan, Write, false, true, Block),
        (Default, Read, false, false, Run),
        (Default, Write, false, false, Ask),
        (Default, Execute, false, false, Ask),
        (Default, External, false, false, Ask),
        (Default, Write, true, false, Run),
        (Default, Execute, true, false, Run),
        (Default, Write, true, true, Ask),
        (Default, Read, false, true, Ask),
        (Auto, Read, false, false, Run),
        (Auto, Write, false, false, Run),
        (Auto, Execute, false, false, Run),
        (Auto, External, false, false, Run),
        (Auto, Write, false, true, Ask),
    ];
    for (mode, category, allowed, hitl, expected) in table {
        assert_eq!(
            decide(mode, category, allowed, hitl),
            expected,
            "{mode:?} {category:?} allowed={allowed} hitl={hitl}"
        );
    }
}

fn write_script() -> serde_json::Value {
    json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"id": "w1", "name": "write", "arguments": {"path": "a.md"}}]},
        {"tool_calls": [{"id": "w2", "name": "write", "arguments": {"path": "b.md"}}]},
        {"text": "done"}
    ]}]})
}

fn writer() -> TestTool {
    TestTool::new("write").category(ToolCategory::Write)
}

/// Run the turn, answering each approval request with the next decision.
async fn run_answering(
    h: &Harness,
    decisions: Vec<ApprovalDecision>,
) -> (weft_core::TurnOutcome, Vec<ServerEvent>) {
    let (sink, mut rx) = EventSink::channel();
    let turn = tokio::spawn(weft_core::run_classic_turn(h.spec(sink)));
    let gate = h.gate.clone();
    let mut decisions = decisions.into_iter();
    let mut events = Vec::new();
    while let Some(event) = rx.recv().await {
        if let ServerEvent::ToolApprovalRequest { tool_call_id, .. } = &event {
            let decision = decisions.next().expect("an unexpected approval request");
            assert!(gate.respond(tool_call_id, decision));
        }
        events.push(event);
    }
    (turn.await.unwrap(), events)
}

fn approvals(events: &[ServerEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::ToolApprovalRequest {
                tool_call_id,
                category,
                ..
            } => Some(format!("ask {} {category:?}", support::hint(tool_call_id))),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn default_mode_asks_and_allow_runs_the_call() {
    let tool = writer();
    let probe = tool.probe();
    let h = Harness::new(write_script())
        .tool(tool)
        .mode(PermissionMode::Default);
    let (outcome, events) =
        run_answering(&h, vec![ApprovalDecision::Allow, ApprovalDecision::Allow]).await;
    assert_eq!(approvals(&events), vec!["ask w1 Write", "ask w2 Write"]);
    assert_eq!(probe.count(), 2);
    let meta = support::metadata_of(&events, "w1");
    assert_eq!(
        (
            meta.status,
            meta.approval_status,
            meta.approval_id.as_deref().map(support::hint)
        ),
        (
            ToolResultStatus::Success,
            ApprovalStatus::Approved,
            Some("w1")
        )
    );
    assert_eq!(
        meta.approval_id,
        Some(support::wire_id(&events, "w1")),
        "the approval is keyed by the server-unique id"
    );
    assert_eq!(outcome.end, TurnEnd::Completed);
}

#[tokio::test]
async fn allow_for_this_chat_stops_asking_for_that_tool() {
    let tool = writer();
    let probe = tool.probe();
    let h = Harness::new(write_script())
        .tool(tool)
        .mode(PermissionMode::Default);
    let (_, events) = run_answering(&h, vec![ApprovalDecision::AllowForChat]).await;
    assert_eq!(approvals(&events), vec!["ask w1 Write"]);
    assert_eq!(probe.count(), 2);
    assert!(h.gate.is_allowed_for_chat("write"));
    assert!(!h.gate.is_allowed_for_chat("other"));
}

#[tokio::test]
async fn deny_returns_an_error_result_the_model_can_act_on() {
    let tool = writer();
    let probe = tool.probe();
    let h = Harness::new(write_script())
        .tool(tool)
        .mode(PermissionMode::Default);
    let (outcome, events) =
        run_answering(&h, vec![ApprovalDecision::Deny, ApprovalDecision::Allow]).await;
    let (text, is_error) = result_of(&events, "w1");
    assert!(is_error && text.starts_with("denied:"), "{text}");
    let meta = support::metadata_of(&events, "w1");
    assert_eq!(
        (meta.status, meta.approval_status),
        (ToolResultStatus::Rejected, ApprovalStatus::Rejected)
    );
    assert_eq!(probe.count(), 1, "only the allowed call ran");
    assert_eq!(outcome.end, TurnEnd::Completed);
}

#[tokio::test]
async fn plan_mode_never_executes_a_non_read_tool() {
    let tool = writer();
    let probe = tool.probe();
    let h = Harness::new(write_script())
        .tool(tool)
        .mode(PermissionMode::Plan);
    let (_, events) = h.run().await;
    assert_eq!(probe.count(), 0);
    assert!(approvals(&events).is_empty());
    let (text, is_error) = result_of(&events, "w1");
    assert!(
        is_error && text.contains("unavailable in plan mode"),
        "{text}"
    );
}

#[tokio::test]
async fn auto_mode_runs_without_asking_except_hitl_tools() {
    let tool = writer();
    let probe = tool.probe();
    let h = Harness::new(write_script())
        .tool(tool)
        .mode(PermissionMode::Auto);
    let (_, events) = h.run().await;
    assert!(approvals(&events).is_empty());
    assert_eq!(probe.count(), 2);

    let h = Harness::new(write_script())
        .tool(writer())
        .mode(PermissionMode::Auto)
        .config(|c| c.hitl_tools = vec!["write".into()]);
    let (_, events) =
        run_answering(&h, vec![ApprovalDecision::Allow, ApprovalDecision::Deny]).await;
    assert_eq!(approvals(&events), vec!["ask w1 Write", "ask w2 Write"]);
}

#[tokio::test]
async fn subtasks_inherit_the_gate() {
    let tool = writer();
    let probe = tool.probe();
    let h = Harness::new(json!({"conversations": [
        {"match": "root", "steps": [
            {"tool_calls": [{"id": "s", "name": "run_subtask", "arguments": {"title": "t", "instructions": "child writes"}}]},
            {"text": "done"}]},
        {"match": "child", "steps": [
            {"tool_calls": [{"id": "cw", "name": "write", "arguments": {}}]}, {"text": "child done"}]}
    ]}))
    .user("root")
    .tool(tool)
    .mode(PermissionMode::Plan);
    let (_, events) = h.run().await;
    assert_eq!(probe.count(), 0);
    assert!(result_of(&events, "cw").0.contains("plan mode"));
}

#[tokio::test]
async fn a_dropped_approval_reads_as_deny() {
    let tool = writer();
    let probe = tool.probe();
    let h = Harness::new(write_script())
        .tool(tool)
        .mode(PermissionMode::Default);
    let (sink, mut rx) = EventSink::channel();
    let turn = tokio::spawn(weft_core::run_classic_turn(h.spec(sink)));
    let mut asked = 0;
    while let Some(event) = rx.recv().await {
        if let ServerEvent::ToolApprovalRequest { .. } = event {
            asked += 1;
            h.gate.clear_pending();
        }
    }
    let outcome = turn.await.unwrap();
    assert_eq!(asked, 2);
    assert_eq!(probe.count(), 0);
    assert_eq!(outcome.end, TurnEnd::Completed);
}

#[tokio::test]
async fn switching_to_auto_releases_pending_approvals_as_allowed() {
    let tool = writer();
    let probe = tool.probe();
    let h = Harness::new(write_script())
        .tool(tool)
        .mode(PermissionMode::Default);
    let (sink, mut rx) = EventSink::channel();
    let turn = tokio::spawn(weft_core::run_classic_turn(h.spec(sink)));
    while let Some(event) = rx.recv().await {
        if let ServerEvent::ToolApprovalRequest { .. } = event {
            h.gate.set_mode(PermissionMode::Auto);
        }
    }
    turn.await.unwrap();
    assert_eq!(
        probe.count(),
        2,
        "the pending call was released and the next one did not ask"
    );
}

#[tokio::test]
async fn an_unanswered_approval_times_out() {
    let tool = writer();
    let probe = tool.probe();
    let h = Harness::new(write_script())
        .tool(tool)
        .mode(PermissionMode::Default)
        .config(|c| c.approval_timeout_ms = Some(30));
    let (_, events) = tokio::time::timeout(Duration::from_secs(5), h.run())
        .await
        .unwrap();
    let meta = support::metadata_of(&events, "w1");
    assert_eq!(
        (meta.status, meta.approval_status),
        (ToolResultStatus::TimedOut, ApprovalStatus::TimedOut)
    );
    assert_eq!(probe.count(), 0);
    assert!(h.gate.pending().is_empty());
}

#[tokio::test]
async fn answering_an_unknown_approval_id_is_refused() {
    let gate = weft_core::PermissionGate::new(PermissionMode::Default);
    assert!(!gate.respond("nope", ApprovalDecision::Allow));
}

#[tokio::test]
async fn conflicting_claims_run_in_the_order_the_model_emitted_them() {
    // The first (a write) asks before it may run; the second (a read of the same resource)
    // would run at once. Their claims conflict, so the read waits for the write, the
    // approval wait included.
    let write = TestTool::new("locked_write")
        .category(ToolCategory::Write)
        .claim(weft_core::Claim::write("workspace_fs"));
    let probe = write.probe();
    let mut read = TestTool::new("locked_read").claim(weft_core::Claim::read("workspace_fs"));
    read.probe = probe.clone();
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [
            {"id": "w", "name": "locked_write", "arguments": {"i": 0}},
            {"id": "r", "name": "locked_read", "arguments": {"i": 1}}
        ]},
        {"text": "ok"}
    ]}]}))
    .tool(write)
    .tool(read)
    .mode(PermissionMode::Default);
    let (outcome, _) = run_answering(&h, vec![ApprovalDecision::Allow]).await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(*probe.calls.lock(), vec![json!({"i": 0}), json!({"i": 1})]);
}
