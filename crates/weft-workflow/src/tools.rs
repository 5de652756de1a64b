//! The workflow tools (the generic workflow toolbelt): `list_workflows`, `get_workflow`,
//! `list_node_types` (read) and `run_workflow`, `run_node` (execute: they ask in Default mode).
//! A run inside a chat turn happens at the call's own place: its nodes' frames nest under the
//! call, and tool nodes go through the gate, budget and record as calls nested under it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use weft_core::{Tool, ToolContext, ToolError};

use crate::builder::BuildWorkflow;
use crate::executor::execute;
use crate::graph::{Graph, Node};
use crate::registry::NodeRegistry;
use crate::run::{Job, RunLimits, RunResult, RunStatus};
use crate::validate::validate_within;

/// A saved workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedWorkflow {
    pub id: String,
    pub name: String,
    pub description: String,
    pub graph: Graph,
}

/// A finished run, to keep.
pub struct RunRecord<'a> {
    pub run_id: &'a str,
    pub owner: &'a str,
    pub workflow_id: &'a str,
    pub thread_id: Option<&'a str>,
    pub message_id: Option<&'a str>,
    pub params: &'a Map<String, Value>,
    pub result: &'a RunResult,
    pub started_at: i64,
}

/// Where workflows are kept (the server's store).
#[async_trait]
pub trait WorkflowLibrary: Send + Sync {
    /// The owner's workflows: `[{"id","name","description"}]`.
    async fn list(&self, owner: &str) -> Result<Vec<Value>, String>;
    async fn get(&self, owner: &str, id: &str) -> Result<Option<SavedWorkflow>, String>;
    async fn record_run(&self, run: RunRecord<'_>) -> Result<(), String>;
}

/// What the workflow tools share.
#[derive(Clone)]
pub struct Workflows {
    pub library: Arc<dyn WorkflowLibrary>,
    pub registry: Arc<NodeRegistry>,
    pub limits: RunLimits,
}

impl Workflows {
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(ListWorkflows(self.clone())),
            Arc::new(GetWorkflow(self.clone())),
            Arc::new(ListNodeTypes(self.clone())),
            Arc::new(RunWorkflow(self.clone())),
            Arc::new(RunNode(self.clone())),
            // Editor context only (its policy class): the server leaves it out elsewhere.
            Arc::new(BuildWorkflow::new(self.registry.clone())),
        ]
    }

    /// Run `graph` inside the tool call `ctx`, nested under it.
    async fn run(
        &self,
        graph: &Graph,
        workflow_id: &str,
        params: &Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<(String, RunResult), ToolError> {
        let plan = validate_within(graph, &self.registry, &self.limits).map_err(|errors| {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            ToolError::model(format!("invalid_graph: {}", errors.join("; ")))
        })?;
        let nested = ctx
            .nested
            .as_ref()
            .ok_or_else(|| ToolError::model("workflows run only inside a turn"))?;
        let run_id = format!("run_{}", ctx.tool_call_id);
        let job = Job {
            job_id: &run_id,
            workflow_id,
            prefix: None,
        };
        let result = execute(
            &plan,
            params,
            nested.as_ref(),
            &self.registry,
            &self.limits,
            job,
        )
        .await;
        Ok((run_id, result))
    }
}

fn text_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::model(format!("`{key}` is required")))
}

/// A run as the model reads it; a run that did not complete is an error result.
fn run_answer(run_id: &str, result: &RunResult) -> Result<String, ToolError> {
    let nodes: Vec<Value> = result
        .nodes
        .iter()
        .map(|n| {
            let mut node = json!({"node_id": n.node_id, "status": n.status});
            if let Some(error) = &n.error {
                node["error"] = json!(error);
            }
            node
        })
        .collect();
    let mut answer = json!({
        "run_id": run_id,
        "status": result.status,
        "outputs": result.outputs,
        "nodes": nodes,
    });
    if let Some(error) = &result.error {
        answer["error"] = json!(error);
    }
    if result.status == RunStatus::Completed {
        Ok(answer.to_string())
    } else {
        Err(ToolError::model(answer.to_string()))
    }
}

pub struct ListWorkflows(Workflows);
pub struct GetWorkflow(Workflows);
pub struct ListNodeTypes(Workflows);
pub struct RunWorkflow(Workflows);
pub struct RunNode(Workflows);

