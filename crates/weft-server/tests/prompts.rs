//! The prompt API over real HTTP: a prompt runs to its end or to an approval, is approved or
//! rejected over REST, streams its frames as Server-Sent Events, and is a turn of a thread.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use reqwest::Method;
use serde_json::{json, Value};
use support::TestServer;
use weft_server::config::ApiKeyEntry;

const ALICE: Option<&str> = Some("k-alice");
const BOB: Option<&str> = Some("k-bob");

fn code(body: &str) -> Value {
    json!({"text": format!("```js\n{body}\n```")})
}

async fn server() -> TestServer {
    TestServer::start_with(
        json!({"conversations": [
            {"match": "hello", "steps": [{"chunks": ["Hi ", "there."], "usage": {"input_tokens": 12, "output_tokens": 3}}, {"text": "Again.", "repeat": true}]},
            {"match": "save", "steps": [
                code("try { await tools.write_file({path: 'p.md', content: 'from a prompt'}); output('saved'); }\n\
                      catch (e) { output('refused: ' + e.message); }\ndone();")]}
        ]}),
        |c| {
            c.auth.api_keys = vec![
                ApiKeyEntry { key: "k-alice".into(), user: "alice".into() },
                ApiKeyEntry { key: "k-bob".into(), user: "bob".into() },
            ]
        },
    )
    .await
}

async fn prompt(server: &TestServer, body: Value) -> (u16, Value) {
    server
        .call(Method::POST, "/prompt", ALICE, Some(body))
        .await
}

#[tokio::test]
async fn a_prompt_runs_to_its_answer_and_is_a_turn_of_its_conversation() {
    let server = server().await;
    let (status, first) = prompt(&server, json!({"input": "hello"})).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["state"], "completed");
    assert_eq!(first["mode"], "classic");
    assert_eq!(first["input"], "hello");
    assert_eq!(
        first["output"],
        json!([{"type": "text", "content": "Hi there."}])
    );
    assert_eq!(first["usage"]["input_tokens"], 12);
    let id = first["id"].as_str().unwrap();
    let conversation = first["conversation_id"].as_str().unwrap();

    let (status, fetched) = server.get(&format!("/prompts/{id}"), ALICE).await;
    assert_eq!((status, &fetched), (200, &first));
    // Another user's prompt does not exist for them.
    assert_eq!(server.get(&format!("/prompts/{id}"), BOB).await.0, 404);

    // The conversation goes on in the same thread, with its history.
    let (_, second) = prompt(
        &server,
        json!({"input": "hello again", "conversation_id": conversation}),
    )
    .await;
    assert_eq!(second["conversation_id"], conversation);
    assert_eq!(second["output"][0]["content"], "Again.");
    let history = &server.provider.requests().pop().unwrap().messages;
    assert_eq!(history.len(), 3);
    let (_, threads) = server.get("/threads", ALICE).await;
    assert_eq!(threads.as_array().unwrap().len(), 1);
    let (_, messages) = server
        .get(&format!("/threads/{conversation}/messages"), ALICE)
        .await;
    assert_eq!(messages.as_array().unwrap().len(), 4);

    // Bad input gets a clear error.
    let (status, body) = prompt(
        &server,
        json!({"input": "hello", "conversation_id": "no spaces allowed"}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("invalid_field"))
    );
    let (status, body) = prompt(&server, json!({"input": "hello", "mode": "telepathy"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("unknown_mode"))
    );
    let (status, _) = server
        .call(
            Method::POST,
            "/prompt",
            BOB,
            Some(json!({"input": "hello", "conversation_id": conversation})),
        )
        .await;
    assert_eq!(status, 403);
    server.stop().await;
}

