//! Chunk embeddings. Every database keeps them in the chunk's row as text (little-endian
//! `f32`, base64), compared in process; a PostgreSQL server that has the pgvector extension
//! also keeps them in a `vector` column (`embedding_vector`, added and filled by
//! [`Store::migrate`]) and finds the nearest chunks itself, by cosine distance.

use std::sync::atomic::{AtomicU8, Ordering};

use base64::Engine as _;
use serde_json::{json, Value};
use sqlx::Row;

use crate::{Backend, Result, Store};

/// An embedding as stored in the row.
pub fn encode_vector(vector: &[f32]) -> String {
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An embedding from its stored text (`None` if it is not one).
pub fn decode_vector(text: &str) -> Option<Vec<f32>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

/// Whether the database searches vectors: not known yet, no, yes.
#[derive(Debug, Default)]
pub(crate) struct VectorSupport(AtomicU8);

const UNKNOWN: u8 = 0;
const NO: u8 = 1;
const YES: u8 = 2;

/// Rows filled per statement when existing embeddings are copied into the vector column.
const FILL_BATCH: i64 = 500;

impl Store {
    /// On PostgreSQL with pgvector available: create the extension, add the vector column and
    /// fill it from the embeddings already kept. Anything else: nothing (and no error: the
    /// embeddings are then compared in process).
    pub(crate) async fn enable_pgvector(&self) -> Result<()> {
        if self.backend != Backend::Postgres {
            return Ok(());
        }
        let available =
            sqlx::query("SELECT count(*) AS n FROM pg_available_extensions WHERE name = 'vector'")
                .fetch_one(&self.pool)
                .await?
                .try_get::<i64, _>("n")?;
        if available == 0 {
            self.vectors.0.store(NO, Ordering::SeqCst);
            return Ok(());
        }
        if let Err(e) = sqlx::query("CREATE EXTENSION IF NOT EXISTS vector")
            .execute(&self.pool)
            .await
        {
            tracing::warn!(error = %e, "pgvector is available but cannot be created: embeddings are compared in process");
            self.vectors.0.store(NO, Ordering::SeqCst);
            return Ok(());
        }
        sqlx::query("ALTER TABLE chunks ADD COLUMN IF NOT EXISTS embedding_vector vector")
            .execute(&self.pool)
            .await?;
        let mut after = 0i64;
        loop {
            let rows = sqlx::query(
                "SELECT seq, embedding FROM chunks WHERE seq > $1 AND embedding IS NOT NULL \
                 AND embedding_vector IS NULL ORDER BY seq LIMIT $2",
            )
            .bind(after)
            .bind(FILL_BATCH)
            .fetch_all(&self.pool)
            .await?;
            let Some(last) = rows.last() else { break };
            after = last.try_get("seq")?;
            let mut fill = Vec::new();
            for row in &rows {
                let text: String = row.try_get("embedding")?;
                if let Some(vector) = decode_vector(&text).filter(|v| !v.is_empty()) {
                    fill.push(json!({"k": row.try_get::<i64, _>("seq")?, "v": vector}));
                }
            }
            sqlx::query(
                "UPDATE chunks c SET embedding_vector = (e->>'v')::vector \
                 FROM json_array_elements($1::json) e WHERE c.seq = (e->>'k')::bigint",
            )
            .bind(Value::Array(fill).to_string())
            .execute(&self.pool)
            .await?;
        }
        self.vectors.0.store(YES, Ordering::SeqCst);
        tracing::info!("pgvector: embeddings are searched in the database");
        Ok(())
    }

    /// Whether nearest chunks are found in the database (PostgreSQL with pgvector, migrated).
    pub async fn vectors_in_database(&self) -> Result<bool> {
        match self.vectors.0.load(Ordering::SeqCst) {
            YES => return Ok(true),
            NO => return Ok(false),
            _ => {}
        }
        let yes = self.backend == Backend::Postgres
            && sqlx::query(
                "SELECT count(*) AS n FROM information_schema.columns WHERE table_schema = \
                 current_schema() AND table_name = 'chunks' AND column_name = 'embedding_vector'",
            )
            .fetch_one(&self.pool)
            .await?
            .try_get::<i64, _>("n")?
                > 0;
        self.vectors
            .0
            .compare_exchange(
                UNKNOWN,
                if yes { YES } else { NO },
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .ok();
        Ok(yes)
    }

    /// The `k` chunks of `collections` nearest `query` by cosine distance, best first; `None`
    /// when the database cannot tell (no pgvector): the caller compares in process.
    pub async fn nearest_chunks(
        &self,
        collections: &[String],
        query: &[f32],
        k: usize,
    ) -> Result<Option<Vec<i64>>> {
        if !self.vectors_in_database().await? {
            return Ok(None);
        }
        if collections.is_empty() || query.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let ids = crate::collections::placeholders(4, collections.len());
        let sql = format!(
            "SELECT seq FROM chunks WHERE collection_id IN ({ids}) \
             AND embedding_vector IS NOT NULL AND vector_dims(embedding_vector) = $2 \
             ORDER BY embedding_vector <=> $1::vector, seq LIMIT $3"
        );
        let mut q = sqlx::query(&sql)
            .bind(json!(query).to_string())
            .bind(i32::try_from(query.len()).unwrap_or(i32::MAX))
            .bind(i64::try_from(k).unwrap_or(i64::MAX));
        for id in collections {
            q = q.bind(id);
        }
        let rows = q.fetch_all(&self.pool).await?;
        Ok(Some(
            rows.iter()
                .map(|r| r.try_get("seq"))
                .collect::<std::result::Result<_, _>>()?,
        ))
    }

    /// Copy a new document's embeddings into the vector column (within its transaction).
    pub(crate) async fn fill_document_vectors(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        document_id: &str,
        chunks: &[(String, Option<Vec<f32>>)],
    ) -> Result<()> {
        if !self.vectors_in_database().await? {
            return Ok(());
        }
        let fill: Vec<Value> = chunks
            .iter()
            .enumerate()
            .filter_map(|(position, (_, vector))| {
                let vector = vector.as_ref().filter(|v| !v.is_empty())?;
                Some(json!({"k": position, "v": vector}))
            })
            .collect();
        if fill.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "UPDATE chunks c SET embedding_vector = (e->>'v')::vector \
             FROM json_array_elements($2::json) e \
             WHERE c.document_id = $1 AND c.position = (e->>'k')::bigint",
        )
        .bind(document_id)
        .bind(Value::Array(fill).to_string())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}
