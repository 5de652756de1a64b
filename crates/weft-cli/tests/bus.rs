//! Real `weft serve` replicas on one PostgreSQL database and a real `nats-server`: a client
//! of one replica follows, answers, re-moded, stops and deletes a turn another replica runs;
//! a thread deleted while the replica running its turn is frozen (`SIGSTOP`) stays deleted
//! when that replica wakes; a message to a thread busy elsewhere is refused as on one
//! replica; a follower whose owner dies gets the stored answer once the turn is closed, and
//! an approval answered before another replica takes the turn up is applied there; a
//! replica told to stop (`SIGTERM`) closes its sockets with 1012 and `weft chat` resumes
//! through another replica; with three replicas, one runs a turn, one follows it and the
//! third answers its approval; the prompt API reads, follows and answers a prompt another
//! replica runs; `weft chat` whose replica is killed reconnects and sees the turn taken up
//! elsewhere go on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{chat, is_done, recv, send, until, Balancer, Db, Nats, Server, Ws, NO_USER_LIMITS};
use tokio::io::AsyncBufReadExt;
use weft_store::Store;

/// A replica named `id` on `nats`, with short leases.
async fn replica(db: &Db, nats: &Nats, script: &Value, id: &str) -> Server {
    replica_with(db, nats, script, id, "").await
}

/// A replica as [`replica`] makes it, with more `[server]` settings.
async fn replica_with(db: &Db, nats: &Nats, script: &Value, id: &str, server: &str) -> Server {
    let config = format!(
        "{NO_USER_LIMITS}{server}[cluster]\nreplica_id = \"{id}\"\nnats_url = \"{}\"\nlease_ms = 1500\nheartbeat_ms = 250\n",
        nats.url
    );
    Server::start_with(db, script, &config).await
}

/// A replica as [`replica`] makes it, holding its turns' leases for `lease_ms`.
async fn replica_leasing(db: &Db, nats: &Nats, script: &Value, id: &str, lease_ms: u64) -> Server {
    let config = format!(
        "{NO_USER_LIMITS}[cluster]\nreplica_id = \"{id}\"\nnats_url = \"{}\"\nlease_ms = {lease_ms}\nheartbeat_ms = 250\n",
        nats.url
    );
    Server::start_with(db, script, &config).await
}

/// A replica as [`replica`] makes it that closes the turns dead replicas left.
async fn interrupting_replica(db: &Db, nats: &Nats, script: &Value, id: &str) -> Server {
    let config = format!(
        "{NO_USER_LIMITS}[cluster]\nreplica_id = \"{id}\"\nnats_url = \"{}\"\nlease_ms = 1500\nheartbeat_ms = 250\nrecovery = \"interrupt\"\n",
        nats.url
    );
    Server::start_with(db, script, &config).await
}

/// Stop the replicas, then the bus, then drop the database.
async fn shut_down(replicas: Vec<Server>, nats: Nats, store: Option<Store>, db: Db) {
    for replica in replicas {
        replica.stop().await;
    }
    nats.stop().await;
    if let Some(store) = store {
        store.close().await;
    }
    db.drop_database().await;
}

/// Each turn writes a file (asking first in Default mode), then says so.
fn write_script() -> Value {
    let write = json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}]});
    json!({"conversations": [{"match": "*", "steps": [
        write, {"text": "written"}, write, {"text": "written", "repeat": true}]}]})
}

/// A's client starts a turn that waits for an approval: its thread and the call's id.
async fn waiting_turn(ws: &mut Ws, content: &str, thread: Option<&str>) -> (String, Value) {
    send(ws, chat(content, thread)).await;
    let frames = until(ws, |f| f["type"] == "tool_approval_request").await;
    let thread = frames[0]["thread_id"].as_str().unwrap().to_owned();
    (thread, frames.last().unwrap()["tool_call_id"].clone())
}

fn completed(frames: &[Value]) -> bool {
    frames
        .iter()
        .any(|f| f["type"] == "message" && f["message"]["status"] == "completed")
}

async fn newest_status(store: &Store, thread: &str) -> String {
    let messages = store.messages(thread).await.unwrap();
    messages.last().unwrap().status.clone()
}

/// A read, then a slow second round (for a turn cut between them).
fn two_round_script() -> Value {
    json!({"conversations": [{"match": "*", "steps": [
        {"text": "first part. ", "tool_calls": [{"name": "memory_list", "arguments": {}}]},
        {"delay_ms": 2_000, "text": "second part."}]}]})
}

