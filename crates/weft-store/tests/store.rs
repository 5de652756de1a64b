//! One store suite, run against PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use weft_store::testing::{new_thread, TestDb};
use weft_store::{now_ms, ApprovalRow, ItemRow, ModelCallRow, NewMessage, Store, WriteOp};

async fn suite(store: &Store) {
    // Migrations are idempotent.
    store.migrate().await.unwrap();

    // Users and keys: only live keys resolve, and only hashes are stored.
    store.put_api_key("k-alice", "alice").await.unwrap();
    store.put_api_key("k-bob", "bob").await.unwrap();
    assert_eq!(
        store.user_for_key("k-alice").await.unwrap().as_deref(),
        Some("alice")
    );
    assert_eq!(store.user_for_key("nope").await.unwrap(), None);
    store.revoke_api_key("k-bob").await.unwrap();
    assert_eq!(store.user_for_key("k-bob").await.unwrap(), None);
    store.put_api_key("k-bob", "bob").await.unwrap();
    assert_eq!(
        store.user_for_key("k-bob").await.unwrap().as_deref(),
        Some("bob")
    );
    store.revoke_other_keys(&["k-alice"]).await.unwrap();
    assert_eq!(store.user_for_key("k-bob").await.unwrap(), None);
    assert_eq!(
        store.user_for_key("k-alice").await.unwrap().as_deref(),
        Some("alice")
    );

    // Threads: owner, mode, listing per owner.
    let t = store
        .create_thread("t1", "alice", "default", "first")
        .await
        .unwrap();
    assert_eq!(store.thread("t1").await.unwrap(), Some(t.clone()));
    store
        .create_thread("t2", "bob", "default", "")
        .await
        .unwrap();
    assert_eq!(
        store
            .threads_of("alice")
            .await
            .unwrap()
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>(),
        vec!["t1"]
    );
    store.set_thread_mode("t1", "plan").await.unwrap();
    assert_eq!(
        store.thread("t1").await.unwrap().unwrap().permission_mode,
        "plan"
    );
    assert_eq!(store.thread("missing").await.unwrap(), None);

    // Messages with execution trees, usage and cost.
    let now = now_ms();
    let user = NewMessage {
        id: "m1".into(),
        thread_id: "t1".into(),
        role: "user".into(),
        content: json!("compare A and B"),
        execution_tree: None,
        permission_mode: Some("plan".into()),
        status: "completed".into(),
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        created_at: now,
        position: 0,
        metadata: None,
    };
    let assistant = NewMessage {
        id: "m2".into(),
        role: "assistant".into(),
        content: json!("A and B differ."),
        execution_tree: Some(std::sync::Arc::new(
            serde_json::from_value(
                json!({"version": 1, "nodes": [{"id": "c1", "parent_id": null, "name": "run_subtask", "duration_ms": 1.5}]}),
            )
            .unwrap(),
        )),
        status: "budget_exceeded".into(),
        input_tokens: 120,
        output_tokens: 30,
        cost_usd: 0.0025,
        // Same millisecond: position orders them.
        created_at: now,
        position: 1,
        metadata: Some("{\"agent\":\"default\"}".into()),
        ..user.clone()
    };
    store
        .write(WriteOp::BeginTurn {
            thread: None,
            messages: vec![assistant.clone(), user.clone()],
        })
        .await
        .unwrap();
    assert_eq!(store.messages("t1").await.unwrap(), vec![user, assistant]);

    // Audit: model calls, approvals.
    let model = ModelCallRow {
        id: "m2.m0".into(),
        thread_id: "t1".into(),
        message_id: "m2".into(),
        user_id: "alice".into(),
        provider: "scripted".into(),
        model: "test".into(),
        depth: 1,
        input_tokens: 100,
        output_tokens: 20,
        tool_calls: 2,
        cost_usd: 0.001,
        duration_ms: 12.0,
        error: Some("HTTP 500".into()),
        created_at: now,
    };
    // Finishing a turn replaces its running message and adds its audit rows.
    let finished = NewMessage {
        content: json!("A and B differ, finally."),
        status: "completed".into(),
        ..store.messages("t1").await.unwrap()[1].clone()
    };
    store
        .write(WriteOp::Many(vec![
            WriteOp::ModelCalls(vec![model.clone()]),
            WriteOp::FinishTurn {
                message: finished.clone(),
            },
        ]))
        .await
        .unwrap();
    assert_eq!(store.messages("t1").await.unwrap()[1], finished);

    assert_eq!(store.model_calls("t1").await.unwrap(), vec![model]);

    let approval = ApprovalRow {
        id: "c1".into(),
        thread_id: "t1".into(),
        tool: "write_file".into(),
        arguments: "{}".into(),
        status: "pending".into(),
        created_at: now,
        decided_at: None,
        injected_args: Some("{\"trace\":\"t1\"}".into()),
    };
    store
        .write(WriteOp::InsertApproval(approval.clone()))
        .await
        .unwrap();
    store
        .write(WriteOp::DecideApproval {
            thread_id: "t1".into(),
            id: "c1".into(),
            status: "approved".into(),
        })
        .await
        .unwrap();
    let stored = store.approvals("t1").await.unwrap();
    assert_eq!(
        (stored[0].status.as_str(), stored[0].decided_at.is_some()),
        ("approved", true)
    );
    // A pending one left by a stopped server expires.
    store
        .write(WriteOp::InsertApproval(ApprovalRow {
            id: "c2".into(),
            ..approval
        }))
        .await
        .unwrap();
    assert_eq!(store.expire_pending_approvals("t1").await.unwrap(), 1);
    let stored = store.approvals("t1").await.unwrap();
    assert_eq!(stored[1].status, "expired");

    // A whole turn in one transaction, more rows than one INSERT carries.
    let turn_message = NewMessage {
        id: "m3".into(),
        status: "completed".into(),
        ..store.messages("t1").await.unwrap()[1].clone()
    };
    let model_template = store.model_calls("t1").await.unwrap()[0].clone();
    // 301 rows: chunks of 256, 32, 8, 4 and 1.
    let models: Vec<ModelCallRow> = (0..301)
        .map(|i| ModelCallRow {
            id: format!("m3.m{i}"),
            depth: i,
            message_id: "m3".into(),
            ..model_template.clone()
        })
        .collect();
    store
        .write(WriteOp::Many(vec![
            WriteOp::ModelCalls(models),
            WriteOp::FinishTurn {
                message: turn_message,
            },
        ]))
        .await
        .unwrap();
    assert_eq!(store.messages("t1").await.unwrap().len(), 3);
    assert_eq!(store.model_calls("t1").await.unwrap().len(), 302);

    // A new thread and its first message in one transaction.
    let fresh = weft_store::ThreadRow {
        id: "t3".into(),
        owner: "alice".into(),
        title: "new".into(),
        permission_mode: "auto".into(),
        agent: Some("helper".into()),
        created_at: now,
        updated_at: now,
        allowed_tools: Vec::new(),
    };
    let first = NewMessage {
        id: "m9".into(),
        thread_id: "t3".into(),
        role: "user".into(),
        ..store.messages("t1").await.unwrap()[0].clone()
    };
    let begin = |thread: Option<&weft_store::ThreadRow>, m: &NewMessage| WriteOp::BeginTurn {
        thread: thread.cloned(),
        messages: vec![m.clone()],
    };
    store.write(begin(Some(&fresh), &first)).await.unwrap();
    assert_eq!(
        store.thread("t3").await.unwrap().unwrap().permission_mode,
        "auto"
    );
    assert_eq!(store.messages("t3").await.unwrap().len(), 1);
    let again = NewMessage {
        id: "m10".into(),
        ..first.clone()
    };
    assert!(
        store.write(begin(Some(&fresh), &again)).await.is_err(),
        "a thread is created once"
    );
    assert_eq!(
        store.messages("t3").await.unwrap().len(),
        1,
        "the failed start left nothing behind"
    );
    // A start after it takes the next place (one at a taken place is refused as busy).
    assert!(store
        .write(begin(None, &again))
        .await
        .is_err_and(|e| e.is_thread_busy()));
    let next = NewMessage {
        position: first.position + 1,
        ..again.clone()
    };
    store.write(begin(None, &next)).await.unwrap();
    assert_eq!(store.messages("t3").await.unwrap().len(), 2);

    record(store).await;

    // Agents: per owner, created once, replaced, listed by name, deleted.
    assert!(store
        .create_agent("alice", "helper", "{\"name\":\"helper\"}")
        .await
        .unwrap());
    assert!(
        !store.create_agent("alice", "helper", "{}").await.unwrap(),
        "names are unique per owner"
    );
    assert!(
        store
            .create_agent("bob", "helper", "{\"b\":1}")
            .await
            .unwrap(),
        "…but not across owners"
    );
    assert!(store
        .update_agent("alice", "helper", "{\"v\":2}")
        .await
        .unwrap());
    assert!(!store.update_agent("alice", "nobody", "{}").await.unwrap());
    assert_eq!(
        store
            .agent("alice", "helper")
            .await
            .unwrap()
            .unwrap()
            .config,
        "{\"v\":2}"
    );
    assert_eq!(store.agents_of("bob").await.unwrap().len(), 1);
    assert!(store.delete_agent("alice", "helper").await.unwrap());
    assert!(store.agent("alice", "helper").await.unwrap().is_none());
    assert_eq!(
        store.thread("t3").await.unwrap().unwrap().agent.as_deref(),
        Some("helper")
    );
    store
        .write(WriteOp::SetThreadAgent {
            id: "t3".into(),
            agent: Some("other".into()),
        })
        .await
        .unwrap();
    assert_eq!(
        store.thread("t3").await.unwrap().unwrap().agent.as_deref(),
        Some("other")
    );

    // Deleting a thread removes everything under it, and nothing else.
    assert!(store.delete_thread("t1").await.unwrap());
    assert!(!store.delete_thread("t1").await.unwrap());
    assert!(store.messages("t1").await.unwrap().is_empty());
    assert!(store.model_calls("t1").await.unwrap().is_empty());
    assert!(store.approvals("t1").await.unwrap().is_empty());
    assert!(store.thread("t2").await.unwrap().is_some());
}

