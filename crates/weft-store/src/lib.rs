//! Weft's persistence: one [`Store`] API over PostgreSQL (production) and SQLite (the
//! embedded default), through sqlx's `Any` driver so one set of queries serves both.

mod rows;
pub mod testing;

use std::path::Path;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

pub use rows::{ApprovalRow, MessageRow, ModelCallRow, NewMessage, ThreadRow, ToolCallRow};

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
}

pub type Result<T> = std::result::Result<T, StoreError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A fresh random id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

impl Store {
    /// Connect to `url` (`sqlite://path` or `postgres://…`). SQLite files and their directory
    /// are created when missing.
    pub async fn connect(url: &str) -> Result<Store> {
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
        let pool = AnyPoolOptions::new()
            .max_connections(max)
            .connect(&url)
            .await?;
        if backend == Backend::Sqlite {
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await?;
        }
        Ok(Store { pool, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Apply the migrations of this backend (idempotent).
    pub async fn migrate(&self) -> Result<()> {
        match self.backend {
            Backend::Postgres => {
                sqlx::migrate!("../../migrations/postgres")
                    .run(&self.pool)
                    .await?
            }
            Backend::Sqlite => {
                sqlx::migrate!("../../migrations/sqlite")
                    .run(&self.pool)
                    .await?
            }
        }
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    // ---- users and API keys ----

    pub async fn ensure_user(&self, id: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO users (id, created_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Register (or re-activate) an API key for a user; only its hash is stored.
    pub async fn put_api_key(&self, key: &str, user: &str) -> Result<()> {
        self.ensure_user(user).await?;
        sqlx::query(
            "INSERT INTO api_keys (key_hash, user_id, created_at, revoked_at) VALUES ($1, $2, $3, NULL) \
             ON CONFLICT (key_hash) DO UPDATE SET user_id = excluded.user_id, revoked_at = NULL",
        )
        .bind(hash_key(key))
        .bind(user)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn revoke_api_key(&self, key: &str) -> Result<()> {
        sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE key_hash = $2")
            .bind(now_ms())
            .bind(hash_key(key))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Revoke every key not in `keep` (keys removed from the config).
    pub async fn revoke_other_keys(&self, keep: &[&str]) -> Result<()> {
        let keep: Vec<String> = keep.iter().map(|k| hash_key(k)).collect();
        let rows = sqlx::query("SELECT key_hash FROM api_keys WHERE revoked_at IS NULL")
            .fetch_all(&self.pool)
            .await?;
        for row in rows {
            let hash: String = row.try_get("key_hash")?;
            if !keep.contains(&hash) {
                sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE key_hash = $2")
                    .bind(now_ms())
                    .bind(&hash)
                    .execute(&self.pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// The user a live (unrevoked) key belongs to.
    pub async fn user_for_key(&self, key: &str) -> Result<Option<String>> {
        let row =
            sqlx::query("SELECT user_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL")
                .bind(hash_key(key))
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|r| r.try_get("user_id")).transpose()?)
    }

    // ---- threads ----

    pub async fn create_thread(
        &self,
        id: &str,
        owner: &str,
        permission_mode: &str,
        title: &str,
    ) -> Result<ThreadRow> {
        self.ensure_user(owner).await?;
        let now = now_ms();
        sqlx::query(
            "INSERT INTO threads (id, owner, title, permission_mode, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(owner)
        .bind(title)
        .bind(permission_mode)
        .bind(now)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(ThreadRow {
            id: id.to_owned(),
            owner: owner.to_owned(),
            title: title.to_owned(),
            permission_mode: permission_mode.to_owned(),
            created_at: now,
            updated_at: now,
        })
    }

    pub async fn thread(&self, id: &str) -> Result<Option<ThreadRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM threads WHERE id = $1",
            ThreadRow::COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(ThreadRow::from_row).transpose()
    }

    /// A user's threads, most recently active first.
    pub async fn threads_of(&self, owner: &str) -> Result<Vec<ThreadRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM threads WHERE owner = $1 ORDER BY updated_at DESC, id",
            ThreadRow::COLUMNS
        ))
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(ThreadRow::from_row).collect()
    }

    pub async fn set_thread_mode(&self, id: &str, permission_mode: &str) -> Result<()> {
        sqlx::query("UPDATE threads SET permission_mode = $1 WHERE id = $2")
            .bind(permission_mode)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn touch_thread(&self, id: &str) -> Result<()> {
        sqlx::query("UPDATE threads SET updated_at = $1 WHERE id = $2")
            .bind(now_ms())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Delete a thread and everything recorded under it.
    pub async fn delete_thread(&self, id: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        for table in ["approvals", "model_calls", "tool_calls", "messages"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE thread_id = $1"))
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        let done = sqlx::query("DELETE FROM threads WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    // ---- messages ----

    pub async fn insert_message(&self, m: &NewMessage) -> Result<()> {
        sqlx::query(
            "INSERT INTO messages (id, thread_id, role, content, execution_tree, permission_mode, status, \
             input_tokens, output_tokens, cost_usd, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(&m.id)
        .bind(&m.thread_id)
        .bind(&m.role)
        .bind(m.content.to_string())
        .bind(m.execution_tree.as_ref().map(|t| t.to_string()))
        .bind(m.permission_mode.clone())
        .bind(&m.status)
        .bind(m.input_tokens)
        .bind(m.output_tokens)
        .bind(m.cost_usd)
        .bind(m.created_at)
        .execute(&self.pool)
        .await?;
        self.touch_thread(&m.thread_id).await
    }

    /// A thread's messages, oldest first.
    pub async fn messages(&self, thread_id: &str) -> Result<Vec<MessageRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM messages WHERE thread_id = $1 ORDER BY created_at, id",
            MessageRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(MessageRow::from_row).collect()
    }

    // ---- audit ----

    pub async fn insert_tool_calls(&self, rows: &[ToolCallRow]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for r in rows {
            sqlx::query(
                "INSERT INTO tool_calls (id, thread_id, message_id, tool_call_id, parent_id, depth, tool, arguments, \
                 result_preview, status, approval_status, started_at, duration_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            )
            .bind(new_id())
            .bind(&r.thread_id)
            .bind(&r.message_id)
            .bind(&r.tool_call_id)
            .bind(r.parent_id.clone())
            .bind(r.depth)
            .bind(&r.tool)
            .bind(&r.arguments)
            .bind(&r.result_preview)
            .bind(&r.status)
            .bind(&r.approval_status)
            .bind(r.started_at)
            .bind(r.duration_ms)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub async fn tool_calls(&self, thread_id: &str) -> Result<Vec<ToolCallRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM tool_calls WHERE thread_id = $1 ORDER BY started_at, tool_call_id",
            ToolCallRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(ToolCallRow::from_row).collect()
    }

    pub async fn insert_model_calls(&self, rows: &[ModelCallRow]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for r in rows {
            sqlx::query(
                "INSERT INTO model_calls (id, thread_id, message_id, user_id, provider, model, depth, input_tokens, \
                 output_tokens, cost_usd, duration_ms, error, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            )
            .bind(new_id())
            .bind(&r.thread_id)
            .bind(&r.message_id)
            .bind(&r.user_id)
            .bind(&r.provider)
            .bind(&r.model)
            .bind(r.depth)
            .bind(r.input_tokens)
            .bind(r.output_tokens)
            .bind(r.cost_usd)
            .bind(r.duration_ms)
            .bind(r.error.clone())
            .bind(r.created_at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub async fn model_calls(&self, thread_id: &str) -> Result<Vec<ModelCallRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM model_calls WHERE thread_id = $1 ORDER BY created_at, id",
            ModelCallRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(ModelCallRow::from_row).collect()
    }

    /// Record a new pending approval.
    pub async fn insert_approval(&self, r: &ApprovalRow) -> Result<()> {
        sqlx::query(
            "INSERT INTO approvals (id, thread_id, tool, arguments, status, created_at, decided_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
        )
        .bind(&r.id)
        .bind(&r.thread_id)
        .bind(&r.tool)
        .bind(&r.arguments)
        .bind(&r.status)
        .bind(r.created_at)
        .bind(r.decided_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Settle an approval: `approved`, `rejected` or `timed_out`.
    pub async fn decide_approval(&self, id: &str, status: &str) -> Result<()> {
        sqlx::query("UPDATE approvals SET status = $1, decided_at = $2 WHERE id = $3")
            .bind(status)
            .bind(now_ms())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn approvals(&self, thread_id: &str) -> Result<Vec<ApprovalRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM approvals WHERE thread_id = $1 ORDER BY created_at, id",
            ApprovalRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(ApprovalRow::from_row).collect()
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