/// Wait until the only thread's running turn has its first round's results on record.
async fn first_round_on_record(store: &Store) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(thread) = store.threads_of("local").await.unwrap().first() {
            if let Some(message) = store.last_assistant_message(&thread.id).await.unwrap() {
                let items = store.turn_items(&thread.id, &message.id).await.unwrap();
                if items.iter().any(|i| i.kind == "tool_results") {
                    return;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "the first round never reached the record"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `DELETE /threads/{thread}` through `replica`, answered 204. A replica frozen mid-write
/// holds it up for at most `[database] stalled_transaction_ms` (5 s) beyond the stop it does
/// not answer (5 s).
async fn delete_thread(replica: &Server, thread: &str) {
    let deleting = reqwest::Client::new()
        .delete(format!("http://{}/threads/{thread}", replica.addr))
        .send();
    let deleted = tokio::time::timeout(Duration::from_secs(60), deleting)
        .await
        .expect("the delete is still waiting")
        .unwrap()
        .status();
    assert_eq!(deleted.as_u16(), 204);
}

/// Send `frame` and expect it refused with "try again".
async fn refused_try_again(ws: &mut Ws, frame: Value) {
    send(ws, frame).await;
    let refused = until(ws, |f| f["type"] == "error").await;
    let why = refused.last().unwrap()["message"].as_str().unwrap();
    assert!(why.contains("try again"), "{refused:?}");
}

/// Output lines of a `weft chat` process.
type ChatLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// `weft chat go` through the server at `addr`, and its output lines.
fn weft_chat(addr: &str) -> (tokio::process::Child, ChatLines) {
    let mut chat = tokio::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["chat", "--url", &format!("http://{addr}"), "go"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = chat.stdout.take().unwrap();
    (chat, tokio::io::BufReader::new(stdout).lines())
}

/// Add `weft chat`'s lines to `shown` until one holds `needle` (none: until it ends).
async fn read_until(lines: &mut ChatLines, shown: &mut String, needle: Option<&str>) {
    loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .unwrap()
            .unwrap();
        let Some(line) = line else {
            assert!(needle.is_none(), "weft chat ended early: {shown}");
            return;
        };
        shown.push_str(&line);
        shown.push('\n');
        if needle.is_some_and(|n| line.contains(n)) {
            return;
        }
    }
}

#[tokio::test]
async fn a_client_of_any_replica_follows_answers_and_redirects_a_turn_another_runs() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = write_script();
    let a = replica(&db, &nats, &script, "a").await;
    let b = replica(&db, &nats, &script, "b").await;
    let health = b.get("/healthz").await;
    assert_eq!(health["bus"], "connected", "{health}");
    let mut on_a = a.connect().await;
    let (thread, call) = waiting_turn(&mut on_a, "write it", None).await;

    // Through B: a new message to the busy thread is refused as on one replica…
    let mut on_b = b.connect().await;
    send(&mut on_b, chat("me too", Some(&thread))).await;
    let refused = recv(&mut on_b).await;
    assert_eq!(
        (refused["type"].as_str(), refused["code"].as_str()),
        (Some("error"), Some("turn_in_progress")),
        "{refused}"
    );
    // …resuming replays the turn from A (its approval request too) and follows it live…
    send(
        &mut on_b,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}}),
    )
    .await;
    let replayed = until(&mut on_b, |f| f["type"] == "tool_approval_request").await;
    assert_eq!(replayed[0]["type"], "turn_started", "{replayed:?}");
    assert_eq!(replayed.last().unwrap()["tool_call_id"], call);
    // …and the answer given there reaches A's turn: both clients see it finish.
    send(
        &mut on_b,
        json!({"type": "tool_approval_response", "tool_call_id": call, "decision": "allow"}),
    )
    .await;
    let on_b_frames = until(&mut on_b, is_done).await;
    let on_a_frames = until(&mut on_a, is_done).await;
    assert!(completed(&on_a_frames), "{on_a_frames:?}");
    assert!(completed(&on_b_frames), "{on_b_frames:?}");
    let seqs: Vec<u64> = replayed
        .iter()
        .chain(&on_b_frames)
        .filter_map(|f| f["seq"].as_u64())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "followed frames keep the owner's order: {seqs:?}"
    );
    assert_eq!(newest_status(&store, &thread).await, "completed");

    // A second turn on A; B switches the thread to Auto, which releases A's pending call.
    let (_, _) = waiting_turn(&mut on_a, "write it again", Some(&thread)).await;
    send(
        &mut on_b,
        json!({"command": "set_permission_mode", "data": {"thread_id": thread, "permission_mode": "auto"}}),
    )
    .await;
    let on_a_frames = until(&mut on_a, is_done).await;
    assert!(completed(&on_a_frames), "{on_a_frames:?}");
    assert_eq!(
        store
            .thread(&thread)
            .await
            .unwrap()
            .unwrap()
            .permission_mode,
        "auto"
    );
    let metrics = reqwest::get(format!("http://{}/metrics", a.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !metrics.contains("weft_bus_published_total 0"),
        "A published B's follower's frames: {metrics}"
    );
    shut_down(vec![a, b], nats, Some(store), db).await;
}

