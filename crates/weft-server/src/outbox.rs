//! Frames on their way to a connection: each frame is encoded once (JSON, MessagePack on
//! demand) however many subscribers get it, and every connection's queue is bounded in bytes
//! so a client that stops reading cannot make the server buffer without limit.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::Bytes;
use axum::extract::ws::{Message, Utf8Bytes};
use tokio::sync::{mpsc, Notify};
use weft_protocol::ServerFrame;

use crate::codec::Wire;

/// A frame encoded for the wire, shared by every subscriber and the replay buffer.
#[derive(Debug)]
pub struct SharedFrame {
    pub seq: Option<u64>,
    json: Utf8Bytes,
    msgpack: OnceLock<Bytes>,
}

impl SharedFrame {
    pub fn encode(frame: &ServerFrame) -> Arc<SharedFrame> {
        let mut json = serde_json::to_string(frame).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot encode a frame");
            String::from("{}")
        });
        // Kept for the whole turn (replay): no spare capacity.
        json.shrink_to_fit();
        Arc::new(SharedFrame {
            seq: frame.seq,
            json: json.into(),
            msgpack: OnceLock::new(),
        })
    }

    /// Bytes this frame holds (its JSON form).
    pub fn len(&self) -> usize {
        self.json.len()
    }

    pub fn is_empty(&self) -> bool {
        self.json.is_empty()
    }

    pub fn json(&self) -> &str {
        self.json.as_str()
    }

    pub fn message(&self, wire: Wire) -> Message {
        match wire {
            Wire::Json => Message::Text(self.json.clone()),
            Wire::MsgPack => Message::Binary(
                self.msgpack
                    .get_or_init(|| crate::codec::json_to_msgpack(self.json.as_str()))
                    .clone(),
            ),
        }
    }
}

/// What a connection's writer sends.
#[derive(Debug, Clone)]
pub enum Outbound {
    Frame(Arc<SharedFrame>),
    Close(u16, String),
}

/// The sending side of one connection's queue. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outbound>,
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
    pub fn new(limit: usize) -> (Outbox, mpsc::UnboundedReceiver<Outbound>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = Arc::new(OutboxState {
            queued: AtomicUsize::new(0),
            limit,
            overflowed: AtomicBool::new(false),
            overflow: Notify::new(),
        });
        (Outbox { tx, state }, rx)
    }

    /// Queue a frame; false when the connection is gone or its queue overflowed (it is then
    /// being closed and takes nothing more).
    pub fn send(&self, frame: Arc<SharedFrame>) -> bool {
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

    /// Queue a close frame behind what is queued.
    pub fn close(&self, code: u16, reason: impl Into<String>) {
        let _ = self.tx.send(Outbound::Close(code, reason.into()));
    }

    pub fn state(&self) -> &Arc<OutboxState> {
        &self.state
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed() || self.state.overflowed.load(Ordering::Relaxed)
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
        let (outbox, mut rx) = Outbox::new(200);
        assert!(outbox.send(frame("a")));
        assert!(!outbox.send(frame(&"x".repeat(300))));
        assert!(outbox.state().overflowed());
        assert!(
            !outbox.send(frame("b")),
            "an overflowed queue takes nothing more"
        );
        assert!(matches!(rx.try_recv(), Ok(Outbound::Frame(_))));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_frame_is_encoded_once_in_each_format() {
        let f = frame("hello");
        let Message::Binary(a) = f.message(Wire::MsgPack) else {
            panic!("binary expected")
        };
        let Message::Binary(b) = f.message(Wire::MsgPack) else {
            panic!("binary expected")
        };
        assert_eq!(a.as_ptr(), b.as_ptr(), "the MessagePack form is shared");
        let back: serde_json::Value = rmp_serde::from_slice(&a).unwrap();
        assert_eq!(back["message"], "hello");
    }
}
