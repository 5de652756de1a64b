//! `EventSink`: where a turn's events go; every event also feeds the execution-tree builder,
//! so the persisted tree is built from exactly what the client saw.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use weft_protocol::{ExecutionTreeSnapshot, ServerEvent};

use crate::tree::{ToolCallRecord, TreeBuilder};

#[derive(Clone)]
pub struct EventSink {
    inner: Arc<SinkInner>,
}

struct SinkInner {
    tx: Option<mpsc::UnboundedSender<ServerEvent>>,
    tree: Mutex<TreeBuilder>,
}

impl EventSink {
    /// A sink that forwards every event to `tx`.
    pub fn new(tx: mpsc::UnboundedSender<ServerEvent>) -> Self {
        Self::build(Some(tx))
    }

    /// A sink with no listener: events only feed the tree.
    pub fn detached() -> Self {
        Self::build(None)
    }

    /// A sink and the receiving end of its events.
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<ServerEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self::new(tx), rx)
    }

    fn build(tx: Option<mpsc::UnboundedSender<ServerEvent>>) -> Self {
        EventSink {
            inner: Arc::new(SinkInner {
                tx,
                tree: Mutex::new(TreeBuilder::default()),
            }),
        }
    }

    pub fn emit(&self, event: ServerEvent) {
        self.inner.tree.lock().observe(&event);
        if let Some(tx) = &self.inner.tx {
            // A closed receiver means nobody listens any more; the turn goes on regardless.
            let _ = tx.send(event);
        }
    }

    /// Take the tree and the per-call records built so far (the turn is over).
    pub fn take_tree(&self) -> (ExecutionTreeSnapshot, Vec<ToolCallRecord>) {
        self.inner.tree.lock().take()
    }
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink").finish_non_exhaustive()
    }
}