#[async_trait]
impl Tool for ListWorkflows {
    weft_core::tool_meta! {
        name: "list_workflows",
        description: "List your saved workflows (id, name, description).",
        class: Safe,
        category: Read,
        parameters: json!({"type": "object", "properties": {}}),
    }
    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let list = self
            .0
            .library
            .list(&ctx.user_id)
            .await
            .map_err(ToolError::model)?;
        Ok(Value::Array(list).to_string())
    }
}

#[async_trait]
impl Tool for GetWorkflow {
    weft_core::tool_meta! {
        name: "get_workflow",
        description: "Read one saved workflow: its graph of nodes and edges.",
        class: Safe,
        category: Read,
        parameters: json!({"type": "object", "properties": {"workflow_id": {"type": "string"}}, "required": ["workflow_id"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let id = text_arg(&args, "workflow_id")?;
        let workflow = self
            .0
            .library
            .get(&ctx.user_id, id)
            .await
            .map_err(ToolError::model)?
            .ok_or_else(|| ToolError::model(format!("no workflow `{id}`; see list_workflows")))?;
        Ok(json!({
            "id": workflow.id,
            "name": workflow.name,
            "description": workflow.description,
            "graph": workflow.graph,
        })
        .to_string())
    }
}

#[async_trait]
impl Tool for ListNodeTypes {
    weft_core::tool_meta! {
        name: "list_node_types",
        description: "List the node types workflows can use (optionally those matching a query): each with \
    its input and output ports as JSON Schemas.",
        class: Safe,
        category: Read,
        parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let query = args.get("query").and_then(Value::as_str);
        serde_json::to_string(&self.0.registry.catalogue(query))
            .map_err(|e| ToolError::model(e.to_string()))
    }
}

#[async_trait]
impl Tool for RunWorkflow {
    weft_core::tool_meta! {
        name: "run_workflow",
        description: "Run a saved workflow with parameters (its input nodes' names); returns its outputs and \
    each node's status.",
        class: Safe,
        category: Execute,
        parameters: json!({"type": "object", "properties": {
            "workflow_id": {"type": "string"},
            "params": {"type": "object", "description": "Parameter values by name."}
        }, "required": ["workflow_id"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let id = text_arg(&args, "workflow_id")?;
        let params = args
            .get("params")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let workflow = self
            .0
            .library
            .get(&ctx.user_id, id)
            .await
            .map_err(ToolError::model)?
            .ok_or_else(|| ToolError::model(format!("no workflow `{id}`; see list_workflows")))?;
        let started_at = now_ms();
        let (run_id, result) = self.0.run(&workflow.graph, id, &params, ctx).await?;
        let record = RunRecord {
            run_id: &run_id,
            owner: &ctx.user_id,
            workflow_id: id,
            thread_id: None,
            message_id: None,
            params: &params,
            result: &result,
            started_at,
        };
        if let Err(e) = self.0.library.record_run(record).await {
            tracing::warn!(error = %e, "cannot record a workflow run");
        }
        run_answer(&run_id, &result)
    }
}

#[async_trait]
impl Tool for RunNode {
    weft_core::tool_meta! {
        name: "run_node",
        description: "Run one node of any type (see list_node_types) with its inputs; returns its outputs.",
        class: Safe,
        category: Execute,
        parameters: json!({"type": "object", "properties": {
            "node_type": {"type": "string"},
            "inputs": {"type": "object"}
        }, "required": ["node_type"]}),
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let node_type = text_arg(&args, "node_type")?;
        let graph = Graph {
            nodes: vec![Node {
                id: "node".into(),
                node_type: node_type.to_owned(),
                inputs: args
                    .get("inputs")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
            }],
            edges: Vec::new(),
        };
        let (_, result) = self.0.run(&graph, node_type, &Map::new(), ctx).await?;
        let node = result.nodes.into_iter().next();
        match node {
            Some(n) if n.status == crate::run::NodeStatus::Completed => {
                Ok(n.output.unwrap_or(Value::Null).to_string())
            }
            Some(n) => Err(ToolError::model(
                n.error
                    .unwrap_or_else(|| format!("the node was {:?}", n.status)),
            )),
            None => Err(ToolError::model("the node did not run")),
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
