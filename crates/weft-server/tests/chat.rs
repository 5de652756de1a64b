//! Chat turns over a real websocket: answers, subtasks, persistence, routing, errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::{answer_id, hinted, kinds, of_type, text_of, thread_of, TestServer};

#[tokio::test]
async fn a_trivial_answer_streams_and_is_persisted() {
    let server = TestServer::start(
        json!({"conversations": [{"match": "*", "steps": [{"chunks": ["Hel", "lo!"]}]}]}),
    )
    .await;
    let mut c = server.client().await;
    c.chat(None, "hi there", json!({})).await;
    let frames = c.turn().await;
    assert_eq!(
        kinds(&frames),
        vec![
            "turn_started",
            "chunk d0",
            "cost_summary",
            "message",
            "done"
        ]
    );
    let seqs: Vec<u64> = frames.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    // Consecutive, from where the turn's position puts it (2^26 per message position: a
    // thread's seq only increases whichever replica runs its turns).
    assert_eq!(seqs[0], 1 << 26, "the turn answers at position 1");
    assert_eq!(seqs, (seqs[0]..seqs[0] + 5).collect::<Vec<_>>());
    assert_eq!(text_of(&frames), "Hello!");
    let thread = thread_of(&frames);
    assert!(frames.iter().all(|f| f["thread_id"] == thread.as_str()));
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(
        (message["role"].as_str(), message["content"].as_str()),
        (Some("assistant"), Some("Hello!"))
    );
    assert_eq!(message["permission_mode"], "default");

    let (status, messages) = server
        .get(&format!("/threads/{thread}/messages"), None)
        .await;
    assert_eq!(status, 200);
    let roles: Vec<_> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].clone(), m["content"].clone()))
        .collect();
    assert_eq!(
        roles,
        vec![
            (json!("user"), json!("hi there")),
            (json!("assistant"), json!("Hello!"))
        ]
    );
    let (_, threads) = server.get("/threads", None).await;
    assert_eq!(threads[0]["id"], thread.as_str());
    assert_eq!(threads[0]["title"], "hi there");
    let calls = server.store().model_calls(&thread).await.unwrap();
    assert_eq!(
        (calls.len(), calls[0].provider.as_str(), &*calls[0].user_id),
        (1, "scripted", "local")
    );
    server.stop().await;
}

#[tokio::test]
async fn reasoning_streams_as_its_own_frames_and_is_kept_but_never_sent_back() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"reasoning": "They want a file read first.", "tool_calls": [
            {"name": "memory_list", "arguments": {}}]},
        {"text": "Done.", "repeat": true}]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "think first", json!({})).await;
    let frames = c.turn().await;
    let reasoning = of_type(&frames, "reasoning");
    assert_eq!(reasoning.len(), 1, "{frames:?}");
    assert_eq!(reasoning[0]["content"], "They want a file read first.");
    assert_eq!(reasoning[0]["depth"], 0);
    // Apart from the answer, ahead of the call it led to.
    assert_eq!(text_of(&frames), "Done.");
    let kinds = kinds(&frames);
    let at = |kind: &str| kinds.iter().position(|k| k.starts_with(kind)).unwrap();
    assert!(at("reasoning") < at("start memory_list"), "{kinds:?}");

    let thread = thread_of(&frames);
    let (_, items) = server.get(&format!("/threads/{thread}/items"), None).await;
    let kept: Vec<&serde_json::Value> = items
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "assistant" && i.get("reasoning").is_some())
        .collect();
    assert_eq!(kept.len(), 1, "{items}");
    assert_eq!(kept[0]["reasoning"], "They want a file read first.");
    // The second model call's history holds the first response without its reasoning.
    let sent = format!("{:?}", server.provider.requests().last().unwrap().messages);
    assert!(!sent.contains("They want a file read first."), "{sent}");
    server.stop().await;
}

