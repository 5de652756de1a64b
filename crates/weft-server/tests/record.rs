//! The conversation record over a real socket: the next turn's provider request replays the
//! earlier turn's tool calls and results (OpenAI and Anthropic, field by field), the trace
//! nests subtasks with full results, `resume_chat` answers from the store, a failed write is
//! never reported saved, and streaming text reaches the database while it streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use support::{
    answer_id, hint, hinted, in_order, of_type, openai_chunk, openai_sse, openai_text, text_of,
    thread_of, TestServer,
};
use weft_server::config::ApiKeyEntry;
use wiremock::{MockServer, ResponseTemplate};

async fn two_turns(server: &TestServer) -> String {
    std::fs::write(server.workspace.join("a.txt"), "hi from a").unwrap();
    let mut c = server.client().await;
    c.chat(None, "read a.txt", json!({})).await;
    let first = c.turn().await;
    let thread = thread_of(&first);
    assert_eq!(text_of(&first), "It says hi.");
    c.chat(Some(&thread), "what did it say?", json!({})).await;
    let second = c.turn().await;
    assert_eq!(text_of(&second), "hi from a, it said");
    thread
}

#[tokio::test]
async fn the_next_turn_replays_calls_and_results_to_openai() {
    let openai = MockServer::start().await;
    in_order(
        &openai,
        "/v1/chat/completions",
        vec![
            openai_sse(&[
                openai_chunk(json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}]}), None),
                openai_chunk(json!({}), Some("tool_calls")),
            ]),
            openai_text("It says hi."),
            openai_text("hi from a, it said"),
        ],
    )
    .await;
    let base = format!("{}/v1", openai.uri());
    let server = TestServer::start_with(json!({"conversations": []}), move |c| {
        c.provider.default = Some("openai".into());
        c.provider.model = Some("gpt-4o-mini".into());
        c.providers.openai.base_url = Some(base);
    })
    .await;
    two_turns(&server).await;

    let requests = openai.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3);
    let third: Value = serde_json::from_slice(&requests[2].body).unwrap();
    let messages = third["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(
        messages[1..].to_vec(),
        vec![
            json!({"role": "user", "content": "read a.txt"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "call_1", "content": "hi from a"}),
            json!({"role": "assistant", "content": "It says hi."}),
            json!({"role": "user", "content": "what did it say?"}),
        ]
    );
    server.stop().await;
}

fn anthropic_sse(events: &[Value]) -> ResponseTemplate {
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(body)
}

fn anthropic_turn(blocks: Vec<Value>, stop: &str) -> ResponseTemplate {
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
        "content": [], "model": "claude-sonnet-4-0", "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    ];
    events.extend(blocks);
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}));
    events.push(json!({"type": "message_stop"}));
    anthropic_sse(&events)
}

fn anthropic_text(text: &str) -> ResponseTemplate {
    anthropic_turn(
        vec![
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            json!({"type": "content_block_stop", "index": 0}),
        ],
        "end_turn",
    )
}

#[tokio::test]
async fn the_next_turn_replays_calls_and_results_to_anthropic() {
    let anthropic = MockServer::start().await;
    in_order(
        &anthropic,
        "/v1/messages",
        vec![
            anthropic_turn(
                vec![
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}}),
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a.txt\"}"}}),
                    json!({"type": "content_block_stop", "index": 0}),
                ],
                "tool_use",
            ),
            anthropic_text("It says hi."),
            anthropic_text("hi from a, it said"),
        ],
    )
    .await;
    let base = anthropic.uri();
    let server = TestServer::start_with(json!({"conversations": []}), move |c| {
        c.provider.default = Some("anthropic".into());
        c.provider.model = Some("claude-sonnet-4-0".into());
        c.providers.anthropic.api_key = Some("sk-ant".into());
        c.providers.anthropic.base_url = Some(base);
    })
    .await;
    two_turns(&server).await;

    let requests = anthropic.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3);
    let third: Value = serde_json::from_slice(&requests[2].body).unwrap();
    assert_eq!(
        third["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "read a.txt"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.txt"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hi from a", "is_error": false}]},
            {"role": "assistant", "content": [{"type": "text", "text": "It says hi."}]},
            {"role": "user", "content": [{"type": "text", "text": "what did it say?"}]}
        ])
    );
    server.stop().await;
}