#[tokio::test]
async fn stop_and_delete_through_another_replica_reach_the_turn() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    // Every model call asks to write: every turn waits for a person.
    let script = json!({"conversations": [{"match": "*", "steps": [{"repeat": true, "tool_calls": [
        {"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}]}]}]});
    let a = replica(&db, &nats, &script, "a").await;
    let b = replica(&db, &nats, &script, "b").await;
    let mut on_a = a.connect().await;
    let (thread, _) = waiting_turn(&mut on_a, "write it", None).await;

    let mut on_b = b.connect().await;
    send(
        &mut on_b,
        json!({"command": "stop", "data": {"thread_id": thread}}),
    )
    .await;
    until(&mut on_a, is_done).await;
    assert_eq!(newest_status(&store, &thread).await, "cancelled");

    // DELETE through B while A's next turn waits: the turn stops, the thread is gone.
    waiting_turn(&mut on_a, "write it again", Some(&thread)).await;
    delete_thread(&b, &thread).await;
    until(&mut on_a, is_done).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        store.thread(&thread).await.unwrap().is_none(),
        "a stopped turn's last write brought it back"
    );
    shut_down(vec![a, b], nats, Some(store), db).await;
}

#[tokio::test]
async fn a_thread_deleted_while_its_replica_is_frozen_stays_deleted_when_the_replica_wakes() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    // Ten slow rounds, each some text and a read: the turn writes a round's rows every 300 ms.
    let mut steps: Vec<Value> = (0..10)
        .map(|r| {
            json!({"delay_ms": 300, "chunks": [format!("r{r} ")],
                   "tool_calls": [{"name": "memory_list", "arguments": {}}]})
        })
        .collect();
    steps.push(json!({"text": "done", "repeat": true}));
    let script = json!({"conversations": [{"match": "*", "steps": steps}]});
    // A's lease outlasts its freeze: when it wakes, it still believes it runs the turn.
    let a = replica_leasing(&db, &nats, &script, "a", 30_000).await;
    let b = replica(&db, &nats, &script, "b").await;
    let mut on_a = a.connect().await;
    send(
        &mut on_a,
        json!({"command": "chat_message", "data": {"content": "read ten times", "permission_mode": "auto"}}),
    )
    .await;
    let frames = until(&mut on_a, |f| {
        f["type"] == "tool_call_update" && f["status"] == "end"
    })
    .await;
    let thread = frames[0]["thread_id"].as_str().unwrap().to_owned();
    let message = store
        .last_assistant_message(&thread)
        .await
        .unwrap()
        .unwrap();

    // A freezes mid-turn; the thread is deleted through B, whose stop A cannot answer.
    a.signal("STOP");
    delete_thread(&b, &thread).await;
    assert!(
        store.lease(&message.id).await.unwrap().is_none(),
        "the lease outlived its thread"
    );

    // A wakes and goes on with the turn it had: nothing it writes for it lands.
    a.signal("CONT");
    let woke = until(&mut on_a, is_done).await;
    let errors: Vec<&str> = woke
        .iter()
        .filter(|f| f["type"] == "error")
        .map(|f| f["message"].as_str().unwrap())
        .collect();
    assert!(
        matches!(errors[..], [told] if told.contains("lost the turn's lease")),
        "{woke:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(store.thread(&thread).await.unwrap().is_none());
    assert!(store.messages(&thread).await.unwrap().is_empty());
    assert!(store
        .turn_items(&thread, &message.id)
        .await
        .unwrap()
        .is_empty());
    assert!(store.model_calls(&thread).await.unwrap().is_empty());
    assert!(store.approvals(&thread).await.unwrap().is_empty());
    shut_down(vec![a, b], nats, Some(store), db).await;
}

#[tokio::test]
async fn a_follower_whose_owner_dies_sees_another_replica_take_the_turn_up_and_answers_it_there() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = write_script();
    // A's lease outlasts the answer's way to B (with time to spare on a loaded machine).
    let lease_ms = 4000;
    let a = replica_leasing(&db, &nats, &script, "a", lease_ms).await;
    let b = replica(&db, &nats, &script, "b").await;
    let mut on_a = a.connect().await;
    let (thread, call) = waiting_turn(&mut on_a, "write it", None).await;
    let mut on_b = b.connect().await;
    send(
        &mut on_b,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}}),
    )
    .await;
    let seen = until(&mut on_b, |f| f["type"] == "tool_approval_request").await;
    let seen_seq = seen.iter().filter_map(|f| f["seq"].as_u64()).max().unwrap();

    let killed = Instant::now();
    a.kill().await;
    // Answered before anyone has taken the turn up. While A's lease lasts the answer is
    // refused ("try again"); on a machine so loaded that B handles it only after the lease
    // ran out, it is kept for the replica that takes the turn up (or B already runs the
    // turn and applies it), and the turn goes on with no second answer.
    send(
        &mut on_b,
        json!({"type": "tool_approval_response", "tool_call_id": call, "decision": "allow"}),
    )
    .await;
    // B takes the turn up once A's lease expires: the approval is asked again, same id. The
    // refusal may come after that (should the bus not yet know A is gone, the request to it
    // times out after 5 s).
    let mut frames = Vec::new();
    let mut asked_again = None;
    let refused = |frames: &[Value]| frames.iter().any(|f: &Value| f["type"] == "error");
    loop {
        let asked_and_refused = asked_again.is_some() && refused(&frames);
        if asked_and_refused || frames.iter().any(is_done) {
            break;
        }
        let f = recv(&mut on_b).await;
        if f["type"] == "tool_approval_request" && asked_again.is_none() {
            asked_again = Some(killed.elapsed());
        }
        frames.push(f);
    }
    let resumed = frames
        .iter()
        .find(|f| f["type"] == "turn_resumed")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert!(resumed["seq"].as_u64().unwrap() > seen_seq, "{resumed}");
    let frames = if refused(&frames) {
        let asked_again = asked_again.unwrap();
        let refusal = frames.iter().find(|f| f["type"] == "error").unwrap();
        assert!(
            refusal["message"].as_str().unwrap().contains("try again"),
            "{refusal}"
        );
        eprintln!(
            "the turn ran again {} ms after its owner died (lease {lease_ms} ms)",
            asked_again.as_millis()
        );
        assert!(asked_again < Duration::from_millis(lease_ms + 1000 + 1000));
        let asked = frames
            .iter()
            .find(|f| f["type"] == "tool_approval_request")
            .unwrap();
        assert_eq!(asked["tool_call_id"], call);
        let pending = store.approvals(&thread).await.unwrap();
        assert_eq!(pending.len(), 1, "the same approval, still pending");
        assert_eq!(pending[0].status, "pending");
        send(
            &mut on_b,
            json!({"type": "tool_approval_response", "tool_call_id": call, "decision": "allow"}),
        )
        .await;
        until(&mut on_b, is_done).await
    } else {
        eprintln!("the answer was handled after A's lease ran out: kept and applied");
        frames
    };
    assert!(completed(&frames), "{frames:?}");
    let text: String = frames
        .iter()
        .filter(|f| f["type"] == "chunk")
        .filter_map(|f| f["content"].as_str())
        .collect();
    assert_eq!(text, "written");
    assert_eq!(newest_status(&store, &thread).await, "completed");
    let results: Vec<String> = store
        .thread_items(&thread)
        .await
        .unwrap()
        .iter()
        .filter(|i| i.kind == "tool_results")
        .map(|i| i.body.clone())
        .collect();
    assert_eq!(results.len(), 1, "one result for the one call: {results:?}");
    assert!(results[0].contains("\"is_error\":false"), "{results:?}");
    shut_down(vec![b], nats, Some(store), db).await;
}

#[tokio::test]
async fn a_follower_whose_owner_dies_gets_the_stored_answer() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = write_script();
    let a = interrupting_replica(&db, &nats, &script, "a").await;
    let b = interrupting_replica(&db, &nats, &script, "b").await;
    let mut on_a = a.connect().await;
    let (thread, _) = waiting_turn(&mut on_a, "write it", None).await;
    let mut on_b = b.connect().await;
    send(
        &mut on_b,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}}),
    )
    .await;
    until(&mut on_b, |f| f["type"] == "tool_approval_request").await;

    let killed = Instant::now();
    a.kill().await;
    let frames = until(&mut on_b, is_done).await;
    eprintln!(
        "the follower's turn ended {} ms after its owner died",
        killed.elapsed().as_millis()
    );
    let message = frames
        .iter()
        .find(|f| f["type"] == "message")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(message["message"]["status"], "interrupted", "{message}");
    assert_eq!(newest_status(&store, &thread).await, "interrupted");
    let last_seq = frames
        .iter()
        .filter_map(|f| f["seq"].as_u64())
        .max()
        .unwrap();

    // The thread goes on through B, its frames after every seq the client saw from A.
    send(&mut on_b, json!({"command": "chat_message", "data": {"content": "again", "thread_id": thread, "permission_mode": "auto"}})).await;
    let frames = until(&mut on_b, is_done).await;
    assert!(completed(&frames));
    let first = frames.iter().find_map(|f| f["seq"].as_u64()).unwrap();
    assert!(first > last_seq, "seq {first} after {last_seq}");
    shut_down(vec![b], nats, Some(store), db).await;
}