#[tokio::test]
async fn parallel_subtasks_nest_and_the_tree_reloads_over_rest() {
    let server = TestServer::start(json!({"conversations": [
        {"match": "compare", "steps": [
            {"tool_calls": [
                {"id": "sa", "name": "run_subtask", "arguments": {"title": "A", "instructions": "research A"}},
                {"id": "sb", "name": "run_subtask", "arguments": {"title": "B", "instructions": "research B"}}]},
            {"chunks": ["A and B ", "differ."], "usage": {"input_tokens": 50, "output_tokens": 5}}]},
        {"match": "research A", "steps": [{"text": "A is old.", "delay_ms": 20}]},
        {"match": "research B", "steps": [{"text": "B is new.", "delay_ms": 60}]}
    ]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "compare A and B", json!({})).await;
    let frames = c.turn().await;
    assert_eq!(
        kinds(&frames),
        vec![
            "turn_started",
            "start run_subtask d0",
            "start run_subtask d0",
            "chunk d1",
            "end run_subtask d0",
            "chunk d1",
            "end run_subtask d0",
            "chunk d0",
            "cost_summary",
            "message",
            "done"
        ]
    );
    let nested: Vec<_> = of_type(&frames, "chunk")
        .iter()
        .filter(|f| f["depth"] == 1)
        .map(|f| hinted(&f["parent_id"]))
        .collect();
    assert_eq!(nested, vec![json!("sa"), json!("sb")]);

    let thread = thread_of(&frames);
    let (_, messages) = server
        .get(&format!("/threads/{thread}/messages"), None)
        .await;
    let tree = &messages[1]["execution_tree"];
    assert_eq!(tree["version"], 1);
    let nodes: Vec<_> = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                hinted(&n["id"]),
                n["title"].clone(),
                n["result_preview"].clone(),
            )
        })
        .collect();
    assert_eq!(
        nodes,
        vec![
            (json!("sa"), json!("A"), json!("A is old.")),
            (json!("sb"), json!("B"), json!("B is new."))
        ]
    );
    assert_eq!(
        tree,
        &of_type(&frames, "message")[0]["message"]["execution_tree"]
    );
    // Written once: the row keeps no copy, the tree is rebuilt from the record.
    let message_id = messages[1]["id"].as_str().unwrap();
    let row = server.store().message(&thread, message_id).await.unwrap();
    assert_eq!(row.unwrap().execution_tree, None);
    let audit = weft_record::audit::tool_calls(server.store(), &thread)
        .await
        .unwrap();
    assert_eq!(audit.len(), 2);
    assert!(audit
        .iter()
        .all(|r| r.status == "success" && r.approval_status == "not_required"));
    server.stop().await;
}

#[tokio::test]
async fn the_depth_limit_is_an_error_result() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"name": "run_subtask", "arguments": {"title": "deeper", "instructions": "again"}}]},
        {"text": "bottom"}
    ]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "go deep", json!({})).await;
    let frames = c.turn().await;
    let refused: Vec<_> = of_type(&frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["status"] == "end" && f["is_error"] == true)
        .map(|f| (f["depth"].clone(), f["result"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(refused, vec![(json!(3), "error: depth limit reached (max_depth = 3); do this work directly instead of delegating.".to_owned())]);
    assert!(of_type(&frames, "budget_exceeded")
        .iter()
        .any(|f| f["reason"] == "depth" && f["ends_turn"] == false));
    server.stop().await;
}

#[tokio::test]
async fn unknown_tools_and_bad_arguments_go_back_to_the_model() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [
            {"id": "u", "name": "teleport", "arguments": {}},
            {"id": "b", "name": "read_file", "arguments": {"path": 42}}]},
        {"tool_calls": [{"id": "m", "name": "read_file", "arguments": {"path": "x"}}], "error": {"kind": "malformed_tool_args"}},
        {"text": "recovered"}
    ]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "try tools", json!({})).await;
    let frames = c.turn().await;
    let ends: Vec<_> = of_type(&frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["status"] == "end")
        .collect();
    assert!(ends[0]["result"].as_str().unwrap().starts_with(
        "error: unknown tool `teleport`. Available tools: run_subtask, read_file, write_file"
    ));
    assert!(ends[1]["result"]
        .as_str()
        .unwrap()
        .starts_with("error: invalid arguments for `read_file`"));
    assert!(ends[2]["result"]
        .as_str()
        .unwrap()
        .contains("not valid JSON"));
    assert!(ends.iter().all(|f| f["is_error"] == true));
    assert_eq!(text_of(&frames), "recovered");
    server.stop().await;
}

#[tokio::test]
async fn a_provider_failure_is_reported_and_partial_text_persisted() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["partial "], "error": {"kind": "http_status", "status": 500}}
    ]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "fail please", json!({})).await;
    let frames = c.turn().await;
    assert_eq!(
        kinds(&frames),
        vec![
            "turn_started",
            "chunk d0",
            "cost_summary",
            "message",
            "error",
            "done"
        ]
    );
    let error = &of_type(&frames, "error")[0];
    assert_eq!(error["code"], "provider_error");
    assert!(error["message"].as_str().unwrap().contains("500"));
    let thread = thread_of(&frames);
    let stored = server.store().messages(&thread).await.unwrap();
    assert_eq!(
        (stored[1].content.clone(), stored[1].status.as_str()),
        (json!("partial "), "provider_error")
    );
    server.stop().await;
}

