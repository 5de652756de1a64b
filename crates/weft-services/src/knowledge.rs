//! The server's knowledge base: documents split into overlapping chunks (paragraph-aware,
//! Markdown-aware for Markdown and HTML), embedded when `[embeddings]` is configured, stored
//! per collection; searched by full text and, with embeddings, by cosine similarity too, the
//! two rankings fused by reciprocal rank. Long-term memory is a per-user collection.

use std::collections::HashMap;

use async_trait::async_trait;
use text_splitter::{ChunkConfig, MarkdownSplitter, TextSplitter};
use weft_store::{ChunkHit, CollectionRow, DocumentRow, NewDocument, Store};
use weft_tools::knowledge::{CollectionInfo, Hit, KnowledgeBase};
use weft_tools::web::FetchUrl;

use crate::embeddings::{cosine, Embedder};
use weft_store::decode_vector;

/// The collection each user's memories are kept in (names starting with `_` are reserved).
pub const MEMORY: &str = "_memory";
/// Chunk size in characters (a range: the splitter fills up to the top at a good boundary).
const CHUNK_CHARS: std::ops::Range<usize> = 500..1_000;
const OVERLAP_CHARS: usize = 120;
/// Reciprocal rank fusion's constant.
const RRF_K: f64 = 60.0;
/// Each ranking contributes this many times `k` candidates to the fusion.
const CANDIDATES_PER_HIT: usize = 4;
/// Most characters a memory's title keeps of its fact.
const TITLE_CHARS: usize = 80;

pub struct Knowledge {
    pub store: Store,
    pub embedder: Option<Embedder>,
    pub fetcher: FetchUrl,
}

/// What a new document holds.
pub enum Body {
    Text { text: String, format: Format },
    Url(String),
}

pub use weft_protocol::rest::DocumentFormat as Format;

impl Knowledge {
    /// Split, embed and store a document in `collection`.
    pub async fn ingest(
        &self,
        collection: &CollectionRow,
        title: &str,
        body: Body,
        metadata: &str,
    ) -> Result<DocumentRow, String> {
        let (text, format, source) = match body {
            Body::Text { text, format } => (text, format, String::new()),
            Body::Url(url) => {
                let page = self.fetcher.read(&url).await?;
                (page.text, Format::Markdown, page.url)
            }
        };
        let chunks = tokio::task::spawn_blocking(move || split(&text, format))
            .await
            .map_err(|e| format!("cannot split the document: {e}"))??;
        if chunks.is_empty() {
            return Err("the document has no text".to_owned());
        }
        let embeddings = match &self.embedder {
            Some(embedder) => embedder
                .embed(&chunks)
                .await?
                .into_iter()
                .map(Some)
                .collect(),
            None => vec![None; chunks.len()],
        };
        self.store
            .add_document(
                &collection.id,
                NewDocument {
                    title,
                    source: &source,
                    metadata,
                    chunks: chunks.into_iter().zip(embeddings).collect(),
                },
            )
            .await
            .map_err(|e| e.to_string())
    }

    /// The best `k` chunks of `collections` for `query`.
    pub async fn search(
        &self,
        collections: &[CollectionRow],
        query: &str,
        k: usize,
    ) -> Result<Vec<Hit>, String> {
        let ids: Vec<String> = collections.iter().map(|c| c.id.clone()).collect();
        let candidates = (k * CANDIDATES_PER_HIT).max(20);
        let text_hits = self
            .store
            .search_chunks(&ids, query, candidates)
            .await
            .map_err(|e| e.to_string())?;
        let ranked = match &self.embedder {
            None => text_hits.into_iter().take(k).collect(),
            Some(embedder) => {
                let vector_ranking = self
                    .vector_ranking(embedder, &ids, query, candidates)
                    .await?;
                self.fuse(text_hits, &vector_ranking, k).await?
            }
        };
        let names: HashMap<&str, &str> = collections
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        Ok(ranked
            .into_iter()
            .map(|h| Hit {
                collection: names
                    .get(h.collection_id.as_str())
                    .map(|n| (*n).to_owned())
                    .unwrap_or_default(),
                document: h.document_id,
                title: h.title,
                chunk: h.text,
                score: h.score,
            })
            .collect())
    }

