//! Seed 004's runtime contract in the engine: the planner pre-pass, budget awareness
//! (advisories and compaction), parallel sub-agents, offloaded results, progress reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use support::tools::{Behaviour, TestTool};
use support::{lines, metadata_of, result_of, Harness, RecordLines};
use weft_core::{prompts, Artifacts, ChatMessage, PlannerSpec, Provider, Role, TurnEnd};
use weft_protocol::{BudgetReason, ServerEvent, ToolCategory};

fn planner(harness: &Harness, instructions: &str) -> PlannerSpec {
    PlannerSpec {
        provider: harness.provider.clone() as Arc<dyn Provider>,
        model: "planner-model".into(),
        instructions: instructions.into(),
    }
}

#[tokio::test]
async fn the_planner_runs_first_and_only_its_plan_reaches_the_executor() {
    let recorder = Arc::new(RecordLines::default());
    let mut harness = Harness::new(json!({"conversations": [
        {"match": prompts::PLANNER_REQUEST, "steps": [
            {"tool_calls": [
                {"id": "look", "name": "lookup", "arguments": {"q": "notes"}},
                {"id": "w", "name": "save", "arguments": {}}]},
            {"text": "1. read the notes\n2. answer"}]},
        {"match": "*", "steps": [{"text": "Here is the answer."}]}
    ]}))
    .tool(TestTool::new("lookup").behaviour(Behaviour::Text("planner-only secret".into())))
    .tool(TestTool::new("save").category(ToolCategory::Write))
    .user("summarize my notes");
    harness.recorder = recorder.clone();
    harness.planner = Some(planner(&harness, ""));

    let (outcome, events) = harness.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(
        outcome.plan.as_deref(),
        Some("1. read the notes\n2. answer")
    );
    assert_eq!(outcome.text, "Here is the answer.");

    let requests = harness.provider.requests.lock().clone();
    assert_eq!(requests.len(), 3, "two planner calls, one executor call");
    // The planner: its own model and prompt, read tools only.
    assert_eq!(requests[0].model, "planner-model");
    assert_eq!(&*requests[0].system, prompts::PLANNER_PROMPT);
    let planner_tools: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(planner_tools, vec!["lookup"]);
    // The executor: the plan in its system prompt, none of the planner's messages.
    let executor = &requests[2];
    assert_eq!(executor.model, "test-model");
    assert!(executor.system.contains("1. read the notes\n2. answer"));
    assert_eq!(executor.messages.len(), 1);
    assert_eq!(executor.messages[0].text(), "summarize my notes");
    assert!(!format!("{:?}", executor.messages).contains("planner-only secret"));

    // Events: the planning updates, nothing else of the planner's.
    let planning: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::PlanningUpdate {
                status, content, ..
            } => Some((status.clone(), content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        planning,
        vec![
            ("started".to_owned(), String::new()),
            ("done".to_owned(), "1. read the notes\n2. answer".to_owned())
        ]
    );
    assert!(!lines(&events).iter().any(|l| l.contains("lookup")));
    assert!(outcome.tree.nodes.is_empty());
    // The record holds the executor's answer only.
    assert_eq!(
        recorder.0.lock().clone(),
        vec!["d0 assistant \"Here is the answer.\" ".to_owned()]
    );
    // The planner's calls count against the turn's budget.
    assert_eq!(outcome.totals.llm_calls, 3);
    assert_eq!(outcome.totals.tool_calls, 2);
}

#[tokio::test]
async fn planning_instructions_replace_the_built_in_prompt_and_a_failed_plan_is_reported() {
    let mut harness = Harness::new(json!({"conversations": [
        {"match": prompts::PLANNER_REQUEST, "steps": [
            {"error": {"kind": "http_status", "status": 500}}]},
        {"match": "*", "steps": [{"text": "answered without a plan"}]}
    ]}));
    harness.planner = Some(planner(&harness, "Return a short numbered execution plan."));
    let (outcome, events) = harness.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(outcome.plan, None);
    let requests = harness.provider.requests.lock().clone();
    assert_eq!(
        &*requests[0].system,
        "Return a short numbered execution plan."
    );
    assert!(!requests[1].system.contains("planning phase"));
    assert!(events.iter().any(|e| matches!(
        e,
        ServerEvent::PlanningUpdate { status, .. } if status == "failed"
    )));
}

#[tokio::test]
async fn per_message_awareness_tells_the_model_its_budget_on_every_result_and_message() {
    let harness = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"text": "Looking.", "tool_calls": [{"id": "a", "name": "lookup", "arguments": {}}]},
        {"text": "Done."}]}]}))
    .tool(TestTool::new("lookup").behaviour(Behaviour::Text("found it".into())))
    .config(|c| {
        c.budget_awareness = Some("per-message".into());
        c.max_total_llm_calls = 10;
        c.max_total_tool_calls = 5;
    });
    let (outcome, events) = harness.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    let requests = harness.provider.requests.lock().clone();
    let second = &requests[1].messages;
    let assistant = second[1].text();
    let result = second[2].text();
    assert!(
        assistant.starts_with("Looking.\n\n[budget: context "),
        "{assistant}"
    );
    assert!(
        result.starts_with("found it\n\n[budget: context "),
        "{result}"
    );
    for text in [&assistant, &result] {
        assert!(text.contains("of 128000 tokens"), "{text}");
        assert!(text.contains("spent]"), "{text}");
    }
    // Each tells the budget as it stood when it was surfaced.
    assert!(
        assistant.contains("9 model calls and 5 tool calls left"),
        "{assistant}"
    );
    assert!(
        result.contains("9 model calls and 4 tool calls left"),
        "{result}"
    );
    // What the user sees and what is recorded stay clean.
    assert_eq!(result_of(&events, "a").0, "found it");
}