#[tokio::test]
async fn sigterm_closes_with_1012_and_weft_chat_resumes_through_another_replica() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    // The turn is mid-way when its replica gets SIGTERM.
    let script = two_round_script();
    let config = |id: &str| {
        format!(
            "[limits]\nturns_per_user = 0\nmessages_per_minute = 0\n\
             [server]\nmax_sockets_per_user = 0\nshutdown_timeout_ms = 20000\n\
             [cluster]\nreplica_id = \"{id}\"\nnats_url = \"{}\"\nlease_ms = 1500\nheartbeat_ms = 250\n",
            nats.url
        )
    };
    let a = Server::start_with(&db, &script, &config("a")).await;
    let b = Server::start_with(&db, &script, &config("b")).await;
    let balancer = Balancer::start(&a.addr).await;

    let (chat, mut lines) = weft_chat(&balancer.addr);
    let mut shown = String::new();
    read_until(&mut lines, &mut shown, Some("└─ memory_list")).await;

    // A deploy: new connections go to B, A is told to stop.
    balancer.route_to(&b.addr);
    a.signal("TERM");
    read_until(&mut lines, &mut shown, None).await;
    let out = chat.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{shown}\n{stderr}");
    assert!(
        stderr.contains("1012"),
        "closed as a service restart: {stderr}"
    );
    assert!(shown.contains("second part."), "{shown}\n{stderr}");
    assert_eq!(
        shown.matches("first part.").count(),
        1,
        "resumed after what was shown, not from the start: {shown}"
    );
    let thread = store.threads_of("local").await.unwrap()[0].id.clone();
    let message = store
        .last_assistant_message(&thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.status, "completed");
    shut_down(vec![b], nats, Some(store), db).await;
}

