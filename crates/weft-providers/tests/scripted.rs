//! The scripted provider follows PROTOCOL.md: matching, steps, repeat, chunks, usage, faults.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use weft_core::{
    ChatMessage, Provider, ProviderError, ProviderEvent, ProviderRequest, ToolCallRequest, Usage,
};
use weft_providers::ScriptedProvider;

fn request(messages: Vec<ChatMessage>) -> ProviderRequest {
    ProviderRequest {
        response_schema: None,
        model: "m".into(),
        system: "s".into(),
        messages: Arc::new(messages),
        tools: Arc::from([]),
        max_tokens: None,
        temperature: None,
        single_tool_call: false,
    }
}

async fn events(
    p: &ScriptedProvider,
    messages: Vec<ChatMessage>,
) -> Result<Vec<ProviderEvent>, ProviderError> {
    let stream = p
        .stream(request(messages), CancellationToken::new())
        .await?;
    stream.collect::<Vec<_>>().await.into_iter().collect()
}

fn script() -> ScriptedProvider {
    ScriptedProvider::from_value(json!({"conversations": [
        {"match": "compare", "steps": [
            {"tool_calls": [{"name": "run_subtask", "arguments": {"title": "A"}}, {"id": "fixed", "name": "x", "arguments": {}}]},
            {"chunks": ["A and B ", "differ."], "usage": {"input_tokens": 50, "output_tokens": 5}}]},
        {"match": "loop", "steps": [{"text": "again", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok"}]}
    ]}))
    .unwrap()
}

#[tokio::test]
async fn the_first_matching_conversation_and_the_step_by_assistant_count() {
    let p = script();
    let first = events(&p, vec![ChatMessage::user("please compare them")])
        .await
        .unwrap();
    let calls: Vec<_> = first
        .iter()
        .filter_map(|e| match e {
            ProviderEvent::ToolCall(ToolCallRequest {
                id,
                name,
                arguments,
            }) => Some((id.clone(), name.clone(), arguments.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 2);
    assert!(
        calls[0].0.starts_with("call_"),
        "generated id {}",
        calls[0].0
    );
    assert_eq!(
        (calls[0].1.as_str(), &*calls[0].2),
        ("run_subtask", "{\"title\":\"A\"}")
    );
    assert_eq!(calls[1].0, "fixed");

    let second = events(
        &p,
        vec![
            ChatMessage::user("please compare them"),
            ChatMessage::assistant("", vec![]),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        second,
        vec![
            ProviderEvent::TextDelta("A and B ".into()),
            ProviderEvent::TextDelta("differ.".into()),
            ProviderEvent::Usage(Usage {
                input_tokens: 50,
                output_tokens: 5
            }),
            ProviderEvent::Finish(weft_core::FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn past_the_last_step_repeat_or_an_error_naming_the_conversation() {
    let p = script();
    let history = vec![
        ChatMessage::user("loop"),
        ChatMessage::assistant("again", vec![]),
        ChatMessage::assistant("again", vec![]),
    ];
    assert!(events(&p, history).await.is_ok());
    let history = vec![
        ChatMessage::user("hello"),
        ChatMessage::assistant("ok", vec![]),
    ];
    let err = events(&p, history).await.unwrap_err();
    assert!(err.to_string().contains("\"*\" has no step 1"), "{err}");
}

#[tokio::test]
async fn usage_is_estimated_when_the_script_gives_none() {
    let events = events(&script(), vec![ChatMessage::user("hello there")])
        .await
        .unwrap();
    let usage = events.iter().find_map(|e| match e {
        ProviderEvent::Usage(u) => Some(*u),
        _ => None,
    });
    assert!(
        matches!(usage, Some(Usage { input_tokens, output_tokens }) if input_tokens > 0 && output_tokens > 0)
    );
}

#[tokio::test]
async fn injected_faults() {
    let p = ScriptedProvider::from_value(json!({"conversations": [
        {"match": "500", "steps": [{"error": {"kind": "http_status", "status": 500}}]},
        {"match": "slow", "steps": [{"error": {"kind": "timeout"}}]},
        {"match": "cut", "steps": [{"chunks": ["part"], "error": {"kind": "http_status", "status": 502}}]},
        {"match": "bad", "steps": [{"tool_calls": [{"name": "x", "arguments": {"a": 1}}], "error": {"kind": "malformed_tool_args"}}]}
    ]}))
    .unwrap();
    assert!(matches!(
        events(&p, vec![ChatMessage::user("500")]).await,
        Err(ProviderError::Http { status: 500, .. })
    ));
    assert!(matches!(
        events(&p, vec![ChatMessage::user("slow")]).await,
        Err(ProviderError::Timeout(_))
    ));
    let cut: Vec<_> = p
        .stream(
            request(vec![ChatMessage::user("cut")]),
            CancellationToken::new(),
        )
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(cut[0], Ok(ProviderEvent::TextDelta("part".into())));
    assert!(matches!(
        cut[1],
        Err(ProviderError::Http { status: 502, .. })
    ));
    let bad = events(&p, vec![ChatMessage::user("bad")]).await.unwrap();
    let ProviderEvent::ToolCall(call) = &bad[0] else {
        panic!("a tool call")
    };
    assert!(serde_json::from_str::<serde_json::Value>(&call.arguments).is_err());
}

#[tokio::test]
async fn delay_is_cancellable() {
    let p = ScriptedProvider::from_value(
        json!({"conversations": [{"match": "*", "steps": [{"text": "late", "delay_ms": 60000}]}]}),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        c.cancel();
    });
    let started = std::time::Instant::now();
    assert!(p
        .stream(request(vec![ChatMessage::user("x")]), cancel)
        .await
        .is_err());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// A turn resumed in another process (issue 22) rebuilds its history from the record and
/// calls a fresh provider: the script goes on from the step that history has reached, so a
/// resumed turn continues its script rather than starting over.
#[tokio::test]
async fn a_fresh_provider_continues_the_script_from_a_resumed_history() {
    let steps = json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "a"}}]},
        {"tool_calls": [{"id": "w2", "name": "write_file", "arguments": {"path": "b"}}]},
        {"text": "both written"}]}]});
    let call = |id: &str, path: &str| ToolCallRequest {
        id: id.into(),
        name: "write_file".into(),
        arguments: json!({"path": path}).to_string().into(),
    };
    // Cut after the first round: its call and its result are on record.
    let resumed = vec![
        ChatMessage::user("write two files"),
        ChatMessage::assistant("", vec![call("w1", "a")]),
        ChatMessage::tool_result("w1", "written", false),
    ];
    let fresh = ScriptedProvider::from_value(steps.clone()).unwrap();
    let next = events(&fresh, resumed.clone()).await.unwrap();
    let called: Vec<&str> = next
        .iter()
        .filter_map(|e| match e {
            ProviderEvent::ToolCall(c) => Some(c.id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(called, vec!["w2"], "the second round, not the first again");
    // And after the second round, the answer.
    let mut done = resumed;
    done.push(ChatMessage::assistant("", vec![call("w2", "b")]));
    done.push(ChatMessage::tool_result("w2", "written", false));
    let last = events(&ScriptedProvider::from_value(steps).unwrap(), done)
        .await
        .unwrap();
    assert_eq!(last[0], ProviderEvent::TextDelta("both written".into()));
}
