//! Saved workflows (a user's graphs, JSON text) and their runs.

use crate::rows::{WorkflowRow, WorkflowRunRow};
use crate::{now_ms, Result, Store};

impl Store {
    pub async fn create_workflow(&self, row: &WorkflowRow) -> Result<()> {
        self.ensure_user(&row.owner).await?;
        sqlx::query(
            "INSERT INTO workflows (id, owner, name, description, graph, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&row.id)
        .bind(&row.owner)
        .bind(&row.name)
        .bind(&row.description)
        .bind(&row.graph)
        .bind(row.created_at)
        .bind(row.updated_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Replace a workflow's name, description and graph; false when the owner has none.
    pub async fn update_workflow(
        &self,
        owner: &str,
        id: &str,
        name: &str,
        description: &str,
        graph: &str,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE workflows SET name = $1, description = $2, graph = $3, updated_at = $4 \
             WHERE id = $5 AND owner = $6",
        )
        .bind(name)
        .bind(description)
        .bind(graph)
        .bind(now_ms())
        .bind(id)
        .bind(owner)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// One of the owner's workflows (another user's reads as missing).
    pub async fn workflow(&self, owner: &str, id: &str) -> Result<Option<WorkflowRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM workflows WHERE id = $1 AND owner = $2",
            WorkflowRow::COLUMNS
        ))
        .bind(id)
        .bind(owner)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(WorkflowRow::from_row).transpose()
    }

    /// The owner's workflows, most recently changed first.
    pub async fn workflows_of(&self, owner: &str) -> Result<Vec<WorkflowRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM workflows WHERE owner = $1 ORDER BY updated_at DESC, id",
            WorkflowRow::COLUMNS
        ))
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(WorkflowRow::from_row).collect()
    }

    pub async fn delete_workflow(&self, owner: &str, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM workflows WHERE id = $1 AND owner = $2")
            .bind(id)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn insert_workflow_run(&self, row: &WorkflowRunRow) -> Result<()> {
        sqlx::query(
            "INSERT INTO workflow_runs (id, workflow_id, owner, thread_id, message_id, status, \
             params, outputs, nodes, error, started_at, finished_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&row.id)
        .bind(&row.workflow_id)
        .bind(&row.owner)
        .bind(&row.thread_id)
        .bind(&row.message_id)
        .bind(&row.status)
        .bind(&row.params)
        .bind(&row.outputs)
        .bind(&row.nodes)
        .bind(&row.error)
        .bind(row.started_at)
        .bind(row.finished_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A workflow's runs, newest first.
    pub async fn workflow_runs(
        &self,
        owner: &str,
        workflow_id: &str,
    ) -> Result<Vec<WorkflowRunRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM workflow_runs WHERE workflow_id = $1 AND owner = $2 \
             ORDER BY started_at DESC, id",
            WorkflowRunRow::COLUMNS
        ))
        .bind(workflow_id)
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(WorkflowRunRow::from_row).collect()
    }

    /// One of `owner`'s runs.
    pub async fn workflow_run(&self, owner: &str, id: &str) -> Result<Option<WorkflowRunRow>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM workflow_runs WHERE id = $1 AND owner = $2",
            WorkflowRunRow::COLUMNS
        ))
        .bind(id)
        .bind(owner)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(WorkflowRunRow::from_row).transpose()
    }
}