#[tokio::test]
async fn the_trace_nests_parallel_subtasks_with_full_results_and_is_owner_only() {
    let big = "x".repeat(2_000);
    let server = TestServer::start_with(
        json!({"conversations": [
            {"match": "compare", "steps": [
                {"chunks": ["Looking. "], "tool_calls": [
                    {"id": "sa", "name": "run_subtask", "arguments": {"title": "A", "instructions": "research A"}},
                    {"id": "sb", "name": "run_subtask", "arguments": {"title": "B", "instructions": "research B"}}]},
                {"text": "A and B differ."}]},
            {"match": "research A", "steps": [
                {"tool_calls": [{"id": "ra", "name": "read_file", "arguments": {"path": "big.txt"}}]},
                {"text": "A is old."}]},
            {"match": "research B", "steps": [{"text": "B is new.", "delay_ms": 30}]}
        ]}),
        |c| {
            c.auth.api_keys = vec![
                ApiKeyEntry { key: "k-alice".into(), user: "alice".into() },
                ApiKeyEntry { key: "k-bob".into(), user: "bob".into() },
            ]
        },
    )
    .await;
    std::fs::write(server.workspace_of("alice").join("big.txt"), &big).unwrap();
    let mut c = server.client_with_key(Some("k-alice")).await.unwrap();
    c.chat(None, "compare A and B", json!({})).await;
    let frames = c.turn().await;
    let thread = thread_of(&frames);
    let message_id = answer_id(&frames);

    let (status, body) = server
        .get(
            &format!("/threads/{thread}/messages/{message_id}/trace"),
            Some("k-alice"),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "completed");
    let trace = body["trace"].as_array().unwrap();
    let shape: Vec<String> = trace.iter().map(describe).collect();
    assert_eq!(
        shape,
        vec![
            "assistant \"Looking. \" [run_subtask sa, run_subtask sb]",
            "subtask sa: assistant \"\" [read_file ra] | tool_result ra | assistant \"A is old.\" []",
            "tool_result sa",
            "subtask sb: assistant \"B is new.\" []",
            "tool_result sb",
            "assistant \"A and B differ.\" []",
        ]
    );
    // Full results, not the tree's 500-character previews.
    let nested = &trace[1]["trace"][1];
    assert_eq!(nested["result"].as_str().unwrap(), big);
    assert_eq!(nested["metadata"]["status"], "success");
    assert_eq!(trace[2]["result"], "A is old.");

    // The whole record: root items only, in order.
    let (_, items) = server
        .get(&format!("/threads/{thread}/items"), Some("k-alice"))
        .await;
    let kinds: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        vec![
            "user",
            "assistant",
            "tool_result",
            "tool_result",
            "assistant"
        ]
    );
    assert!(items
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .all(|i| i["message_id"] == message_id.as_str()));

    for path in [
        format!("/threads/{thread}/items"),
        format!("/threads/{thread}/messages/{message_id}/trace"),
    ] {
        assert_eq!(server.get(&path, Some("k-bob")).await.0, 403, "{path}");
        assert_eq!(server.get(&path, None).await.0, 401, "{path}");
    }
    let (status, _) = server
        .get(
            &format!("/threads/{thread}/messages/nope/trace"),
            Some("k-alice"),
        )
        .await;
    assert_eq!(status, 404);
    server.stop().await;
}

fn describe(entry: &Value) -> String {
    match entry["kind"].as_str().unwrap() {
        "assistant" => {
            let calls: Vec<String> = entry["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    format!(
                        "{} {}",
                        c["name"].as_str().unwrap(),
                        hint(c["id"].as_str().unwrap())
                    )
                })
                .collect();
            format!("assistant {} [{}]", entry["text"], calls.join(", "))
        }
        "tool_result" => format!(
            "tool_result {}",
            hint(entry["tool_call_id"].as_str().unwrap())
        ),
        "subtask" => {
            let inner: Vec<String> = entry["trace"]
                .as_array()
                .unwrap()
                .iter()
                .map(describe)
                .collect();
            format!(
                "subtask {}: {}",
                hinted(&entry["tool_call_id"]).as_str().unwrap(),
                inner.join(" | ")
            )
        }
        other => other.to_owned(),
    }
}

