//! Turns that outlive their process (`[cluster] recovery = "resume"`, the default): the real
//! `weft` process killed with `kill -9` mid-turn and restarted on the same database takes its
//! turns up from their last completed round. Each round's text is kept once, no call that may
//! have acted runs twice, a pending approval is asked again (same id) and answered, and a
//! client that resumes with its `last_seq` gets the rest of the turn numbered after what it
//! saw; a code-mode turn redoes the run it was cut in, meeting the calls it had made, and a
//! workflow run goes on from its completed nodes. On SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::{chat, is_done, send, until, Db, Server, NO_USER_LIMITS};

/// One replica, restarted under the same id: it takes up what its former life left at once.
async fn start(db: &Db, script: &Value) -> Server {
    start_with(db, script, "").await
}

/// [`start`] with more settings (TOML sections after `[cluster]`).
async fn start_with(db: &Db, script: &Value, more: &str) -> Server {
    Server::start_with(
        db,
        script,
        &format!("{NO_USER_LIMITS}[cluster]\nreplica_id = \"one\"\n{more}"),
    )
    .await
}

/// Kill the server once the client has seen `write_file`'s result for `path`: the thread and
/// the last `seq` the client saw.
async fn kill_after_writing(server: Server, ws: &mut support::Ws, path: &str) -> (String, u64) {
    let frames = until(ws, |f| {
        f["type"] == "tool_call_update"
            && f["status"] == "end"
            && f["result"].as_str().is_some_and(|r| r.ends_with(path))
    })
    .await;
    server.kill().await;
    let thread = frames[0]["thread_id"].as_str().unwrap().to_owned();
    let last_seq = frames
        .iter()
        .filter_map(|f| f["seq"].as_u64())
        .max()
        .unwrap();
    (thread, last_seq)
}

/// Six rounds, each some text then a file written, then the answer.
fn rounds_script() -> Value {
    let mut steps: Vec<Value> = (0..6)
        .map(|r| {
            json!({"chunks": [format!("r{r} ")], "delay_ms": 150, "tool_calls": [
                {"name": "write_file", "arguments": {"path": format!("f{r}.md"), "content": format!("round {r}")}}]})
        })
        .collect();
    steps.push(json!({"text": "done", "repeat": true}));
    json!({"conversations": [{"match": "*", "steps": steps}]})
}

/// The results the thread's record holds, as (tool, result) pairs in order.
fn results(items: &Value) -> Vec<(String, String)> {
    items
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "tool_result")
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_owned(),
                i["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The results of `tool`'s calls anywhere in `trace` (subtasks included), in order.
fn results_in(trace: &Value, tool: &str) -> Vec<String> {
    support::results_named(trace, tool)
        .into_iter()
        .map(|(_, result)| result)
        .collect()
}

/// Resume `thread` on `server` from `last_seq` and read its turn to the end: the socket and
/// the frames.
async fn resume_to_end(server: &Server, thread: &str, last_seq: u64) -> (support::Ws, Vec<Value>) {
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": last_seq}}),
    )
    .await;
    let frames = until(&mut ws, is_done).await;
    (ws, frames)
}

/// Kill the server once its turn asks for an approval, start it again and resume: the
/// server, the resumed socket, the thread, the approval's id (asked again, the same) and
/// the `turn_resumed` frame.
async fn restart_while_asking(
    server: Server,
    mut ws: support::Ws,
    db: &Db,
    script: &Value,
) -> (Server, support::Ws, String, Value, Value) {
    let frames = until(&mut ws, |f| f["type"] == "tool_approval_request").await;
    let thread = frames[0]["thread_id"].as_str().unwrap().to_owned();
    let call = frames.last().unwrap()["tool_call_id"].clone();
    let last_seq = frames
        .iter()
        .filter_map(|f| f["seq"].as_u64())
        .max()
        .unwrap();
    server.kill().await;

    let server = start(db, script).await;
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": last_seq}}),
    )
    .await;
    let frames = until(&mut ws, |f| f["type"] == "tool_approval_request").await;
    assert_eq!(
        frames.last().unwrap()["tool_call_id"],
        call,
        "the same approval"
    );
    let resumed = frames
        .iter()
        .find(|f| f["type"] == "turn_resumed")
        .unwrap()
        .clone();
    (server, ws, thread, call, resumed)
}

