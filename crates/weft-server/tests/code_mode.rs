//! Code mode over the real socket: JavaScript from the scripted model runs in the sandbox and
//! its tool calls go through the thread's gate, nested under the run, recorded and replayed;
//! classic mode's `interpreter_run` runs a snippet in the same sandbox, gated as `execute`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use support::{of_type, text_of, thread_of, TestServer};
use weft_core::Role;

fn code(body: &str) -> Value {
    json!({"text": format!("```js\n{body}\n```")})
}

/// `tool_call_update` lines: status, name, depth, nested under a code run or not.
fn cards(frames: &[Value]) -> Vec<String> {
    let runs: Vec<&str> = of_type(frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["name"] == "code.execute")
        .filter_map(|f| f["tool_call_id"].as_str())
        .collect();
    of_type(frames, "tool_call_update")
        .into_iter()
        .map(|f| {
            let nested = f["parent_id"].as_str().is_some_and(|p| runs.contains(&p));
            format!(
                "{} {} d{}{}",
                f["status"].as_str().unwrap(),
                f["name"].as_str().unwrap(),
                f["depth"],
                if nested { " nested" } else { "" }
            )
        })
        .collect()
}

#[tokio::test]
async fn code_reads_two_files_in_parallel_and_the_record_replays_it() {
    let server = TestServer::start(json!({"conversations": [
        {"match": "compare", "steps": [
            code("const [a, b] = await Promise.all([tools.read_file({path: 'a.md'}), tools.read_file({path: 'b.md'})]);\n\
                  output(`a: ${a}, `);\noutput(`b: ${b}`);\ndone();")]},
        {"match": "*", "steps": [{"text": "noted", "repeat": true}]}
    ]}))
    .await;
    std::fs::write(server.workspace.join("a.md"), "alpha").unwrap();
    std::fs::write(server.workspace.join("b.md"), "beta").unwrap();
    let mut c = server.client().await;
    c.chat(None, "compare a and b", json!({"mode": "code"}))
        .await;
    let frames = c.turn().await;
    assert_eq!(of_type(&frames, "turn_started")[0]["mode"], "code");
    assert_eq!(text_of(&frames), "a: alpha, b: beta");
    let lines = cards(&frames);
    assert_eq!(lines.first().unwrap(), "start code.execute d0");
    assert_eq!(lines.last().unwrap(), "end code.execute d0");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.ends_with("read_file d1 nested"))
            .count(),
        4
    );
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["status"], "completed");
    assert_eq!(message["content"], "a: alpha, b: beta");
    let tree: Vec<&str> = message["execution_tree"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(tree, vec!["code.execute", "read_file", "read_file"]);

    // The trace nests the run's calls under it.
    let thread = thread_of(&frames);
    let message_id = message["id"].as_str().unwrap();
    let (_, trace) = server
        .get(
            &format!("/threads/{thread}/messages/{message_id}/trace"),
            None,
        )
        .await;
    let kinds: Vec<&str> = trace["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["assistant", "subtask", "tool_result"]);
    assert!(trace.to_string().contains("alpha"));

    // A classic turn next reads the code and its result as text.
    c.chat(Some(&thread), "what did that show?", json!({}))
        .await;
    c.turn().await;
    let request = server.provider.requests().pop().unwrap();
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        vec![Role::User, Role::Assistant, Role::User, Role::User]
    );
    assert!(request.messages[1].text().contains("Promise.all"));
    assert!(request.messages[2]
        .text()
        .starts_with("[result of running that code]\nok"));
    assert!(request.messages.iter().all(|m| m.tool_calls.is_empty()));
    server.stop().await;
}