#[tokio::test]
async fn a_code_prompt_that_uses_every_round_completes_with_a_system_text() {
    // Code that never calls done(): two rounds (the agent's max_steps), then the limit.
    let server = TestServer::start_with(
        json!({"conversations": [{"match": "*", "steps": [
            {"text": "```js\noutput('working ');\n```", "repeat": true}]}]}),
        |c| c.agent.max_steps = Some(2),
    )
    .await;
    let (status, done) = server
        .call(
            Method::POST,
            "/prompt",
            None,
            Some(json!({"input": "loop", "mode": "code"})),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["status"], "budget_exceeded");
    let output = done["output"].as_array().unwrap();
    let functions: Vec<&str> = output
        .iter()
        .filter_map(|o| o["function"].as_str())
        .collect();
    assert_eq!(functions, ["code.execute", "code.execute"]);
    let last = output.last().unwrap();
    assert_eq!(last["type"], "system", "{done}");
    assert!(
        last["content"].as_str().unwrap().contains("2 rounds"),
        "{last}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_code_prompt_waits_for_approval_then_approve_and_reject_resume_it() {
    let server = server().await;
    for (decision, saved) in [("approve", true), ("reject", false)] {
        let _ = std::fs::remove_file(server.workspace_of("alice").join("p.md"));
        let (status, waiting) = prompt(&server, json!({"input": "save it", "mode": "code"})).await;
        assert_eq!(status, 200, "{waiting}");
        assert_eq!(waiting["state"], "waiting_for_approval", "{waiting}");
        assert_eq!(waiting["mode"], "code");
        let tools: Vec<(&str, &str)> = waiting["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["function"].as_str().unwrap(),
                    o["result"]["type"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            tools,
            vec![("code.execute", "pending"), ("write_file", "pending")]
        );
        let pending = waiting["output"][1]["id"].as_str().unwrap();
        assert_eq!(waiting["output"][1]["input"]["path"], "p.md");
        let id = waiting["id"].as_str().unwrap();
        let (status, fetched) = server.get(&format!("/prompts/{id}"), ALICE).await;
        assert_eq!(
            (status, &fetched["state"]),
            (200, &json!("waiting_for_approval"))
        );

        // The events stream, opened while it waits, follows it to its end.
        let url = server.url(&format!("/prompts/{id}/events"));
        let events = tokio::spawn(async move {
            let response = reqwest::Client::new()
                .get(url)
                .bearer_auth("k-alice")
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.headers()["content-type"].to_str().unwrap(),
                "text/event-stream"
            );
            response.text().await.unwrap()
        });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;

        let (status, done) = server
            .call(
                Method::POST,
                &format!("/prompts/{id}/{decision}"),
                ALICE,
                Some(json!({"tool_call_id": pending, "reason": "not today"})),
            )
            .await;
        assert_eq!(status, 200, "{done}");
        assert_eq!(done["state"], "completed");
        assert_eq!(server.workspace_of("alice").join("p.md").exists(), saved);
        let output = done["output"].as_array().unwrap();
        let text = output.last().unwrap()["content"].as_str().unwrap();
        if saved {
            assert_eq!(text, "saved");
            assert_eq!(output[1]["result"]["type"], "success");
        } else {
            assert!(text.starts_with("refused: denied"), "{text}");
            assert_eq!(output[1]["result"]["type"], "error");
            // The rejection's reason reached the model with the call's result.
            let error = output[1]["result"]["error"].as_str().unwrap();
            assert!(error.contains("Their reason: not today"), "{error}");
        }

        let stream = events.await.unwrap();
        let frames: Vec<Value> = stream
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let kinds: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
        assert_eq!(kinds.first(), Some(&"turn_started"));
        assert!(kinds.contains(&"tool_approval_request"));
        assert!(kinds.contains(&"tool_approval_resolved"));
        assert!(kinds.contains(&"message"));
        assert_eq!(frames.last().unwrap()["done"], true);

        // Approving again: nothing is pending.
        let (status, _) = server
            .call(
                Method::POST,
                &format!("/prompts/{id}/approve"),
                ALICE,
                Some(json!({"tool_call_id": pending})),
            )
            .await;
        assert_eq!(status, 422);
        // A finished prompt's events: its stored message, then the end.
        let (_, text) = server.get(&format!("/prompts/{id}/events"), ALICE).await;
        let text = text.as_str().unwrap().to_owned();
        let finished: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(finished.len(), 2);
        assert_eq!(finished[0]["type"], "message");
        assert_eq!(finished[1]["done"], true);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_prompt_with_more_frames_than_a_socket_may_queue_still_answers() {
    // 900 KB of text in 4 KB chunks, against a 256 KiB outbound bound.
    let chunk = "x".repeat(4096);
    let server = TestServer::start_with(
        json!({"conversations": [{"match": "*", "steps": [
            {"chunks": [chunk], "repeat_chunks": 225}
        ]}]}),
        |c| c.server.max_outbound_bytes = 256 << 10,
    )
    .await;
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        server.call(Method::POST, "/prompt", None, Some(json!({"input": "big"}))),
    )
    .await
    .expect("the prompt answered");
    let (status, body) = answer;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "completed");
    let text = body["output"][0]["content"].as_str().unwrap();
    assert_eq!(text.len(), 225 * 4096);
    // Its events, read back after the end, end too.
    let id = body["id"].as_str().unwrap();
    let events = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        reqwest::get(server.url(&format!("/prompts/{id}/events"))),
    )
    .await
    .expect("the events answered")
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(
        events.contains("\"done\":true"),
        "{}",
        &events[..200.min(events.len())]
    );
    server.stop().await;
}
