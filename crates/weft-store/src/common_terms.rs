//! The corpus's most common words (PostgreSQL only), read from the planner's statistics on the
//! chunks' `tsvector`s and kept for a minute. `ts_rank` has no notion of how informative a word
//! is, and a word found in most chunks makes a query rank most of the table: a search looks
//! first among the chunks holding its rarer words (ranked by all of them), and only when those
//! are too few among the rest.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::Row;

use crate::{Backend, Store};

/// A word in more than this share of the chunks is common.
const COMMON_SHARE: f64 = 0.1;
/// How long the list is used before it is read again.
const FRESH_FOR: Duration = Duration::from_secs(60);

/// The cached list: the common lexemes, space-separated, and when they were read.
#[derive(Debug, Default)]
pub(crate) struct CommonTerms {
    cached: Mutex<Option<(Instant, Arc<str>)>>,
}

impl Store {
    /// The common lexemes, space-separated (empty before PostgreSQL has analysed the table,
    /// and always on SQLite, whose `bm25` weighs words by rarity itself).
    pub async fn common_terms(&self) -> Arc<str> {
        if self.backend != Backend::Postgres {
            return Arc::from("");
        }
        if let Ok(cached) = self.common.cached.lock() {
            if let Some((at, list)) = &*cached {
                if at.elapsed() < FRESH_FOR {
                    return list.clone();
                }
            }
        }
        let read = sqlx::query(
            "SELECT coalesce(string_agg(e.elem, ' '), '') AS common \
             FROM pg_stats s, \
             unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(elem, share) \
             WHERE s.schemaname = current_schema() AND s.tablename = 'chunks' \
             AND s.attname = 'tsv' AND e.share > $1",
        )
        .bind(COMMON_SHARE)
        .fetch_one(&self.pool)
        .await
        .and_then(|row| row.try_get::<String, _>("common"));
        let list: Arc<str> = match read {
            Ok(list) => Arc::from(list),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the common words of the chunks");
                Arc::from("")
            }
        };
        if let Ok(mut cached) = self.common.cached.lock() {
            *cached = Some((Instant::now(), list.clone()));
        }
        list
    }

    /// Refresh the database's statistics on the chunks (after a large ingest; autovacuum
    /// does it in time too) and read the common words again on the next search.
    pub async fn analyze_chunks(&self) -> crate::Result<()> {
        sqlx::query("ANALYZE chunks").execute(&self.pool).await?;
        if let Ok(mut cached) = self.common.cached.lock() {
            *cached = None;
        }
        Ok(())
    }
}