/// The conversation record: items inserted then replaced (a streaming draft becoming the
/// final item), read back per thread (root only, in turn order) and per turn.
async fn record(store: &Store) {
    let now = now_ms();
    let item = |_name: &str, turn: &str, position: i64, depth: i64, body: &str| ItemRow {
        thread_id: "t3".into(),
        message_id: turn.into(),
        position,
        kind: "assistant".into(),
        parent_id: (depth > 0).then(|| "call".to_owned()),
        depth,
        body: body.into(),
        created_at: now,
    };
    let turn = |id: &str, position: i64, status: &str| NewMessage {
        id: id.into(),
        thread_id: "t3".into(),
        role: "assistant".into(),
        content: json!(""),
        execution_tree: None,
        permission_mode: None,
        status: status.into(),
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        created_at: now,
        position,
        metadata: None,
    };
    store
        .write(WriteOp::BeginTurn {
            thread: None,
            messages: vec![turn("late", 20, "completed"), turn("early", 10, "running")],
        })
        .await
        .unwrap();
    // Submitted without waiting: the writer keeps their order, and the draft of `d` is
    // replaced by its final body in the same batch.
    store.submit(
        WriteOp::Items(vec![item("d", "late", 0, 0, "{\"v\":\"draft\"}")]),
        None,
    );
    store.submit(
        WriteOp::Items(vec![
            item("d", "late", 0, 0, "{\"v\":\"final\"}"),
            item("e", "early", 1, 0, "{\"v\":2}"),
            item("f", "early", 0, 0, "{\"v\":1}"),
            item("g", "early", 2, 1, "{\"v\":3}"),
        ]),
        None,
    );
    store.write(WriteOp::Items(Vec::new())).await.unwrap();
    let bodies = |rows: Vec<ItemRow>| rows.into_iter().map(|r| r.body).collect::<Vec<_>>();
    assert_eq!(
        bodies(store.root_items("t3").await.unwrap()),
        vec!["{\"v\":1}", "{\"v\":2}", "{\"v\":\"final\"}"]
    );
    assert_eq!(store.turn_items("t3", "early").await.unwrap().len(), 3);
    let running: Vec<String> = store
        .orphaned_turns(i64::MAX, None)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(running, vec!["early"]);
    assert_eq!(
        store
            .last_assistant_message("t3")
            .await
            .unwrap()
            .unwrap()
            .id,
        "late"
    );

    // A batch of heavy items (over a megabyte) goes out in several statements, none too big
    // to copy cheaply, and comes back whole and in order (packed while they waited for the
    // writer: PostgreSQL is given their text back, SQLite keeps them packed).
    let heavy_body = |i: usize| format!("{{\"v\":\"{}{i}\"}}", "x".repeat(4000 + i));
    let heavy: Vec<ItemRow> = (0..300)
        .map(|i| item("h", "early", 100 + i, 0, &heavy_body(i as usize)))
        .collect();
    store.write(WriteOp::Items(heavy)).await.unwrap();
    let back = store.turn_items("t3", "early").await.unwrap();
    assert_eq!(back.len(), 303);
    for (i, row) in back[3..].iter().enumerate() {
        assert_eq!(row.position, 100 + i as i64);
        assert!(row.body == heavy_body(i), "item {i}");
    }
}