async fn killed_mid_turn(postgres: bool) {
    let db = Db::new(postgres).await;
    let script = rounds_script();
    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    // On a model of the message's own choosing: the resumed turn runs on it too.
    send(&mut ws, json!({"command": "chat_message", "data": {"content": "write six files", "permission_mode": "auto", "model": "chosen-model"}})).await;
    let (thread, last_seq) = kill_after_writing(server, &mut ws, "f2.md").await;

    let server = start(&db, &script).await;
    let (mut ws, frames) = resume_to_end(&server, &thread, last_seq).await;
    let seqs: Vec<u64> = frames.iter().filter_map(|f| f["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(seqs[0] > last_seq, "{seqs:?} after {last_seq}");
    let resumed = frames
        .iter()
        .find(|f| f["type"] == "turn_resumed")
        .unwrap_or_else(|| panic!("{frames:?}"));
    let so_far = resumed["content"].as_str().unwrap();
    assert!(so_far.starts_with("r0 r1 r2 "), "{so_far:?}");
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed", "{message}");
    assert_eq!(message["message"]["content"], "r0 r1 r2 r3 r4 r5 done");
    assert_eq!(message["message"]["metadata"]["model"], "chosen-model");
    let nodes = message["message"]["execution_tree"]["nodes"]
        .as_array()
        .unwrap();
    assert_eq!(nodes.len(), 6, "one node per call, earlier lives' included");

    // Each file written once at most: a call cut mid-way was not run again.
    let items = server.get(&format!("/threads/{thread}/items")).await;
    let results = results(&items);
    assert_eq!(results.len(), 6, "{results:?}");
    let mut written = 0;
    for (r, (name, result)) in results.iter().enumerate() {
        assert_eq!(name, "write_file");
        let path = format!("f{r}.md");
        let file = db.dir.path().join("workspace/local").join(&path);
        if result.contains(&path) && !result.starts_with("interrupted") {
            written += 1;
            assert!(file.exists(), "{}", file.display());
        } else {
            assert!(
                result.starts_with("interrupted: the server stopped"),
                "{result}"
            );
        }
    }
    assert!(written >= 5, "{results:?}");

    // The thread goes on.
    send(&mut ws, chat("and now?", Some(&thread))).await;
    let frames = until(&mut ws, is_done).await;
    assert!(frames.iter().any(|f| f["type"] == "message"), "{frames:?}");
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_turn_killed_mid_way_goes_on_after_a_restart_on_sqlite() {
    killed_mid_turn(false).await;
}

#[tokio::test]
async fn a_turn_killed_mid_way_goes_on_after_a_restart_on_postgres() {
    killed_mid_turn(true).await;
}

async fn approval_survives(postgres: bool) {
    let db = Db::new(postgres).await;
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["Saving your notes. "], "tool_calls": [
            {"id": "w", "name": "write_file", "arguments": {"path": "notes.md", "content": "hi"}}]},
        {"text": "Saved."},
        {"tool_calls": [
            {"id": "w2", "name": "write_file", "arguments": {"path": "more.md", "content": "hi"}}]},
        {"text": "Saved again."}]}]});
    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    send(&mut ws, chat("save my notes", None)).await;
    let (server, mut ws, thread, call, resumed) =
        restart_while_asking(server, ws, &db, &script).await;
    assert_eq!(resumed["content"], "Saving your notes. ");
    send(
        &mut ws,
        json!({"type": "tool_approval_response", "tool_call_id": call, "decision": "allow_for_chat"}),
    )
    .await;
    let frames = until(&mut ws, is_done).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed");
    assert_eq!(message["message"]["content"], "Saving your notes. Saved.");

    // What was allowed for the chat holds after another restart: the next write is not asked.
    server.stop().await;
    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    send(&mut ws, chat("save more", Some(&thread))).await;
    let frames = until(&mut ws, is_done).await;
    assert!(
        !frames.iter().any(|f| f["type"] == "tool_approval_request"),
        "{frames:?}"
    );
    assert!(db.dir.path().join("workspace/local/more.md").exists());
    let items = server.get(&format!("/threads/{thread}/items")).await;
    let results = results(&items);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results.iter().all(|(_, r)| r.starts_with("wrote")),
        "{results:?}"
    );
    let store = weft_store::Store::connect(&db.url).await.unwrap();
    let approvals = store.approvals(&thread).await.unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0].status, "approved");
    store.close().await;
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_pending_approval_and_what_it_allowed_for_the_chat_survive_restarts_on_sqlite() {
    approval_survives(false).await;
}

