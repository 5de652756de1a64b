//! The audit trail: tool calls, model calls, approvals, and a whole turn in one transaction.

use crate::rows::{ApprovalRow, ModelCallRow, NewMessage, ToolCallRow};
use crate::threads::insert_message;
use crate::{new_id, now_ms, Tx};
use crate::{Result, Store};

impl Store {
    pub async fn insert_tool_calls(&self, rows: &[ToolCallRow]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        insert_tool_calls(&mut tx, rows).await?;
        tx.commit().await?;
        Ok(())
    }

    /// A finished turn in one transaction: the assistant message, its tool calls and its
    /// model calls (one commit, multi-row inserts).
    pub async fn record_turn(
        &self,
        message: &NewMessage,
        tools: &[ToolCallRow],
        models: &[ModelCallRow],
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        insert_message(&mut tx, message, true).await?;
        insert_tool_calls(&mut tx, tools).await?;
        insert_model_calls(&mut tx, models).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn tool_calls(&self, thread_id: &str) -> Result<Vec<ToolCallRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM tool_calls WHERE thread_id = $1 ORDER BY started_at, tool_call_id",
            ToolCallRow::COLUMNS
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(ToolCallRow::from_row).collect()
    }

    pub async fn insert_model_calls(&self, rows: &[ModelCallRow]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        insert_model_calls(&mut tx, rows).await?;
        tx.commit().await?;
        Ok(())
    }

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

    /// Record a new pending approval.
    pub async fn insert_approval(&self, r: &ApprovalRow) -> Result<()> {
        sqlx::query(
            "INSERT INTO approvals (id, thread_id, tool, arguments, status, created_at, decided_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
        )
        .bind(&r.id)
        .bind(&r.thread_id)
        .bind(&r.tool)
        .bind(&r.arguments)
        .bind(&r.status)
        .bind(r.created_at)
        .bind(r.decided_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Settle an approval: `approved`, `rejected` or `timed_out`.
    pub async fn decide_approval(&self, id: &str, status: &str) -> Result<()> {
        sqlx::query("UPDATE approvals SET status = $1, decided_at = $2 WHERE id = $3")
            .bind(status)
            .bind(now_ms())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
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
}

/// Rows per multi-row INSERT (13 columns each keeps well under every bind limit).
const ROWS_PER_INSERT: usize = 50;

/// `($1, …, $n), ($n+1, …)`: placeholders for `rows` rows of `columns` values.
fn placeholders(rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|r| {
            let row: Vec<String> = (1..=columns)
                .map(|c| format!("${}", r * columns + c))
                .collect();
            format!("({})", row.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

async fn insert_tool_calls(tx: &mut Tx<'_>, rows: &[ToolCallRow]) -> Result<()> {
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO tool_calls (id, thread_id, message_id, tool_call_id, parent_id, depth, tool, arguments, \
             result_preview, status, approval_status, started_at, duration_ms) VALUES {}",
            placeholders(chunk.len(), 13)
        );
        let mut query = sqlx::query(&sql);
        for r in chunk {
            query = query
                .bind(new_id())
                .bind(&r.thread_id)
                .bind(&r.message_id)
                .bind(&r.tool_call_id)
                .bind(r.parent_id.clone())
                .bind(r.depth)
                .bind(&r.tool)
                .bind(&r.arguments)
                .bind(&r.result_preview)
                .bind(&r.status)
                .bind(&r.approval_status)
                .bind(r.started_at)
                .bind(r.duration_ms);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

async fn insert_model_calls(tx: &mut Tx<'_>, rows: &[ModelCallRow]) -> Result<()> {
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO model_calls (id, thread_id, message_id, user_id, provider, model, depth, input_tokens, \
             output_tokens, cost_usd, duration_ms, error, created_at) VALUES {}",
            placeholders(chunk.len(), 13)
        );
        let mut query = sqlx::query(&sql);
        for r in chunk {
            query = query
                .bind(new_id())
                .bind(&r.thread_id)
                .bind(&r.message_id)
                .bind(&r.user_id)
                .bind(&r.provider)
                .bind(&r.model)
                .bind(r.depth)
                .bind(r.input_tokens)
                .bind(r.output_tokens)
                .bind(r.cost_usd)
                .bind(r.duration_ms)
                .bind(r.error.clone())
                .bind(r.created_at);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}