/// A new thread of `owner`'s, as a turn's start writes it.
/// Everything queued when the writer wakes goes out in one commit; an op that fails fails
/// alone and the rest of its batch still commits.
async fn group_commit(store: &Store) {
    #[derive(Default)]
    struct Count(std::sync::Mutex<Vec<(usize, bool)>>);
    impl weft_store::WriteObserver for Count {
        fn committed(&self, ops: usize, _rows: usize, _elapsed: std::time::Duration, ok: bool) {
            self.0.lock().unwrap().push((ops, ok));
        }
    }
    let count = std::sync::Arc::new(Count::default());
    store.observe_writes(count.clone());
    store.ensure_user("gc").await.unwrap();
    let thread = |id: String| new_thread(&id, "gc");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    {
        let hold = store.hold_writes().await;
        for i in 0..200 {
            let tx = tx.clone();
            store.submit(
                WriteOp::BeginTurn {
                    // One op creates a thread that already exists: only it fails.
                    thread: Some(thread(if i == 100 {
                        "gc-0".into()
                    } else {
                        format!("gc-{i}")
                    })),
                    messages: Vec::new(),
                },
                Some(Box::new(move |r| {
                    let _ = tx.send((i, r.is_ok()));
                })),
            );
        }
        assert_eq!(store.queued_writes(), 200);
        drop(hold);
    }
    drop(tx);
    let mut outcomes = Vec::new();
    while let Some(o) = rx.recv().await {
        outcomes.push(o);
    }
    assert_eq!(outcomes.len(), 200);
    assert_eq!(
        outcomes
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(i, _)| *i)
            .collect::<Vec<_>>(),
        vec![100]
    );
    let commits = count.0.lock().unwrap().clone();
    assert_eq!(commits[0], (200, false), "one batch for everything queued");
    assert_eq!(commits.len(), 201, "then each op alone to find the culprit");
    assert_eq!(store.threads_of("gc").await.unwrap().len(), 199);
}

