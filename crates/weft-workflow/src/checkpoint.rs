//! Checkpoints: a run keeps each top-level node's progress in its turn's record — started,
//! before a node that may act runs; completed, with its outputs — so a run cut by a crash
//! goes on from its completed nodes and never runs a node that may have acted twice.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use weft_protocol::{NodeProgress, RecordEntry};

use crate::node::{NodeType, Ports};

/// Where a run keeps its nodes' progress.
#[async_trait]
pub trait NodeLog: Send + Sync {
    /// A node that may act is about to run: it is on record once this returns. An error
    /// means it could not be kept, and the node does not run.
    async fn started(&self, node_id: &str) -> Result<(), String>;
    /// A node completed with `outputs`.
    fn completed(&self, node_id: &str, outputs: &Ports);
}

/// What the earlier life of a run cut by a crash had done, as its record keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EarlierRun {
    /// Nodes that completed, with their outputs: not run again.
    pub completed: HashMap<String, Ports>,
    /// Nodes that may act which started and never completed: they may or may not have
    /// acted, so they fail rather than run again.
    pub cut: HashSet<String>,
}

impl EarlierRun {
    /// Read the run's progress from its turn's root record entries.
    pub fn read<'a>(entries: impl IntoIterator<Item = &'a RecordEntry>) -> EarlierRun {
        let mut earlier = EarlierRun::default();
        for entry in entries {
            let RecordEntry::Node {
                node_id,
                status,
                outputs,
            } = entry
            else {
                continue;
            };
            match status {
                NodeProgress::Started => {
                    earlier.cut.insert(node_id.clone());
                }
                NodeProgress::Completed => {
                    earlier.cut.remove(node_id);
                    earlier
                        .completed
                        .insert(node_id.clone(), outputs.clone().unwrap_or_default());
                }
            }
        }
        earlier
    }

    pub fn is_empty(&self) -> bool {
        self.completed.is_empty() && self.cut.is_empty()
    }
}

/// A run's checkpoints: what its earlier life did, and where this life keeps its own.
pub struct Checkpoints<'a> {
    pub earlier: EarlierRun,
    pub log: &'a dyn NodeLog,
}

/// What a node that was cut gives as its error.
pub const CUT_NODE: &str = "the server stopped while this node ran; it may or may not have \
taken effect, so it was not run again";

/// Whether a node may act (its start is kept before it runs): anything but a read, and any
/// node running graphs of its own (whose nodes may act).
pub fn may_act(node: &dyn NodeType) -> bool {
    node.category() != weft_protocol::ToolCategory::Read || node.graph_port().is_some()
}
