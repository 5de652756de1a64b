//! The conversation record as read back: a thread's root-level items in order, one turn's
//! items at every depth, and the turns a crash left `running`.

use sqlx::any::AnyRow;

use crate::item_pairs::unpack;
use crate::rows::{ItemRow, MessageRow};
use crate::{Result, Store};

/// The items stored `rows` hold (a pair's row gives back its two).
fn items(rows: &[AnyRow]) -> Result<Vec<ItemRow>> {
    rows.iter()
        .map(ItemRow::from_row)
        .collect::<Result<Vec<_>>>()
        .map(unpack)
}

impl Store {
    /// A thread's root-level items (depth 0), in conversation order.
    pub async fn root_items(&self, thread_id: &str) -> Result<Vec<ItemRow>> {
        let rows = sqlx::query(
            "SELECT i.thread_id, i.message_id, i.position, i.kind, i.parent_id, i.depth, i.body, i.created_at \
             FROM messages m JOIN items i ON i.message_id = m.id \
             WHERE m.thread_id = $1 AND i.depth = 0 ORDER BY m.position, i.position",
        )
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        items(&rows)
    }

    /// Every item of a thread, every depth, turn by turn in record order.
    pub async fn thread_items(&self, thread_id: &str) -> Result<Vec<ItemRow>> {
        let rows = sqlx::query(
            "SELECT i.thread_id, i.message_id, i.position, i.kind, i.parent_id, i.depth, i.body, i.created_at \
             FROM messages m JOIN items i ON i.message_id = m.id \
             WHERE m.thread_id = $1 ORDER BY m.position, i.position",
        )
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        items(&rows)
    }

    /// One turn's items at every depth, in the order they were recorded.
    pub async fn turn_items(&self, thread_id: &str, message_id: &str) -> Result<Vec<ItemRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM items WHERE message_id = $2 AND thread_id = $1 ORDER BY position",
            ItemRow::COLUMNS
        ))
        .bind(thread_id)
        .bind(message_id)
        .fetch_all(&self.pool)
        .await?;
        items(&rows)
    }

    /// One message of a thread.
    pub async fn message(&self, thread_id: &str, message_id: &str) -> Result<Option<MessageRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM messages WHERE thread_id = $1 AND id = $2",
            MessageRow::COLUMNS
        ))
        .bind(thread_id)
        .bind(message_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(MessageRow::from_row).transpose()
    }

    /// A message by its id alone (a prompt's id is its assistant message's).
    pub async fn message_by_id(&self, message_id: &str) -> Result<Option<MessageRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM messages WHERE id = $1",
            MessageRow::COLUMNS
        ))
        .bind(message_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(MessageRow::from_row).transpose()
    }

    /// The newest assistant message of a thread.
    pub async fn last_assistant_message(&self, thread_id: &str) -> Result<Option<MessageRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM messages WHERE thread_id = $1 AND role = 'assistant' \
             ORDER BY position DESC, created_at DESC LIMIT 1",
            MessageRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(MessageRow::from_row).transpose()
    }
}