#[tokio::test]
async fn without_awareness_nothing_is_added() {
    let harness = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"id": "a", "name": "lookup", "arguments": {}}]},
        {"text": "Done."}]}]}))
    .tool(TestTool::new("lookup").behaviour(Behaviour::Text("found it".into())));
    harness.run().await;
    let requests = harness.provider.requests.lock().clone();
    assert_eq!(requests[1].messages[2].text(), "found it");
}

/// Earlier turns of about `tokens` each (estimated), alternating user and assistant.
fn long_history(turns: usize) -> Vec<ChatMessage> {
    (0..turns)
        .flat_map(|i| {
            let words = format!("turn {i} ") + &"word ".repeat(60);
            [
                ChatMessage::user(format!("question {i}: {words}")),
                ChatMessage::assistant(format!("answer {i}: {words}"), Vec::new()),
            ]
        })
        .collect()
}

#[tokio::test]
async fn over_the_limit_the_oldest_rounds_are_compacted_into_a_summary() {
    let recorder = Arc::new(RecordLines::default());
    let mut harness = Harness::new(json!({"conversations": [
        {"match": prompts::COMPACT_REQUEST, "steps": [{"text": "The user asked ten questions about words."}]},
        {"match": "*", "steps": [{"text": "Fresh answer.", "repeat": true}]}
    ]}))
    .config(|c| c.budget_awareness = Some("limit:50".into()))
    .user("one more question");
    harness.context_window = 2_000;
    harness.earlier = long_history(10);
    harness.recorder = recorder.clone();

    let (outcome, _) = harness.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(outcome.text, "Fresh answer.");
    let requests = harness.provider.requests.lock().clone();
    assert_eq!(requests.len(), 2);
    // The summarizer saw the oldest messages as a transcript.
    assert_eq!(&*requests[0].system, prompts::COMPACT_PROMPT);
    assert!(requests[0].messages[0]
        .text()
        .contains("User: question 0: turn 0"));
    assert!(requests[0].tools.is_empty());
    // The executor saw the summary in their place, then the newest messages.
    let messages = &requests[1].messages;
    assert_eq!(messages[0].role, Role::User);
    assert_eq!(
        messages[0].text(),
        prompts::summary_message("The user asked ten questions about words.")
    );
    assert!(messages.len() < 21, "{} messages", messages.len());
    assert_eq!(messages.last().unwrap().text(), "one more question");
    assert!(!messages.iter().any(|m| m.text().starts_with("question 0:")));
    // The compaction is recorded, with how many messages it kept.
    let kept = messages.len() - 1;
    assert_eq!(
        recorder.0.lock()[0],
        format!("d0 summary \"The user asked ten questions about words.\" kept {kept}")
    );
    // The history the turn hands back is the compacted one.
    assert_eq!(outcome.history[0].text(), messages[0].text());
}