#[tokio::test]
async fn weft_chat_goes_on_when_its_replica_is_killed_and_another_takes_the_turn_up() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    // The turn is mid-way when its replica is killed.
    let script = two_round_script();
    let a = replica(&db, &nats, &script, "a").await;
    let b = replica(&db, &nats, &script, "b").await;
    let balancer = Balancer::start(&a.addr).await;

    let (chat, mut lines) = weft_chat(&balancer.addr);
    let mut shown = String::new();
    read_until(&mut lines, &mut shown, Some("└─ memory_list")).await;
    // Killed while it waits for the model's second answer, its first round on record (a
    // round of calls that only read is shown before it is written; one that dies in those
    // few milliseconds is run again where it is taken up).
    first_round_on_record(&store).await;

    // A dies: `weft chat` reconnects (to B), and B takes the turn up once A's lease expires.
    balancer.route_to(&b.addr);
    a.kill().await;
    read_until(&mut lines, &mut shown, None).await;
    let out = chat.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{shown}\n{stderr}");
    assert!(shown.contains("taken up again"), "{shown}\n{stderr}");
    assert!(shown.contains("second part."), "{shown}\n{stderr}");
    assert_eq!(shown.matches("first part.").count(), 1, "{shown}");
    let thread = store.threads_of("local").await.unwrap()[0].id.clone();
    let message = store
        .last_assistant_message(&thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.status, "completed");
    assert_eq!(message.content, json!("first part. second part."));
    shut_down(vec![b], nats, Some(store), db).await;
}

#[tokio::test]
async fn a_dead_replicas_turn_nobody_has_taken_up_yet_is_followed_until_one_does_and_an_answer_meanwhile_waits_for_it(
) {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = write_script();
    let a = replica(&db, &nats, &script, "a").await;
    // B looks for turns dead replicas left only every 5 s: A's lease has expired, and
    // nobody has taken its turn up, when the client answers and resumes through B.
    let config = format!(
        "{NO_USER_LIMITS}[cluster]\nreplica_id = \"b\"\nnats_url = \"{}\"\nlease_ms = 15000\nheartbeat_ms = 5000\n",
        nats.url
    );
    let b = Server::start_with(&db, &script, &config).await;
    let mut on_a = a.connect().await;
    let (thread, call) = waiting_turn(&mut on_a, "write it", None).await;
    let message = store
        .last_assistant_message(&thread)
        .await
        .unwrap()
        .unwrap();
    a.kill().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while store
        .lease(&message.id)
        .await
        .unwrap()
        .is_some_and(|l| l.owner == "a" && l.expires_at > weft_store::now_ms())
    {
        assert!(Instant::now() < deadline, "A's lease never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut on_b = b.connect().await;
    // A stop now is refused ("try again": the turn is not silently left to go on).
    refused_try_again(
        &mut on_b,
        json!({"command": "stop", "data": {"thread_id": thread}}),
    )
    .await;
    // An answer now is kept for the replica that takes the turn up: no error.
    send(
        &mut on_b,
        json!({"type": "tool_approval_response", "tool_call_id": call, "decision": "allow"}),
    )
    .await;
    send(&mut on_b, json!({"type": "ping"})).await;
    let answered = until(&mut on_b, |f| f["type"] == "pong" || f["type"] == "error").await;
    assert_eq!(answered.last().unwrap()["type"], "pong", "{answered:?}");
    send(
        &mut on_b,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}}),
    )
    .await;
    // Not answered as if the turn had ended: followed until B takes it up, where the kept
    // answer applies (nobody is asked twice) and the turn ends.
    let frames = until(&mut on_b, is_done).await;
    assert!(
        frames.iter().any(|f| f["type"] == "turn_resumed"),
        "{frames:?}"
    );
    let resolved: Vec<_> = frames
        .iter()
        .filter(|f| f["type"] == "tool_approval_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "{frames:?}");
    assert_eq!(resolved[0]["decision"], "allow");
    assert!(completed(&frames), "{frames:?}");
    assert_eq!(newest_status(&store, &thread).await, "completed");
    let approvals = store.approvals(&thread).await.unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0].status, "approved");
    shut_down(vec![b], nats, Some(store), db).await;
}

