//! Knowledge collections: collections (an owner's, or shared), documents and their chunks, and
//! full-text search over chunks — PostgreSQL `tsvector` ranked by `ts_rank`, SQLite FTS5
//! ranked by `bm25` — with any of the query's words matching. Embeddings, when there are any,
//! are kept as text in the chunk's row; comparing them is the caller's business.

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::{get, new_id, now_ms, Backend, Result, Store};

#[derive(Debug, Clone, PartialEq)]
pub struct CollectionRow {
    pub id: String,
    pub owner: String,
    pub name: String,
    pub description: String,
    pub shared: bool,
    pub created_at: i64,
}

impl CollectionRow {
    const COLUMNS: &'static str = "id, owner, name, description, shared, created_at";

    fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(CollectionRow {
            id: get(row, "id")?,
            owner: get(row, "owner")?,
            name: get(row, "name")?,
            description: get(row, "description")?,
            shared: get::<i64>(row, "shared")? != 0,
            created_at: get(row, "created_at")?,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DocumentRow {
    pub id: String,
    pub collection_id: String,
    pub title: String,
    /// Where it came from (a URL), or empty.
    pub source: String,
    /// JSON text.
    pub metadata: String,
    pub chunks: i64,
    pub created_at: i64,
}

impl DocumentRow {
    const COLUMNS: &'static str = "id, collection_id, title, source, metadata, chunks, created_at";

    fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(DocumentRow {
            id: get(row, "id")?,
            collection_id: get(row, "collection_id")?,
            title: get(row, "title")?,
            source: get(row, "source")?,
            metadata: get(row, "metadata")?,
            chunks: get(row, "chunks")?,
            created_at: get(row, "created_at")?,
        })
    }
}

/// A document to add: its chunks in order, each with its embedding if any.
pub struct NewDocument<'a> {
    pub title: &'a str,
    pub source: &'a str,
    pub metadata: &'a str,
    pub chunks: Vec<(String, Option<Vec<f32>>)>,
}

/// One chunk found by a search.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkHit {
    pub chunk: i64,
    pub collection_id: String,
    pub document_id: String,
    pub title: String,
    pub text: String,
    /// Higher is better; comparable within one search only.
    pub score: f64,
}

/// Chunks a multi-row insert carries (5 parameters each).
const CHUNKS_PER_INSERT: usize = 100;
/// Most query words a search uses.
const MAX_TERMS: usize = 32;

impl Store {
    /// Create a collection; None when the owner already has one of that name.
    pub async fn create_collection(
        &self,
        owner: &str,
        name: &str,
        description: &str,
        shared: bool,
    ) -> Result<Option<CollectionRow>> {
        self.ensure_user(owner).await?;
        let row = CollectionRow {
            id: format!("col_{}", new_id()),
            owner: owner.to_owned(),
            name: name.to_owned(),
            description: description.to_owned(),
            shared,
            created_at: now_ms(),
        };
        let done = sqlx::query(
            "INSERT INTO collections (id, owner, name, description, shared, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (owner, name) DO NOTHING",
        )
        .bind(&row.id)
        .bind(&row.owner)
        .bind(&row.name)
        .bind(&row.description)
        .bind(i64::from(shared))
        .bind(row.created_at)
        .execute(&self.pool)
        .await?;
        Ok((done.rows_affected() == 1).then_some(row))
    }