#[tokio::test]
async fn when_compaction_cannot_fit_the_turn_stops_with_a_deterministic_answer() {
    let harness =
        Harness::new(json!({"conversations": [{"match": "*", "steps": [{"text": "never"}]}]}))
            .config(|c| c.budget_awareness = Some("limit:50".into()))
            .user(&"huge request ".repeat(400));
    let mut harness = harness;
    harness.context_window = 1_000;
    let (outcome, events) = harness.run().await;
    let TurnEnd::BudgetExceeded(trip) = &outcome.end else {
        panic!("{:?}", outcome.end)
    };
    assert_eq!(trip.reason, BudgetReason::Context);
    assert_eq!(trip.limit, 500.0);
    assert!(
        harness.provider.requests.lock().is_empty(),
        "no provider call"
    );
    let expected = prompts::context_limit_reached(500, trip.observed as u64, 1_000);
    assert_eq!(outcome.text, expected);
    assert!(lines(&events).contains(&format!("chunk d0 {expected:?}")));
    assert!(lines(&events)
        .iter()
        .any(|l| l.starts_with("budget context") && l.ends_with("/500 END")));
}

fn parallel_harness(script: Value, max: u32) -> Harness {
    Harness::new(script)
        .tool(weft_core::RunParallelSubagentsTool)
        .tool(TestTool::new("lookup").behaviour(Behaviour::Text("looked".into())))
        .config(|c| {
            c.allow_parallel_subagents = true;
            c.max_parallel_subagents = max;
            c.max_schema_retries = 0;
        })
}

#[tokio::test]
async fn parallel_jobs_give_one_structured_entry_each_with_a_schema_failure_among_them() {
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let harness = parallel_harness(
        json!({"conversations": [
            {"match": "job alpha", "steps": [
                {"tool_calls": [{"id": "l", "name": "lookup", "arguments": {}}]},
                {"text": "alpha done"}]},
            {"match": "job beta", "steps": [
                {"tool_calls": [{"id": "f", "name": "finish_subtask", "arguments": {"m": 1}}]}]},
            {"match": "job gamma", "steps": [
                {"tool_calls": [{"id": "g", "name": "finish_subtask", "arguments": {"n": 3}}]}]},
            {"match": "*", "steps": [
                {"tool_calls": [{"id": "par", "name": "run_parallel_subagents", "arguments": {"jobs": [
                    {"task": "job alpha", "tool_names": ["lookup"], "system_prompt": "You are terse."},
                    {"task": "job beta", "output_schema": schema},
                    {"task": "job gamma", "additional_context": "n is three", "output_schema": schema}]}}]},
                {"text": "combined"}]}
        ]}),
        4,
    );
    let (outcome, events) = harness.run().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    let (result, is_error) = result_of(&events, "par");
    assert!(!is_error);
    let result: Value = serde_json::from_str(&result).unwrap();
    let entries = result["results"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(
        entries[0],
        json!({"job": 0, "status": "success", "output": "alpha done"})
    );
    assert_eq!(entries[1]["job"], 1);
    assert_eq!(entries[1]["status"], "error");
    assert!(entries[1]["error"]
        .as_str()
        .unwrap()
        .contains("schema_not_satisfied"));
    assert_eq!(
        entries[2],
        json!({"job": 2, "status": "success", "output": {"n": 3}})
    );

    // Each job ran at depth 1 under the call, with its own framing and tools.
    let par = support::wire_id(&events, "par");
    assert!(lines(&events)
        .iter()
        .any(|l| l == "start d1 <par> lookup#l"));
    let requests = harness.provider.requests.lock().clone();
    let alpha = requests
        .iter()
        .find(|r| r.messages[0].text() == "job alpha")
        .unwrap();
    assert!(alpha.system.ends_with("You are terse."));
    let names: Vec<&str> = alpha.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["lookup"]);
    let gamma = requests
        .iter()
        .find(|r| r.messages[0].text().starts_with("job gamma"))
        .unwrap();
    assert_eq!(
        gamma.messages[0].text(),
        "job gamma\n\nContext:\nn is three"
    );
    assert!(gamma.tools.iter().any(|t| t.name == "finish_subtask"));
    // Children never fan out again.
    assert!(!gamma
        .tools
        .iter()
        .any(|t| t.name == "run_parallel_subagents"));
    assert_eq!(outcome.totals.subtasks, 3);
    assert!(outcome
        .tree
        .nodes
        .iter()
        .any(|n| n.parent_id.as_deref() == Some(par.as_str())));
}