#[tokio::test]
async fn three_replicas_one_runs_the_turn_one_follows_it_one_answers_it() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = write_script();
    let a = replica(&db, &nats, &script, "a").await;
    let b = replica(&db, &nats, &script, "b").await;
    let c = replica(&db, &nats, &script, "c").await;
    let mut on_a = a.connect().await;
    let (thread, call) = waiting_turn(&mut on_a, "write it", None).await;

    let mut on_b = b.connect().await;
    send(
        &mut on_b,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}}),
    )
    .await;
    until(&mut on_b, |f| f["type"] == "tool_approval_request").await;
    let mut on_c = c.connect().await;
    send(
        &mut on_c,
        json!({"type": "tool_approval_response", "tool_call_id": call, "decision": "allow"}),
    )
    .await;
    let followed = until(&mut on_b, is_done).await;
    assert!(completed(&followed));
    assert!(completed(&until(&mut on_a, is_done).await));
    assert_eq!(newest_status(&store, &thread).await, "completed");
    // The next turn runs on B: its frames come after every seq B relayed from A.
    let last_seq = followed
        .iter()
        .filter_map(|f| f["seq"].as_u64())
        .max()
        .unwrap();
    send(&mut on_b, json!({"command": "chat_message", "data": {"content": "again", "thread_id": thread, "permission_mode": "auto"}})).await;
    let frames = until(&mut on_b, is_done).await;
    assert!(completed(&frames), "{frames:?}");
    let first = frames.iter().find_map(|f| f["seq"].as_u64()).unwrap();
    assert!(first > last_seq, "seq {first} after {last_seq}");
    // C answered and sent nothing else: its socket got no error.
    send(&mut on_c, json!({"type": "ping"})).await;
    assert_eq!(recv(&mut on_c).await["type"], "pong");
    shut_down(vec![a, b, c], nats, Some(store), db).await;
}