#[tokio::test]
async fn a_write_from_code_asks_and_the_answer_decides() {
    let server = TestServer::start(json!({"conversations": [
        {"match": "save", "steps": [
            code("try { await tools.write_file({path: 'out.md', content: 'hi'}); output('saved'); }\n\
                  catch (e) { output('not saved: ' + e.message); }\ndone();")]},
        {"match": "*", "steps": [{"text": "?"}]}
    ]}))
    .await;
    let mut c = server.client().await;
    for (decision, saved) in [("deny", false), ("allow", true)] {
        c.chat(None, "save it", json!({"mode": "code"})).await;
        let frames = c.recv_until(|f| f["type"] == "tool_approval_request").await;
        let request = frames.last().unwrap();
        let run = of_type(&frames, "tool_call_update")
            .into_iter()
            .find(|f| f["name"] == "code.execute")
            .unwrap()["tool_call_id"]
            .clone();
        assert_eq!(request["parent_id"], run);
        assert_eq!(
            (request["name"].as_str(), request["depth"].as_u64()),
            (Some("write_file"), Some(1))
        );
        c.send(json!({"type": "tool_approval_response", "tool_call_id": request["tool_call_id"], "decision": decision}))
            .await;
        let frames = c.turn().await;
        assert_eq!(server.workspace.join("out.md").exists(), saved);
        let text = text_of(&frames);
        if saved {
            assert_eq!(text, "saved");
        } else {
            assert!(text.starts_with("not saved: denied"), "{text}");
        }
        let approvals = server.store().approvals(&thread_of(&frames)).await.unwrap();
        assert_eq!(
            approvals[0].status,
            if saved { "approved" } else { "rejected" }
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn plan_mode_blocks_a_write_from_code() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        code("await tools.write_file({path: 'x.md', content: 'x'});"),
        {"text": "I cannot write in plan mode."}]}]}))
    .await;
    let mut c = server.client().await;
    c.chat(
        None,
        "write x",
        json!({"mode": "code", "permission_mode": "plan"}),
    )
    .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "tool_approval_request").is_empty());
    assert!(!server.workspace.join("x.md").exists());
    let run_end = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["name"] == "code.execute" && f["status"] == "end")
        .unwrap();
    assert_eq!(run_end["is_error"], true);
    assert!(run_end["result"]
        .as_str()
        .unwrap()
        .contains("unavailable in plan mode"));
    assert_eq!(text_of(&frames), "I cannot write in plan mode.");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_loop_ends_at_its_limit_while_another_turn_keeps_streaming() {
    let server = TestServer::start_with(
        json!({"conversations": [
            {"match": "spin", "steps": [code("while (true) {}"), {"text": "stopped spinning"}]},
            {"match": "stream", "steps": [{"chunks": ["1 ", "2 ", "3 ", "4 ", "5 ", "6 ", "7 ", "8"], "chunk_delay_ms": 50}]}
        ]}),
        |c| c.code.max_ms_per_run = 1_500,
    )
    .await;
    let mut spinner = server.client().await;
    let mut streamer = server.client().await;
    let started = Instant::now();
    spinner.chat(None, "spin", json!({"mode": "code"})).await;
    spinner
        .recv_until(|f| f["type"] == "tool_call_update" && f["name"] == "code.execute")
        .await;
    streamer.chat(None, "stream", json!({})).await;
    let frames = streamer.turn().await;
    let streamed_in = started.elapsed();
    assert_eq!(text_of(&frames), "1 2 3 4 5 6 7 8");
    assert!(
        streamed_in < Duration::from_millis(1_400),
        "{streamed_in:?}"
    );
    let frames = spinner.turn().await;
    let run_end = of_type(&frames, "tool_call_update")
        .into_iter()
        .find(|f| f["name"] == "code.execute" && f["status"] == "end")
        .unwrap();
    assert!(run_end["result"]
        .as_str()
        .unwrap()
        .contains("more than 1500 ms of CPU time"));
    assert_eq!(text_of(&frames), "stopped spinning");
    server.stop().await;
}

