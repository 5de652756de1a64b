//! A socket's queue of frames, bounded in bytes so a client that stops reading cannot make
//! the server buffer without limit; it is the socket's [`FrameSink`]. Frames are shared,
//! encoded once ([`SharedFrame`]); the writer turns each into a websocket message in the
//! format the client last used.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use weft_frames::frame::SubscriberId;
use weft_protocol::ServerFrame;
use weft_runtime::{FrameSink, Outgoing, SharedFrame};

use crate::codec::Wire;
use crate::socket::Opcode;

/// What a connection's writer sends.
#[derive(Debug, Clone)]
pub enum Outbound {
    Frame(Arc<SharedFrame>),
    Close(u16, String),
}

/// The sending side of one connection's queue (a flume channel: it allocates nothing until
/// frames wait in it, where tokio's unbounded channel allocates a block of 32 slots for every
/// socket).
#[derive(Debug)]
pub struct Outbox {
    id: SubscriberId,
    tx: flume::Sender<Outbound>,
    state: Arc<OutboxState>,
}

#[derive(Debug)]
pub struct OutboxState {
    queued: AtomicUsize,
    limit: usize,
    overflowed: AtomicBool,
    /// Woken when the queue overflows, so the writer can drop the connection at once.
    pub overflow: Notify,
}

impl Outbox {
    pub fn new(id: SubscriberId, limit: usize) -> (Arc<Outbox>, flume::Receiver<Outbound>) {
        let (tx, rx) = flume::unbounded();
        let state = Arc::new(OutboxState {
            queued: AtomicUsize::new(0),
            limit,
            overflowed: AtomicBool::new(false),
            overflow: Notify::new(),
        });
        (Arc::new(Outbox { id, tx, state }), rx)
    }

    /// Queue a frame; false when the connection is gone or its queue overflowed (it is then
    /// being closed and takes nothing more).
    pub fn push(&self, frame: Arc<SharedFrame>) -> bool {
        if self.state.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        let queued = self.state.queued.fetch_add(frame.len(), Ordering::Relaxed) + frame.len();
        if queued > self.state.limit {
            self.state.overflowed.store(true, Ordering::Relaxed);
            self.state.overflow.notify_one();
            return false;
        }
        self.tx.send(Outbound::Frame(frame)).is_ok()
    }

    /// Queue a frame of this connection's own (not a thread's).
    pub fn push_frame(&self, frame: &ServerFrame) {
        self.push(SharedFrame::encode(frame));
    }

    /// Queue a close frame behind what is queued.
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        let _ = self.tx.send(Outbound::Close(code, reason.into()));
    }

    pub fn state(&self) -> &Arc<OutboxState> {
        &self.state
    }
}

impl FrameSink for Outbox {
    fn id(&self) -> SubscriberId {
        self.id
    }

    fn send(&self, out: Outgoing<'_>) -> bool {
        self.push(out.frame.clone())
    }

    fn is_gone(&self) -> bool {
        self.tx.is_disconnected() || self.state.overflowed()
    }
}

impl OutboxState {
    /// The writer took `bytes` off the queue.
    pub fn taken(&self, bytes: usize) {
        self.queued.fetch_sub(bytes, Ordering::Relaxed);
    }

    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Relaxed)
    }

    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

/// A frame as a websocket message in `wire`'s format: its kind and payload, lent by the frame
/// (JSON text is valid UTF-8 as encoded).
pub fn message(frame: &SharedFrame, wire: Wire) -> (Opcode, &[u8]) {
    match wire {
        Wire::Json => (Opcode::Text, frame.json_slice()),
        Wire::MsgPack => (Opcode::Binary, frame.msgpack()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_protocol::ServerEvent;

    fn frame(text: &str) -> Arc<SharedFrame> {
        SharedFrame::encode(&ServerFrame::bare(ServerEvent::error(
            weft_protocol::ErrorCode::Internal,
            text,
            None,
        )))
    }

    #[test]
    fn the_queue_refuses_frames_past_its_byte_bound() {
        let (outbox, rx) = Outbox::new(1, 200);
        assert!(outbox.push(frame("a")));
        assert!(!outbox.push(frame(&"x".repeat(300))));
        assert!(outbox.state().overflowed());
        assert!(
            !outbox.push(frame("b")),
            "an overflowed queue takes nothing more"
        );
        assert!(matches!(rx.try_recv(), Ok(Outbound::Frame(_))));
        assert!(rx.try_recv().is_err());
    }
}
