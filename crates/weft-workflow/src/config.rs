//! `[workflow]`: whether workflows are on, and the bounds of every run (beyond the turn's
//! budget it runs under).

use serde::{Deserialize, Serialize};

use crate::run::RunLimits;

/// How workflow runs are bounded (beyond the turn's budget they run under).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct WorkflowConfig {
    /// The node registry, workflow tools, route 1 and the editor context; off leaves them out.
    pub enabled: bool,
    /// Nodes of one run running at once (nested `list.map` runs included).
    pub max_parallel_nodes: usize,
    /// How long one node may run (tool nodes keep the tool timeout).
    pub node_timeout_ms: u64,
    /// Items one `list.map` takes.
    pub max_map_items: usize,
    /// How deep `list.map`s may nest.
    pub max_map_depth: u32,
    /// Node runs of one run, nested ones included.
    pub max_node_runs: u64,
    /// Work one `text.template` render may do (minijinja fuel: about one per instruction
    /// and one per 64 bytes it makes).
    pub template_fuel: u64,
    /// Bytes one `text.template` may render.
    pub max_template_bytes: usize,
}

impl Default for WorkflowConfig {
    fn default() -> Self {
        let limits = RunLimits::default();
        WorkflowConfig {
            enabled: true,
            max_parallel_nodes: limits.max_parallel,
            node_timeout_ms: limits.node_timeout.as_millis() as u64,
            max_map_items: limits.max_map_items,
            max_map_depth: limits.max_map_depth,
            max_node_runs: limits.max_node_runs,
            template_fuel: limits.template_fuel,
            max_template_bytes: limits.max_template_bytes,
        }
    }
}

impl WorkflowConfig {
    pub fn limits(&self) -> RunLimits {
        RunLimits {
            max_parallel: self.max_parallel_nodes.max(1),
            node_timeout: std::time::Duration::from_millis(self.node_timeout_ms),
            max_map_items: self.max_map_items,
            max_map_depth: self.max_map_depth,
            max_node_runs: self.max_node_runs,
            template_fuel: self.template_fuel,
            max_template_bytes: self.max_template_bytes,
        }
    }
}
