//! The OpenAI-compatible adapter against a local mock server replaying documented SSE streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_core::{
    ChatMessage, FinishReason, Provider, ProviderError, ProviderEvent, ProviderRequest,
    ToolCallRequest, ToolSpec, Usage,
};
use weft_protocol::{ContentPart, MessageContent};
use weft_providers::{HttpOptions, OpenAiProvider};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn options() -> HttpOptions {
    HttpOptions {
        max_retries: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        read_timeout: Duration::from_secs(5),
        ..HttpOptions::default()
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn sse(chunks: &[Value], done: bool) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    body
}

fn usage_chunk(input: u64, output: u64) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
           "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})
}

fn stream_response(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

fn request(messages: Vec<ChatMessage>) -> ProviderRequest {
    ProviderRequest {
        response_schema: None,
        model: "gpt-4o-mini".into(),
        system: "be brief".into(),
        messages: Arc::new(messages),
        tools: Arc::from(vec![ToolSpec {
            name: "get_weather".into(),
            description: "Weather for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }]),
        max_tokens: None,
        temperature: None,
        single_tool_call: false,
    }
}

async fn collect(
    provider: &OpenAiProvider,
    req: ProviderRequest,
) -> Result<Vec<Result<ProviderEvent, ProviderError>>, ProviderError> {
    let stream = provider.stream(req, CancellationToken::new()).await?;
    Ok(stream.collect().await)
}

fn provider(server: &MockServer) -> OpenAiProvider {
    OpenAiProvider::new(Some(&server.uri()), Some("sk-test"), options()).unwrap()
}

#[tokio::test]
async fn plain_text_with_usage_at_the_end() {
    let server = MockServer::start().await;
    let body = sse(
        &[
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": "Hel"}), None),
            chunk(json!({"content": "lo"}), None),
            chunk(json!({}), Some("stop")),
            usage_chunk(9, 2),
        ],
        true,
    );
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .and(header("authorization", "Bearer sk-test"))
        .respond_with(stream_response(body))
        .expect(1)
        .mount(&server)
        .await;
    let events: Vec<_> = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        vec![
            ProviderEvent::TextDelta("Hel".into()),
            ProviderEvent::TextDelta("lo".into()),
            ProviderEvent::Usage(Usage {
                input_tokens: 9,
                output_tokens: 2
            }),
            ProviderEvent::Finish(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn interleaved_parallel_tool_calls_are_assembled_per_index() {
    let server = MockServer::start().await;
    let body = sse(
        &[
            chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": ""}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"tz\":\"UTC\"}"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
                None,
            ),
            chunk(json!({"reasoning_content": "thinking about tools"}), None),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk(20, 30),
        ],
        true,
    );
    Mock::given(method("POST"))
        .respond_with(stream_response(body))
        .mount(&server)
        .await;
    let events: Vec<_> = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        vec![
            ProviderEvent::ReasoningDelta("thinking about tools".into()),
            ProviderEvent::ToolCall(ToolCallRequest {
                id: "call_a".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into()
            }),
            ProviderEvent::ToolCall(ToolCallRequest {
                id: "call_b".into(),
                name: "get_time".into(),
                arguments: "{\"tz\":\"UTC\"}".into()
            }),
            ProviderEvent::Usage(Usage {
                input_tokens: 20,
                output_tokens: 30
            }),
            ProviderEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn a_429_is_retried_after_retry_after() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_string("{\"error\":\"slow down\"}"),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(stream_response(sse(
            &[
                chunk(json!({"content": "ok"}), None),
                chunk(json!({}), Some("stop")),
            ],
            true,
        )))
        .with_priority(2)
        .expect(1)
        .mount(&server)
        .await;
    let started = Instant::now();
    let events = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(events[0], Ok(ProviderEvent::TextDelta("ok".into())));
}

#[tokio::test]
async fn repeated_500s_fail_after_the_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_string("boom"))
        .expect(3)
        .mount(&server)
        .await;
    let err = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ProviderError::Http {
            status: 500,
            message: "boom".into()
        }
    );
}

#[tokio::test]
async fn unauthorized_fails_at_once() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_string("bad key"))
        .expect(1)
        .mount(&server)
        .await;
    let err = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Http { status: 401, .. }));

    let forbidden = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(403))
        .expect(1)
        .mount(&forbidden)
        .await;
    let err = collect(
        &provider(&forbidden),
        request(vec![ChatMessage::user("hi")]),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ProviderError::Http { status: 403, .. }));
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_an_error_after_the_partial_text() {
    let server = MockServer::start().await;
    let body = sse(
        &[
            chunk(json!({"content": "partial "}), None),
            chunk(json!({"content": "answ"}), None),
        ],
        false,
    );
    Mock::given(method("POST"))
        .respond_with(stream_response(body))
        .mount(&server)
        .await;
    let events = collect(&provider(&server), request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap();
    assert_eq!(events[0], Ok(ProviderEvent::TextDelta("partial ".into())));
    assert_eq!(events[1], Ok(ProviderEvent::TextDelta("answ".into())));
    assert!(matches!(events[2], Err(ProviderError::Protocol(_))));
}

#[tokio::test]
async fn a_silent_server_times_out_and_cancel_aborts() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(stream_response(String::new()).set_delay(Duration::from_secs(30)))
        .mount(&server)
        .await;
    let quick = OpenAiProvider::new(
        Some(&server.uri()),
        None,
        HttpOptions {
            read_timeout: Duration::from_millis(200),
            max_retries: 0,
            ..options()
        },
    )
    .unwrap();
    let err = collect(&quick, request(vec![ChatMessage::user("hi")]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Timeout(_)), "{err:?}");

    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c.cancel();
    });
    let started = Instant::now();
    assert!(provider(&server)
        .stream(request(vec![ChatMessage::user("hi")]), cancel)
        .await
        .is_err());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn the_request_body_follows_the_documented_shape() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(stream_response(sse(
            &[chunk(json!({}), Some("stop"))],
            true,
        )))
        .mount(&server)
        .await;
    let history = vec![
        ChatMessage::user(MessageContent::Parts(vec![
            ContentPart::Text {
                text: "what is this?".into(),
            },
            ContentPart::ImageUrl {
                image_url: "https://example.com/cat.png".into(),
            },
        ])),
        ChatMessage::assistant(
            "",
            vec![
                ToolCallRequest {
                    id: "c1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                },
                ToolCallRequest {
                    id: "orphan".into(),
                    name: "get_weather".into(),
                    arguments: "{}".into(),
                },
            ],
        ),
        ChatMessage::tool_result("c1", "sunny", false),
        ChatMessage::user("thanks"),
    ];
    collect(&provider(&server), request(history)).await.unwrap();
    let received = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "gpt-4o-mini",
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "user", "content": "thanks"}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
        })
    );
}

