//! Weft's persistence: one [`Store`] API over PostgreSQL (production) and SQLite (the
//! embedded default), through sqlx's `Any` driver so one set of queries serves both.

mod agents;
mod assets;
mod audit;
mod collections;
mod common_terms;
mod item_pairs;
mod keys;
mod leases;
mod packed;
mod record;
mod rows;
mod statements;
#[cfg(feature = "testing")]
pub mod testing;
mod threads;
mod vectors;
mod workflows;
mod writer;

use std::path::Path;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

pub use collections::{ChunkHit, CollectionRow, DocumentRow, NewDocument};
pub use leases::{Lease, LeaseRenewer, LeaseRow};
pub use packed::compress;
pub use rows::{
    ApprovalRow, AssetRow, ItemRow, MessageRow, ModelCallRow, NewMessage, ThreadRow, WorkflowRow,
    WorkflowRunRow,
};
pub use vectors::{decode_vector, encode_vector};
pub use writer::{Done, PackedItem, Queued, WriteError, WriteHold, WriteObserver, WriteOp};

use writer::Writer;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported database url {0:?} (use sqlite://… or postgres://…)")]
    UnsupportedUrl(String),
    #[error("cannot prepare the database directory: {0}")]
    Io(#[from] std::io::Error),
    #[error("stored value is corrupt: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Write(String),
    #[error("this replica no longer holds the lease of turn {0}")]
    LeaseLost(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// How durable a SQLite commit is: `Normal` (WAL, survives a crashed or killed process; a
/// power loss may lose the last commits) or `Full` (fsync on every commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqliteSync {
    #[default]
    Normal,
    Full,
}

impl SqliteSync {
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "normal" => Some(SqliteSync::Normal),
            "full" => Some(SqliteSync::Full),
            _ => None,
        }
    }

    fn pragma(self) -> &'static str {
        match self {
            SqliteSync::Normal => "PRAGMA synchronous = NORMAL",
            SqliteSync::Full => "PRAGMA synchronous = FULL",
        }
    }
}

/// How a store's connections behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSettings {
    pub sqlite_sync: SqliteSync,
    /// PostgreSQL: how long a transaction of this store's may wait for its next statement
    /// before the server ends its session (0: no limit). Its process is then frozen or
    /// stalled (`SIGSTOP`, a VM paused, swapping) with rows locked that other replicas wait
    /// for: deleting a thread waits for the lease a batch of its turn holds. The writer
    /// writes a batch whose session was ended again on a fresh connection.
    pub stalled_transaction_ms: u64,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            sqlite_sync: SqliteSync::default(),
            stalled_transaction_ms: 5_000,
        }
    }
}

/// The page size of a new SQLite database. A tool round's row of the record is typically 1–4 KB
/// (its calls and their results): SQLite's default 4 KB page holds one such row and leaves the
/// rest empty (W1's 2.4 KB rounds left 38 % of the items table unused), and every page a commit
/// touches goes whole into the WAL. 8 KB pages hold three; a W1 turn writes 13 % fewer bytes and
/// its file is a third smaller (docs/BENCHMARKS.md).
pub const SQLITE_PAGE_SIZE: u32 = 8192;

/// Reads go through a pool; hot-path writes through the one writer (group commit), which has
/// its own connection.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    /// The chunks' common words (PostgreSQL's full-text search looks past them first).
    common: std::sync::Arc<common_terms::CommonTerms>,
    /// Whether embeddings are searched in the database (pgvector).
    vectors: std::sync::Arc<vectors::VectorSupport>,
    writer: Writer,
    backend: Backend,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A stored time (Unix milliseconds) as the API shows it: RFC 3339, to the millisecond.
pub fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// A fresh id: a UUIDv7, its first 48 bits the time in milliseconds, the rest random (74
/// bits). Ids made one after another sort one after another, so the rows a burst of turns
/// inserts land at the right edge of each index on their id, not on pages all over it: a
/// commit dirties (and SQLite's WAL or PostgreSQL's WAL writes) a few pages instead of one per
/// row.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

impl Store {
    /// Connect to `url` (`sqlite://path` or `postgres://…`). SQLite files and their directory
    /// are created when missing.
    pub async fn connect(url: &str) -> Result<Store> {
        Self::connect_with(url, StoreSettings::default()).await
    }