#[tokio::test]
async fn an_unknown_mode_is_refused_and_code_is_listed() {
    let server =
        TestServer::start(json!({"conversations": [{"match": "*", "steps": [{"text": "x"}]}]}))
            .await;
    let mut c = server.client().await;
    c.chat(None, "hi", json!({"mode": "telepathy"})).await;
    let error = c.recv().await;
    assert_eq!(error["code"], "unknown_mode");
    assert!(error["message"].as_str().unwrap().contains("classic, code"));
    server.stop().await;
}

#[tokio::test]
async fn modes_are_listed_with_their_rounds_and_code_stops_after_ten() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"text": "```js\n1 + 1\n```", "repeat": true}
    ]}]}))
    .await;
    let (status, modes) = server.get("/modes", None).await;
    assert_eq!(status, 200);
    let listed: Vec<(&str, u64)> = modes
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["max_rounds"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [("classic", 20), ("code", 10)]);
    assert!(modes
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["display_name"].is_string()));

    // A model that always answers with more code gets ten rounds.
    let mut c = server.client().await;
    c.chat(None, "keep going", json!({"mode": "code"})).await;
    let frames = c.turn().await;
    let runs = of_type(&frames, "tool_call_update")
        .into_iter()
        .filter(|f| f["name"] == "code.execute" && f["status"] == "end")
        .count();
    assert_eq!(runs, 10);
    assert_eq!(server.provider.requests().len(), 10);
    let budget = of_type(&frames, "budget_exceeded");
    assert_eq!(budget.len(), 1, "{frames:?}");
    assert_eq!(
        (budget[0]["reason"].as_str(), budget[0]["limit"].as_u64()),
        (Some("iterations"), Some(10))
    );
    server.stop().await;
}

#[tokio::test]
async fn classic_mode_runs_a_snippet_with_interpreter_run_gated_as_execute() {
    let run = |code: &str| json!({"tool_calls": [{"name": "interpreter_run", "arguments": {"code": code}}]});
    let server = TestServer::start_with(json!({"conversations": [
        {"match": "sum", "steps": [
            run("output('adding'); log('n=3'); return [1, 2, 3].reduce((a, b) => a + b, 0);"),
            {"text": "six", "repeat": true}]},
        {"match": "spin", "steps": [run("while (true) {}"), {"text": "stopped", "repeat": true}]},
        {"match": "reach", "steps": [
            run("return await tools.read_file({path: 'x'});"), {"text": "no", "repeat": true}]}
    ]}), |c| c.code.max_ms_per_run = 1_000)
    .await;
    let mut c = server.client().await;
    let end = |frames: &[Value]| {
        of_type(frames, "tool_call_update")
            .into_iter()
            .find(|f| f["status"] == "end" && f["name"] == "interpreter_run")
            .cloned()
            .unwrap()
    };

    // Plan refuses it: it is not a read.
    c.chat(None, "sum in plan", json!({"permission_mode": "plan"}))
        .await;
    let frames = c.turn().await;
    assert_eq!(end(&frames)["metadata"]["status"], "rejected", "{frames:?}");

    // Default asks first; allowed, it runs and answers with what the code returned, showed
    // and logged.
    c.chat(None, "sum it", json!({})).await;
    let asked = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let request = asked.last().unwrap();
    assert_eq!(request["category"], "execute");
    c.send(json!({"type": "tool_approval_response", "tool_call_id": request["tool_call_id"], "decision": "allow"}))
        .await;
    let frames = c.turn().await;
    let result = end(&frames)["result"].as_str().unwrap().to_owned();
    assert!(result.starts_with("ok; returned 6"), "{result}");
    assert!(
        result.contains("adding") && result.contains("n=3"),
        "{result}"
    );

    // The code mode's CPU limit holds, and no tool is reachable from inside.
    c.chat(None, "spin", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let spun = end(&frames);
    assert_eq!(spun["is_error"], true);
    assert!(spun["result"].as_str().unwrap().contains("error"), "{spun}");
    c.chat(None, "reach", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    let reached = end(&frames);
    assert_eq!(reached["is_error"], true, "{reached}");
    server.stop().await;
}
