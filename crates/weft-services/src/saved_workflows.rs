//! Saved workflows as their owners manage them: create and replace (the name checked, the
//! graph validated within the server's bounds), list, read, delete; and a finished run as the
//! API shows it. Everything is the caller's own.

use serde_json::Value;
use weft_protocol::rest::{Workflow, WorkflowBody, WorkflowRun};
use weft_store::{new_id, now_ms, rfc3339, Store, StoreError, WorkflowRow, WorkflowRunRow};
use weft_workflow::{validate_within, GraphError, NodeRegistry, RunLimits};

/// Why a workflow request was refused.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    #[error("{0}")]
    Invalid(&'static str),
    /// The graph is not valid: each error names its node and port.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Graph(Vec<GraphError>),
    #[error("no such workflow")]
    NotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored graph that no longer reads.
    #[error("stored graph: {0}")]
    Stored(#[from] serde_json::Error),
}

type Result<T> = std::result::Result<T, WorkflowError>;

/// What the graph of a saved workflow is checked against.
pub struct Bounds<'a> {
    pub registry: &'a NodeRegistry,
    pub limits: RunLimits,
}

/// The body's graph as JSON text when the body is a valid workflow.
fn checked(bounds: &Bounds<'_>, body: &WorkflowBody) -> Result<String> {
    if body.name.trim().is_empty() || body.name.len() > 200 {
        return Err(WorkflowError::Invalid("name must be 1 to 200 bytes"));
    }
    validate_within(&body.graph, bounds.registry, &bounds.limits).map_err(WorkflowError::Graph)?;
    Ok(serde_json::to_string(&body.graph)?)
}

/// Save a new workflow of `owner`'s.
pub async fn create(
    store: &Store,
    bounds: &Bounds<'_>,
    owner: &str,
    body: WorkflowBody,
) -> Result<Workflow> {
    let graph = checked(bounds, &body)?;
    let now = now_ms();
    let row = WorkflowRow {
        id: format!("wf_{}", new_id()),
        owner: owner.to_owned(),
        name: body.name.trim().to_owned(),
        description: body.description,
        graph,
        created_at: now,
        updated_at: now,
    };
    store.create_workflow(&row).await?;
    workflow_json(&row)
}

/// `owner`'s workflows.
pub async fn list(store: &Store, owner: &str) -> Result<Vec<Workflow>> {
    store
        .workflows_of(owner)
        .await?
        .iter()
        .map(workflow_json)
        .collect()
}

/// `owner`'s workflow `id`.
pub async fn get(store: &Store, owner: &str, id: &str) -> Result<Workflow> {
    workflow_json(&owned(store, owner, id).await?)
}

/// Replace `owner`'s workflow `id`.
pub async fn replace(
    store: &Store,
    bounds: &Bounds<'_>,
    owner: &str,
    id: &str,
    body: WorkflowBody,
) -> Result<Workflow> {
    owned(store, owner, id).await?;
    let graph = checked(bounds, &body)?;
    store
        .update_workflow(owner, id, body.name.trim(), &body.description, &graph)
        .await?;
    get(store, owner, id).await
}

/// Delete `owner`'s workflow `id`.
pub async fn delete(store: &Store, owner: &str, id: &str) -> Result<()> {
    if !weft_protocol::is_identifier(id) || !store.delete_workflow(owner, id).await? {
        return Err(WorkflowError::NotFound);
    }
    Ok(())
}

/// `owner`'s workflow `id`, as stored.
pub async fn owned(store: &Store, owner: &str, id: &str) -> Result<WorkflowRow> {
    if !weft_protocol::is_identifier(id) {
        return Err(WorkflowError::NotFound);
    }
    store
        .workflow(owner, id)
        .await?
        .ok_or(WorkflowError::NotFound)
}

fn workflow_json(row: &WorkflowRow) -> Result<Workflow> {
    Ok(Workflow {
        id: row.id.clone(),
        name: row.name.clone(),
        description: row.description.clone(),
        graph: serde_json::from_str(&row.graph)?,
        created_at: rfc3339(row.created_at),
        updated_at: rfc3339(row.updated_at),
    })
}

/// A finished run as the API shows it.
pub fn run_json(run: WorkflowRunRow) -> WorkflowRun {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    WorkflowRun {
        outputs: parse(&run.outputs),
        nodes: parse(&run.nodes),
        id: run.id,
        status: run.status,
        thread_id: run.thread_id,
        error: run.error,
    }
}