    pub async fn connect_with(url: &str, settings: StoreSettings) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let (backend, url) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_owned())
        } else if let Some(rest) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            (Backend::Sqlite, sqlite_url(rest)?)
        } else {
            return Err(StoreError::UnsupportedUrl(url.to_owned()));
        };
        let max = if backend == Backend::Sqlite { 4 } else { 16 };
        // PostgreSQL connections die under us (a restart, a failover, an idle-connection
        // killer, `pg_terminate_backend`): a pooled read connection is pinged before use, so
        // a dead one is replaced instead of failing a request. SQLite's cannot die so. The
        // writer is not pinged (a round trip per commit); it retries a batch whose connection
        // died on a fresh one instead.
        let mut read = AnyPoolOptions::new()
            .max_connections(max)
            .test_before_acquire(backend == Backend::Postgres);
        let mut write = AnyPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .test_before_acquire(false);
        // What each new session is told first: on PostgreSQL (reads and writes) how long a
        // transaction may stall, on SQLite (the writer) how durable a commit is.
        match backend {
            Backend::Postgres if settings.stalled_transaction_ms > 0 => {
                let limit: std::sync::Arc<str> = format!(
                    "SET idle_in_transaction_session_timeout = {}",
                    settings.stalled_transaction_ms
                )
                .into();
                read = read.after_connect(session_setup(limit.clone()));
                write = write.after_connect(session_setup(limit));
            }
            Backend::Postgres => {}
            Backend::Sqlite => {
                write = write.after_connect(session_setup(settings.sqlite_sync.pragma().into()));
            }
        }
        let pool = read.connect(&url).await?;
        if backend == Backend::Sqlite {
            // The page size takes only on a database not yet written (this statement's
            // journal mode writes it); an existing file keeps its own.
            sqlx::query(&format!(
                "PRAGMA page_size = {SQLITE_PAGE_SIZE}; PRAGMA journal_mode = WAL"
            ))
            .execute(&pool)
            .await?;
        }
        let writer = Writer::start(write, &url, backend).await?;
        Ok(Store {
            pool,
            common: Default::default(),
            vectors: Default::default(),
            writer,
            backend,
        })
    }

    /// Hand `op` to the writer; `done` is called once it is committed (or failed).
    pub fn submit(&self, op: WriteOp, done: Option<Done>) {
        self.writer.submit(op, done);
    }

    /// [`Store::submit`], ahead of what is queued: for a write someone waits for (a turn's
    /// end, a response before its call runs), which must not follow any write still queued.
    pub fn submit_ahead(&self, op: WriteOp, done: Option<Done>) {
        self.writer.submit_ahead(op, done);
    }

    /// [`Store::submit`], keeping the means to move the write ahead of the queue should
    /// someone come to wait for it.
    pub fn submit_movable(&self, op: WriteOp, done: Option<Done>) -> Queued {
        self.writer.submit_movable(op, done)
    }

    /// A write not yet handed to the writer, for a submitter that must keep it where others
    /// can move it ahead before it is queued: hand it over with [`Queued::queue`] or
    /// [`Queued::hurry`].
    pub fn movable(&self, op: WriteOp, done: Option<Done>) -> Queued {
        self.writer.movable(op, done)
    }

    /// See [`Writer::batch_started`](writer::Writer::batch_started).
    pub fn batch_started(&self) -> std::time::Instant {
        self.writer.batch_started()
    }

    /// Write `op` and wait for its commit.
    pub async fn write(&self, op: WriteOp) -> Result<()> {
        Ok(self.writer.write(op, false).await?)
    }

    /// [`Store::write`], ahead of what is queued (see [`Store::submit_ahead`]).
    pub async fn write_ahead(&self, op: WriteOp) -> Result<()> {
        Ok(self.writer.write(op, true).await?)
    }

    /// Ops handed to the writer and not yet committed.
    pub fn queued_writes(&self) -> usize {
        self.writer.queued()
    }

    /// Keep the writer from committing until the hold is dropped (ops queue up meanwhile):
    /// for tests of batching, and for maintenance.
    pub async fn hold_writes(&self) -> WriteHold {
        self.writer.hold().await
    }

    /// Be told about every commit (once; later observers are ignored).
    pub fn observe_writes(&self, observer: std::sync::Arc<dyn WriteObserver>) {
        self.writer.observe(observer);
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    fn migrator(&self) -> sqlx::migrate::Migrator {
        match self.backend {
            Backend::Postgres => sqlx::migrate!("../../migrations/postgres"),
            Backend::Sqlite => sqlx::migrate!("../../migrations/sqlite"),
        }
    }

    /// Apply the migrations of this backend (idempotent).
    pub async fn migrate(&self) -> Result<()> {
        self.migrator().run(&self.pool).await?;
        // Not a migration file: it depends on the server having the extension.
        self.enable_pgvector().await?;
        Ok(())
    }

    /// The schema version the database has (the latest applied migration) and the one this
    /// build needs.
    pub async fn schema_versions(&self) -> Result<(i64, i64)> {
        let needed = self.migrator().iter().map(|m| m.version).max().unwrap_or(0);
        let applied: Option<i64> =
            sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success = TRUE")
                .fetch_one(&self.pool)
                .await?;
        Ok((applied.unwrap_or(0), needed))
    }

    /// Write what is queued, then close both connections.
    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

/// Run `statement` on each new connection of a pool, before its first use.
fn session_setup(
    statement: std::sync::Arc<str>,
) -> impl for<'c> Fn(
    &'c mut sqlx::AnyConnection,
    sqlx::pool::PoolConnectionMetadata,
) -> futures::future::BoxFuture<'c, std::result::Result<(), sqlx::Error>>
       + Send
       + Sync
       + 'static {
    move |conn, _| {
        let statement = statement.clone();
        Box::pin(async move {
            sqlx::Executor::execute(&mut *conn, &*statement).await?;
            Ok(())
        })
    }
}

fn sqlite_url(rest: &str) -> Result<String> {
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path != ":memory:" {
        if let Some(parent) = Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent)?;
        }
    }
    let query = if query.contains("mode=") {
        query.to_owned()
    } else if query.is_empty() {
        "mode=rwc".to_owned()
    } else {
        format!("{query}&mode=rwc")
    };
    Ok(format!("sqlite://{path}?{query}"))
}

pub(crate) fn get<T>(row: &AnyRow, column: &str) -> Result<T>
where
    T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
{
    Ok(row.try_get(column)?)
}

pub(crate) fn parse_json(text: &str) -> Result<serde_json::Value> {
    serde_json::Value::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::new_id;

    /// Ids made one after another sort one after another (even many in one millisecond), are
    /// unique, and end in random characters (a replica's id takes its last eight).
    #[test]
    fn ids_sort_in_the_order_they_were_made() {
        let ids: Vec<String> = (0..20_000).map(|_| new_id()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let a = new_id();
        let b = new_id();
        assert_ne!(a[a.len() - 8..], b[b.len() - 8..]);
    }
}
