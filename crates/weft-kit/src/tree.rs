//! Builds the persisted execution tree and the per-call audit records: from
//! `tool_call_update` events as a turn runs, or from calls and results read back from the
//! record (the same `start` and `end`).

use std::sync::Arc;

use serde_json::Value;
use weft_protocol::tree::{preview, PREVIEW_MAX_CHARS};
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
pub struct TreeBuilder {
    nodes: Vec<Node>,
    records: Vec<ToolCallRecord>,
}

/// A node while the turn runs: its texts end to end in one allocation, which a turn holds
/// for each of its calls for its whole life (a node of separate strings took five
/// allocations and half as much room again), and its arguments' preview, most often the
/// very text the history holds.
#[derive(Debug)]
struct Node {
    /// The id, parent id, name, title and result preview, end to end.
    text: Box<str>,
    args: Option<Arc<str>>,
    /// Where each text but the last ends in `text` (the result preview runs to its end).
    ends: [u32; TEXTS - 1],
    /// Which texts are present, one bit each (the id and the name always are).
    present: u8,
    is_error: Option<bool>,
    duration_ms: f64,
}

const TEXTS: usize = 5;
const ID: usize = 0;
const PARENT: usize = 1;
const NAME: usize = 2;
const TITLE: usize = 3;
const RESULT: usize = 4;

impl Node {
    fn new(texts: [Option<&str>; TEXTS - 1], args: Option<Arc<str>>) -> Node {
        let mut text = String::with_capacity(texts.iter().flatten().map(|t| t.len()).sum());
        let mut ends = [0; TEXTS - 1];
        let mut present = 0;
        for (at, t) in texts.iter().enumerate() {
            if let Some(t) = t {
                text.push_str(t);
                present |= 1 << at;
            }
            ends[at] = offset(text.len());
        }
        Node {
            text: text.into_boxed_str(),
            args,
            ends,
            present,
            is_error: None,
            duration_ms: 0.0,
        }
    }

    fn text(&self, at: usize) -> Option<&str> {
        if self.present & (1 << at) == 0 {
            return None;
        }
        let start = if at == 0 {
            0
        } else {
            self.ends[at - 1] as usize
        };
        let end = self
            .ends
            .get(at)
            .map_or(self.text.len(), |&end| end as usize);
        self.text.get(start..end)
    }

    fn id(&self) -> &str {
        self.text(ID).unwrap_or_default()
    }

    /// Put `result` in place of the node's result preview (none: no result).
    fn set_result(&mut self, result: Option<&str>) {
        let kept = self.ends[RESULT - 1] as usize;
        let mut text = String::with_capacity(kept + result.map_or(0, str::len));
        text.push_str(&self.text[..kept]);
        text.push_str(result.unwrap_or_default());
        self.text = text.into_boxed_str();
        match result {
            Some(_) => self.present |= 1 << RESULT,
            None => self.present &= !(1 << RESULT),
        }
    }

    fn into_snapshot(self) -> ExecutionTreeNode {
        let owned = |at| self.text(at).map(str::to_owned);
        ExecutionTreeNode {
            id: self.id().to_owned(),
            parent_id: owned(PARENT),
            name: self.text(NAME).unwrap_or_default().to_owned(),
            title: owned(TITLE),
            args_preview: self.args.as_deref().map(str::to_owned),
            result_preview: owned(RESULT),
            is_error: self.is_error,
            duration_ms: self.duration_ms,
        }
    }
}