#[tokio::test]
async fn the_prompt_api_reads_follows_and_answers_a_prompt_another_replica_runs() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = write_script();
    let a = replica(&db, &nats, &script, "a").await;
    let b = replica(&db, &nats, &script, "b").await;
    let http = reqwest::Client::new();
    // POST /prompt on A answers once the turn waits for its write's approval.
    let waiting: Value = http
        .post(format!("http://{}/prompt", a.addr))
        .json(&json!({"input": "write it"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(waiting["state"], "waiting_for_approval", "{waiting}");
    let id = waiting["id"].as_str().unwrap().to_owned();
    let thread = waiting["conversation_id"].as_str().unwrap().to_owned();

    // Through B: read back as waiting, its events followed on A, approved there.
    let read = b.get(&format!("/prompts/{id}")).await;
    assert_eq!(read["state"], "waiting_for_approval", "{read}");
    let events = tokio::spawn(
        reqwest::get(format!("http://{}/prompts/{id}/events", b.addr))
            .await
            .unwrap()
            .text(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let call = store.approvals(&thread).await.unwrap()[0].id.clone();
    let answered: Value = http
        .post(format!("http://{}/prompts/{id}/approve", b.addr))
        .json(&json!({"tool_call_id": call}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answered["state"], "completed", "{answered}");
    let text = tokio::time::timeout(Duration::from_secs(20), events)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        text.contains("tool_approval_request"),
        "replayed from A: {text}"
    );
    assert!(text.contains("\"type\":\"message\""), "{text}");
    assert!(text.contains("\"done\":true"), "{text}");
    shut_down(vec![a, b], nats, Some(store), db).await;
}

/// Frames up to the end of a turn that completed (its `message`, then its final chunk);
/// frames of turns refused or cut before (an `error` and a final chunk) come along.
async fn until_completed(ws: &mut Ws) -> Vec<Value> {
    let mut frames: Vec<Value> = Vec::new();
    loop {
        let f = recv(ws).await;
        let end = is_done(&f) && frames.last().is_some_and(|p| p["type"] == "message");
        frames.push(f);
        if end {
            return frames;
        }
    }
}

fn seqs(frames: &[Value]) -> Vec<u64> {
    frames.iter().filter_map(|f| f["seq"].as_u64()).collect()
}

#[tokio::test]
async fn a_client_watching_a_thread_through_one_replica_sees_the_turns_another_starts() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"text": "one"}, {"text": "two", "delay_ms": 600}, {"text": "three", "delay_ms": 20_000}]}]});
    let grace = "detach_grace_ms = 300\n";
    let a = replica_with(&db, &nats, &script, "a", grace).await;
    let b = replica_with(&db, &nats, &script, "b", grace).await;

    // A first turn through B; its client stays on, watching the thread.
    let mut on_b = b.connect().await;
    send(&mut on_b, chat("hi", None)).await;
    let first = until(&mut on_b, is_done).await;
    let thread = first[0]["thread_id"].as_str().unwrap().to_owned();
    let first_last = *seqs(&first).last().unwrap();

    // Another device of the same user, through A, asks again.
    let mut on_a = a.connect().await;
    send(&mut on_a, chat("again", Some(&thread))).await;
    let second = until(&mut on_a, is_done).await;
    assert!(completed(&second), "{second:?}");
    assert!(
        seqs(&second).iter().all(|&s| s > first_last),
        "a turn another replica runs is numbered after the thread's last: {first_last} then {:?}",
        seqs(&second)
    );
    // B's client saw that turn too, relayed unchanged.
    let watched = until(&mut on_b, is_done).await;
    let started = |frames: &[Value]| {
        frames
            .iter()
            .find(|f| f["type"] == "turn_started")
            .map(|f| f["message_id"].clone())
    };
    assert_eq!(started(&watched), started(&second), "{watched:?}");
    assert!(completed(&watched), "{watched:?}");
    assert!(seqs(&watched).iter().all(|s| seqs(&second).contains(s)));

    // A third, long turn, through A; B's client follows it. A's client leaves: B's still
    // watches, so the turn goes on past the grace period…
    send(&mut on_a, chat("long", Some(&thread))).await;
    until(&mut on_a, |f| f["type"] == "turn_started").await;
    until(&mut on_b, |f| f["type"] == "turn_started").await;
    drop(on_a);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(newest_status(&store, &thread).await, "running");
    // …until B's client leaves too: A hears of it and stops the turn after the grace period.
    drop(on_b);
    let deadline = Instant::now() + Duration::from_secs(10);
    while newest_status(&store, &thread).await == "running" {
        assert!(
            Instant::now() < deadline,
            "the turn nobody watches any more still runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shut_down(vec![a, b], nats, Some(store), db).await;
}

#[tokio::test]
async fn a_follower_on_another_replica_gets_every_frame_of_a_turn_whose_answer_is_over_a_mib() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    // The second answer is cut at the 1 MiB output cap: its `message` frame is larger than
    // NATS takes in one message.
    let big = "x".repeat(1_200_000);
    // A pause first: the follower on B follows before any of it is sent, so it gets it live.
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"text": "one"}, {"delay_ms": 1_500, "text": big}]}]});
    // Long leases and heartbeats: a frame that never came would be made up from the store
    // only after seconds, with other frames than the owner sent.
    let config = |id: &str| {
        format!(
            "{NO_USER_LIMITS}[cluster]\nreplica_id = \"{id}\"\nnats_url = \"{}\"\nlease_ms = 20000\nheartbeat_ms = 5000\n",
            nats.url
        )
    };
    let a = Server::start_with(&db, &script, &config("a")).await;
    let b = Server::start_with(&db, &script, &config("b")).await;
    let mut on_b = b.connect().await;
    send(&mut on_b, chat("hi", None)).await;
    let first = until(&mut on_b, is_done).await;
    let thread = first[0]["thread_id"].as_str().unwrap().to_owned();

    let mut on_a = a.connect().await;
    send(&mut on_a, chat("again", Some(&thread))).await;
    let owner_saw = until(&mut on_a, is_done).await;
    let follower_saw = until(&mut on_b, is_done).await;
    let shape = |frames: &[Value]| -> Vec<(String, u64)> {
        frames
            .iter()
            .map(|f| {
                (
                    f["type"].as_str().unwrap().to_owned(),
                    f["seq"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(shape(&follower_saw), shape(&owner_saw));
    let message = |frames: &[Value]| {
        frames
            .iter()
            .find(|f| f["type"] == "message")
            .map(|f| f["message"]["content"].as_str().unwrap().len())
    };
    assert!(message(&follower_saw).unwrap() > 1_000_000);
    assert_eq!(message(&follower_saw), message(&owner_saw));
    shut_down(vec![a, b], nats, None, db).await;
}

#[tokio::test]
async fn a_follower_misses_nothing_of_a_turn_streamed_across_a_nats_restart() {
    let db = Db::new(true).await;
    let mut nats = Nats::start().await;
    let chunks: Vec<String> = (0..40).map(|i| format!("c{i} ")).collect();
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"text": "one"}, {"chunks": chunks, "chunk_delay_ms": 100}]}]});
    let a = replica(&db, &nats, &script, "a").await;
    let b = replica(&db, &nats, &script, "b").await;
    let mut on_b = b.connect().await;
    send(&mut on_b, chat("hi", None)).await;
    let first = until(&mut on_b, is_done).await;
    let thread = first[0]["thread_id"].as_str().unwrap().to_owned();

    // Another device asks through A; B's client follows. NATS restarts mid-stream.
    let mut on_a = a.connect().await;
    send(&mut on_a, chat("again", Some(&thread))).await;
    let mut followed = until(&mut on_b, |f| f["type"] == "chunk" && f["content"] == "c8 ").await;
    nats.restart(Duration::from_millis(1_000)).await;
    let owner_saw = until(&mut on_a, is_done).await;
    followed.extend(until(&mut on_b, is_done).await);
    let text = |frames: &[Value]| -> String {
        frames
            .iter()
            .filter(|f| f["type"] == "chunk" && f["depth"] == 0)
            .filter_map(|f| f["content"].as_str())
            .collect()
    };
    assert_eq!(text(&followed), text(&owner_saw), "{followed:?}");
    let seqs = seqs(&followed);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(completed(&followed), "{followed:?}");
    shut_down(vec![a, b], nats, None, db).await;
}