    /// Chunk ids by cosine similarity to the query, best first.
    async fn vector_ranking(
        &self,
        embedder: &Embedder,
        ids: &[String],
        query: &str,
        candidates: usize,
    ) -> Result<Vec<i64>, String> {
        let query_vector = embedder
            .embed(&[query.to_owned()])
            .await?
            .pop()
            .unwrap_or_default();
        // pgvector: the database ranks them itself.
        if let Some(nearest) = self
            .store
            .nearest_chunks(ids, &query_vector, candidates)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(nearest);
        }
        let stored = self
            .store
            .chunk_embeddings(ids)
            .await
            .map_err(|e| e.to_string())?;
        let mut scored: Vec<(i64, f64)> = stored
            .iter()
            .filter_map(|(chunk, text)| {
                Some((*chunk, cosine(&query_vector, &decode_vector(text)?)))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(scored
            .into_iter()
            .take(candidates)
            .map(|(chunk, _)| chunk)
            .collect())
    }

    /// Reciprocal rank fusion of the full-text hits and the vector ranking.
    async fn fuse(
        &self,
        text_hits: Vec<ChunkHit>,
        vector_ranking: &[i64],
        k: usize,
    ) -> Result<Vec<ChunkHit>, String> {
        let mut scores: HashMap<i64, f64> = HashMap::new();
        for (rank, hit) in text_hits.iter().enumerate() {
            *scores.entry(hit.chunk).or_default() += 1.0 / (RRF_K + rank as f64 + 1.0);
        }
        for (rank, chunk) in vector_ranking.iter().enumerate() {
            *scores.entry(*chunk).or_default() += 1.0 / (RRF_K + rank as f64 + 1.0);
        }
        let mut order: Vec<(i64, f64)> = scores.into_iter().collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        order.truncate(k);
        let mut known: HashMap<i64, ChunkHit> =
            text_hits.into_iter().map(|h| (h.chunk, h)).collect();
        let missing: Vec<i64> = order
            .iter()
            .map(|(chunk, _)| *chunk)
            .filter(|chunk| !known.contains_key(chunk))
            .collect();
        for hit in self
            .store
            .chunks_by_id(&missing)
            .await
            .map_err(|e| e.to_string())?
        {
            known.insert(hit.chunk, hit);
        }
        Ok(order
            .into_iter()
            .filter_map(|(chunk, score)| known.remove(&chunk).map(|hit| ChunkHit { score, ..hit }))
            .collect())
    }

    async fn visible(&self, user: &str) -> Result<Vec<CollectionRow>, String> {
        let all = self
            .store
            .visible_collections(user)
            .await
            .map_err(|e| e.to_string())?;
        Ok(all
            .into_iter()
            .filter(|c| !c.name.starts_with('_'))
            .collect())
    }

    async fn memory(&self, user: &str) -> Result<CollectionRow, String> {
        if let Some(found) = self
            .store
            .own_collection(user, MEMORY)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(found);
        }
        let created = self
            .store
            .create_collection(user, MEMORY, "long-term memory", false)
            .await
            .map_err(|e| e.to_string())?;
        match created {
            Some(row) => Ok(row),
            // Created meanwhile by another turn of the same user.
            None => self
                .store
                .own_collection(user, MEMORY)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "cannot open the memory collection".to_owned()),
        }
    }
}

/// Overlapping chunks at paragraph (or Markdown structure) boundaries.
pub fn split(text: &str, format: Format) -> Result<Vec<String>, String> {
    let (text, markdown) = match format {
        Format::Html => (weft_tools::web::to_markdown(text)?, true),
        Format::Markdown => (text.to_owned(), true),
        Format::Text => (text.to_owned(), false),
    };
    let config = ChunkConfig::new(CHUNK_CHARS)
        .with_overlap(OVERLAP_CHARS)
        .map_err(|e| e.to_string())?;
    let chunks: Vec<String> = if markdown {
        MarkdownSplitter::new(config)
            .chunks(&text)
            .map(str::to_owned)
            .collect()
    } else {
        TextSplitter::new(config)
            .chunks(&text)
            .map(str::to_owned)
            .collect()
    };
    Ok(chunks
        .into_iter()
        .filter(|c| !c.trim().is_empty())
        .collect())
}

#[async_trait]
impl KnowledgeBase for Knowledge {
    async fn collections(&self, user: &str) -> Result<Vec<CollectionInfo>, String> {
        let mut list = Vec::new();
        for c in self.visible(user).await? {
            let documents = self
                .store
                .documents(&c.id)
                .await
                .map_err(|e| e.to_string())?
                .len();
            list.push(CollectionInfo {
                name: c.name,
                description: c.description,
                owner: c.owner,
                shared: c.shared,
                documents,
            });
        }
        Ok(list)
    }

    async fn query(
        &self,
        user: &str,
        collection: Option<&str>,
        query: &str,
        k: usize,
    ) -> Result<Vec<Hit>, String> {
        let collections = match collection {
            Some(name) => {
                let missing = || {
                    format!(
                        "no collection `{}`; see list_collections",
                        weft_protocol::clip(name, 64)
                    )
                };
                // Memory is reached through `recall` only.
                if name.starts_with('_') {
                    return Err(missing());
                }
                let row = self
                    .store
                    .visible_collection(user, name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(missing)?;
                vec![row]
            }
            None => self.visible(user).await?,
        };
        self.search(&collections, query, k).await
    }

    async fn remember(&self, user: &str, fact: &str) -> Result<(), String> {
        let memory = self.memory(user).await?;
        let title: String = fact.chars().take(TITLE_CHARS).collect();
        self.ingest(
            &memory,
            &title,
            Body::Text {
                text: fact.to_owned(),
                format: Format::Text,
            },
            "{}",
        )
        .await
        .map(|_| ())
    }

    async fn recall(&self, user: &str, query: &str, k: usize) -> Result<Vec<Hit>, String> {
        let Some(memory) = self
            .store
            .own_collection(user, MEMORY)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(Vec::new());
        };
        self.search(&[memory], query, k).await
    }
}