#[tokio::test]
async fn resume_after_the_turn_left_memory_answers_from_the_store() {
    let server = TestServer::start(
        json!({"conversations": [{"match": "*", "steps": [{"chunks": ["stored ", "answer"]}]}]}),
    )
    .await;
    let mut c = server.client().await;
    c.chat(None, "hello", json!({})).await;
    let frames = c.turn().await;
    let thread = thread_of(&frames);
    let last_seq = frames.last().unwrap()["seq"].as_u64().unwrap();
    c.close().await;
    // The janitor forgets the finished turn.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(server.state.runtime.hub.sweep(Duration::ZERO) >= 1);

    let mut c = server.client().await;
    c.send(json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": last_seq}}))
        .await;
    let frames = c.turn().await;
    assert_eq!(
        frames
            .iter()
            .map(|f| f["type"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["message", "chunk"]
    );
    assert_eq!(frames[0]["message"]["content"], "stored answer");
    assert_eq!(frames[0]["message"]["status"], "completed");
    assert!(
        frames[0]["seq"].as_u64().unwrap() > last_seq,
        "seqs keep increasing"
    );
    assert_eq!(frames[0]["thread_id"], thread.as_str());
    server.stop().await;
}

#[tokio::test]
async fn a_turn_whose_writes_fail_is_never_reported_saved() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["one ", "two ", "three ", "four ", "five ", "six "], "chunk_delay_ms": 400}]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "go", json!({})).await;
    let seen = c.recv_until(|f| f["type"] == "chunk").await;
    let thread = thread_of(&seen);
    // Once the thread is stored (within a second of streaming), it disappears under the
    // running turn: its remaining writes cannot land.
    while server.store().thread(&thread).await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(server.store().delete_thread(&thread).await.unwrap());
    let rest = c.turn().await;
    assert!(of_type(&rest, "message").is_empty(), "{rest:?}");
    let errors = of_type(&rest, "error");
    assert_eq!(errors.len(), 1, "{rest:?}");
    assert_eq!(errors[0]["code"], "internal");
    // On PostgreSQL the turn's lease went with its thread, and the write's fence says so.
    let told = errors[0]["message"].as_str().unwrap();
    assert!(
        told.contains("could not be saved") || told.contains("lost the turn's lease"),
        "{told}"
    );
    server.stop().await;
}

#[tokio::test]
async fn streaming_text_reaches_the_database_while_it_streams() {
    let chunks: Vec<String> = (0..12).map(|i| format!("c{i} ")).collect();
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": chunks, "chunk_delay_ms": 300}]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "stream slowly", json!({})).await;
    let mut seen = Vec::new();
    // Nine chunks' worth of words (a busy server may send several in one frame).
    while seen
        .iter()
        .filter(|f: &&Value| f["type"] == "chunk")
        .filter_map(|f| f["content"].as_str())
        .flat_map(str::split_whitespace)
        .count()
        < 9
    {
        seen.push(c.recv().await);
    }
    let thread = thread_of(&seen);
    // 2.4 s into the stream: what streamed more than a flush period ago is stored, as a
    // partial assistant item, before the turn ends.
    let (_, items) = server.get(&format!("/threads/{thread}/items"), None).await;
    let draft = items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "assistant")
        .cloned()
        .expect("a partial assistant item");
    assert_eq!(draft["partial"], true);
    let stored = draft["text"].as_str().unwrap();
    assert!(stored.starts_with("c0 c1 c2 c3 "), "{stored:?}");
    assert!(text_of(&seen).starts_with(stored));
    let rest = c.turn().await;
    assert_eq!(
        of_type(&rest, "message")[0]["message"]["content"],
        chunks.concat()
    );
    let (_, items) = server.get(&format!("/threads/{thread}/items"), None).await;
    let last = items.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["text"].as_str(), last.get("partial")),
        (Some(chunks.concat().as_str()), None)
    );
    server.stop().await;
}

#[tokio::test]
async fn a_tool_round_is_stored_as_one_row() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["noting "], "tool_calls": [
            {"name": "memory_write", "arguments": {"key": "a", "value": "1"}},
            {"name": "memory_write", "arguments": {"key": "b", "value": "2"}}]},
        {"text": "noted"}]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "note two things", json!({})).await;
    let frames = c.turn().await;
    let thread = thread_of(&frames);
    let message_id = answer_id(&frames);
    let items = server
        .store()
        .turn_items(&thread, &message_id)
        .await
        .unwrap();
    let kinds: Vec<_> = items
        .iter()
        .map(|i| (i.position, i.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![(0, "assistant"), (1, "tool_results"), (2, "assistant")]
    );
    let rows = weft_store::testing::item_rows(server.store(), &message_id)
        .await
        .unwrap();
    assert_eq!(rows, 2, "the round (response and results) and the answer");
    server.stop().await;
}