#[tokio::test]
async fn group_commit_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    group_commit(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn group_commit_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    group_commit(&db.store).await;
    db.drop_database().await.unwrap();
}

/// On SQLite a long record item is stored compressed and a short one as text; both, and a
/// long one stored as text before compression came, read back as written.
#[tokio::test]
async fn long_items_are_stored_compressed_on_sqlite_and_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    let round = format!(
        "[{}]",
        r#"{"kind":"tool_result","result":"stored k0 é"},"#.repeat(60)
    );
    let round = round.replace(",]", "]");
    let item = |position: i64, body: &str| ItemRow {
        thread_id: "tz".into(),
        message_id: "mz".into(),
        position,
        kind: "tool_results".into(),
        parent_id: None,
        depth: 0,
        body: body.into(),
        created_at: 1,
    };
    db.store
        .write(WriteOp::Items(vec![item(0, &round), item(1, "[]")]))
        .await
        .unwrap();
    // A draft and the item replacing it in one batch (the later wins, packed), inside a
    // batch of several ops as a turn's log submits them.
    db.store
        .write(WriteOp::Many(vec![
            WriteOp::Items(vec![item(3, r#"[{"kind":"draft"}]"#)]),
            WriteOp::Items(vec![item(3, &round)]),
        ]))
        .await
        .unwrap();
    let mut own = <sqlx::AnyConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    // A long body written as text, as every body was before.
    sqlx::query(
        "INSERT INTO items (thread_id, message_id, position, kind, parent_id, depth, body, created_at) \
         VALUES ('tz', 'mz', 2, 'tool_results', NULL, 0, $1, 1)",
    )
    .bind(&round)
    .execute(&mut own)
    .await
    .unwrap();
    let stored: Vec<(String, i64)> = sqlx::query_as(
        "SELECT typeof(body), length(body) FROM items WHERE message_id = 'mz' ORDER BY position",
    )
    .fetch_all(&mut own)
    .await
    .unwrap();
    assert_eq!(stored[0].0, "blob");
    assert!((stored[0].1 as usize) < round.len() / 4, "{stored:?}");
    assert_eq!(stored[1].0, "text");
    assert_eq!(stored[2].0, "text");
    assert_eq!(stored[3].0, "blob");
    let read = db.store.turn_items("tz", "mz").await.unwrap();
    let bodies: Vec<&str> = read.iter().map(|i| i.body.as_str()).collect();
    assert_eq!(
        bodies,
        [round.as_str(), "[]", round.as_str(), round.as_str()]
    );
    drop(own);
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn store_suite_on_postgres() {
    let db = TestDb::postgres()
        .await
        .expect("PostgreSQL must be running (scripts/test.sh starts it)");
    suite(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn store_suite_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    suite(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn an_unsupported_url_is_refused() {
    assert!(Store::connect("mysql://x").await.is_err());
}

/// Where the ordering tests' writes tell they landed: each its name and whether it committed.
type Told = tokio::sync::mpsc::UnboundedSender<(String, bool)>;

/// A write's acknowledgement, sent as `name` on `tx`.
fn told(tx: &Told, name: impl Into<String>) -> Option<weft_store::Done> {
    let (tx, name) = (tx.clone(), name.into());
    Some(Box::new(move |r| {
        let _ = tx.send((name, r.is_ok()));
    }))
}

/// An approval decision of a thread that does not exist: a write of one row that does nothing.
fn decision(i: usize) -> WriteOp {
    WriteOp::DecideApproval {
        thread_id: "q-none".into(),
        id: format!("a{i}"),
        status: "allowed".into(),
    }
}

/// A turn's start submitted behind more than a batch of other writes is written in the first
/// batch: its client waits for `turn_started`, the rest is the progress of turns under way.
async fn a_start_goes_ahead_of_the_queue(store: &Store) {
    store.ensure_user("q").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    {
        let hold = store.hold_writes().await;
        for i in 0..1100 {
            store.submit(decision(i), told(&tx, format!("decision {i}")));
        }
        store.submit(
            WriteOp::BeginTurn {
                thread: Some(new_thread("q-1", "q")),
                messages: Vec::new(),
            },
            told(&tx, "start"),
        );
        drop(hold);
    }
    drop(tx);
    let mut order = Vec::new();
    while let Some(done) = rx.recv().await {
        order.push(done);
    }
    assert_eq!(order.len(), 1101);
    assert!(order.iter().all(|(_, ok)| *ok));
    assert_eq!(order[0].0, "start", "the start is acknowledged first");
    assert_eq!(order[1].0, "decision 0", "the rest keep their order");
    assert_eq!(order[1100].0, "decision 1099");
}

/// A write someone waits for goes ahead of the queue, and a queued write can be moved ahead
/// once someone waits for it: the moved write commits first, once, then the one submitted
/// ahead after it, then the rest in their order. Moving a committed write does nothing.
async fn a_queued_write_is_moved_ahead(store: &Store) {
    store.ensure_user("q").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let moved = {
        let _hold = store.hold_writes().await;
        for i in 0..1100 {
            store.submit(decision(i), told(&tx, format!("decision {i}")));
        }
        let moved = store.submit_movable(decision(1100), told(&tx, "moved"));
        store.submit(decision(1101), told(&tx, "decision 1101"));
        moved.hurry();
        store.submit_ahead(decision(1102), told(&tx, "ahead"));
        moved
    };
    let mut order = Vec::new();
    while order.len() < 1103 {
        order.push(rx.recv().await.unwrap());
    }
    moved.hurry();
    store.write(decision(1103)).await.unwrap();
    drop(tx);
    assert_eq!(rx.recv().await, None, "each write is acknowledged once");
    assert!(order.iter().all(|(_, ok)| *ok));
    let names: Vec<&str> = order.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names[..3], ["moved", "ahead", "decision 0"]);
    assert_eq!(names[1101..], ["decision 1099", "decision 1101"]);
}

/// A write kept by its submitter before it is in any queue: moved ahead meanwhile (by another
/// thread that waits for it), it commits ahead, once, and before what is submitted ahead
/// after the move; queuing it afterwards does nothing; the store counts it once.
async fn a_write_moved_ahead_before_it_was_queued(store: &Store) {
    store.ensure_user("q").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    {
        let _hold = store.hold_writes().await;
        store.submit(decision(0), told(&tx, "queued"));
        let kept = store.movable(decision(1), told(&tx, "kept"));
        assert_eq!(store.queued_writes(), 2, "counted once made");
        let other = kept.clone();
        other.hurry();
        store.submit_ahead(decision(2), told(&tx, "ahead"));
        kept.queue();
        kept.hurry();
    }
    let mut order = Vec::new();
    while order.len() < 3 {
        order.push(rx.recv().await.unwrap());
    }
    store.write(decision(3)).await.unwrap();
    drop(tx);
    assert_eq!(rx.recv().await, None, "each write is acknowledged once");
    let names: Vec<&str> = order.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["kept", "ahead", "queued"]);
    assert!(order.iter().all(|(_, ok)| *ok));
    assert_eq!(store.queued_writes(), 0);
}

#[tokio::test]
async fn a_write_moved_ahead_before_it_was_queued_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    a_write_moved_ahead_before_it_was_queued(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn a_write_moved_ahead_before_it_was_queued_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    a_write_moved_ahead_before_it_was_queued(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn a_queued_write_is_moved_ahead_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    a_queued_write_is_moved_ahead(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn a_queued_write_is_moved_ahead_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    a_queued_write_is_moved_ahead(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn a_start_goes_ahead_of_the_queue_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    a_start_goes_ahead_of_the_queue(&db.store).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn a_start_goes_ahead_of_the_queue_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    a_start_goes_ahead_of_the_queue(&db.store).await;
    db.drop_database().await.unwrap();
}

/// A round (a response and its results) written as one row replaces the response's draft
/// and reads back as the two items it was made of; the table holds one row for it.
async fn a_round_is_one_row(db: &TestDb) {
    let store = &db.store;
    store.put_api_key("k-rounds", "rounds").await.unwrap();
    store
        .write(WriteOp::BeginTurn {
            thread: Some(new_thread("tr", "rounds")),
            messages: vec![NewMessage {
                id: "mr".into(),
                thread_id: "tr".into(),
                role: "assistant".into(),
                content: json!(""),
                execution_tree: None,
                permission_mode: None,
                status: "running".into(),
                input_tokens: 0,
                output_tokens: 0,
                cost_usd: 0.0,
                created_at: 1,
                position: 1,
                metadata: None,
            }],
        })
        .await
        .unwrap();
    let item = |position: i64, kind: &str, body: &str| ItemRow {
        thread_id: "tr".into(),
        message_id: "mr".into(),
        position,
        kind: kind.into(),
        parent_id: None,
        depth: 0,
        body: body.into(),
        created_at: 2,
    };
    let draft = item(
        0,
        "assistant",
        r#"{"kind":"assistant","text":"wor","partial":true}"#,
    );
    store.write(WriteOp::Items(vec![draft])).await.unwrap();
    let response = item(
        0,
        "assistant",
        r#"{"kind":"assistant","text":"working, [1]"}"#,
    );
    let results = item(
        1,
        "tool_results",
        r#"[{"kind":"tool_result","result":"]"}]"#,
    );
    let after = item(2, "assistant", r#"{"kind":"assistant","text":"done"}"#);
    let pair = ItemRow::paired(&response, &results).unwrap();
    store
        .write(WriteOp::Items(vec![pair, after.clone()]))
        .await
        .unwrap();
    let expected = vec![response, results, after];
    assert_eq!(store.turn_items("tr", "mr").await.unwrap(), expected);
    assert_eq!(store.thread_items("tr").await.unwrap(), expected);
    assert_eq!(store.root_items("tr").await.unwrap(), expected);
    assert_eq!(
        weft_store::testing::item_rows(store, "mr").await.unwrap(),
        2,
        "the round and the answer after it"
    );
}

#[tokio::test]
async fn a_round_is_one_row_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    a_round_is_one_row(&db).await;
    db.drop_database().await.unwrap();
}

#[tokio::test]
async fn a_round_is_one_row_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite(dir.path()).await.unwrap();
    a_round_is_one_row(&db).await;
    db.drop_database().await.unwrap();
}
