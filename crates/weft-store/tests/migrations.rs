//! Migrations that move data: what a database held before one is there after it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use weft_store::Store;

/// The record's tables built again without their foreign keys (migration 14 on SQLite): every
/// item and model call is still there, read as before, and deleting the thread still takes
/// them with it.
#[tokio::test]
async fn sqlite_record_rows_survive_the_rebuild_without_foreign_keys() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/weft.db", dir.path().display());
    let options = SqliteConnectOptions::from_str(&url)
        .unwrap()
        .create_if_missing(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let mut before = sqlx::migrate!("../../migrations/sqlite");
    before.migrations = before
        .migrations
        .iter()
        .filter(|m| m.version < 14)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    before.run(&pool).await.unwrap();
    for statement in [
        "INSERT INTO users (id, created_at) VALUES ('alice', 0)",
        "INSERT INTO threads (id, owner, title, permission_mode, created_at, updated_at) \
         VALUES ('t1', 'alice', '', 'default', 0, 0)",
        "INSERT INTO messages (id, thread_id, role, content, status, created_at, position) \
         VALUES ('m1', 't1', 'assistant', 'done', 'completed', 0, 1)",
        "INSERT INTO items (message_id, position, thread_id, kind, parent_id, depth, body, created_at) \
         VALUES ('m1', 0, 't1', 'assistant', NULL, 0, '{\"role\":\"assistant\"}', 5), \
                ('m1', 1, 't1', 'tool_results', 'call_1', 1, '[]', 6)",
        "INSERT INTO model_calls (id, thread_id, message_id, user_id, provider, model, depth, \
         input_tokens, output_tokens, cost_usd, duration_ms, error, created_at, tool_calls) \
         VALUES ('m1.m0', 't1', 'm1', 'alice', 'scripted', 'w', 0, 10, 20, 0.5, 12.5, NULL, 7, 2)",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    pool.close().await;

    let store = Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let pool = SqlitePoolOptions::new().connect(&url).await.unwrap();
    for table in ["items", "model_calls"] {
        let keys: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM pragma_foreign_key_list('{table}')"
        ))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(keys, 0, "{table} still has a foreign key");
    }
    pool.close().await;
    let items = store.turn_items("t1", "m1").await.unwrap();
    let kept: Vec<_> = items
        .iter()
        .map(|i| {
            (
                i.position,
                i.kind.as_str(),
                i.parent_id.as_deref(),
                i.depth,
                i.body.as_str(),
                i.created_at,
            )
        })
        .collect();
    assert_eq!(
        kept,
        vec![
            (0, "assistant", None, 0, "{\"role\":\"assistant\"}", 5),
            (1, "tool_results", Some("call_1"), 1, "[]", 6),
        ]
    );
    let calls = store.model_calls("t1").await.unwrap();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(
        (
            call.id.as_str(),
            &*call.user_id,
            call.input_tokens,
            call.output_tokens,
            call.tool_calls,
            call.cost_usd,
            call.duration_ms,
            call.created_at,
        ),
        ("m1.m0", "alice", 10, 20, 2, 0.5, 12.5, 7)
    );

    assert!(store.delete_thread("t1").await.unwrap());
    assert!(store.turn_items("t1", "m1").await.unwrap().is_empty());
    assert!(store.model_calls("t1").await.unwrap().is_empty());
    store.close().await;
}

/// The page size of a SQLite file, read on a connection of its own.
async fn page_size(url: &str) -> i64 {
    let pool = SqlitePoolOptions::new().connect(url).await.unwrap();
    let size = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    size
}

/// A new SQLite database is made with the store's page size (8 KB, three tool rounds a page);
/// a file made before with SQLite's default 4 KB keeps its pages, opens, migrates and is
/// written as before.
#[tokio::test]
async fn sqlite_page_size_is_chosen_for_new_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = format!("sqlite://{}/fresh.db", dir.path().display());
    let store = Store::connect(&fresh).await.unwrap();
    store.migrate().await.unwrap();
    store.close().await;
    assert_eq!(
        page_size(&fresh).await,
        i64::from(weft_store::SQLITE_PAGE_SIZE)
    );
    assert_ne!(weft_store::SQLITE_PAGE_SIZE, 4096);

    let older = format!("sqlite://{}/older.db", dir.path().display());
    let options = SqliteConnectOptions::from_str(&older)
        .unwrap()
        .create_if_missing(true)
        .page_size(4096);
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE made_before (id INTEGER)")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let store = Store::connect(&older).await.unwrap();
    store.migrate().await.unwrap();
    store
        .create_thread("t1", "alice", "default", "")
        .await
        .unwrap();
    assert!(store.thread("t1").await.unwrap().is_some());
    store.close().await;
    assert_eq!(page_size(&older).await, 4096);
}

/// A record row big enough for PostgreSQL to compress (a round with its calls and results) is
/// compressed with lz4 when the server was built with it (migration 15), and with pglz, as
/// before, when it was not.
#[tokio::test]
async fn postgres_record_rows_compress_with_lz4_where_the_server_has_it() {
    let db = weft_store::testing::TestDb::postgres().await.unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .unwrap();
    let has_lz4: bool = sqlx::query_scalar(
        "SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    // The session's own default stays pglz: only the column's setting can make it lz4.
    sqlx::query("SET default_toast_compression = pglz")
        .execute(&pool)
        .await
        .unwrap();
    let body = format!(
        "{{\"role\":\"assistant\",\"calls\":[{}]}}",
        vec!["{\"name\":\"memory_write\",\"arguments\":\"rrrrrrrrrrrrrrrr\"}"; 100].join(",")
    );
    assert!(body.len() > 4000);
    sqlx::query(
        "INSERT INTO items (message_id, position, thread_id, kind, parent_id, depth, body, created_at) \
         VALUES ('m1', 0, 't1', 'assistant', NULL, 0, $1, 0)",
    )
    .bind(&body)
    .execute(&pool)
    .await
    .unwrap();
    let (method, kept): (Option<String>, String) = sqlx::query_as(
        "SELECT pg_column_compression(body), body FROM items WHERE message_id = 'm1'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(kept, body);
    let expected = if has_lz4 { "lz4" } else { "pglz" };
    assert_eq!(method.as_deref(), Some(expected));
    pool.close().await;
    db.drop_database().await.unwrap();
}
