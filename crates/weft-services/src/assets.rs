//! Assets: bytes in the object store (a local directory by default), indexed in the store
//! with their owner. Tool results too large for the model are offloaded here whole, the
//! model pages through them with `read_artifact`, and the server serves them, always to
//! their owner only.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use object_store::local::LocalFileSystem;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use weft_core::Artifacts;
use weft_store::{new_id, now_ms, AssetRow, Store};

/// Kind of an offloaded tool result.
pub const ARTIFACT: &str = "artifact";

pub struct AssetStore {
    objects: Arc<dyn ObjectStore>,
    store: Store,
    /// The largest asset kept.
    max_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error("no such asset")]
    NotFound,
    #[error("the file is {size} bytes, over the {max} bytes an asset may have")]
    TooLarge { size: usize, max: usize },
    #[error("asset storage: {0}")]
    Objects(#[from] object_store::Error),
    #[error("asset index: {0}")]
    Index(#[from] weft_store::StoreError),
}

impl AssetStore {
    /// Assets kept in the local directory `dir` (created if missing).
    pub fn local(dir: &Path, store: Store, max_bytes: usize) -> std::io::Result<AssetStore> {
        std::fs::create_dir_all(dir)?;
        let objects = LocalFileSystem::new_with_prefix(dir).map_err(std::io::Error::other)?;
        Ok(AssetStore {
            objects: Arc::new(objects),
            store,
            max_bytes,
        })
    }

    /// Assets kept in an S3-compatible bucket.
    pub fn s3(
        config: &S3Config,
        store: Store,
        max_bytes: usize,
    ) -> Result<AssetStore, object_store::Error> {
        let mut builder = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(&config.bucket)
            .with_region(&config.region);
        if let Some(endpoint) = &config.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"))
                .with_virtual_hosted_style_request(false);
        }
        if let Some(key) = &config.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &config.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        Ok(AssetStore {
            objects: Arc::new(builder.build()?),
            store,
            max_bytes,
        })
    }

    /// Remove every asset a thread's turns made (their tool calls' and messages' files):
    /// called before the thread itself is deleted.
    pub async fn delete_for_thread(
        &self,
        owner: &str,
        thread_id: &str,
    ) -> Result<usize, AssetError> {
        let items = self.store.thread_items(thread_id).await?;
        let mut sources: Vec<String> = self
            .store
            .messages(thread_id)
            .await?
            .into_iter()
            .map(|m| m.id)
            .collect();
        for item in &items {
            sources.push(item.message_id.to_string());
            if let Ok(body) = serde_json::from_str::<serde_json::Value>(&item.body) {
                call_ids(&body, &mut sources);
            }
        }
        sources.sort();
        sources.dedup();
        let assets = self.store.assets_from(owner, &sources).await?;
        for asset in &assets {
            match self.objects.delete(&asset.key().into()).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            self.store.delete_asset(owner, &asset.id).await?;
        }
        Ok(assets.len())
    }

    /// Keep `bytes` for `owner`; the new asset's index entry.
    pub async fn put(
        &self,
        owner: &str,
        kind: &str,
        media_type: &str,
        source: Option<&str>,
        bytes: Vec<u8>,
    ) -> Result<AssetRow, AssetError> {
        if bytes.len() > self.max_bytes {
            return Err(AssetError::TooLarge {
                size: bytes.len(),
                max: self.max_bytes,
            });
        }
        let row = AssetRow {
            id: format!("{kind}_{}", new_id()),
            owner: owner.to_owned(),
            kind: kind.to_owned(),
            media_type: media_type.to_owned(),
            size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
            source: source.map(str::to_owned),
            sha256: Some(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes))),
            created_at: now_ms(),
        };
        self.objects
            .put(&row.key().into(), PutPayload::from(bytes))
            .await?;
        self.store.insert_asset(&row).await?;
        Ok(row)
    }

    /// `owner`'s asset `id` (another user's reads as missing).
    pub async fn find(&self, owner: &str, id: &str) -> Result<AssetRow, AssetError> {
        if !weft_protocol::is_identifier(id) {
            return Err(AssetError::NotFound);
        }
        self.store
            .asset(owner, id)
            .await?
            .ok_or(AssetError::NotFound)
    }

    /// Bytes `range` of an asset (clamped to its size).
    pub async fn read(&self, asset: &AssetRow, range: Range<u64>) -> Result<Vec<u8>, AssetError> {
        let size = u64::try_from(asset.size).unwrap_or(0);
        let range = range.start.min(size)..range.end.min(size);
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let bytes = self.objects.get_range(&asset.key().into(), range).await?;
        Ok(bytes.to_vec())
    }
}

#[async_trait]
impl Artifacts for AssetStore {
    async fn offload(
        &self,
        user: &str,
        tool_call_id: &str,
        content: &str,
    ) -> Result<String, String> {
        self.put(
            user,
            ARTIFACT,
            "text/plain; charset=utf-8",
            Some(tool_call_id),
            content.as_bytes().to_vec(),
        )
        .await
        .map(|row| row.id)
        .map_err(|e| e.to_string())
    }
}

/// The asset store as the tools' sink for generated files (screenshots, media).
#[async_trait::async_trait]
impl weft_tools::web::AssetSink for AssetStore {
    async fn put(
        &self,
        owner: &str,
        kind: &str,
        media_type: &str,
        source: &str,
        bytes: Vec<u8>,
    ) -> Result<String, String> {
        AssetStore::put(self, owner, kind, media_type, Some(source), bytes)
            .await
            .map(|row| row.id)
            .map_err(|e| e.to_string())
    }
}

/// Every `tool_call_id` (and a call's `id`) in a record item's body.
fn call_ids(value: &serde_json::Value, into: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                if let (true, Some(id)) = (key == "tool_call_id" || key == "id", v.as_str()) {
                    into.push(id.to_owned());
                }
                call_ids(v, into);
            }
        }
        serde_json::Value::Array(list) => list.iter().for_each(|v| call_ids(v, into)),
        _ => {}
    }
}

/// Where asset bytes (offloaded tool results, media) are kept.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct AssetsConfig {
    /// A local directory (created if missing).
    pub dir: PathBuf,
    /// The largest file kept (offloaded results, screenshots, generated media).
    pub max_bytes: usize,
    /// Keep the bytes in an S3-compatible bucket instead of `dir`.
    pub s3: Option<S3Config>,
}

/// `[assets.s3]`: an S3-compatible bucket (AWS, MinIO, Ceph, R2…). Credentials absent here
/// come from the usual `AWS_*` environment variables.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    pub bucket: String,
    #[serde(default = "default_region")]
    pub region: String,
    /// A non-AWS endpoint (`http://127.0.0.1:9000`); path-style requests are used with it.
    pub endpoint: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

fn default_region() -> String {
    "us-east-1".to_owned()
}

impl Default for AssetsConfig {
    fn default() -> Self {
        AssetsConfig {
            dir: PathBuf::from("data/assets"),
            max_bytes: 50 * 1024 * 1024,
            s3: None,
        }
    }
}
