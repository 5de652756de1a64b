//! Users and API keys (only a key's SHA-256 is stored).

use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::now_ms;
use crate::{Result, Store};

fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

impl Store {
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
}