#[tokio::test]
async fn malformed_tool_arguments_become_an_error_result_in_a_real_turn() {
    let server = MockServer::start().await;
    let bad = sse(
        &[
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_x", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": "}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
        ],
        true,
    );
    Mock::given(method("POST"))
        .respond_with(stream_response(bad))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(stream_response(sse(
            &[
                chunk(json!({"content": "sorry"}), None),
                chunk(json!({}), Some("stop")),
            ],
            true,
        )))
        .with_priority(2)
        .mount(&server)
        .await;
    let (sink, _rx) = weft_core::EventSink::channel();
    let spec = weft_core::TurnSpec {
        provider: Arc::new(provider(&server)),
        model: "gpt-4o-mini".into(),
        system_prompt: "s".into(),
        history: vec![ChatMessage::user("weather?")],
        toolbelt: weft_core::Toolbelt::new(vec![Arc::new(Weather)]),
        config: Arc::new(weft_protocol::AgentConfig::default()),
        gate: weft_core::PermissionGate::new(weft_protocol::PermissionMode::Auto),
        rate_card: Arc::new(weft_core::RateCard::with_common_models()),
        events: sink,
        cancel: CancellationToken::new(),
        memory: weft_core::AgentMemory::new(),
        user_id: std::sync::Arc::from("tester"),
        workspace_root: None,
        recorder: std::sync::Arc::new(weft_core::NoRecord),
        planner: None,
        context_window: 128_000,
        artifacts: None,
        resume: None,
        pace: None,
        chunk_interval: std::time::Duration::ZERO,
    };
    let outcome = weft_core::run_classic_turn(spec).await;
    assert_eq!(outcome.end, weft_core::TurnEnd::Completed);
    assert_eq!(outcome.text, "sorry");
    let second: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[1].body).unwrap();
    let tool_msg = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(tool_msg["tool_call_id"], "call_x");
    let content = tool_msg["content"].as_str().unwrap();
    assert!(
        content.starts_with("error: invalid arguments for `get_weather`")
            && content.contains("not valid JSON"),
        "{content}"
    );
}

