//! The asset index: what is kept in the object store (offloaded tool results, later images
//! and audio), whose it is, and how big. The bytes themselves live in the object store.

use crate::rows::AssetRow;
use crate::{Result, Store};

impl Store {
    /// Index an asset (its owner is created if new: a first turn may offload before its
    /// thread is written).
    pub async fn insert_asset(&self, asset: &AssetRow) -> Result<()> {
        self.ensure_user(&asset.owner).await?;
        sqlx::query(
            "INSERT INTO assets (id, owner, kind, media_type, size, source, sha256, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&asset.id)
        .bind(&asset.owner)
        .bind(&asset.kind)
        .bind(&asset.media_type)
        .bind(asset.size)
        .bind(&asset.source)
        .bind(&asset.sha256)
        .bind(asset.created_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// `owner`'s assets made by any of `sources` (tool calls, messages).
    pub async fn assets_from(&self, owner: &str, sources: &[String]) -> Result<Vec<AssetRow>> {
        let mut found = Vec::new();
        for batch in sources.chunks(500) {
            let marks: Vec<String> = (0..batch.len()).map(|i| format!("${}", i + 2)).collect();
            let sql = format!(
                "SELECT {} FROM assets WHERE owner = $1 AND source IN ({})",
                AssetRow::COLUMNS,
                marks.join(", ")
            );
            let mut query = sqlx::query(&sql).bind(owner);
            for source in batch {
                query = query.bind(source);
            }
            for row in query.fetch_all(&self.pool).await? {
                found.push(AssetRow::from_row(&row)?);
            }
        }
        Ok(found)
    }

    /// Forget an asset (its bytes are the caller's to remove).
    pub async fn delete_asset(&self, owner: &str, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM assets WHERE id = $1 AND owner = $2")
            .bind(id)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// An asset of `owner`'s; `None` when there is none (or it is someone else's).
    pub async fn asset(&self, owner: &str, id: &str) -> Result<Option<AssetRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM assets WHERE id = $1 AND owner = $2",
            AssetRow::COLUMNS
        ))
        .bind(id)
        .bind(owner)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(AssetRow::from_row).transpose()
    }
}
