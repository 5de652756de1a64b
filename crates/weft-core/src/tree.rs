//! Builds the persisted execution tree (seed 000 shape) and the per-call audit records from
//! `tool_call_update` events.

use std::collections::HashMap;
use std::time::Instant;

use weft_protocol::tree::preview;
use weft_protocol::{ExecutionTreeNode, ExecutionTreeSnapshot, ServerEvent, ToolCallStatus, ToolResultMetadata};

/// One tool call as recorded for the audit log: its tree node, depth and runtime metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRecord {
    pub node: ExecutionTreeNode,
    pub depth: u32,
    /// `None` only for a call whose end was never emitted.
    pub metadata: Option<ToolResultMetadata>,
}

#[derive(Debug, Default)]
pub struct TreeBuilder {
    records: Vec<ToolCallRecord>,
    index: HashMap<String, (usize, Instant)>,
}

impl TreeBuilder {
    pub fn observe(&mut self, event: &ServerEvent) {
        let ServerEvent::ToolCallUpdate {
            tool_call_id, name, status, args, result, is_error, parent_id, depth, metadata,
        } = event
        else {
            return;
        };
        match status {
            ToolCallStatus::Start => {
                let title = args
                    .as_ref()
                    .filter(|_| name == "run_subtask")
                    .and_then(|a| a.get("title"))
                    .and_then(|t| t.as_str())
                    .map(preview);
                let args_preview = args.as_ref().map(|a| preview(&a.to_string()));
                self.index.insert(tool_call_id.clone(), (self.records.len(), Instant::now()));
                self.records.push(ToolCallRecord {
                    node: ExecutionTreeNode {
                        id: tool_call_id.clone(),
                        parent_id: parent_id.clone(),
                        name: name.clone(),
                        title,
                        args_preview,
                        result_preview: None,
                        is_error: None,
                        duration_ms: 0.0,
                    },
                    depth: *depth,
                    metadata: None,
                });
            }
            ToolCallStatus::End => {
                let Some((at, started)) = self.index.get(tool_call_id) else {
                    return;
                };
                let record = &mut self.records[*at];
                record.node.result_preview = result.as_deref().map(preview);
                record.node.is_error = *is_error;
                record.node.duration_ms = metadata
                    .as_ref()
                    .map(|m| m.execution_time_ms)
                    .unwrap_or_else(|| started.elapsed().as_secs_f64() * 1000.0);
                record.metadata = metadata.clone();
            }
        }
    }

    pub fn snapshot(&self) -> ExecutionTreeSnapshot {
        ExecutionTreeSnapshot { version: 1, nodes: self.records.iter().map(|r| r.node.clone()).collect() }
    }

    pub fn records(&self) -> Vec<ToolCallRecord> {
        self.records.clone()
    }
}