struct Weather;

#[async_trait::async_trait]
impl weft_core::Tool for Weather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "Weather for a city"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}})
    }
    fn policy_class(&self) -> weft_protocol::PolicyClass {
        weft_protocol::PolicyClass::Network
    }
    fn category(&self) -> weft_protocol::ToolCategory {
        weft_protocol::ToolCategory::Read
    }
    async fn call(
        &self,
        _args: Value,
        _ctx: &weft_core::ToolContext,
    ) -> Result<String, weft_core::ToolError> {
        Ok("sunny".into())
    }
}

#[test]
fn the_per_response_token_cap_is_sent_under_the_name_each_model_takes() {
    let mut req = request(vec![ChatMessage::user("hi")]);
    assert!(weft_providers::openai::request_body(&req)
        .get("max_tokens")
        .is_none());
    req.temperature = Some(0.2);
    assert_eq!(
        weft_providers::openai::request_body(&req)["temperature"],
        0.2
    );
    req.max_tokens = Some(256);
    assert_eq!(
        weft_providers::openai::request_body(&req)["max_tokens"],
        256
    );
    req.model = "o3-mini".into();
    let body = weft_providers::openai::request_body(&req);
    assert_eq!(
        (
            body["max_completion_tokens"].as_u64(),
            body.get("max_tokens")
        ),
        (Some(256), None)
    );
}

#[test]
fn a_response_schema_becomes_a_json_schema_response_format() {
    let mut req = request(vec![ChatMessage::user("plan")]);
    assert!(weft_providers::openai::request_body(&req)
        .get("response_format")
        .is_none());
    let schema = json!({"type": "object", "properties": {"nodes": {"type": "array"}}});
    req.response_schema = Some(Arc::new(schema.clone()));
    let body = weft_providers::openai::request_body(&req);
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["schema"], schema);
    assert_eq!(body["response_format"]["json_schema"]["strict"], false);
}

#[test]
fn a_model_without_parallel_tool_calls_is_asked_for_one_at_a_time() {
    let mut req = request(vec![ChatMessage::user("weather?")]);
    assert!(weft_providers::openai::request_body(&req)
        .get("parallel_tool_calls")
        .is_none());
    req.single_tool_call = true;
    assert_eq!(
        weft_providers::openai::request_body(&req)["parallel_tool_calls"],
        false
    );
    // Configured per endpoint.
    let mut config = weft_providers::ProvidersConfig::default();
    config.openai.api_key = Some("k".into());
    config.openai.parallel_tool_calls = false;
    let providers = weft_providers::Providers::from_config(&Default::default(), &config).unwrap();
    let (_, openai) = providers.get(Some("openai")).unwrap();
    assert!(!openai.capabilities("gpt-4o").parallel_tool_calls);
}
