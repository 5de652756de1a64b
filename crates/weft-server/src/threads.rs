//! Live per-thread state: the permission gate, the one active turn, the per-thread `seq`,
//! the replay buffer for `resume_chat`, and the connections subscribed to its frames.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weft_core::PermissionGate;
use weft_protocol::{PermissionMode, ServerEvent, ServerFrame};

pub type ConnId = u64;

/// What a connection's writer sends.
#[derive(Debug, Clone)]
pub enum Outbound {
    Frame(Arc<ServerFrame>),
    Close(u16, String),
}

pub type OutboundTx = mpsc::UnboundedSender<Outbound>;

pub struct ThreadRuntime {
    pub id: String,
    pub owner: String,
    pub gate: PermissionGate,
    state: Mutex<ThreadState>,
}

#[derive(Default)]
struct ThreadState {
    next_seq: u64,
    /// Every frame of the current (or last) turn, for `resume_chat`.
    replay: Vec<Arc<ServerFrame>>,
    subscribers: HashMap<ConnId, OutboundTx>,
    active: Option<CancellationToken>,
    detach_generation: u64,
    /// When the last turn ended (for the janitor).
    ended_at: Option<std::time::Instant>,
}

impl ThreadRuntime {
    fn new(id: &str, owner: &str, mode: PermissionMode) -> Self {
        ThreadRuntime {
            id: id.to_owned(),
            owner: owner.to_owned(),
            gate: PermissionGate::new(mode),
            state: Mutex::new(ThreadState {
                next_seq: 1,
                ..ThreadState::default()
            }),
        }
    }

    /// Stamp the event with this thread and the next `seq`, keep it for replay, send it to
    /// every subscriber.
    pub fn publish(&self, event: ServerEvent) -> u64 {
        let mut state = self.state.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        let frame = Arc::new(ServerFrame {
            thread_id: Some(self.id.clone()),
            seq: Some(seq),
            event,
        });
        state.replay.push(frame.clone());
        state
            .subscribers
            .retain(|_, tx| tx.send(Outbound::Frame(frame.clone())).is_ok());
        seq
    }

    pub fn subscribe(&self, conn: ConnId, tx: OutboundTx) {
        let mut state = self.state.lock();
        state.detach_generation += 1;
        state.subscribers.insert(conn, tx);
    }

    /// Send every buffered frame after `last_seq`, then subscribe, with no gap between.
    pub fn resume(&self, conn: ConnId, tx: OutboundTx, last_seq: u64) -> usize {
        let mut state = self.state.lock();
        let missed: Vec<_> = state
            .replay
            .iter()
            .filter(|f| f.seq.unwrap_or(0) > last_seq)
            .cloned()
            .collect();
        let count = missed.len();
        for frame in missed {
            let _ = tx.send(Outbound::Frame(frame));
        }
        state.detach_generation += 1;
        state.subscribers.insert(conn, tx);
        count
    }

    /// Drop a connection; true when that leaves a running turn with nobody listening.
    fn unsubscribe(&self, conn: ConnId) -> Option<u64> {
        let mut state = self.state.lock();
        state.subscribers.remove(&conn)?;
        if state.subscribers.is_empty() && state.active.is_some() {
            state.detach_generation += 1;
            return Some(state.detach_generation);
        }
        None
    }

    /// Stop the turn if it is still orphaned since `generation` (nobody resumed meanwhile).
    pub fn stop_if_still_detached(&self, generation: u64) -> bool {
        let state = self.state.lock();
        if state.detach_generation == generation && state.subscribers.is_empty() {
            if let Some(cancel) = &state.active {
                cancel.cancel();
                return true;
            }
        }
        false
    }

    /// Begin a turn unless one is running; the replay buffer restarts with it.
    pub fn try_begin(&self, cancel: CancellationToken) -> bool {
        let mut state = self.state.lock();
        if state.active.is_some() {
            return false;
        }
        state.active = Some(cancel);
        state.replay.clear();
        true
    }

    pub fn end(&self) {
        let mut state = self.state.lock();
        state.active = None;
        state.ended_at = Some(std::time::Instant::now());
    }

