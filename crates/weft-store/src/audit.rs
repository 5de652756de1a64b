//! The audit trail as read back: model calls and approvals (tool calls are in the record).

use crate::rows::{ApprovalRow, ModelCallRow};
use crate::{Result, Store};

impl Store {
    pub async fn model_calls(&self, thread_id: &str) -> Result<Vec<ModelCallRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM model_calls WHERE thread_id = $1 ORDER BY created_at, id",
            ModelCallRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(ModelCallRow::from_row).collect()
    }

    pub async fn approvals(&self, thread_id: &str) -> Result<Vec<ApprovalRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM approvals WHERE thread_id = $1 ORDER BY created_at, id",
            ApprovalRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(ApprovalRow::from_row).collect()
    }

    /// Every approval of the thread still `pending` becomes `expired` (its turn was closed
    /// after its replica died); returns how many.
    pub async fn expire_pending_approvals(&self, thread_id: &str) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE approvals SET status = 'expired', decided_at = $1 \
             WHERE thread_id = $2 AND status = 'pending'",
        )
        .bind(crate::now_ms())
        .bind(thread_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// The thread of a pending approval, if `id` is one.
    pub async fn pending_approval_thread(&self, id: &str) -> Result<Option<String>> {
        let thread: Option<String> = sqlx::query_scalar(
            "SELECT thread_id FROM approvals WHERE id = $1 AND status = 'pending'",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(thread)
    }

    /// The ids of a thread's approvals still pending.
    pub async fn pending_approval_ids(&self, thread_id: &str) -> Result<Vec<String>> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM approvals WHERE thread_id = $1 AND status = 'pending'",
        )
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(ids)
    }

    /// Keep `answer` for a pending approval whose turn no replica runs now, for the one that
    /// takes the turn up; the approval's tool, or `None` when it is not pending.
    pub async fn queue_approval_answer(
        &self,
        thread_id: &str,
        id: &str,
        answer: &str,
    ) -> Result<Option<String>> {
        let tool: Option<String> = sqlx::query_scalar(
            "UPDATE approvals SET queued_answer = $1 \
             WHERE thread_id = $2 AND id = $3 AND status = 'pending' RETURNING tool",
        )
        .bind(answer)
        .bind(thread_id)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(tool)
    }

    /// The answers kept for a thread's pending approvals (see
    /// [`Store::queue_approval_answer`]): (approval id, answer).
    pub async fn queued_approval_answers(&self, thread_id: &str) -> Result<Vec<(String, String)>> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT id, queued_answer FROM approvals \
             WHERE thread_id = $1 AND status = 'pending' AND queued_answer IS NOT NULL",
        )
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }
}