#[tokio::test]
async fn a_pending_approval_and_what_it_allowed_for_the_chat_survive_restarts_on_postgres() {
    approval_survives(true).await;
}

async fn budget_holds(postgres: bool) {
    let db = Db::new(postgres).await;
    let script = rounds_script();
    let limit = "[agent]\nmax_total_tool_calls = 5\n";
    let server = start_with(&db, &script, limit).await;
    let mut ws = server.connect().await;
    send(&mut ws, json!({"command": "chat_message", "data": {"content": "write six files", "permission_mode": "auto"}})).await;
    // Killed after 3 of its 5 calls: it runs at most 2 more.
    let (thread, last_seq) = kill_after_writing(server, &mut ws, "f2.md").await;

    let server = start_with(&db, &script, limit).await;
    let (_, frames) = resume_to_end(&server, &thread, last_seq).await;
    let trip = frames
        .iter()
        .find(|f| f["type"] == "budget_exceeded")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(trip["reason"], "tool_calls");
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "budget_exceeded");
    let items = server.get(&format!("/threads/{thread}/items")).await;
    let written = results(&items)
        .iter()
        .filter(|(_, r)| r.starts_with("wrote"))
        .count();
    assert_eq!(written, 5, "{:?}", results(&items));
    let workspace = db.dir.path().join("workspace/local");
    assert!(workspace.join("f4.md").exists());
    assert!(!workspace.join("f5.md").exists());
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_resumed_turn_keeps_its_budget_on_sqlite() {
    budget_holds(false).await;
}

#[tokio::test]
async fn a_resumed_turn_keeps_its_budget_on_postgres() {
    budget_holds(true).await;
}

/// Cut inside a subtask that had written a file: the subtask goes on from its own last round
/// (the write it made is not made again, the next one is), answers, and the turn goes on.
async fn cut_in_a_subtask(postgres: bool) {
    let db = Db::new(postgres).await;
    let script = json!({"conversations": [
        {"match": "careful work", "steps": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "once.md", "content": "x"}}]},
            {"delay_ms": 1500, "tool_calls": [{"name": "write_file", "arguments": {"path": "twice.md", "content": "y"}}]},
            {"text": "child done"}]},
        {"match": "*", "steps": [
            {"chunks": ["delegating "], "tool_calls": [{"name": "run_subtask", "arguments": {"title": "t", "instructions": "careful work"}}]},
            {"text": "all done", "repeat": true}]}]});
    let server = start_with(&db, &script, "[agent]\nmax_total_subtasks = 1\n").await;
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "chat_message", "data": {"content": "go", "permission_mode": "auto"}}),
    )
    .await;
    let (thread, last_seq) = kill_after_writing(server, &mut ws, "once.md").await;

    let server = start_with(&db, &script, "[agent]\nmax_total_subtasks = 1\n").await;
    let (_, frames) = resume_to_end(&server, &thread, last_seq).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed", "{message}");
    assert_eq!(message["message"]["content"], "delegating all done");
    let trace = server.trace(&thread, message).await;
    let writes = results_in(&trace, "write_file");
    assert_eq!(
        writes,
        ["wrote 1 bytes to once.md", "wrote 1 bytes to twice.md"],
        "{trace}"
    );
    let items = server.get(&format!("/threads/{thread}/items")).await;
    let results = results(&items);
    let subtask = results.iter().find(|(n, _)| n == "run_subtask").unwrap();
    assert_eq!(subtask.1, "child done", "{results:?}");
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_turn_cut_inside_a_subtask_goes_on_inside_it_on_sqlite() {
    cut_in_a_subtask(false).await;
}

