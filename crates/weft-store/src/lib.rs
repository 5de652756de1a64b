//! Weft's persistence: one [`Store`] API over PostgreSQL (production) and SQLite (the
//! embedded default), through sqlx's `Any` driver so one set of queries serves both.

mod audit;
mod keys;
mod rows;
pub mod testing;
mod threads;

use std::path::Path;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

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

pub(crate) type Tx<'a> = sqlx::Transaction<'a, sqlx::Any>;

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