#[tokio::test]
async fn two_replicas_never_run_two_turns_of_a_thread_at_once() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let store = Store::connect(&db.url).await.unwrap();
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"text": "slow", "delay_ms": 300, "repeat": true}]}]});
    let a = replica(&db, &nats, &script, "a").await;
    let b = replica(&db, &nats, &script, "b").await;
    let mut on_a = a.connect().await;
    send(&mut on_a, chat("first", None)).await;
    let first = until(&mut on_a, is_done).await;
    let thread = first[0]["thread_id"].as_str().unwrap().to_owned();
    // Both clients watch the thread.
    let mut on_b = b.connect().await;
    send(
        &mut on_b,
        json!({"command": "resume_chat", "data": {"thread_id": thread, "last_seq": 0}}),
    )
    .await;
    until(&mut on_b, is_done).await;

    let mut last_seen = [*seqs(&first).last().unwrap(), 0];
    let mut last_turn = last_seen[0];
    for round in 0..8 {
        // The same thread, through both replicas, at the same moment.
        let text = format!("round {round}");
        tokio::join!(
            send(&mut on_a, chat(&text, Some(&thread))),
            send(&mut on_b, chat(&text, Some(&thread)))
        );
        let (seen_a, seen_b) = tokio::join!(until_completed(&mut on_a), until_completed(&mut on_b));
        let both: Vec<&Value> = seen_a.iter().chain(&seen_b).collect();
        let mut started: Vec<String> = both
            .iter()
            .filter(|f| f["type"] == "turn_started")
            .map(|f| f["message_id"].as_str().unwrap().to_owned())
            .collect();
        started.sort();
        started.dedup();
        assert_eq!(started.len(), 1, "round {round}: one turn runs: {both:?}");
        let refused = both
            .iter()
            .filter(|f| f["type"] == "error" && f["code"] == "turn_in_progress")
            .count();
        assert_eq!(refused, 1, "round {round}: the other is refused: {both:?}");
        // Each client's seq only increases, and the turn is numbered after the last one,
        // whichever replica ran that.
        for (i, seen) in [&seen_a, &seen_b].into_iter().enumerate() {
            let numbers = seqs(seen);
            assert!(
                numbers.windows(2).all(|w| w[0] < w[1]) && numbers[0] > last_seen[i],
                "round {round}: seq only increases: {} then {numbers:?}",
                last_seen[i]
            );
            last_seen[i] = *numbers.last().unwrap();
        }
        let turn = seen_a.iter().find(|f| f["type"] == "turn_started").unwrap()["seq"]
            .as_u64()
            .unwrap();
        assert!(turn > last_turn, "round {round}: {last_turn} then {turn}");
        last_turn = turn;
        let messages = store.messages(&thread).await.unwrap();
        let running = messages.iter().filter(|m| m.status == "running").count();
        assert_eq!(running, 0, "round {round}");
        assert_eq!(
            messages.len(),
            2 * (round + 2),
            "round {round}: one turn stored"
        );
    }
    shut_down(vec![a, b], nats, Some(store), db).await;
}

#[tokio::test]
async fn the_trace_of_a_turn_another_replica_runs_holds_what_its_clients_saw() {
    let db = Db::new(true).await;
    let nats = Nats::start().await;
    let chunks: Vec<String> = (0..40).map(|i| format!("w{i} ")).collect();
    let script = json!({"conversations": [{"match": "*", "steps": [
        {"chunks": chunks, "chunk_delay_ms": 100}]}]});
    let a = replica(&db, &nats, &script, "a").await;
    let b = replica(&db, &nats, &script, "b").await;
    let mut on_a = a.connect().await;
    send(&mut on_a, chat("stream", None)).await;
    // Half a second in: streamed text is held (flushed every second), yet the trace read
    // through the other replica has all of it.
    let seen = until(&mut on_a, |f| {
        f["type"] == "chunk" && f["content"].as_str().is_some_and(|c| c.contains("w4 "))
    })
    .await;
    let thread = seen[0]["thread_id"].as_str().unwrap().to_owned();
    let message = seen[0]["message_id"].as_str().unwrap().to_owned();
    let trace = b
        .get(&format!("/threads/{thread}/messages/{message}/trace"))
        .await;
    assert_eq!(trace["status"], "running", "{trace}");
    assert!(
        trace["trace"].to_string().contains("w0 w1 w2 w3 w4 "),
        "the trace holds every chunk the client saw: {trace}"
    );
    until(&mut on_a, is_done).await;
    shut_down(vec![a, b], nats, None, db).await;
}
