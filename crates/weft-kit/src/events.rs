//! `EventSink`: where a turn's events go (a channel, or straight into a callback with no hop
//! between tasks); every event also feeds the execution-tree builder, so the persisted tree
//! is built from exactly what the client saw.

use std::borrow::Cow;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use weft_protocol::{ExecutionTreeSnapshot, ServerEvent};

use crate::tree::{ToolCallRecord, TreeBuilder};

#[derive(Clone)]
pub struct EventSink {
    inner: Arc<SinkInner>,
}

/// Receives every event as it is emitted, given or lent (see [`EventSink::emit_lent`]); it
/// must not block.
pub type EventCallback = Box<dyn Fn(Cow<'_, ServerEvent>) + Send + Sync>;

enum Listener {
    Nobody,
    Channel(mpsc::UnboundedSender<ServerEvent>),
    Callback(EventCallback),
}

struct SinkInner {
    listener: Listener,
    tree: Mutex<TreeBuilder>,
}

impl EventSink {
    /// A sink that forwards every event to `tx`.
    pub fn new(tx: mpsc::UnboundedSender<ServerEvent>) -> Self {
        Self::build(Listener::Channel(tx))
    }

    /// A sink that hands every event to `callback`, on the emitting task.
    pub fn callback(callback: EventCallback) -> Self {
        Self::build(Listener::Callback(callback))
    }

    /// A sink with no listener: events only feed the tree.
    pub fn detached() -> Self {
        Self::build(Listener::Nobody)
    }

    /// A sink and the receiving end of its events.
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<ServerEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self::new(tx), rx)
    }

    fn build(listener: Listener) -> Self {
        EventSink {
            inner: Arc::new(SinkInner {
                listener,
                tree: Mutex::new(TreeBuilder::default()),
            }),
        }
    }

    /// A round of `calls` calls is about to start: the tree makes room for them at once.
    pub fn expect_calls(&self, calls: usize) {
        self.inner.tree.lock().reserve_exact(calls);
    }

    pub fn emit(&self, event: ServerEvent) {
        self.inner.tree.lock().observe(&event);
        self.deliver(event);
    }

    /// Emit `event`, lent: it is the caller's again afterwards (a call's end gives its result
    /// back to the loop rather than a copy of it). A listener that keeps it copies it.
    pub fn emit_lent(&self, event: &ServerEvent) {
        self.inner.tree.lock().observe(event);
        match &self.inner.listener {
            Listener::Nobody => {}
            Listener::Channel(tx) => {
                let _ = tx.send(event.clone());
            }
            Listener::Callback(callback) => callback(Cow::Borrowed(event)),
        }
    }

    /// Emit a call's `start`, whose card's arguments are `shown` as compact JSON
    /// (`validate::compact_sharing`: the model's own text, shared with the history, when it is
    /// that): the tree keeps that text rather than writing the arguments out again.
    pub fn emit_call_start(&self, event: ServerEvent, shown: Arc<str>) {
        self.inner.tree.lock().observe_call(&event, Some(shown));
        self.deliver(event);
    }

    fn deliver(&self, event: ServerEvent) {
        match &self.inner.listener {
            Listener::Nobody => {}
            // A closed receiver means nobody listens any more; the turn goes on regardless.
            Listener::Channel(tx) => {
                let _ = tx.send(event);
            }
            Listener::Callback(callback) => callback(Cow::Owned(event)),
        }
    }

    /// Feed the tree events no listener hears (the calls of a resumed turn's earlier lives).
    pub fn seed(&self, events: &[ServerEvent]) {
        let mut tree = self.inner.tree.lock();
        for event in events {
            tree.observe(event);
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
