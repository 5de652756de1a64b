//! Embeddings from an OpenAI-compatible `/embeddings` endpoint (`[embeddings]`), in batches;
//! vectors kept in the chunk's row as base64 of little-endian `f32`s and compared by cosine.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

/// `[embeddings]`: absent `url` means no embeddings (full text only).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct EmbeddingsConfig {
    /// Base URL of an OpenAI-compatible API (`…/v1`); `POST {url}/embeddings`.
    pub url: Option<String>,
    pub api_key: Option<String>,
    pub model: String,
    /// Texts per request.
    pub batch: usize,
    pub timeout_ms: u64,
}

impl Default for EmbeddingsConfig {
    fn default() -> Self {
        EmbeddingsConfig {
            url: None,
            api_key: None,
            model: "text-embedding-3-small".to_owned(),
            batch: 64,
            timeout_ms: 30_000,
        }
    }
}

pub struct Embedder {
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
    model: String,
    batch: usize,
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

impl Embedder {
    /// The configured embedder, if any.
    pub fn from_config(config: &EmbeddingsConfig) -> Result<Option<Embedder>, String> {
        let Some(url) = &config.url else {
            return Ok(None);
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Some(Embedder {
            client,
            url: format!("{}/embeddings", url.trim_end_matches('/')),
            api_key: config.api_key.clone(),
            model: config.model.clone(),
            batch: config.batch.max(1),
        }))
    }

    /// One vector per text, in order.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.batch) {
            let mut request = self
                .client
                .post(&self.url)
                .json(&json!({"model": self.model, "input": batch}));
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key);
            }
            let response = request
                .send()
                .await
                .map_err(|e| format!("embeddings failed: {e}"))?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("embeddings failed: HTTP {status}"));
            }
            let mut answer: Answer = response
                .json()
                .await
                .map_err(|e| format!("embeddings failed: {e}"))?;
            if answer.data.len() != batch.len() {
                return Err(format!(
                    "embeddings failed: {} vectors for {} texts",
                    answer.data.len(),
                    batch.len()
                ));
            }
            answer.data.sort_by_key(|item| item.index);
            vectors.extend(answer.data.into_iter().map(|item| item.embedding));
        }
        Ok(vectors)
    }
}

/// Cosine similarity; 0 when either vector is zero or their lengths differ.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}
