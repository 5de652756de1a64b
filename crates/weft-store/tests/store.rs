//! One store suite, run against PostgreSQL and SQLite alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use weft_store::testing::TestDb;
use weft_store::{now_ms, ApprovalRow, ModelCallRow, NewMessage, Store, ToolCallRow};

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
    };
    let assistant = NewMessage {
        id: "m2".into(),
        role: "assistant".into(),
        content: json!("A and B differ."),
        execution_tree: Some(
            json!({"version": 1, "nodes": [{"id": "c1", "parent_id": null, "name": "run_subtask", "duration_ms": 1.5}]}),
        ),
        status: "budget_exceeded".into(),
        input_tokens: 120,
        output_tokens: 30,
        cost_usd: 0.0025,
        created_at: now + 1,
        ..user.clone()
    };
    store.insert_message(&user).await.unwrap();
    store.insert_message(&assistant).await.unwrap();
    assert_eq!(store.messages("t1").await.unwrap(), vec![user, assistant]);

    // Audit: tool calls, model calls, approvals.
    let call = ToolCallRow {
        thread_id: "t1".into(),
        message_id: "m2".into(),
        tool_call_id: "c1".into(),
        parent_id: None,
        depth: 0,
        tool: "write_file".into(),
        arguments: "{\"path\":\"a.md\"}".into(),
        result_preview: "wrote 3 bytes".into(),
        status: "success".into(),
        approval_status: "approved".into(),
        started_at: 1_790_000_000.25,
        duration_ms: 3.5,
    };
    store
        .insert_tool_calls(std::slice::from_ref(&call))
        .await
        .unwrap();
    assert_eq!(store.tool_calls("t1").await.unwrap(), vec![call]);

    let model = ModelCallRow {
        thread_id: "t1".into(),
        message_id: "m2".into(),
        user_id: "alice".into(),
        provider: "scripted".into(),
        model: "test".into(),
        depth: 1,
        input_tokens: 100,
        output_tokens: 20,
        cost_usd: 0.001,
        duration_ms: 12.0,
        error: Some("HTTP 500".into()),
        created_at: now,
    };
    store
        .insert_model_calls(std::slice::from_ref(&model))
        .await
        .unwrap();
    assert_eq!(store.model_calls("t1").await.unwrap(), vec![model]);

    let approval = ApprovalRow {
        id: "c1".into(),
        thread_id: "t1".into(),
        tool: "write_file".into(),
        arguments: "{}".into(),
        status: "pending".into(),
        created_at: now,
        decided_at: None,
    };
    store.insert_approval(&approval).await.unwrap();
    store.decide_approval("c1", "approved").await.unwrap();
    let stored = store.approvals("t1").await.unwrap();
    assert_eq!(
        (stored[0].status.as_str(), stored[0].decided_at.is_some()),
        ("approved", true)
    );

    // A whole turn in one transaction, more rows than one INSERT carries.
    let turn_message = NewMessage {
        id: "m3".into(),
        status: "completed".into(),
        ..store.messages("t1").await.unwrap()[1].clone()
    };
    let tool_template = store.tool_calls("t1").await.unwrap()[0].clone();
    let model_template = store.model_calls("t1").await.unwrap()[0].clone();
    let many: Vec<ToolCallRow> = (0..120)
        .map(|i| ToolCallRow {
            tool_call_id: format!("bulk{i}"),
            message_id: "m3".into(),
            ..tool_template.clone()
        })
        .collect();
    let models: Vec<ModelCallRow> = (0..60)
        .map(|i| ModelCallRow {
            depth: i,
            message_id: "m3".into(),
            ..model_template.clone()
        })
        .collect();
    store
        .record_turn(&turn_message, &many, &models)
        .await
        .unwrap();
    assert_eq!(store.messages("t1").await.unwrap().len(), 3);
    assert_eq!(store.tool_calls("t1").await.unwrap().len(), 121);
    assert_eq!(store.model_calls("t1").await.unwrap().len(), 61);

    // A new thread and its first message in one transaction.
    let fresh = weft_store::ThreadRow {
        id: "t3".into(),
        owner: "alice".into(),
        title: "new".into(),
        permission_mode: "auto".into(),
        created_at: now,
        updated_at: now,
    };
    let first = NewMessage {
        id: "m9".into(),
        thread_id: "t3".into(),
        role: "user".into(),
        ..store.messages("t1").await.unwrap()[0].clone()
    };
    store.begin_turn(Some(&fresh), &first).await.unwrap();
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
        store.begin_turn(Some(&fresh), &again).await.is_err(),
        "a thread is created once"
    );
    assert_eq!(
        store.messages("t3").await.unwrap().len(),
        1,
        "the failed start left nothing behind"
    );
    store.begin_turn(None, &again).await.unwrap();
    assert_eq!(store.messages("t3").await.unwrap().len(), 2);

    // Deleting a thread removes everything under it, and nothing else.
    assert!(store.delete_thread("t1").await.unwrap());
    assert!(!store.delete_thread("t1").await.unwrap());
    assert!(store.messages("t1").await.unwrap().is_empty());
    assert!(store.tool_calls("t1").await.unwrap().is_empty());
    assert!(store.approvals("t1").await.unwrap().is_empty());
    assert!(store.thread("t2").await.unwrap().is_some());
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