#[tokio::test]
async fn a_turn_cut_inside_a_subtask_goes_on_inside_it_on_postgres() {
    cut_in_a_subtask(true).await;
}

/// Killed before its first round was on record: the turn a client saw start goes on from its
/// user message.
#[tokio::test]
async fn a_turn_killed_before_its_first_round_starts_over() {
    let db = Db::new(false).await;
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["slowly "], "delay_ms": 1500}, {"text": "again"}]}]});
    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    send(&mut ws, chat("keep this message", None)).await;
    let started = until(&mut ws, |f| f["type"] == "turn_started").await;
    let thread = started[0]["thread_id"].as_str().unwrap().to_owned();
    server.kill().await;

    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}}),
    )
    .await;
    let frames = until(&mut ws, is_done).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed", "{frames:?}");
    assert_eq!(message["message"]["content"], "slowly ");
    server.stop().await;
    db.drop_database().await;
}

/// A code-mode turn killed while its run waited for an approval: taken up, it redoes that run
/// whole; the read it had made gives back its recorded result (not run again), the write is
/// asked again (same id) and runs once approved, and `done()` ends the turn without another
/// model call.
async fn code_run_redone(postgres: bool) {
    let db = Db::new(postgres).await;
    let code = "```js\nconst a = await tools.read_file({path: \"in.md\"});\nawait tools.write_file({path: \"out.md\", content: \"copied\"});\ndone(\"copied\");\n```";
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"text": code}, {"text": "a second model call", "repeat": true}]}]});
    let workspace = db.dir.path().join("workspace/local");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("in.md"), "source").unwrap();
    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "chat_message", "data": {"content": "copy it", "mode": "code"}}),
    )
    .await;
    let (server, mut ws, thread, call, resumed) =
        restart_while_asking(server, ws, &db, &script).await;
    assert_eq!(resumed["mode"], "code");
    send(
        &mut ws,
        json!({"type": "tool_approval_response", "tool_call_id": call, "decision": "allow"}),
    )
    .await;
    let frames = until(&mut ws, is_done).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed", "{message}");
    assert_eq!(message["message"]["content"], "copied");
    assert_eq!(
        std::fs::read_to_string(workspace.join("out.md")).unwrap(),
        "copied"
    );
    let trace = server.trace(&thread, message).await;
    let reads = results_in(&trace, "read_file");
    let writes = results_in(&trace, "write_file");
    let runs = results_in(&trace, "code.execute");
    assert_eq!(reads, ["source"], "read once: {trace}");
    assert_eq!(writes.len(), 1, "{trace}");
    assert!(writes[0].starts_with("wrote"), "{trace}");
    assert_eq!(runs.len(), 1, "one run on record: {trace}");
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_code_run_cut_mid_way_is_redone_whole_on_sqlite() {
    code_run_redone(false).await;
}

#[tokio::test]
async fn a_code_run_cut_mid_way_is_redone_whole_on_postgres() {
    code_run_redone(true).await;
}

