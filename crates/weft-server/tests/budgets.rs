//! Each budget through the real server: a `budget_exceeded` frame, then the turn ends with
//! what it produced persisted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::{of_type, thread_of, TestServer};
use weft_server::Config;

fn looping() -> serde_json::Value {
    let steps: Vec<_> = (0..30)
        .map(|i| json!({"chunks": [format!("s{i} ")], "tool_calls": [{"name": "memory_write", "arguments": {"key": format!("k{i}"), "value": "v".repeat(300)}}], "usage": {"input_tokens": 100, "output_tokens": 10}}))
        .collect();
    json!({"conversations": [{"match": "*", "steps": steps}]})
}

type Configure = Box<dyn Fn(&mut Config)>;

#[tokio::test]
async fn each_budget_trips_and_the_turn_is_persisted() {
    let cases: Vec<(&str, Configure)> = vec![
        ("llm_calls", Box::new(|c| c.agent.max_total_llm_calls = 3)),
        ("tool_calls", Box::new(|c| c.agent.max_total_tool_calls = 2)),
        (
            "iterations",
            Box::new(|c| c.agent.max_iterations_per_level = 2),
        ),
        ("tokens", Box::new(|c| c.agent.max_turn_tokens = Some(250))),
        ("bytes", Box::new(|c| c.agent.max_total_result_bytes = 20)),
        ("wall_clock", Box::new(|c| c.agent.max_wall_clock_ms = 1)),
        (
            "cost",
            Box::new(|c| {
                c.agent.max_cost_usd = Some(0.0001);
                c.provider.model = Some("gpt-4o".into());
            }),
        ),
    ];
    for (reason, configure) in cases {
        let server = TestServer::start_with(looping(), |c| configure(c)).await;
        let mut c = server.client().await;
        c.chat(None, "loop", json!({})).await;
        let frames = c.turn().await;
        let trips = of_type(&frames, "budget_exceeded");
        assert_eq!(trips.len(), 1, "{reason}: {frames:?}");
        assert_eq!(trips[0]["reason"], reason);
        assert_eq!(trips[0]["ends_turn"], true);
        let thread = thread_of(&frames);
        let stored = server.store().messages(&thread).await.unwrap();
        assert_eq!(stored[1].status, "budget_exceeded", "{reason}");
        assert_eq!(of_type(&frames, "message").len(), 1);
        server.stop().await;
    }
}

#[tokio::test]
async fn the_subtask_budget() {
    let server = TestServer::start_with(
        json!({"conversations": [
            {"match": "child", "steps": [{"text": "ok"}]},
            {"match": "*", "steps": [{"tool_calls": [
                {"name": "run_subtask", "arguments": {"title": "1", "instructions": "child 1"}},
                {"name": "run_subtask", "arguments": {"title": "2", "instructions": "child 2"}}]}, {"text": "never"}]}
        ]}),
        |c| c.agent.max_total_subtasks = 1,
    )
    .await;
    let mut c = server.client().await;
    c.chat(None, "spawn", json!({})).await;
    let frames = c.turn().await;
    assert_eq!(of_type(&frames, "budget_exceeded")[0]["reason"], "subtasks");
    server.stop().await;
}