    /// Drop the replay buffer of a turn that ended more than `retention` ago; true when the
    /// runtime is then idle (no turn, no subscribers, nothing granted or pending) and can go.
    fn sweep(&self, retention: std::time::Duration) -> bool {
        let mut state = self.state.lock();
        let stale =
            state.active.is_none() && state.ended_at.is_some_and(|t| t.elapsed() >= retention);
        if stale {
            state.replay = Vec::new();
        }
        stale
            && state.subscribers.is_empty()
            && self.gate.pending().is_empty()
            && !self.gate.has_grants()
    }

    /// Cancel the running turn; false when none runs.
    pub fn stop(&self) -> bool {
        match &self.state.lock().active {
            Some(cancel) => {
                cancel.cancel();
                true
            }
            None => false,
        }
    }

    pub fn is_active(&self) -> bool {
        self.state.lock().active.is_some()
    }
}

#[derive(Default)]
pub struct ThreadHub {
    threads: Mutex<HashMap<String, Arc<ThreadRuntime>>>,
    /// Pending approval (tool-call id) → thread id.
    approvals: Mutex<HashMap<String, String>>,
}

impl ThreadHub {
    pub fn get(&self, id: &str) -> Option<Arc<ThreadRuntime>> {
        self.threads.lock().get(id).cloned()
    }

    /// The live runtime of a thread, created from its stored owner and mode on first use.
    pub fn get_or_insert(&self, id: &str, owner: &str, mode: PermissionMode) -> Arc<ThreadRuntime> {
        self.threads
            .lock()
            .entry(id.to_owned())
            .or_insert_with(|| Arc::new(ThreadRuntime::new(id, owner, mode)))
            .clone()
    }

    pub fn remove(&self, id: &str) -> Option<Arc<ThreadRuntime>> {
        self.threads.lock().remove(id)
    }

    /// Unsubscribe a closed connection everywhere; returns the turns it left orphaned, each
    /// with the detach generation to check when the grace period ends.
    pub fn detach(&self, conn: ConnId) -> Vec<(Arc<ThreadRuntime>, u64)> {
        let threads: Vec<_> = self.threads.lock().values().cloned().collect();
        threads
            .into_iter()
            .filter_map(|t| t.unsubscribe(conn).map(|generation| (t, generation)))
            .collect()
    }

    /// Bound memory: forget replay buffers of long-finished turns and idle runtimes.
    pub fn sweep(&self, retention: std::time::Duration) -> usize {
        let mut threads = self.threads.lock();
        let before = threads.len();
        threads.retain(|_, t| !t.sweep(retention));
        before - threads.len()
    }

    pub fn len(&self) -> usize {
        self.threads.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.lock().is_empty()
    }

    pub fn active(&self) -> Vec<Arc<ThreadRuntime>> {
        self.threads
            .lock()
            .values()
            .filter(|t| t.is_active())
            .cloned()
            .collect()
    }

    pub fn note_approval(&self, tool_call_id: &str, thread_id: &str) {
        self.approvals
            .lock()
            .insert(tool_call_id.to_owned(), thread_id.to_owned());
    }

    pub fn approval_thread(&self, tool_call_id: &str) -> Option<String> {
        self.approvals.lock().get(tool_call_id).cloned()
    }

    pub fn forget_approval(&self, tool_call_id: &str) {
        self.approvals.lock().remove(tool_call_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_janitor_drops_finished_idle_threads_but_keeps_grants_and_subscribers() {
        let hub = ThreadHub::default();
        let idle = hub.get_or_insert("idle", "u", PermissionMode::Default);
        let granted = hub.get_or_insert("granted", "u", PermissionMode::Default);
        let watched = hub.get_or_insert("watched", "u", PermissionMode::Default);
        let running = hub.get_or_insert("running", "u", PermissionMode::Default);
        for t in [&idle, &granted, &watched] {
            assert!(t.try_begin(CancellationToken::new()));
            t.publish(ServerEvent::Pong);
            t.end();
        }
        granted.gate.allow_for_chat("write_file");
        let (tx, _rx) = mpsc::unbounded_channel();
        watched.subscribe(1, tx);
        assert!(running.try_begin(CancellationToken::new()));
        assert_eq!(hub.sweep(std::time::Duration::ZERO), 1);
        assert!(hub.get("idle").is_none());
        assert_eq!(hub.len(), 3);
        assert!(
            watched.state.lock().replay.is_empty(),
            "the replay buffer is dropped"
        );
    }
}
