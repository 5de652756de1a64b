//! The Anthropic adapter against a local mock server replaying Messages-API SSE streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_core::{
    ChatMessage, FinishReason, Provider, ProviderError, ProviderEvent, ProviderRequest,
    ToolCallRequest, ToolSpec, Usage,
};
use weft_protocol::{ContentPart, MessageContent};
use weft_providers::{AnthropicProvider, HttpOptions};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn options() -> HttpOptions {
    HttpOptions {
        max_retries: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        ..HttpOptions::default()
    }
}

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

fn start(input: u64) -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
           "model": "claude-sonnet-4-0", "stop_reason": null, "usage": {"input_tokens": input, "output_tokens": 1}}})
}

fn stop(reason: &str, output: u64) -> Vec<Value> {
    vec![
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": output}}),
        json!({"type": "message_stop"}),
    ]
}

fn respond(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

fn request(messages: Vec<ChatMessage>) -> ProviderRequest {
    ProviderRequest {
        response_schema: None,
        model: "claude-sonnet-4-0".into(),
        system: "be brief".into(),
        messages: Arc::new(messages),
        tools: Arc::from(vec![ToolSpec {
            name: "get_weather".into(),
            description: "Weather for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }]),
        max_tokens: None,
        temperature: None,
        single_tool_call: false,
    }
}

fn provider(server: &MockServer) -> AnthropicProvider {
    AnthropicProvider::new(Some(&server.uri()), Some("sk-ant"), options()).unwrap()
}

async fn collect(
    p: &AnthropicProvider,
    req: ProviderRequest,
) -> Result<Vec<Result<ProviderEvent, ProviderError>>, ProviderError> {
    Ok(p.stream(req, CancellationToken::new())
        .await?
        .collect()
        .await)
}

#[tokio::test]
async fn text_thinking_and_usage() {
    let server = MockServer::start().await;
    let mut events = vec![
        start(25),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hel"}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "lo"}}),
        json!({"type": "content_block_stop", "index": 1}),
    ];
    events.extend(stop("end_turn", 7));
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "sk-ant"))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(respond(sse(&events)))
        .expect(1)
        .mount(&server)
        .await;
    let got: Vec<_> = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        got,
        vec![
            ProviderEvent::ReasoningDelta("hmm".into()),
            ProviderEvent::TextDelta("Hel".into()),
            ProviderEvent::TextDelta("lo".into()),
            ProviderEvent::Usage(Usage {
                input_tokens: 25,
                output_tokens: 7
            }),
            ProviderEvent::Finish(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn parallel_tool_use_blocks_are_assembled_from_json_deltas() {
    let server = MockServer::start().await;
    let mut events = vec![
        start(10),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Checking."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Pa"}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "ris\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Oslo\"}"}}),
        json!({"type": "content_block_stop", "index": 2}),
    ];
    events.extend(stop("tool_use", 40));
    Mock::given(method("POST"))
        .respond_with(respond(sse(&events)))
        .mount(&server)
        .await;
    let got: Vec<_> = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        got,
        vec![
            ProviderEvent::TextDelta("Checking.".into()),
            ProviderEvent::ToolCall(ToolCallRequest {
                id: "toolu_a".into(),
                name: "get_weather".into(),
                arguments: "{\"city\": \"Paris\"}".into()
            }),
            ProviderEvent::ToolCall(ToolCallRequest {
                id: "toolu_b".into(),
                name: "get_weather".into(),
                arguments: "{\"city\": \"Oslo\"}".into()
            }),
            ProviderEvent::Usage(Usage {
                input_tokens: 10,
                output_tokens: 40
            }),
            ProviderEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn overloaded_is_retried_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(529).set_body_string("{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"))
        .up_to_n_times(2)
        .with_priority(1)
        .expect(2)
        .mount(&server)
        .await;
    let mut ok = vec![start(1)];
    ok.extend(stop("end_turn", 1));
    Mock::given(method("POST"))
        .respond_with(respond(sse(&ok)))
        .with_priority(2)
        .expect(1)
        .mount(&server)
        .await;
    let got = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap();
    assert_eq!(
        got.last().unwrap(),
        &Ok(ProviderEvent::Finish(FinishReason::Stop))
    );
}

#[tokio::test]
async fn an_error_event_or_a_cut_stream_fails_after_partial_text() {
    let server = MockServer::start().await;
    let events = vec![
        start(1),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "part"}}),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ];
    Mock::given(method("POST"))
        .respond_with(respond(sse(&events)))
        .mount(&server)
        .await;
    let got = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap();
    assert_eq!(got[0], Ok(ProviderEvent::TextDelta("part".into())));
    assert!(matches!(&got[1], Err(ProviderError::Other(m)) if m.contains("overloaded_error")));

    let cut = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(respond(sse(&events[..3])))
        .mount(&cut)
        .await;
    let got = collect(&provider(&cut), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap();
    assert!(matches!(
        got.last().unwrap(),
        Err(ProviderError::Protocol(_))
    ));
}