#[tokio::test]
async fn messagepack_frames_are_answered_in_kind() {
    let server = TestServer::start(
        json!({"conversations": [{"match": "*", "steps": [{"text": "packed"}]}]}),
    )
    .await;
    let mut c = server.client().await;
    c.send_msgpack(&json!({"command": "chat_message", "data": {"content": "hi"}}))
        .await;
    let frames = c.turn().await;
    assert!(frames.iter().all(|f| f["__binary"] == true));
    assert_eq!(text_of(&frames), "packed");
    c.send_msgpack(&json!({"type": "ping"})).await;
    assert_eq!(c.recv().await["type"], "pong");
    server.stop().await;
}

#[tokio::test]
async fn routing_precedence_and_unknown_modes() {
    let server = TestServer::start(
        json!({"conversations": [{"match": "*", "steps": [{"text": "chat", "repeat": true}]}]}),
    )
    .await;
    let mut c = server.client().await;
    // workflow_target wins over media_generation: it goes to the workflow route.
    c.chat(None, "x", json!({"workflow_target": "workflow", "workflow_id": "wf1", "media_generation": {"mode": "image"}})).await;
    let f = c.recv().await;
    assert_eq!(
        (
            f["type"].as_str(),
            f["code"].as_str(),
            f["request_id"].as_str()
        ),
        (Some("error"), Some("workflow_not_found"), Some("r1"))
    );
    c.chat(
        None,
        "x",
        json!({"media_generation": {"mode": "image", "prompt": "a cat"}}),
    )
    .await;
    let f = c.recv().await;
    assert!(f["code"] == "unsupported_route" && f["message"].as_str().unwrap().contains("media"));
    // workflow_id alone (editor chat) and media mode "chat" go to the agent.
    c.chat(None, "x", json!({"workflow_id": "wf1", "media_generation": {"mode": "chat"}, "agent_mode": true, "tools": ["x"], "collections": ["y"]})).await;
    assert_eq!(text_of(&c.turn().await), "chat");
    c.chat(None, "x", json!({"mode": "telepathy"})).await;
    let f = c.recv().await;
    assert_eq!(f["code"], "unknown_mode");
    assert!(f["message"].as_str().unwrap().contains("classic"));
    c.chat(
        None,
        "x",
        json!({"mode": "classic", "chat_context": {"kind": "thread"}}),
    )
    .await;
    assert_eq!(text_of(&c.turn().await), "chat");
    server.stop().await;
}

#[tokio::test]
async fn a_second_turn_in_a_thread_sees_the_history() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [{"text": "first"}, {"text": "second"}]}]})).await;
    let mut c = server.client().await;
    c.chat(None, "one", json!({})).await;
    let thread = thread_of(&c.turn().await);
    c.chat(Some(&thread), "two", json!({})).await;
    let frames = c.turn().await;
    assert_eq!(text_of(&frames), "second");
    assert_eq!(server.store().messages(&thread).await.unwrap().len(), 4);
    server.stop().await;
}

/// What the model saw last: each user or assistant message's role and text, tool results
/// and calls left out.
fn last_history(server: &TestServer) -> Vec<(String, String)> {
    let request = server.provider.requests().pop().unwrap();
    request
        .messages
        .iter()
        .map(|m| (format!("{:?}", m.role).to_lowercase(), m.content.text()))
        .filter(|(role, text)| role != "tool" && !text.is_empty())
        .collect()
}

#[tokio::test]
async fn a_message_that_replaces_an_answer_drops_its_exchange() {
    // The scripted step is the number of answers the model sees: a replaced exchange that
    // stayed in the history would move it on.
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [{"id": "w", "name": "memory_write", "arguments": {"key": "k", "value": "v"}}]},
        {"text": "first"},
        {"text": "second"},
        {"text": "third"}
    ]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "one", json!({"permission_mode": "auto"}))
        .await;
    let first = c.turn().await;
    let thread = thread_of(&first);
    assert_eq!(text_of(&first), "first");
    c.chat(Some(&thread), "two", json!({})).await;
    let second = c.turn().await;
    assert_eq!(text_of(&second), "second");
    let replaced = answer_id(&second);
    let last_seq = second.last().unwrap()["seq"].as_u64().unwrap();

    // Regenerate: the same question again, in place of the last exchange.
    c.chat(Some(&thread), "two", json!({"replaces": replaced}))
        .await;
    let again = c.turn().await;
    // Three answers in the history (the first turn's two responses and "second") would
    // have moved the script on to "third".
    assert_eq!(
        text_of(&again),
        "second",
        "the replaced exchange is not in the history"
    );
    let pair = |r: &str, t: &str| (r.to_owned(), t.to_owned());
    assert_eq!(
        last_history(&server),
        vec![
            pair("user", "one"),
            pair("assistant", "first"),
            pair("user", "two")
        ]
    );
    assert!(
        again[0]["seq"].as_u64().unwrap() > last_seq,
        "a thread's seq only rises"
    );
    let texts = |messages: Vec<weft_store::MessageRow>| -> Vec<(String, String)> {
        messages
            .into_iter()
            .map(|m| (m.role, m.content.as_str().unwrap_or_default().to_owned()))
            .collect()
    };
    assert_eq!(
        texts(server.store().messages(&thread).await.unwrap()),
        vec![
            pair("user", "one"),
            pair("assistant", "first"),
            pair("user", "two"),
            pair("assistant", "second")
        ]
    );
    let (status, _) = server
        .get(
            &format!("/threads/{thread}/messages/{replaced}/trace"),
            None,
        )
        .await;
    assert_eq!(status, 404, "the replaced answer is gone");

    // Edit the first message: everything from it on goes, the record with it.
    let first_answer = answer_id(&first);
    c.chat(Some(&thread), "uno", json!({"replaces": first_answer}))
        .await;
    let edited = c.turn().await;
    assert_eq!(
        text_of(&edited),
        "first",
        "the model started from nothing again"
    );
    assert_eq!(server.provider.requests().len(), 6);
    assert_eq!(last_history(&server), vec![pair("user", "uno")]);
    let messages = server.store().messages(&thread).await.unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].content, json!("uno"));
    let kept: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    let items = server.store().thread_items(&thread).await.unwrap();
    assert!(!items.is_empty());
    assert!(
        items.iter().all(|i| kept.contains(&&*i.message_id)),
        "no record item of a dropped message is left"
    );
    // What was spent stays on record: every model call of the thread, dropped ones too.
    assert_eq!(server.store().model_calls(&thread).await.unwrap().len(), 6);
    server.stop().await;
}