#[tokio::test]
async fn more_jobs_than_allowed_is_an_error_result_and_nothing_runs() {
    let jobs: Vec<Value> = (0..8)
        .map(|i| json!({"task": format!("job {i}")}))
        .collect();
    let harness = parallel_harness(
        json!({"conversations": [
            {"match": "job", "steps": [{"text": "ran"}]},
            {"match": "*", "steps": [
                {"tool_calls": [{"id": "par", "name": "run_parallel_subagents", "arguments": {"jobs": jobs}}]},
                {"text": "ok"}]}
        ]}),
        7,
    );
    let (outcome, events) = harness.run().await;
    let (result, is_error) = result_of(&events, "par");
    assert!(is_error);
    assert_eq!(result, prompts::too_many_jobs(8, 7));
    assert_eq!(outcome.totals.subtasks, 0);
    assert_eq!(harness.provider.requests.lock().len(), 2);
}

#[tokio::test]
async fn a_job_asking_for_tools_its_parent_lacks_fails_alone() {
    let harness = parallel_harness(
        json!({"conversations": [
            {"match": "good job", "steps": [{"text": "fine"}]},
            {"match": "*", "steps": [
                {"tool_calls": [{"id": "par", "name": "run_parallel_subagents", "arguments": {"jobs": [
                    {"task": "good job"},
                    {"task": "greedy job", "tool_names": ["lookup", "rm_rf"]}]}}]},
                {"text": "ok"}]}
        ]}),
        3,
    );
    let (_, events) = harness.run().await;
    let result: Value = serde_json::from_str(&result_of(&events, "par").0).unwrap();
    assert_eq!(result["results"][0]["status"], "success");
    assert_eq!(result["results"][1]["status"], "error");
    assert!(result["results"][1]["error"]
        .as_str()
        .unwrap()
        .contains("rm_rf"));
}

/// Artifacts kept in memory.
#[derive(Default)]
struct MemoryArtifacts(Mutex<HashMap<String, (String, String)>>);

#[async_trait]
impl Artifacts for MemoryArtifacts {
    async fn offload(&self, user: &str, _call: &str, content: &str) -> Result<String, String> {
        let mut kept = self.0.lock();
        let id = format!("artifact_{}", kept.len());
        kept.insert(id.clone(), (user.to_owned(), content.to_owned()));
        Ok(id)
    }
}

#[tokio::test]
async fn a_result_over_the_cap_is_kept_whole_and_the_model_is_told_where() {
    let big = "x".repeat(200_000);
    let artifacts = Arc::new(MemoryArtifacts::default());
    let mut harness = Harness::new(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"id": "big", "name": "dump", "arguments": {}}]},
        {"text": "ok"}]}]}))
    .tool(TestTool::new("dump").behaviour(Behaviour::Text(big.clone())))
    .config(|c| c.tool_result_max_bytes = 1_000);
    harness.artifacts = Some(artifacts.clone());
    let (_, events) = harness.run().await;
    let metadata = metadata_of(&events, "big");
    assert_eq!(
        metadata.offloaded_artifact_id.as_deref(),
        Some("artifact_0")
    );
    let (result, _) = result_of(&events, "big");
    assert!(result.len() <= 1_000);
    assert!(result.ends_with(&prompts::offloaded_marker(200_000, "artifact_0")));
    assert_eq!(artifacts.0.lock()["artifact_0"], ("tester".to_owned(), big));
}

#[tokio::test]
async fn progress_reaches_the_client_only_when_the_agent_emits_it() {
    for emit in [true, false] {
        let harness = Harness::new(json!({"conversations": [{"match": "*", "steps": [
            {"tool_calls": [{"id": "p", "name": "index", "arguments": {}}]},
            {"text": "ok"}]}]}))
        .tool(TestTool::new("index").behaviour(Behaviour::Progress(3)))
        .config(|c| c.emit_mcp_progress = emit);
        let (_, events) = harness.run().await;
        let progress: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                ServerEvent::McpProgress {
                    progress,
                    total,
                    message,
                    depth,
                    ..
                } => Some(format!(
                    "{}/{} {} d{depth}",
                    progress.0,
                    total.unwrap().0,
                    message.clone().unwrap()
                )),
                _ => None,
            })
            .collect();
        if emit {
            assert_eq!(
                progress,
                vec!["1/3 step 1 d0", "2/3 step 2 d0", "3/3 step 3 d0"]
            );
        } else {
            assert!(progress.is_empty());
        }
        // The tool ran either way.
        assert_eq!(result_of(&events, "p").0, "done");
    }
}