/// A text's end as a node keeps it (no preview comes near 4 GB).
fn offset(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

impl TreeBuilder {
    /// Feed one event: a `tool_call_update` starts or ends a node; anything else is ignored.
    pub fn observe(&mut self, event: &ServerEvent) {
        self.observe_call(event, None);
    }

    /// [`TreeBuilder::observe`], for a call whose card's arguments are already written out as
    /// compact JSON (`shown`): the node keeps that text itself when it is what the preview
    /// shows.
    pub fn observe_call(&mut self, event: &ServerEvent, shown: Option<Arc<str>>) {
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
            ToolCallStatus::Start => self.start_sharing(
                tool_call_id,
                parent_id.as_deref(),
                name,
                args.as_ref().map(|a| (a, shown)),
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
        self.start_sharing(id, parent_id, name, args.map(|a| (a, None)), depth);
    }

    /// A call started, with its arguments as compact JSON when they are written out already.
    fn start_sharing(
        &mut self,
        id: &str,
        parent_id: Option<&str>,
        name: &str,
        args: Option<(&Value, Option<Arc<str>>)>,
        depth: u32,
    ) {
        let title = args
            .as_ref()
            .filter(|_| name == "run_subtask")
            .and_then(|(a, _)| a.get("title"))
            .and_then(|t| t.as_str())
            .map(preview);
        let args = args.map(|(a, shown)| {
            let shown = shown.unwrap_or_else(|| Arc::from(crate::validate::compact(a)));
            // Under the preview's limit in bytes, so in characters too: kept as it is.
            if shown.len() <= PREVIEW_MAX_CHARS {
                shown
            } else {
                Arc::from(preview(&shown))
            }
        });
        self.nodes.push(Node::new(
            [Some(id), parent_id, Some(name), title.as_deref()],
            args,
        ));
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
        let Some(at) = self.nodes.iter().rposition(|n| n.id() == id) else {
            return;
        };
        let node = &mut self.nodes[at];
        node.set_result(result.map(preview).as_deref());
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

    /// Room for `calls` more calls (a round's), so the tree holds what its calls need and
    /// not the spare half that doubling leaves: a turn holds its tree for its whole life.
    pub fn reserve_exact(&mut self, calls: usize) {
        self.nodes.reserve_exact(calls);
        self.records.reserve_exact(calls);
    }

    /// Hand over the tree and the records, leaving the builder empty.
    pub fn take(&mut self) -> (ExecutionTreeSnapshot, Vec<ToolCallRecord>) {
        (
            ExecutionTreeSnapshot {
                version: 1,
                nodes: std::mem::take(&mut self.nodes)
                    .into_iter()
                    .map(Node::into_snapshot)
                    .collect(),
            },
            std::mem::take(&mut self.records),
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nodes_give_back_every_text_they_were_built_with() {
        let mut tree = TreeBuilder::default();
        tree.start("c1", None, "read_file", Some(&json!({"path": "a"})), 0);
        tree.start(
            "c2",
            Some("c1"),
            "run_subtask",
            Some(&json!({"title": "Look", "goal": "é"})),
            1,
        );
        tree.start("c3", Some("c1"), "now", None, 1);
        tree.end("c2", Some("found ✓"), Some(false), None);
        tree.end("c1", Some(""), None, None);
        tree.end("unknown", Some("ignored"), Some(true), None);
        let (snapshot, records) = tree.take();
        let texts: Vec<_> = snapshot
            .nodes
            .iter()
            .map(|n| {
                (
                    n.id.as_str(),
                    n.parent_id.as_deref(),
                    n.name.as_str(),
                    n.title.as_deref(),
                    n.args_preview.as_deref(),
                    n.result_preview.as_deref(),
                    n.is_error,
                )
            })
            .collect();
        assert_eq!(
            texts,
            vec![
                (
                    "c1",
                    None,
                    "read_file",
                    None,
                    Some(r#"{"path":"a"}"#),
                    Some(""),
                    None
                ),
                (
                    "c2",
                    Some("c1"),
                    "run_subtask",
                    Some("Look"),
                    Some(r#"{"goal":"é","title":"Look"}"#),
                    Some("found ✓"),
                    Some(false)
                ),
                ("c3", Some("c1"), "now", None, None, None, None),
            ]
        );
        assert_eq!(records.len(), 3);
        assert!(tree.take().0.nodes.is_empty());
    }

    #[test]
    fn a_second_end_replaces_the_first_result() {
        let mut tree = TreeBuilder::default();
        tree.start("c1", None, "echo", Some(&json!("x")), 0);
        tree.end("c1", Some("first"), Some(true), None);
        tree.end("c1", Some("second, longer"), Some(false), None);
        let node = &tree.take().0.nodes[0];
        assert_eq!(node.args_preview.as_deref(), Some(r#""x""#));
        assert_eq!(node.result_preview.as_deref(), Some("second, longer"));
        assert_eq!(node.is_error, Some(false));
        let mut tree = TreeBuilder::default();
        tree.start("c1", None, "echo", None, 0);
        tree.end("c1", Some("first"), None, None);
        tree.end("c1", None, None, None);
        assert_eq!(tree.take().0.nodes[0].result_preview, None);
    }

    /// A call's start as dispatch emits it: its card's arguments written out once, sharing the
    /// model's `raw` text when they are that.
    fn start_with_raw(tree: &mut TreeBuilder, id: &str, args: Value, raw: &Arc<str>) {
        let shown = crate::validate::compact_sharing(&args, raw);
        let event = ServerEvent::ToolCallUpdate {
            tool_call_id: id.to_owned(),
            name: "echo".to_owned(),
            status: ToolCallStatus::Start,
            args: Some(args),
            result: None,
            is_error: None,
            parent_id: None,
            depth: 0,
            metadata: None,
        };
        tree.observe_call(&event, Some(shown));
    }

    #[test]
    fn a_node_keeps_the_models_own_arguments_when_they_are_its_preview() {
        let mut tree = TreeBuilder::default();
        let compact: Arc<str> = Arc::from(r#"{"a":1}"#);
        let spaced: Arc<str> = Arc::from(r#"{ "a": 1 }"#);
        let long: Arc<str> = Arc::from(json!({"a": "x".repeat(600)}).to_string());
        start_with_raw(&mut tree, "c1", json!({"a": 1}), &compact);
        start_with_raw(&mut tree, "c2", json!({"a": 1}), &spaced);
        start_with_raw(&mut tree, "c3", serde_json::from_str(&long).unwrap(), &long);
        let kept: Vec<&Arc<str>> = tree.nodes.iter().flat_map(|n| &n.args).collect();
        assert!(Arc::ptr_eq(kept[0], &compact));
        assert!(!Arc::ptr_eq(kept[1], &spaced));
        assert_eq!(&**kept[1], r#"{"a":1}"#);
        assert_eq!(kept[2].chars().count(), PREVIEW_MAX_CHARS);
        assert!(kept[2].ends_with('…'));
    }
}
