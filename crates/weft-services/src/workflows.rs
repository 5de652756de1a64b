//! The store as the workflow library: saved workflows (always their owner's) and the record
//! of each run.

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_store::{now_ms, Store, WorkflowRow, WorkflowRunRow};
use weft_workflow::{RunRecord, SavedWorkflow, WorkflowLibrary};

/// The store as the workflow tools' library.
pub struct StoreLibrary {
    pub store: Store,
}

pub fn saved(row: &WorkflowRow) -> Result<SavedWorkflow, String> {
    Ok(SavedWorkflow {
        id: row.id.clone(),
        name: row.name.clone(),
        description: row.description.clone(),
        graph: serde_json::from_str(&row.graph).map_err(|e| format!("stored graph: {e}"))?,
    })
}

#[async_trait]
impl WorkflowLibrary for StoreLibrary {
    async fn list(&self, owner: &str) -> Result<Vec<Value>, String> {
        let rows = self
            .store
            .workflows_of(owner)
            .await
            .map_err(|e| e.to_string())?;
        Ok(rows
            .iter()
            .map(|r| json!({"id": r.id, "name": r.name, "description": r.description}))
            .collect())
    }

    async fn get(&self, owner: &str, id: &str) -> Result<Option<SavedWorkflow>, String> {
        if !weft_protocol::is_identifier(id) {
            return Ok(None);
        }
        match self
            .store
            .workflow(owner, id)
            .await
            .map_err(|e| e.to_string())?
        {
            Some(row) => saved(&row).map(Some),
            None => Ok(None),
        }
    }

    async fn record_run(&self, run: RunRecord<'_>) -> Result<(), String> {
        let row = WorkflowRunRow {
            id: run.run_id.to_owned(),
            workflow_id: run.workflow_id.to_owned(),
            owner: run.owner.to_owned(),
            thread_id: run.thread_id.map(str::to_owned),
            message_id: run.message_id.map(str::to_owned),
            status: run.result.status.as_str().to_owned(),
            params: Value::Object(run.params.clone()).to_string(),
            outputs: Value::Object(run.result.outputs.clone()).to_string(),
            nodes: serde_json::to_string(&run.result.nodes).unwrap_or_else(|_| "[]".into()),
            error: run.result.error.clone(),
            started_at: run.started_at,
            finished_at: now_ms(),
        };
        self.store
            .insert_workflow_run(&row)
            .await
            .map_err(|e| e.to_string())
    }
}