#[tokio::test]
async fn a_replacement_that_names_no_answer_of_the_thread_drops_nothing() {
    let server = TestServer::start(
        json!({"conversations": [{"match": "*", "steps": [{"text": "ok", "repeat": true}]}]}),
    )
    .await;
    let mut c = server.client().await;
    c.chat(None, "one", json!({})).await;
    let frames = c.turn().await;
    let thread = thread_of(&frames);
    let answer = answer_id(&frames);
    let question = server.store().messages(&thread).await.unwrap()[0]
        .id
        .clone();
    let mut other = server.client().await;
    other.chat(None, "elsewhere", json!({})).await;
    let elsewhere = answer_id(&other.turn().await);
    for (thread_id, replaces, code) in [
        (Some(thread.as_str()), "nope", "message_not_found"),
        (
            Some(thread.as_str()),
            elsewhere.as_str(),
            "message_not_found",
        ),
        (Some(thread.as_str()), question.as_str(), "invalid_field"),
        (None, answer.as_str(), "message_not_found"),
        (Some(thread.as_str()), "not an id!", "invalid_field"),
    ] {
        c.chat(thread_id, "again", json!({"replaces": replaces}))
            .await;
        let f = c.recv().await;
        assert_eq!(
            (f["type"].as_str(), f["code"].as_str()),
            (Some("error"), Some(code)),
            "{replaces}: {f}"
        );
    }
    assert_eq!(server.store().messages(&thread).await.unwrap().len(), 2);
    server.stop().await;
}

#[tokio::test]
async fn a_response_streamed_in_many_pieces_goes_out_in_fewer_chunks() {
    // 40 pieces 5 ms apart (200 ms) under the default 50 ms chunk interval: a handful of
    // chunks (the first piece at once, then what came in each interval), the text whole.
    let pieces: Vec<String> = (0..40).map(|i| format!("p{i} ")).collect();
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"chunks": pieces, "chunk_delay_ms": 5}]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(None, "stream", json!({})).await;
    let frames = c.turn().await;
    let chunks = of_type(&frames, "chunk")
        .into_iter()
        .filter(|f| f["done"] == false)
        .count();
    assert!((1..=12).contains(&chunks), "{chunks} chunks");
    assert_eq!(text_of(&frames), pieces.concat());
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["content"].as_str(), Some(pieces.concat().as_str()));
    server.stop().await;
}

#[tokio::test]
async fn a_read_the_model_asks_for_after_a_write_in_one_response_reads_what_was_written() {
    // The file holds "old"; one response writes "new" and then reads it. The read claims
    // the workspace's files as the write does, so it runs after the write.
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [
            {"id": "w", "name": "write_file", "arguments": {"path": "notes.md", "content": "new"}},
            {"id": "r", "name": "read_file", "arguments": {"path": "notes.md"}}]},
        {"text": "done"}
    ]}]}))
    .await;
    let workspace = server.workspace_of(weft_runtime::LOCAL_USER);
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.md"), "old").unwrap();
    let mut c = server.client().await;
    c.chat(None, "rewrite and read", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let read = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["status"] == "end" && f["name"] == "read_file")
        .unwrap();
    assert_eq!(read["result"], "new", "{read}");
    server.stop().await;
}