/// Cut while two parallel jobs run (one had written its first file): each job goes on from
/// its own last round, no file is written twice, and the call's result holds both answers.
async fn cut_in_parallel_jobs(postgres: bool) {
    let db = Db::new(postgres).await;
    // Job b writes its first file 300 ms after job a: the kill that follows it finds both
    // jobs waiting for their next model call.
    let job = |name: &str, delay_ms: u64| {
        json!({"match": format!("job {name}"), "steps": [
            {"delay_ms": delay_ms, "tool_calls": [{"name": "write_file", "arguments": {"path": format!("{name}1.md"), "content": "1"}}]},
            {"delay_ms": 1500, "tool_calls": [{"name": "write_file", "arguments": {"path": format!("{name}2.md"), "content": "2"}}]},
            {"text": format!("{name} done")}]})
    };
    let script = json!({"conversations": [job("a", 0), job("b", 300),
        {"match": "*", "steps": [
            {"tool_calls": [{"name": "run_parallel_subagents", "arguments": {"jobs": [{"task": "job a"}, {"task": "job b"}]}}]},
            {"text": "all done", "repeat": true}]}]});
    let limit = "[agent]\nmax_total_subtasks = 2\nallow_parallel_subagents = true\n";
    let server = start_with(&db, &script, limit).await;
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "chat_message", "data": {"content": "go", "permission_mode": "auto"}}),
    )
    .await;
    let (thread, last_seq) = kill_after_writing(server, &mut ws, "b1.md").await;

    let server = start_with(&db, &script, limit).await;
    let (_, frames) = resume_to_end(&server, &thread, last_seq).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed", "{message}");
    assert_eq!(message["message"]["content"], "all done");
    let trace = server.trace(&thread, message).await;
    let mut writes = results_in(&trace, "write_file");
    writes.sort();
    assert_eq!(
        writes,
        [
            "wrote 1 bytes to a1.md",
            "wrote 1 bytes to a2.md",
            "wrote 1 bytes to b1.md",
            "wrote 1 bytes to b2.md"
        ],
        "{trace}"
    );
    let parallel = results_in(&trace, "run_parallel_subagents");
    let result: Value = serde_json::from_str(&parallel[0]).unwrap();
    let outputs: Vec<&str> = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs, ["a done", "b done"], "{result}");
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_turn_cut_inside_parallel_jobs_goes_on_inside_each_on_sqlite() {
    cut_in_parallel_jobs(false).await;
}

#[tokio::test]
async fn a_turn_cut_inside_parallel_jobs_goes_on_inside_each_on_postgres() {
    cut_in_parallel_jobs(true).await;
}