    /// The owner's collection of that name.
    pub async fn own_collection(&self, owner: &str, name: &str) -> Result<Option<CollectionRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM collections WHERE owner = $1 AND name = $2",
            CollectionRow::COLUMNS
        ))
        .bind(owner)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(CollectionRow::from_row).transpose()
    }

    /// The collection `user` means by `name`: their own, else the oldest shared one.
    pub async fn visible_collection(
        &self,
        user: &str,
        name: &str,
    ) -> Result<Option<CollectionRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM collections WHERE name = $1 AND (owner = $2 OR shared = 1) \
             ORDER BY CASE WHEN owner = $3 THEN 0 ELSE 1 END, created_at LIMIT 1",
            CollectionRow::COLUMNS
        ))
        .bind(name)
        .bind(user)
        .bind(user)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(CollectionRow::from_row).transpose()
    }

    /// The user's collections, then those others share, by name.
    pub async fn visible_collections(&self, user: &str) -> Result<Vec<CollectionRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM collections WHERE owner = $1 OR shared = 1 \
             ORDER BY CASE WHEN owner = $2 THEN 0 ELSE 1 END, name",
            CollectionRow::COLUMNS
        ))
        .bind(user)
        .bind(user)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(CollectionRow::from_row).collect()
    }

    /// Delete a collection with its documents and chunks; false when there was none.
    pub async fn delete_collection(&self, owner: &str, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM collections WHERE owner = $1 AND name = $2")
            .bind(owner)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Add a document and its chunks in one transaction.
    pub async fn add_document(
        &self,
        collection_id: &str,
        document: NewDocument<'_>,
    ) -> Result<DocumentRow> {
        let row = DocumentRow {
            id: format!("doc_{}", new_id()),
            collection_id: collection_id.to_owned(),
            title: document.title.to_owned(),
            source: document.source.to_owned(),
            metadata: document.metadata.to_owned(),
            chunks: i64::try_from(document.chunks.len()).unwrap_or(i64::MAX),
            created_at: now_ms(),
        };
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO documents (id, collection_id, title, source, metadata, chunks, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&row.id)
        .bind(&row.collection_id)
        .bind(&row.title)
        .bind(&row.source)
        .bind(&row.metadata)
        .bind(row.chunks)
        .bind(row.created_at)
        .execute(&mut *tx)
        .await?;
        for (batch_index, batch) in document.chunks.chunks(CHUNKS_PER_INSERT).enumerate() {
            let mut sql = String::from(
                "INSERT INTO chunks (document_id, collection_id, position, text, embedding) VALUES ",
            );
            for i in 0..batch.len() {
                let p = i * 5;
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!(
                    "(${}, ${}, ${}, ${}, ${})",
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4,
                    p + 5
                ));
            }
            let mut query = sqlx::query(&sql);
            for (i, (text, embedding)) in batch.iter().enumerate() {
                let position = batch_index * CHUNKS_PER_INSERT + i;
                query = query
                    .bind(&row.id)
                    .bind(&row.collection_id)
                    .bind(i64::try_from(position).unwrap_or(i64::MAX))
                    .bind(text)
                    .bind(embedding.as_deref().map(crate::encode_vector));
            }
            query.execute(&mut *tx).await?;
        }
        self.fill_document_vectors(&mut tx, &row.id, &document.chunks)
            .await?;
        tx.commit().await?;
        Ok(row)
    }

    /// A collection's documents, oldest first.
    pub async fn documents(&self, collection_id: &str) -> Result<Vec<DocumentRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM documents WHERE collection_id = $1 ORDER BY created_at, id",
            DocumentRow::COLUMNS
        ))
        .bind(collection_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(DocumentRow::from_row).collect()
    }

    /// The best `k` chunks of `collections` for `query` by full text (any word may match).
    pub async fn search_chunks(
        &self,
        collections: &[String],
        query: &str,
        k: usize,
    ) -> Result<Vec<ChunkHit>> {
        let terms = terms(query);
        if terms.is_empty() || collections.is_empty() {
            return Ok(Vec::new());
        }
        match self.backend {
            Backend::Postgres => self.search_chunks_postgres(collections, &terms, k).await,
            Backend::Sqlite => self.search_chunks_sqlite(collections, &terms, k).await,
        }
    }

    /// SQLite's search: FTS5 ranked by `bm25`, which weighs words by their rarity itself.
    async fn search_chunks_sqlite(
        &self,
        collections: &[String],
        terms: &[String],
        k: usize,
    ) -> Result<Vec<ChunkHit>> {
        let ids = placeholders(2, collections.len());
        let limit = collections.len() + 2;
        let sql = format!(
            "SELECT c.seq, c.collection_id, c.document_id, d.title, c.text, \
                 -bm25(chunks_fts) AS score \
                 FROM chunks_fts JOIN chunks c ON c.seq = chunks_fts.rowid \
                 JOIN documents d ON d.id = c.document_id \
                 WHERE chunks_fts MATCH $1 AND c.collection_id IN ({ids}) \
                 ORDER BY score DESC, c.seq LIMIT ${limit}"
        );
        let expression = terms
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(" OR ");
        let mut q = sqlx::query(&sql).bind(expression);
        for id in collections {
            q = q.bind(id);
        }
        let rows = q
            .bind(i64::try_from(k).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(hit).collect()
    }

    /// PostgreSQL's search: the best `k` chunks holding one of the query's rarer words (those
    /// not in the corpus's common words), ranked by `ts_rank` over all of its words; when
    /// there are fewer than `k`, the best of the chunks matching only common words follow.
    /// Ranking a common word's thousands of chunks is what made a query slow.
    async fn search_chunks_postgres(
        &self,
        collections: &[String],
        terms: &[String],
        k: usize,
    ) -> Result<Vec<ChunkHit>> {
        let common = self.common_terms().await;
        let ids = placeholders(4, collections.len());
        let limit = collections.len() + 4;
        let sql = format!(
            "WITH q AS MATERIALIZED ( \
               SELECT to_tsquery('english', $1) AS all_words, \
                 coalesce((SELECT to_tsquery('simple', string_agg(quote_literal(l), ' | ')) \
                           FROM unnest(tsvector_to_array(to_tsvector('english', $2))) l \
                           WHERE l <> ALL (string_to_array($3, ' '))), \
                          to_tsquery('english', $1)) AS rare_words), \
             rare AS ( \
               SELECT c.seq, ts_rank(c.tsv, q.all_words)::float8 AS score FROM chunks c, q \
               WHERE c.tsv @@ q.rare_words AND c.collection_id IN ({ids}) \
               ORDER BY score DESC, c.seq LIMIT ${limit}), \
             rest AS ( \
               SELECT c.seq, ts_rank(c.tsv, q.all_words)::float8 AS score FROM chunks c, q \
               WHERE (SELECT count(*) FROM rare) < ${limit} \
               AND c.tsv @@ q.all_words AND NOT (c.tsv @@ q.rare_words) \
               AND c.collection_id IN ({ids}) \
               ORDER BY score DESC, c.seq LIMIT ${limit}) \
             SELECT c.seq, c.collection_id, c.document_id, d.title, c.text, h.score \
             FROM (SELECT seq, score, 0 AS tier FROM rare \
                   UNION ALL SELECT seq, score, 1 AS tier FROM rest) h \
             JOIN chunks c ON c.seq = h.seq JOIN documents d ON d.id = c.document_id \
             ORDER BY h.tier, h.score DESC, h.seq LIMIT ${limit}"
        );
        let mut q = sqlx::query(&sql)
            .bind(terms.join(" | "))
            .bind(terms.join(" "))
            .bind(common.to_string());
        for id in collections {
            q = q.bind(id);
        }
        let rows = q
            .bind(i64::try_from(k).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(hit).collect()
    }

    /// How many chunks there are, in every collection.
    pub async fn count_chunks(&self) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM chunks")
            .fetch_one(&self.pool)
            .await?;
        get(&row, "n")
    }

    /// Every chunk of `collections` that has an embedding: (chunk, encoded embedding).
    pub async fn chunk_embeddings(&self, collections: &[String]) -> Result<Vec<(i64, String)>> {
        if collections.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT seq, embedding FROM chunks WHERE embedding IS NOT NULL AND collection_id IN ({})",
            placeholders(1, collections.len())
        );
        let mut q = sqlx::query(&sql);
        for id in collections {
            q = q.bind(id);
        }
        let rows = q.fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| Ok((r.try_get("seq")?, r.try_get("embedding")?)))
            .collect()
    }

    /// The chunks `seqs` names, with their documents' titles (score 0; in no order).
    pub async fn chunks_by_id(&self, seqs: &[i64]) -> Result<Vec<ChunkHit>> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT c.seq, c.collection_id, c.document_id, d.title, c.text, CAST(0 AS DOUBLE PRECISION) AS score \
             FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.seq IN ({})",
            placeholders(1, seqs.len())
        );
        let mut q = sqlx::query(&sql);
        for seq in seqs {
            q = q.bind(*seq);
        }
        let rows = q.fetch_all(&self.pool).await?;
        rows.iter().map(hit).collect()
    }
}

fn hit(row: &AnyRow) -> Result<ChunkHit> {
    Ok(ChunkHit {
        chunk: get(row, "seq")?,
        collection_id: get(row, "collection_id")?,
        document_id: get(row, "document_id")?,
        title: get(row, "title")?,
        text: get(row, "text")?,
        score: get(row, "score")?,
    })
}

/// `$from, $from+1, …` for `n` values.
pub(crate) fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The query's words, lowercased, letters and digits only, each once.
fn terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        if !word.is_empty() && !terms.contains(&word) {
            terms.push(word);
        }
        if terms.len() == MAX_TERMS {
            break;
        }
    }
    terms
}
