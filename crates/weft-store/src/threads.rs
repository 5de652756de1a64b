//! Threads and their messages.

use crate::rows::{MessageRow, NewMessage, ThreadRow};
use crate::{now_ms, Tx};
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
            created_at: now,
            updated_at: now,
        })
    }

    /// Start a turn in one transaction: create the thread when it is new (its owner must
    /// already exist), then save the user message.
    pub async fn begin_turn(
        &self,
        new_thread: Option<&ThreadRow>,
        user_message: &NewMessage,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if let Some(t) = new_thread {
            sqlx::query(
                "INSERT INTO threads (id, owner, title, permission_mode, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&t.id)
            .bind(&t.owner)
            .bind(&t.title)
            .bind(&t.permission_mode)
            .bind(t.created_at)
            .bind(t.updated_at)
            .execute(&mut *tx)
            .await?;
        }
        // A thread created just now is already marked active.
        insert_message(&mut tx, user_message, new_thread.is_none()).await?;
        tx.commit().await?;
        Ok(())
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

    pub async fn touch_thread(&self, id: &str) -> Result<()> {
        sqlx::query("UPDATE threads SET updated_at = $1 WHERE id = $2")
            .bind(now_ms())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Delete a thread and everything recorded under it.
    pub async fn delete_thread(&self, id: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
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

    pub async fn insert_message(&self, m: &NewMessage) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        insert_message(&mut tx, m, true).await?;
        tx.commit().await?;
        Ok(())
    }

    /// A thread's messages, oldest first.
    pub async fn messages(&self, thread_id: &str) -> Result<Vec<MessageRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM messages WHERE thread_id = $1 ORDER BY created_at, id",
            MessageRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(MessageRow::from_row).collect()
    }
}

/// Insert a message inside `tx`, marking its thread active when `touch`.
pub(crate) async fn insert_message(tx: &mut Tx<'_>, m: &NewMessage, touch: bool) -> Result<()> {
    sqlx::query(
        "INSERT INTO messages (id, thread_id, role, content, execution_tree, permission_mode, status, \
         input_tokens, output_tokens, cost_usd, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(&m.id)
    .bind(&m.thread_id)
    .bind(&m.role)
    .bind(m.content.to_string())
    .bind(m.execution_tree.as_ref().map(|t| t.to_string()))
    .bind(m.permission_mode.clone())
    .bind(&m.status)
    .bind(m.input_tokens)
    .bind(m.output_tokens)
    .bind(m.cost_usd)
    .bind(m.created_at)
    .execute(&mut **tx)
    .await?;
    if touch {
        sqlx::query("UPDATE threads SET updated_at = $1 WHERE id = $2")
            .bind(now_ms())
            .bind(&m.thread_id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
