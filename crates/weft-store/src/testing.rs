//! Fresh, migrated databases for tests: a new PostgreSQL database per call (dropped by
//! [`TestDb::drop_database`]) or a new SQLite file in a temporary directory.

use crate::{new_id, now_ms, Result, Store, StoreError, ThreadRow};

/// Where PostgreSQL tests connect to create their databases.
pub fn postgres_admin_url() -> String {
    std::env::var("WEFT_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Where the tests of the pgvector branch create their databases: a PostgreSQL that has the
/// extension (`scripts/pgvector.sh` starts one and `scripts/test.sh` sets the variable).
pub fn pgvector_admin_url() -> String {
    std::env::var("WEFT_PGVECTOR_URL").unwrap_or_else(|_| {
        panic!("WEFT_PGVECTOR_URL is not set: run ./scripts/test.sh, or export WEFT_PGVECTOR_URL=$(./scripts/pgvector.sh)")
    })
}

/// A new thread's row as a turn's start writes it: `owner`'s, in Default mode, untitled.
pub fn new_thread(id: &str, owner: &str) -> ThreadRow {
    ThreadRow {
        id: id.to_owned(),
        owner: owner.to_owned(),
        title: String::new(),
        permission_mode: "default".into(),
        agent: None,
        created_at: 0,
        updated_at: 0,
        allowed_tools: Vec::new(),
    }
}

/// Make the database look one migration behind this build (for health-check tests).
pub async fn forget_latest_migration(store: &Store) -> Result<()> {
    let (applied, _) = store.schema_versions().await?;
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1")
        .bind(applied)
        .execute(&store.pool)
        .await?;
    Ok(())
}

/// A transaction on one of `store`'s connections that holds `message_id`'s lease as a batch
/// writing for `owner`'s turn does, then is left open: a stand-in for a replica frozen
/// mid-batch.
pub async fn stalled_batch(
    store: &Store,
    message_id: &str,
    owner: &str,
) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
    let mut tx = store.pool.begin().await?;
    let held = sqlx::query(&crate::leases::fence_sql(store.backend, 1, false))
        .bind(owner)
        .bind(now_ms())
        .bind(message_id)
        .fetch_all(&mut *tx)
        .await?;
    if held.len() != 1 {
        return Err(StoreError::LeaseLost(message_id.to_owned()));
    }
    Ok(tx)
}

/// Whether the writer takes `error` for a lost connection, and writes its batch again.
pub fn is_connection_lost(error: &StoreError) -> bool {
    crate::writer::is_connection_lost(error)
}

/// End every other session on the database `url` names, as a PostgreSQL restart, a failover
/// or an idle-connection killer would; how many were ended.
pub async fn terminate_connections(url: &str) -> Result<usize> {
    use sqlx::Connection;
    let mut conn = sqlx::AnyConnection::connect(url).await?;
    let ended = sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut conn)
    .await?;
    conn.close().await?;
    Ok(ended.len())
}

pub struct TestDb {
    pub store: Store,
    pub url: String,
    /// The server's admin URL and the database's name (PostgreSQL).
    database: Option<(String, String)>,
}

impl TestDb {
    /// A new, migrated PostgreSQL database.
    pub async fn postgres() -> Result<TestDb> {
        Self::postgres_at(&postgres_admin_url()).await
    }

    /// A new, migrated database on the PostgreSQL server `admin_url` points at.
    pub async fn postgres_at(admin_url: &str) -> Result<TestDb> {
        let admin = Store::connect(admin_url).await?;
        let name = format!("weft_t_{}", new_id().replace('-', ""));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin.pool)
            .await?;
        admin.close().await;
        let base = admin_url
            .rsplit_once('/')
            .map_or(admin_url, |(base, _)| base);
        let url = format!("{base}/{name}");
        let store = Store::connect(&url).await?;
        store.migrate().await?;
        Ok(TestDb {
            store,
            url,
            database: Some((admin_url.to_owned(), name)),
        })
    }

    /// A new, migrated SQLite database under `dir`.
    pub async fn sqlite(dir: &std::path::Path) -> Result<TestDb> {
        let url = format!("sqlite://{}/weft-{}.db", dir.display(), new_id());
        let store = Store::connect(&url).await?;
        store.migrate().await?;
        Ok(TestDb {
            store,
            url,
            database: None,
        })
    }

    /// Close the pool and drop the PostgreSQL database (SQLite files go with their directory).
    pub async fn drop_database(self) -> Result<()> {
        self.store.close().await;
        if let Some((admin_url, name)) = self.database {
            let admin = Store::connect(&admin_url).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&admin.pool)
                .await?;
            admin.close().await;
        }
        Ok(())
    }
}

/// Rows of the `items` table a turn's record takes (a pair of items is one row).
pub async fn item_rows(store: &Store, message_id: &str) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT COUNT(*) FROM items WHERE message_id = $1")
            .bind(message_id)
            .fetch_one(&store.pool)
            .await?,
    )
}
