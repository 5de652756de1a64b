//! OpenTelemetry GenAI traces: a real `weft serve` exports to an OTLP/HTTP receiver in the
//! test, which decodes the protobuf; a turn with two subtasks (one making a tool call) must
//! give the span tree turn → model calls and tool calls → the subtasks' own, with the GenAI
//! attributes, and no content unless `capture_content` is on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::{json, Value};
use support::{chat, is_done, send, until, Db, Server, NO_USER_LIMITS};

/// A span as received: its ids, name and attributes (as strings).
#[derive(Debug, Clone)]
struct Received {
    id: Vec<u8>,
    parent: Vec<u8>,
    name: String,
    attributes: HashMap<String, String>,
    resource: HashMap<String, String>,
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// An OTLP/HTTP receiver on a free port: every span posted to `/v1/traces`.
async fn receiver() -> (String, Arc<Mutex<Vec<Received>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let sink = spans.clone();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                for resource_spans in request.resource_spans {
                    let resource: HashMap<String, String> = resource_spans
                        .resource
                        .map(|r| r.attributes)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|kv| (kv.key, text(kv.value.as_ref())))
                        .collect();
                    for scope in resource_spans.scope_spans {
                        for span in scope.spans {
                            sink.lock().unwrap().push(Received {
                                id: span.span_id,
                                parent: span.parent_span_id,
                                name: span.name,
                                attributes: span
                                    .attributes
                                    .into_iter()
                                    .map(|kv| (kv.key, text(kv.value.as_ref())))
                                    .collect(),
                                resource: resource.clone(),
                            });
                        }
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), spans)
}

fn script() -> Value {
    json!({"conversations": [
        {"match": "compare", "steps": [
            {"tool_calls": [
                {"name": "run_subtask", "arguments": {"title": "A", "instructions": "research A"}},
                {"name": "run_subtask", "arguments": {"title": "B", "instructions": "research B"}}],
             "usage": {"input_tokens": 100, "output_tokens": 20}},
            {"text": "A and B differ.", "usage": {"input_tokens": 180, "output_tokens": 5}}]},
        {"match": "research A", "steps": [
            {"tool_calls": [{"name": "memory_write", "arguments": {"key": "a", "value": "secret A"}}],
             "usage": {"input_tokens": 30, "output_tokens": 8}},
            {"text": "A is old.", "usage": {"input_tokens": 40, "output_tokens": 4}}]},
        {"match": "research B", "steps": [{"text": "B is new.", "usage": {"input_tokens": 30, "output_tokens": 4}}]}
    ]})
}

/// Run the turn on a server exporting to a fresh receiver; the spans it sent by its exit.
async fn traced_turn(capture_content: bool) -> (String, Vec<Received>) {
    let (endpoint, spans) = receiver().await;
    let db = Db::new(false).await;
    let config = format!(
        "{NO_USER_LIMITS}[telemetry]\notlp_endpoint = \"{endpoint}\"\ncapture_content = {capture_content}\nservice_name = \"weft-test\"\n"
    );
    let server = Server::start_with(&db, &script(), &config).await;
    let mut ws = server.connect().await;
    send(&mut ws, chat("compare A and B", None)).await;
    let frames = until(&mut ws, is_done).await;
    let thread = frames[0]["thread_id"].as_str().unwrap().to_owned();
    assert!(frames
        .iter()
        .any(|f| f["type"] == "message" && f["message"]["status"] == "completed"));
    // SIGTERM: the server sends what it holds before it exits.
    server.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(20);
    while spans.lock().unwrap().len() < 9 {
        assert!(
            Instant::now() < deadline,
            "spans: {:?}",
            spans.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
    let spans = spans.lock().unwrap().clone();
    (thread, spans)
}

fn children<'a>(spans: &'a [Received], parent: &Received) -> Vec<&'a Received> {
    spans.iter().filter(|s| s.parent == parent.id).collect()
}

#[tokio::test]
async fn a_turn_exports_its_genai_span_tree() {
    let (thread, spans) = traced_turn(false).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let turn = spans
        .iter()
        .find(|s| s.name == "invoke_agent default")
        .unwrap_or_else(|| panic!("no turn span: {names:?}"));
    assert!(turn.parent.is_empty(), "the turn is a root span");
    let a = &turn.attributes;
    assert_eq!(a["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(a["gen_ai.conversation.id"], thread);
    assert_eq!(a["gen_ai.agent.name"], "default");
    assert_eq!(a["weft.turn.status"], "completed");
    assert_eq!(turn.resource["service.name"], "weft-test");

    // Under the turn: its two model calls and its two subtask calls.
    let mut under: Vec<&str> = children(&spans, turn)
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    under.sort();
    let model = spans.iter().find(|s| s.name.starts_with("chat ")).unwrap();
    let chat_name = model.name.as_str();
    assert_eq!(
        under,
        vec![
            chat_name,
            chat_name,
            "execute_tool run_subtask",
            "execute_tool run_subtask"
        ],
        "{names:?}"
    );
    let first = children(&spans, turn)
        .into_iter()
        .find(|s| s.name.starts_with("chat ") && s.attributes["gen_ai.usage.input_tokens"] == "100")
        .expect("the first model call");
    assert_eq!(first.attributes["gen_ai.operation.name"], "chat");
    assert_eq!(first.attributes["gen_ai.provider.name"], "scripted");
    assert_eq!(first.attributes["gen_ai.usage.output_tokens"], "20");
    assert_eq!(
        first.attributes["gen_ai.response.finish_reasons"],
        "[\"tool_calls\"]"
    );
    assert!(!first.attributes["gen_ai.request.model"].is_empty());

    // Each subtask's own calls nest under its run_subtask span.
    let subtasks: Vec<&Received> = children(&spans, turn)
        .into_iter()
        .filter(|s| s.name == "execute_tool run_subtask")
        .collect();
    for call in &subtasks {
        assert_eq!(call.attributes["gen_ai.tool.name"], "run_subtask");
        assert!(call.attributes["gen_ai.tool.call.id"].contains('~'));
        assert_eq!(call.attributes["weft.tool.outcome"], "success");
        assert_eq!(call.attributes["weft.approval.status"], "not_required");
        assert!(
            !call.attributes.contains_key("gen_ai.tool.call.arguments"),
            "no content by default"
        );
    }
    let mut nested: Vec<Vec<&str>> = subtasks
        .iter()
        .map(|call| {
            let mut names: Vec<&str> = children(&spans, call)
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            names.sort();
            names
        })
        .collect();
    nested.sort();
    assert_eq!(
        nested,
        vec![
            vec![chat_name],
            vec![chat_name, chat_name, "execute_tool memory_write"]
        ]
    );
    let write = spans
        .iter()
        .find(|s| s.name == "execute_tool memory_write")
        .unwrap();
    assert_eq!(children(&spans, write).len(), 0);
    assert!(spans
        .iter()
        .all(|s| !s.attributes.values().any(|v| v.contains("secret A"))));
}

#[tokio::test]
async fn content_is_exported_only_when_asked() {
    let (_, spans) = traced_turn(true).await;
    let write = spans
        .iter()
        .find(|s| s.name == "execute_tool memory_write")
        .unwrap();
    assert!(write.attributes["gen_ai.tool.call.arguments"].contains("secret A"));
    assert!(write.attributes.contains_key("gen_ai.tool.call.result"));
    assert!(spans.iter().any(|s| s
        .attributes
        .get("gen_ai.output.messages")
        .is_some_and(|t| t == "A and B differ.")));
}
