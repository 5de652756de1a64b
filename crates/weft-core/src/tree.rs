//! Builds the persisted execution tree and the per-call audit records: from
//! `tool_call_update` events as a turn runs, or from calls and results read back from the
//! record (the same `start` and `end`).

use serde_json::Value;
use weft_protocol::tree::preview;
use weft_protocol::{
    ApprovalStatus, ExecutionTreeNode, ExecutionTreeSnapshot, ServerEvent, ToolCallStatus,
    ToolResultMetadata, ToolResultStatus,
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
    /// Feed one event: a `tool_call_update` starts or ends a node; anything else is ignored.
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
            ToolCallStatus::Start => self.start(
                tool_call_id,
                parent_id.as_deref(),
                name,
                args.as_ref(),
                *depth,
            ),
            ToolCallStatus::End => self.end(
                tool_call_id,
                result.as_deref(),
                *is_error,
                metadata.as_deref(),
            ),
        }
    }

    /// A call started: a node under `parent_id` (its title, for a subtask, from its args).
    pub fn start(
        &mut self,
        id: &str,
        parent_id: Option<&str>,
        name: &str,
        args: Option<&Value>,
        depth: u32,
    ) {
        let title = args
            .filter(|_| name == "run_subtask")
            .and_then(|a| a.get("title"))
            .and_then(|t| t.as_str())
            .map(preview);
        self.nodes.push(Box::new(ExecutionTreeNode {
            id: id.to_owned(),
            parent_id: parent_id.map(str::to_owned),
            name: name.to_owned(),
            title,
            args_preview: args.map(|a| preview(&crate::validate::compact(a))),
            result_preview: None,
            is_error: None,
            duration_ms: 0.0,
        }));
        self.records.push(ToolCallRecord {
            depth,
            status: None,
            approval: ApprovalStatus::NotRequired,
            started_at: 0.0,
            execution_time_ms: 0.0,
        });
    }

    /// A call ended with `result`.
    pub fn end(
        &mut self,
        id: &str,
        result: Option<&str>,
        is_error: Option<bool>,
        metadata: Option<&ToolResultMetadata>,
    ) {
        // Ends come soon after their starts: search from the newest.
        let Some(at) = self.nodes.iter().rposition(|n| n.id == id) else {
            return;
        };
        let node = &mut self.nodes[at];
        node.result_preview = result.map(preview);
        node.is_error = is_error;
        if let Some(m) = metadata {
            node.duration_ms = m.execution_time_ms;
            let record = &mut self.records[at];
            record.status = Some(m.status);
            record.approval = m.approval_status;
            record.started_at = m.started_at;
            record.execution_time_ms = m.execution_time_ms;
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
