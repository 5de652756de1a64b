//! `build_workflow {objective}` (editor context only): the model plans a graph against the
//! node catalogue with JSON-Schema-constrained output; the graph is validated and, while it is
//! not valid, sent back with the errors for a repair (at most [`MAX_REPAIRS`] times).
//! `planning_update` frames follow each attempt; the answer is `{"graph": …}`.

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_core::{ChatMessage, ModelError, NestedCalls, Tool, ToolContext, ToolError};
use weft_protocol::{PolicyClass, ServerEvent, ToolCategory};

use crate::graph::Graph;
use crate::registry::NodeRegistry;
use crate::validate::validate;

/// Repairs after the first plan.
pub const MAX_REPAIRS: usize = 3;

pub const BUILD_WORKFLOW: &str = "build_workflow";

const SYSTEM: &str = "You design workflow graphs. A graph is JSON: {\"nodes\": [{\"id\": \
\"n1\", \"type\": \"<node type>\", \"inputs\": {<port>: <value>}}], \"edges\": [{\"from\": \
\"<node id>\", \"output\": \"<output port>\", \"to\": \"<node id>\", \"input\": \"<input port>\"}]}. \
Use only the node types below. Every required input must be set in `inputs` or connected by an \
edge; edges join an output port to an input port of a compatible type; no cycles. The graph's \
parameters are `input.*` nodes (their `name` input is the parameter's name); its results are \
`output` nodes. Answer with the JSON graph only.";

pub struct BuildWorkflow {
    registry: Arc<NodeRegistry>,
    schema: Arc<Value>,
}

impl BuildWorkflow {
    pub fn new(registry: Arc<NodeRegistry>) -> Self {
        let schema = Arc::new(graph_schema(&registry));
        BuildWorkflow { registry, schema }
    }

    /// The system prompt: the format and the catalogue.
    fn system(&self) -> String {
        let mut prompt = String::from(SYSTEM);
        prompt.push_str("\n\nNode types:\n");
        for entry in self.registry.catalogue(None) {
            let _ = writeln!(
                prompt,
                "- {}: {} inputs {} outputs {}",
                entry.node_type,
                entry.description,
                ports(&entry.inputs),
                ports(&entry.outputs),
            );
        }
        prompt
    }

    /// Plan, validate, repair; the valid graph or why there is none.
    async fn build(&self, progress: Progress<'_>, objective: &str) -> Result<Graph, String> {
        let site = progress.site;
        let system = self.system();
        let mut messages = vec![ChatMessage::user(format!("Objective: {objective}"))];
        let mut last_errors = String::new();
        for attempt in 0..=MAX_REPAIRS {
            let status = if attempt == 0 {
                format!("planning a workflow for: {objective}")
            } else {
                format!("repair {attempt} of {MAX_REPAIRS}: {last_errors}")
            };
            progress.update("started", status);
            let answer = site
                .complete_json(&system, messages.clone(), self.schema.clone())
                .await
                .map_err(|e| match e {
                    ModelError::Stopped => "stopped".to_owned(),
                    ModelError::Provider(message) => format!("the model failed: {message}"),
                })?;
            let errors = match parse(&answer) {
                Ok(graph) => match validate(&graph, &self.registry) {
                    Ok(_) => {
                        progress.update(
                            "done",
                            format!("{} nodes, {} edges", graph.nodes.len(), graph.edges.len()),
                        );
                        return Ok(graph);
                    }
                    Err(errors) => errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                },
                Err(error) => error,
            };
            last_errors = errors;
            messages.push(ChatMessage::assistant(answer, Vec::new()));
            messages.push(ChatMessage::user(format!(
                "That graph is not valid: {last_errors}. Answer with the whole corrected graph."
            )));
        }
        progress.update("failed", last_errors.clone());
        Err(format!(
            "no valid graph after {MAX_REPAIRS} repairs: {last_errors}"
        ))
    }
}

/// Where the builder's `planning_update` frames go: under its own call.
struct Progress<'a> {
    site: &'a dyn NestedCalls,
    call_id: &'a str,
}

impl Progress<'_> {
    fn update(&self, status: &str, content: String) {
        self.site.emit(ServerEvent::PlanningUpdate {
            status: status.to_owned(),
            content,
            parent_id: Some(self.call_id.to_owned()),
        });
    }
}

/// `name: type` for each port of a JSON Schema object, required ones marked.
fn ports(schema: &Value) -> String {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else {
        return "{}".to_owned();
    };
    let listed: Vec<String> = properties
        .iter()
        .map(|(name, port)| {
            let kind = port["type"].as_str().unwrap_or("any");
            let mark = if required.contains(&name.as_str()) {
                "*"
            } else {
                ""
            };
            format!("{name}{mark}: {kind}")
        })
        .collect();
    format!("{{{}}}", listed.join(", "))
}

/// The graph out of the model's answer (a fenced block is tolerated).
fn parse(answer: &str) -> Result<Graph, String> {
    let text = answer.trim();
    let text = text
        .strip_prefix("```json")
        .or_else(|| text.strip_prefix("```"))
        .and_then(|t| t.trim_end().strip_suffix("```"))
        .unwrap_or(text);
    serde_json::from_str(text.trim()).map_err(|e| format!("the answer is not a graph: {e}"))
}

/// The structured-output schema: the graph's shape, node types limited to the registry's.
fn graph_schema(registry: &NodeRegistry) -> Value {
    let types: Vec<Value> = registry
        .catalogue(None)
        .into_iter()
        .map(|t| Value::String(t.node_type))
        .collect();
    let text = json!({"type": "string"});
    json!({
        "type": "object",
        "required": ["nodes", "edges"],
        "properties": {
            "nodes": {"type": "array", "items": {
                "type": "object",
                "required": ["id", "type"],
                "properties": {"id": text, "type": {"type": "string", "enum": types}, "inputs": {"type": "object"}}
            }},
            "edges": {"type": "array", "items": {
                "type": "object",
                "required": ["from", "output", "to", "input"],
                "properties": {"from": text, "output": text, "to": text, "input": text}
            }}
        }
    })
}

#[async_trait]
impl Tool for BuildWorkflow {
    fn name(&self) -> &str {
        BUILD_WORKFLOW
    }

    fn description(&self) -> &str {
        "Design a workflow graph for an objective from the available node types; returns the \
validated graph ({\"graph\": …}) for the editor to show (with ui_paste_graph) or save."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "objective": {"type": "string", "description": "What the workflow should do."}
        }, "required": ["objective"]})
    }

    fn policy_class(&self) -> PolicyClass {
        PolicyClass::EditorMutate
    }

    /// It only proposes a graph; applying it is the `ui_*` tools' business.
    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let objective = args
            .get("objective")
            .and_then(Value::as_str)
            .filter(|o| !o.trim().is_empty())
            .ok_or_else(|| ToolError::model("`objective` is required"))?;
        let nested = ctx
            .nested
            .as_ref()
            .ok_or_else(|| ToolError::model("build_workflow runs only inside a turn"))?;
        let progress = Progress {
            site: nested.as_ref(),
            call_id: &ctx.tool_call_id,
        };
        let graph = self
            .build(progress, objective)
            .await
            .map_err(ToolError::model)?;
        Ok(json!({ "graph": graph }).to_string())
    }
}