#[tokio::test]
async fn a_resumed_turn_keeps_what_it_was_started_with() {
    // Long-term memory on for this message: `recall` is a tool of its turn. Cut after the
    // first round; the second round, in the turn's next life, recalls.
    let db = Db::new(false).await;
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": ["looking. "], "tool_calls": [
            {"name": "write_file", "arguments": {"path": "m.md", "content": "x"}}]},
        {"delay_ms": 300, "tool_calls": [{"name": "recall", "arguments": {"query": "loom"}}]},
        {"text": "recalled", "repeat": true}]}]});
    let server = start(&db, &script).await;
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "chat_message", "data": {"content": "remember?",
        "permission_mode": "auto", "memory_enabled": true}}),
    )
    .await;
    let (thread, last_seq) = kill_after_writing(server, &mut ws, "m.md").await;

    let server = start(&db, &script).await;
    let (_ws, frames) = resume_to_end(&server, &thread, last_seq).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed", "{frames:?}");
    let recall = frames
        .iter()
        .find(|f| f["type"] == "tool_call_update" && f["status"] == "end" && f["name"] == "recall")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(
        recall["is_error"], false,
        "memory was off in its next life: {recall}"
    );
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_media_turn_cut_mid_generation_ends_with_a_clear_message_and_is_not_paid_twice() {
    // An Images API of the test's own that takes its time and counts the generations.
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let api = axum::Router::new().route(
        "/v1/images/generations",
        axum::routing::post(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                axum::Json(json!({"data": []}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let images = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, api).await });

    let db = Db::new(false).await;
    let script =
        json!({"conversations": [{"match": "*", "steps": [{"text": "ok", "repeat": true}]}]});
    let more = format!("[media]\nimage_url = \"{images}\"\nimage_api_key = \"k\"\n");
    let server = start_with(&db, &script, &more).await;
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "chat_message", "data": {"content": "a loom",
        "media_generation": {"mode": "image", "prompt": "a loom at dawn"}}}),
    )
    .await;
    let started = until(&mut ws, |f| f["type"] == "turn_started").await;
    let thread = started[0]["thread_id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while calls.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the generation never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    server.kill().await;

    let server = start_with(&db, &script, &more).await;
    let (_ws, frames) = resume_to_end(&server, &thread, 0).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "interrupted", "{message}");
    let said = message["message"]["content"].as_str().unwrap();
    assert!(said.contains("not started again"), "{said}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "generated twice"
    );
    server.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn a_workflow_run_cut_mid_way_goes_on_from_its_completed_nodes() {
    // A write, then a slow model node, then a write of what the model said. Killed while
    // the model node runs: the next life gives the first write's outputs back (it is not
    // run again), runs the model node again and then the second write.
    let db = Db::new(true).await;
    let script = json!({"conversations": [
        {"match": "slow model", "steps": [{"text": "thought", "delay_ms": 1500, "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}]});
    let server = start(&db, &script).await;
    let workflow = json!({"name": "two writes", "description": "writes twice", "graph": {
    "nodes": [
        {"id": "first", "type": "write_file", "inputs": {"path": "a.md", "content": "one"}},
        {"id": "think", "type": "llm.prompt", "inputs": {"prompt": "slow model please"}},
        {"id": "second", "type": "write_file", "inputs": {"path": "b.md"}},
        {"id": "out", "type": "output", "inputs": {"name": "second"}}
    ],
    "edges": [
        {"from": "first", "output": "result", "to": "think", "input": "system"},
        {"from": "think", "output": "text", "to": "second", "input": "content"},
        {"from": "second", "output": "result", "to": "out", "input": "value"}
    ]}});
    let saved: Value = reqwest::Client::new()
        .post(format!("http://{}/workflows", server.addr))
        .json(&workflow)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut ws = server.connect().await;
    send(
        &mut ws,
        json!({"command": "chat_message", "data": {"content": "run it", "permission_mode": "auto",
        "workflow_target": "workflow", "workflow_id": saved["id"]}}),
    )
    .await;
    let frames = until(&mut ws, |f| {
        f["type"] == "node_update" && f["node_id"] == "think" && f["status"] == "running"
    })
    .await;
    let thread = frames[0]["thread_id"].as_str().unwrap().to_owned();
    let last_seq = frames
        .iter()
        .filter_map(|f| f["seq"].as_u64())
        .max()
        .unwrap();
    // Killed once the first write's completion is on record (a completion the kill beat
    // would make it a node that may have acted: failed, not run again).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let items = server.get(&format!("/threads/{thread}/items")).await;
        let kept =
            items.as_array().unwrap().iter().any(|i| {
                i["kind"] == "node" && i["node_id"] == "first" && i["status"] == "completed"
            });
        if kept {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never kept: {items}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    server.kill().await;

    let server = start(&db, &script).await;
    let (_ws, frames) = resume_to_end(&server, &thread, last_seq).await;
    let message = frames.iter().find(|f| f["type"] == "message").unwrap();
    assert_eq!(message["message"]["status"], "completed", "{frames:?}");
    let nodes: Vec<String> = frames
        .iter()
        .filter(|f| f["type"] == "node_update")
        .map(|f| {
            format!(
                "{} {}",
                f["node_id"].as_str().unwrap(),
                f["status"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        nodes,
        [
            "first completed",
            "think running",
            "think completed",
            "second running",
            "second completed",
            "out running",
            "out completed"
        ],
        "the first write given back, the rest run"
    );
    let items = server.get(&format!("/threads/{thread}/items")).await;
    let writes: Vec<String> = results(&items)
        .into_iter()
        .filter(|(tool, _)| tool == "write_file")
        .map(|(_, result)| result)
        .collect();
    assert_eq!(writes.len(), 2, "each write once: {writes:?}");
    let workspace = db.dir.path().join("workspace");
    let b = std::fs::read_dir(&workspace)
        .unwrap()
        .flatten()
        .find_map(|user| std::fs::read_to_string(user.path().join("b.md")).ok());
    assert_eq!(b.as_deref(), Some("thought"));
    server.stop().await;
    db.drop_database().await;
}
