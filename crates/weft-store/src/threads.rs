//! Threads and their messages.

use crate::now_ms;
use crate::rows::{MessageRow, ThreadRow};
use crate::{Result, Store};

impl Store {
    pub async fn create_thread(
        &self,
        id: &str,
        owner: &str,
        permission_mode: &str,
        title: &str,
    ) -> Result<ThreadRow> {
        self.ensure_user(owner).await?;
        let now = now_ms();
        sqlx::query(
            "INSERT INTO threads (id, owner, title, permission_mode, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(owner)
        .bind(title)
        .bind(permission_mode)
        .bind(now)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(ThreadRow {
            id: id.to_owned(),
            owner: owner.to_owned(),
            title: title.to_owned(),
            permission_mode: permission_mode.to_owned(),
            agent: None,
            created_at: now,
            updated_at: now,
            allowed_tools: Vec::new(),
        })
    }

    pub async fn thread(&self, id: &str) -> Result<Option<ThreadRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM threads WHERE id = $1",
            ThreadRow::COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(ThreadRow::from_row).transpose()
    }

    /// A user's threads, most recently active first.
    pub async fn threads_of(&self, owner: &str) -> Result<Vec<ThreadRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM threads WHERE owner = $1 ORDER BY updated_at DESC, id",
            ThreadRow::COLUMNS
        ))
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(ThreadRow::from_row).collect()
    }

    pub async fn set_thread_mode(&self, id: &str, permission_mode: &str) -> Result<()> {
        sqlx::query("UPDATE threads SET permission_mode = $1 WHERE id = $2")
            .bind(permission_mode)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Rename a thread; false when there is none.
    pub async fn set_thread_title(&self, id: &str, title: &str) -> Result<bool> {
        let done = sqlx::query("UPDATE threads SET title = $1 WHERE id = $2")
            .bind(title)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    pub async fn touch_thread(&self, id: &str) -> Result<()> {
        sqlx::query("UPDATE threads SET updated_at = $1 WHERE id = $2")
            .bind(now_ms())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Delete a thread and everything recorded under it. Its turns' leases (which would go
    /// with their messages anyway, `ON DELETE CASCADE`) are deleted first, so the delete
    /// locks what a replica's batch for one of its turns locks in the batch's order, lease
    /// then rows: a replica still writing that turn (one that did not answer the stop) is
    /// waited for, or finds its lease gone and its writes fenced off, instead of the two
    /// deadlocking over the message's row and its lease.
    pub async fn delete_thread(&self, id: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "DELETE FROM turn_leases WHERE message_id IN (SELECT id FROM messages WHERE thread_id = $1)",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM items WHERE message_id IN (SELECT id FROM messages WHERE thread_id = $1)",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        for table in ["approvals", "model_calls", "tool_calls", "messages"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE thread_id = $1"))
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        let done = sqlx::query("DELETE FROM threads WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    /// A thread's messages, oldest first.
    pub async fn messages(&self, thread_id: &str) -> Result<Vec<MessageRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM messages WHERE thread_id = $1 ORDER BY position, created_at, id",
            MessageRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(MessageRow::from_row).collect()
    }
}
