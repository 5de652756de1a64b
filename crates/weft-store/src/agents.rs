//! Stored agents: a user's named agent configs (JSON text; the store does not interpret it).

use crate::rows::AgentRow;
use crate::{now_ms, Result, Store};

impl Store {
    /// Create an agent; false when the user already has one of that name.
    pub async fn create_agent(&self, owner: &str, name: &str, config: &str) -> Result<bool> {
        self.ensure_user(owner).await?;
        let now = now_ms();
        let done = sqlx::query(
            "INSERT INTO agents (owner, name, config, created_at, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (owner, name) DO NOTHING",
        )
        .bind(owner)
        .bind(name)
        .bind(config)
        .bind(now)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Replace an agent's config; false when there is no such agent.
    pub async fn update_agent(&self, owner: &str, name: &str, config: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE agents SET config = $1, updated_at = $2 WHERE owner = $3 AND name = $4",
        )
        .bind(config)
        .bind(now_ms())
        .bind(owner)
        .bind(name)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn agent(&self, owner: &str, name: &str) -> Result<Option<AgentRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM agents WHERE owner = $1 AND name = $2",
            AgentRow::COLUMNS
        ))
        .bind(owner)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(AgentRow::from_row).transpose()
    }

    /// A user's agents, by name.
    pub async fn agents_of(&self, owner: &str) -> Result<Vec<AgentRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM agents WHERE owner = $1 ORDER BY name",
            AgentRow::COLUMNS
        ))
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(AgentRow::from_row).collect()
    }

    /// Delete an agent; false when there was none.
    pub async fn delete_agent(&self, owner: &str, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM agents WHERE owner = $1 AND name = $2")
            .bind(owner)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}
