//! Frames on their way out. [`SharedFrame`]: a frame encoded once (JSON; MessagePack on
//! demand) however many watch it and however long replay keeps it. [`FrameSink`]: whoever
//! watches a thread — a socket's queue, a channel for the prompt API, a bus publisher; a turn
//! never knows which. [`ChannelSink`]: frames over a channel, typed as well as encoded,
//! bounded in bytes not yet taken.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;
use weft_core::json_text::{self, JsonWriter};
use weft_protocol::{ServerEvent, ServerFrame};

use crate::frame_text;

/// Who watches: one per socket, per prompt-API request, per bus subscription.
pub type SubscriberId = u64;

/// A frame encoded for the wire, shared by every subscriber and the replay buffer.
#[derive(Debug)]
pub struct SharedFrame {
    pub seq: Option<u64>,
    json: Bytes,
    msgpack: OnceLock<Bytes>,
}

impl SharedFrame {
    pub fn encode(frame: &ServerFrame) -> Arc<SharedFrame> {
        Self::encode_lent(frame.thread_id.as_deref(), frame.seq, &frame.event)
    }

    /// A [`ServerFrame`] of these parts, encoded from them as they are lent (a turn's events
    /// are, and go back to the turn once encoded).
    pub fn encode_lent(
        thread_id: Option<&str>,
        seq: Option<u64>,
        event: &ServerEvent,
    ) -> Arc<SharedFrame> {
        // Written into this thread's scratch buffer and copied out at its exact size (replay
        // keeps it for the whole turn): one allocation a frame ([`json_text`]). Its envelope
        // by hand; chunks, tool call updates and messages part by part, the rest through
        // serde ([`frame_text`]); all by sonic-rs, which writes what serde_json would (tested
        // below) but escapes strings many bytes at a time: serde_json's byte-at-a-time
        // escaping was a tenth of a W1 turn's instructions for frames alone.
        let fill = |json: &mut JsonWriter<'_>| frame_text::write(json, thread_id, seq, event);
        let json = json_text::write_with(fill, |text| Bytes::copy_from_slice(text.as_bytes()))
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "cannot encode a frame");
                Bytes::from_static(b"{}")
            });
        Arc::new(SharedFrame {
            seq,
            json,
            msgpack: OnceLock::new(),
        })
    }

    /// A frame encoded elsewhere (another replica), as its JSON bytes.
    pub fn from_json(seq: Option<u64>, json: Bytes) -> Arc<SharedFrame> {
        Arc::new(SharedFrame {
            seq,
            json,
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

    /// The JSON form (always valid UTF-8: it was encoded from a `String`).
    pub fn json(&self) -> &str {
        std::str::from_utf8(&self.json).unwrap_or("{}")
    }

    /// The JSON form's bytes, lent: for copying them out (a socket's batch, a replay block),
    /// where neither a check of the text nor a share of the bytes is wanted.
    pub fn json_slice(&self) -> &[u8] {
        &self.json
    }

    /// The JSON form as shared bytes.
    pub fn json_bytes(&self) -> Bytes {
        self.json.clone()
    }

    /// The MessagePack form (same shape, named fields), made once and lent.
    pub fn msgpack(&self) -> &[u8] {
        self.msgpack.get_or_init(|| {
            let value: Value = serde_json::from_slice(&self.json).unwrap_or(Value::Null);
            Bytes::from(rmp_serde::to_vec_named(&value).unwrap_or_default())
        })
    }
}

/// One frame for a subscriber: encoded, and typed when it is published now (replayed frames
/// are only encoded).
#[derive(Clone, Copy)]
pub struct Outgoing<'a> {
    pub frame: &'a Arc<SharedFrame>,
    pub event: Option<&'a ServerEvent>,
}

/// Whoever watches a thread.
pub trait FrameSink: Send + Sync {
    fn id(&self) -> SubscriberId;
    /// Take one frame; false when this watcher is gone or cannot keep up (it is then
    /// forgotten).
    fn send(&self, out: Outgoing<'_>) -> bool;
    /// Whether this watcher is gone already (its connection closed), for relays that would
    /// otherwise only find out at their next frame.
    fn is_gone(&self) -> bool {
        false
    }
    /// Whether this watcher is a follower on another replica (a relay over the bus).
    fn is_remote(&self) -> bool {
        false
    }
}

/// A frame as a [`ChannelSink`] delivers it.
pub struct Delivered {
    pub frame: Arc<SharedFrame>,
    /// The event, when it was published live.
    pub event: Option<ServerEvent>,
}

/// Frames over a channel, for callers in this process (the prompt API). The channel ends
/// when the sink is forgotten by every thread it watches, or when more than its bound waits
/// untaken.
pub struct ChannelSink {
    id: SubscriberId,
    tx: mpsc::UnboundedSender<Delivered>,
    state: Arc<ChannelState>,
    /// Which live events are wanted (none: all).
    only: Option<fn(&ServerEvent) -> bool>,
}

struct ChannelState {
    queued: AtomicUsize,
    limit: usize,
    overflowed: AtomicBool,
}

/// The receiving end of a [`ChannelSink`].
pub struct ChannelFrames {
    rx: mpsc::UnboundedReceiver<Delivered>,
    state: Arc<ChannelState>,
}

impl ChannelSink {
    /// A sink that lets at most `limit` bytes wait untaken.
    pub fn new(id: SubscriberId, limit: usize) -> (Arc<ChannelSink>, ChannelFrames) {
        Self::build(id, limit, None)
    }

    /// A sink that takes only the live events `wanted` accepts (a caller that waits for a
    /// turn's end or its approvals needs none of its text): it never falls behind on the
    /// rest.
    pub fn filtered(
        id: SubscriberId,
        limit: usize,
        wanted: fn(&ServerEvent) -> bool,
    ) -> (Arc<ChannelSink>, ChannelFrames) {
        Self::build(id, limit, Some(wanted))
    }

    fn build(
        id: SubscriberId,
        limit: usize,
        only: Option<fn(&ServerEvent) -> bool>,
    ) -> (Arc<ChannelSink>, ChannelFrames) {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = Arc::new(ChannelState {
            queued: AtomicUsize::new(0),
            limit,
            overflowed: AtomicBool::new(false),
        });
        let sink = Arc::new(ChannelSink {
            id,
            tx,
            state: state.clone(),
            only,
        });
        (sink, ChannelFrames { rx, state })
    }
}

impl FrameSink for ChannelSink {
    fn id(&self) -> SubscriberId {
        self.id
    }

    fn is_gone(&self) -> bool {
        self.tx.is_closed() || self.state.overflowed.load(Ordering::Relaxed)
    }

    fn send(&self, out: Outgoing<'_>) -> bool {
        if self.state.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        if let (Some(wanted), Some(event)) = (self.only, out.event) {
            if !wanted(event) {
                return !self.tx.is_closed();
            }
        }
        let bytes = out.frame.len();
        // A frame bigger than the bound still goes when nothing else waits.
        let before = self.state.queued.fetch_add(bytes, Ordering::Relaxed);
        if before > 0 && before + bytes > self.state.limit {
            self.state.overflowed.store(true, Ordering::Relaxed);
            return false;
        }
        self.tx
            .send(Delivered {
                frame: out.frame.clone(),
                event: out.event.cloned(),
            })
            .is_ok()
    }
}

impl ChannelFrames {
    /// The next frame; `None` once the sink is gone (forgotten, or it overflowed).
    pub async fn recv(&mut self) -> Option<Delivered> {
        if self.state.overflowed.load(Ordering::Relaxed) && self.rx.is_empty() {
            return None;
        }
        let delivered = self.rx.recv().await?;
        self.state
            .queued
            .fetch_sub(delivered.frame.len(), Ordering::Relaxed);
        Some(delivered)
    }
}

/// Subscriber ids, unique in this process.
#[derive(Debug, Default)]
pub struct SubscriberIds(AtomicU64);

impl SubscriberIds {
    pub fn next(&self) -> SubscriberId {
        self.0.fetch_add(1, Ordering::Relaxed) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(text: &str) -> Arc<SharedFrame> {
        SharedFrame::encode(&ServerFrame::bare(ServerEvent::error(
            weft_protocol::ErrorCode::Internal,
            text,
            None,
        )))
    }

    #[test]
    fn a_frame_is_encoded_once_in_each_format() {
        let f = frame("hello");
        let (a, b) = (f.msgpack(), f.msgpack());
        assert_eq!(a.as_ptr(), b.as_ptr(), "the MessagePack form is shared");
        let back: Value = rmp_serde::from_slice(a).unwrap_or_default();
        assert_eq!(back["message"], "hello");
        assert!(f.json().contains("\"hello\""));
    }

    /// Frames are written by sonic-rs (its string escaping is several times serde_json's):
    /// byte for byte what serde_json writes, for every kind of string and number a frame
    /// carries, non-finite numbers included.
    #[test]
    fn frames_are_written_as_serde_json_writes_them() {
        let samples = [
            r#"{"thread_id":"t","seq":3,"type":"chunk","content":"h\u00e9 \"q\" \\ \n\t\r\u0001\u001f \u2028 </script> 😀 €","done":false,"depth":0}"#,
            r#"{"thread_id":"t","seq":4,"type":"tool_call_update","tool_call_id":"c1","name":"memory_write","status":"start","args":{"key":"k\u0000","value":"rrrr","n":[1,2.5,-0.0,1e21,1.5e-7,123456789012345680000,0.1,1e300,5e-324,-7],"o":{"z":null,"a":true}},"parent_id":null,"depth":1}"#,
            r#"{"thread_id":"t","seq":5,"type":"tool_call_update","tool_call_id":"c1","name":"memory_write","status":"end","result":"ok\nline","is_error":false,"parent_id":"p","depth":1,"metadata":{"status":"success","started_at":1764320000.123456,"completed_at":1764320000.5,"execution_time_ms":0.000123,"approval_status":"not_required","approval_id":null,"injected_args":{"user":"u\"1"}}}"#,
            r#"{"type":"budget_exceeded","reason":"cost","limit":200,"observed":200.75,"ends_turn":true}"#,
            r#"{"type":"error","code":"internal","message":"x\u007f\u0080\u00ff"}"#,
            r#"{"thread_id":"t \"1\"\n","type":"pong"}"#,
            r#"{"seq":9,"type":"chunk","content":"","done":true,"parent_id":"c~1","depth":2}"#,
            r#"{"thread_id":"t","seq":0,"type":"cost_summary","llm_calls":1,"tool_calls":0,"input_tokens":0,"output_tokens":0,"cost_usd":0.5}"#,
        ];
        for sample in samples {
            let frame: ServerFrame = serde_json::from_str(sample).unwrap();
            let written = SharedFrame::encode(&frame);
            assert_eq!(written.json(), serde_json::to_string(&frame).unwrap());
        }
        let costs = [
            f64::NAN,
            f64::INFINITY,
            1e21,
            1e-7,
            0.1 + 0.2,
            1e16,
            12345678.9,
        ];
        for cost_usd in costs {
            let frame = ServerFrame::bare(ServerEvent::CostSummary {
                llm_calls: 1,
                tool_calls: 0,
                input_tokens: 0,
                output_tokens: 0,
                cost_usd,
            });
            let written = SharedFrame::encode(&frame);
            assert_eq!(written.json(), serde_json::to_string(&frame).unwrap());
        }
    }

    #[tokio::test]
    async fn a_channel_sink_ends_when_forgotten_or_past_its_bound() {
        let (sink, mut frames) = ChannelSink::new(1, 1_000);
        let event = ServerEvent::Pong;
        let f = frame("a");
        assert!(sink.send(Outgoing {
            frame: &f,
            event: Some(&event)
        }));
        let got = frames.recv().await.map(|d| d.event);
        assert!(matches!(got, Some(Some(ServerEvent::Pong))));
        drop(sink);
        assert!(frames.recv().await.is_none(), "forgotten: the channel ends");

        let (sink, mut frames) = ChannelSink::new(2, 100);
        let big = frame(&"x".repeat(200));
        assert!(
            sink.send(Outgoing {
                frame: &big,
                event: None
            }),
            "a frame over the bound goes when nothing waits"
        );
        assert!(!sink.send(Outgoing {
            frame: &f,
            event: None
        }));
        assert!(frames.recv().await.is_some());
        assert!(
            frames.recv().await.is_none(),
            "overflowed: the channel ends"
        );
    }
}
