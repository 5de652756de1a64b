//! Builds the persisted execution tree (seed 000 shape) and the per-call audit records from
//! `tool_call_update` events.

use weft_protocol::tree::preview;
use weft_protocol::{
    ApprovalStatus, ExecutionTreeNode, ExecutionTreeSnapshot, ServerEvent, ToolCallStatus,
    ToolResultStatus,
};

/// The runtime record of one tool call (for the audit log), aligned by index with the tree's
/// nodes. Kept compact: a turn holds one per call while it runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolCallRecord {
    pub depth: u32,
    /// `None` while the call runs, and for a call whose end was never emitted.
    pub status: Option<ToolResultStatus>,
    pub approval: ApprovalStatus,
    /// Unix seconds.
    pub started_at: f64,
    pub execution_time_ms: f64,
}

#[derive(Debug, Default)]
#[allow(clippy::vec_box)]
pub struct TreeBuilder {
    /// Boxed while building: a turn holds these for its whole life, and a Vec of boxes
    /// wastes far less on spare capacity than a Vec of 160-byte nodes.
    nodes: Vec<Box<ExecutionTreeNode>>,
    records: Vec<ToolCallRecord>,
}

impl TreeBuilder {
    pub fn observe(&mut self, event: &ServerEvent) {
        let ServerEvent::ToolCallUpdate {
            tool_call_id,
            name,
            status,
            args,
            result,
            is_error,
            parent_id,
            depth,
            metadata,
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
                self.nodes.push(Box::new(ExecutionTreeNode {
                    id: tool_call_id.clone(),
                    parent_id: parent_id.clone(),
                    name: name.clone(),
                    title,
                    args_preview: args.as_ref().map(|a| preview(&a.to_string())),
                    result_preview: None,
                    is_error: None,
                    duration_ms: 0.0,
                }));
                self.records.push(ToolCallRecord {
                    depth: *depth,
                    status: None,
                    approval: ApprovalStatus::NotRequired,
                    started_at: 0.0,
                    execution_time_ms: 0.0,
                });
            }
            ToolCallStatus::End => {
                // Ends come soon after their starts: search from the newest.
                let Some(at) = self.nodes.iter().rposition(|n| n.id == *tool_call_id) else {
                    return;
                };
                let node = &mut self.nodes[at];
                node.result_preview = result.as_deref().map(preview);
                node.is_error = *is_error;
                if let Some(m) = metadata {
                    node.duration_ms = m.execution_time_ms;
                    let record = &mut self.records[at];
                    record.status = Some(m.status);
                    record.approval = m.approval_status;
                    record.started_at = m.started_at;
                    record.execution_time_ms = m.execution_time_ms;
                }
            }
        }
    }

    /// Hand over the tree and the records, leaving the builder empty.
    pub fn take(&mut self) -> (ExecutionTreeSnapshot, Vec<ToolCallRecord>) {
        (
            ExecutionTreeSnapshot {
                version: 1,
                nodes: std::mem::take(&mut self.nodes)
                    .into_iter()
                    .map(|n| *n)
                    .collect(),
            },
            std::mem::take(&mut self.records),
        )
    }
}
