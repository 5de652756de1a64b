//! The node registry: the built-in node types and, through [`ToolNode`], every non-agentic
//! tool of the toolbelt, so workflows gain each capability the toolbelt gains.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use weft_core::{prompts, Toolbelt};

use crate::node::NodeType;
use crate::nodes;
use crate::tool_node::ToolNode;
use weft_protocol::{PolicyClass, ToolCategory};

/// A node type as the catalogue (`GET /node-types`, `list_node_types`) describes it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct CatalogueEntry {
    #[serde(rename = "type")]
    pub node_type: String,
    pub description: String,
    /// JSON Schema of the inputs: each property is an input port.
    pub inputs: Value,
    /// JSON Schema of the outputs: each property is an output port.
    pub outputs: Value,
    pub category: ToolCategory,
    pub policy_class: PolicyClass,
}

/// Tools that are not nodes: they delegate, build or run workflows, or live in the client.
pub const NOT_NODES: [&str; 6] = [
    prompts::RUN_SUBTASK,
    prompts::RUN_PARALLEL_SUBAGENTS,
    "run_workflow",
    "run_node",
    "build_workflow",
    "finish_subtask",
];

#[derive(Clone, Default)]
pub struct NodeRegistry {
    types: BTreeMap<String, Arc<dyn NodeType>>,
}

impl NodeRegistry {
    /// The built-in node types.
    pub fn with_builtins() -> Self {
        let mut registry = NodeRegistry::default();
        for node in nodes::builtins() {
            registry.register(node);
        }
        registry
    }

    /// The built-ins plus every non-agentic tool of `tools` as a node of the same name.
    pub fn with_tools(tools: &Toolbelt) -> Self {
        let mut registry = Self::with_builtins();
        registry.add_tools(tools);
        registry
    }

    pub fn add_tools(&mut self, tools: &Toolbelt) {
        for name in tools.names() {
            if NOT_NODES.contains(&name) || name.starts_with("ui_") {
                continue;
            }
            if let Some(tool) = tools.get(name) {
                self.register(Arc::new(ToolNode::new(tool)));
            }
        }
    }

    pub fn register(&mut self, node: Arc<dyn NodeType>) {
        self.types.insert(node.type_name().to_owned(), node);
    }

    pub fn get(&self, type_name: &str) -> Option<&Arc<dyn NodeType>> {
        self.types.get(type_name)
    }

    pub fn len(&self) -> usize {
        self.types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// The catalogue (`GET /node-types`, `list_node_types`): every type whose name or
    /// description contains `query` (case-insensitive), or all.
    pub fn catalogue(&self, query: Option<&str>) -> Vec<CatalogueEntry> {
        let query = query
            .map(str::to_lowercase)
            .filter(|q| !q.trim().is_empty());
        self.types
            .values()
            .filter(|t| {
                query.as_ref().is_none_or(|q| {
                    t.type_name().to_lowercase().contains(q.as_str())
                        || t.description().to_lowercase().contains(q.as_str())
                })
            })
            .map(|t| CatalogueEntry {
                node_type: t.type_name().to_owned(),
                description: t.description().to_owned(),
                inputs: t.inputs(),
                outputs: t.outputs(),
                category: t.category(),
                policy_class: t.policy_class(),
            })
            .collect()
    }
}
