//! A full turn through the real server over a websocket against a mock OpenAI server, so the
//! whole HTTP path (request, SSE, tool round, usage, cost) is exercised.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::{kinds, of_type, text_of, thread_of, TestServer};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn sse(chunks: &[Value]) -> ResponseTemplate {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn usage(i: u64, o: u64) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": i, "completion_tokens": o}})
}

#[tokio::test]
async fn a_turn_against_a_mock_openai_server() {
    let openai = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer sk-test"))
        .respond_with(sse(&[
            chunk(json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "memory_write", "arguments": "{\"key\":\"a\","}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"value\":\"1\"}"}}]}), None),
            chunk(json!({}), Some("tool_calls")),
            usage(100, 20),
        ]))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&openai)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse(&[
            chunk(json!({"content": "Stored "}), None),
            chunk(json!({"content": "it."}), None),
            chunk(json!({}), Some("stop")),
            usage(150, 5),
        ]))
        .with_priority(2)
        .mount(&openai)
        .await;

    let base = format!("{}/v1", openai.uri());
    let server = TestServer::start_with(json!({"conversations": []}), move |c| {
        c.provider.default = Some("openai".into());
        c.provider.model = Some("gpt-4o-mini".into());
        c.providers.openai.api_key = Some("sk-test".into());
        c.providers.openai.base_url = Some(base);
    })
    .await;
    let mut client = server.client().await;
    client.chat(None, "remember a=1", json!({})).await;
    let frames = client.turn().await;
    // Text read together goes out as one chunk: how many depends on how the bytes arrived.
    let mut seen = kinds(&frames);
    seen.dedup();
    assert_eq!(
        seen,
        vec![
            "turn_started",
            "start memory_write d0",
            "end memory_write d0",
            "chunk d0",
            "cost_summary",
            "message",
            "done"
        ]
    );
    assert_eq!(text_of(&frames), "Stored it.");
    let cost = of_type(&frames, "cost_summary")[0];
    assert_eq!(
        (
            cost["input_tokens"].as_u64(),
            cost["output_tokens"].as_u64()
        ),
        (Some(250), Some(25))
    );
    let expected_cost = (250.0 * 0.15 + 25.0 * 0.60) / 1_000_000.0;
    assert!(
        (cost["cost_usd"].as_f64().unwrap() - expected_cost).abs() < 1e-12,
        "{cost}"
    );

    let requests = openai.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    let second: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(messages[0]["content"]
        .as_str()
        .unwrap()
        .contains("Permission mode: DEFAULT"));
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "tool", "tool_call_id": "call_1", "content": "stored a"})
    );
    assert!(second["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["function"]["name"] == "write_file"));

    let thread = thread_of(&frames);
    let calls = server.store().model_calls(&thread).await.unwrap();
    assert_eq!(
        calls
            .iter()
            .map(|c| (c.provider.as_str(), c.model.as_str()))
            .collect::<Vec<_>>(),
        vec![("openai", "gpt-4o-mini"); 2]
    );
    server.stop().await;
}

#[tokio::test]
async fn a_provider_outage_reaches_the_client_as_provider_error() {
    let openai = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_string("invalid api key"))
        .expect(1)
        .mount(&openai)
        .await;
    let base = openai.uri();
    let server = TestServer::start_with(json!({"conversations": []}), move |c| {
        c.provider.default = Some("openai".into());
        c.providers.openai.base_url = Some(base);
    })
    .await;
    let mut client = server.client().await;
    client.chat(None, "hello", json!({})).await;
    let frames = client.turn().await;
    let error = of_type(&frames, "error")[0];
    assert_eq!(error["code"], "provider_error");
    assert!(error["message"].as_str().unwrap().contains("401"));
    server.stop().await;
}