#[tokio::test]
async fn unauthorized_fails_at_once() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401))
        .expect(1)
        .mount(&server)
        .await;
    assert!(matches!(
        collect(&provider(&server), request(vec![ChatMessage::user("hi")])).await,
        Err(ProviderError::Http { status: 401, .. })
    ));
}

#[tokio::test]
async fn the_request_body_maps_results_images_and_system() {
    let server = MockServer::start().await;
    let mut ok = vec![start(1)];
    ok.extend(stop("end_turn", 1));
    Mock::given(method("POST"))
        .respond_with(respond(sse(&ok)))
        .mount(&server)
        .await;
    let history = vec![
        ChatMessage::user(MessageContent::Parts(vec![
            ContentPart::Text {
                text: "look".into(),
            },
            ContentPart::ImageUrl {
                image_url: "data:image/png;base64,AAAA".into(),
            },
            ContentPart::ImageUrl {
                image_url: "https://example.com/cat.png".into(),
            },
        ])),
        ChatMessage::assistant(
            "On it.",
            vec![
                ToolCallRequest {
                    id: "t1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                },
                ToolCallRequest {
                    id: "t2".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Oslo\"}".into(),
                },
                ToolCallRequest {
                    id: "orphan".into(),
                    name: "get_weather".into(),
                    arguments: "{}".into(),
                },
            ],
        ),
        ChatMessage::tool_result("t1", "sunny", false),
        ChatMessage::tool_result("t2", "no such city", true),
        ChatMessage::user("and now?"),
    ];
    collect(&provider(&server), request(history)).await.unwrap();
    let body: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "claude-sonnet-4-0",
            "max_tokens": 4096,
            "stream": true,
            "system": "be brief",
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "On it."},
                    {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "sunny", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "no such city", "is_error": true},
                    {"type": "text", "text": "and now?"}]}
            ],
            "tools": [{"name": "get_weather", "description": "Weather for a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
        })
    );
}

#[test]
fn the_per_response_token_cap_replaces_the_default() {
    let mut req = request(vec![ChatMessage::user("hi")]);
    assert_eq!(
        weft_providers::anthropic::request_body(&req)["max_tokens"],
        4096
    );
    req.temperature = Some(0.7);
    assert_eq!(
        weft_providers::anthropic::request_body(&req)["temperature"],
        0.7
    );
    req.max_tokens = Some(300);
    assert_eq!(
        weft_providers::anthropic::request_body(&req)["max_tokens"],
        300
    );
}

#[test]
fn a_model_without_parallel_tool_calls_is_asked_for_one_at_a_time() {
    let mut req = request(vec![ChatMessage::user("weather?")]);
    assert!(weft_providers::anthropic::request_body(&req)
        .get("tool_choice")
        .is_none());
    req.single_tool_call = true;
    assert_eq!(
        weft_providers::anthropic::request_body(&req)["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
}
