//! One websocket connection: a reader that decodes and handles frames, and a writer that
//! takes every frame already queued, lays them out in the format the client last used in one
//! buffer made for the batch, and writes it at once. A client that stops reading (queue over
//! its byte bound, or a write stalled past the timeout) or stops answering pings is
//! disconnected; its turns keep running.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures::{FutureExt, StreamExt};
use tokio_tungstenite::WebSocketStream;
use tokio_util::task::AbortOnDropHandle;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::Message;
use weft_protocol::ErrorCode;

use crate::auth::AuthUser;
use crate::codec::{decode_json, decode_msgpack, Wire};
use crate::commands::Connection;
use crate::error::ApiError;
use crate::outbox::{message, Outbound, Outbox, OutboxState};
use crate::socket::{self, close_frame, frame_len, put_frame, Opcode, Replies, WriteSide};
use crate::state::{ServerState, SocketSlot};
use crate::upgrade::{Io, WsUpgrade};

pub const CLOSE_GOING_AWAY: u16 = 1001;
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
/// The server is restarting (a deploy, a replica going away): reconnect and resume.
pub const CLOSE_SERVICE_RESTART: u16 = 1012;
pub const CLOSE_INVALID_DATA: u16 = 1007;
pub const CLOSE_TOO_BIG: u16 = 1009;
pub const CLOSE_TRY_AGAIN_LATER: u16 = 1013;
pub const CLOSE_KEY_REVOKED: u16 = 4001;

/// `GET /ws`: authenticate, then upgrade (a refused key is HTTP 401; a user already holding
/// `server.max_sockets_per_user` sockets gets 429).
pub async fn ws_handler(
    State(state): State<Arc<ServerState>>,
    user: AuthUser,
    upgrade: WsUpgrade,
) -> Response {
    let Some(slot) = state.sockets.open(&user.id) else {
        return ApiError::new(
            ErrorCode::RateLimited,
            "too many open sockets for this user (server.max_sockets_per_user)",
        )
        .into_response();
    };
    upgrade.serve(move |io| run(state, user, slot, io))
}

/// How tungstenite reads a client's frames. A small read buffer keeps an idle connection
/// cheap (a client's frames are mostly a few hundred bytes; a bigger one is read into room
/// made for it); tungstenite's own cap sits above ours, so an oversize frame reaches us and gets
/// 1009. What it writes (pongs, a close's answer) goes to the writer at once.
fn read_config(max_frame_bytes: usize) -> WebSocketConfig {
    let hard_cap = max_frame_bytes
        .saturating_mul(2)
        .max(max_frame_bytes + 64 * 1024);
    WebSocketConfig::default()
        .read_buffer_size(1024)
        .write_buffer_size(0)
        .max_write_buffer_size(64 * 1024)
        .max_message_size(Some(hard_cap))
        .max_frame_size(Some(hard_cap))
}

/// What a connection's reader tells its writer.
struct Heard {
    /// The client's last frame was MessagePack: answer in it.
    binary: AtomicBool,
    /// When the client was last heard from, in ms since `since`.
    last_ms: AtomicU64,
    /// The client closed the connection (tungstenite answers its close).
    closed: AtomicBool,
    since: tokio::time::Instant,
}

impl Heard {
    fn new() -> Arc<Heard> {
        Arc::new(Heard {
            binary: AtomicBool::new(false),
            last_ms: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            since: tokio::time::Instant::now(),
        })
    }

    fn now(&self) {
        let ms = self.since.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.since.elapsed().saturating_sub(last)
    }
}

async fn run(state: Arc<ServerState>, user: AuthUser, _slot: SocketSlot, io: Io) {
    let runtime = state.runtime.clone();
    runtime.metrics.open_sockets.inc();
    let (read_side, write_side, replies) = socket::split(io);
    let config = read_config(runtime.config.server.max_frame_bytes);
    let stream = WebSocketStream::from_raw_socket(read_side, Role::Server, Some(config)).await;
    let (outbox, rx) = Outbox::new(
        runtime.next_subscriber_id(),
        runtime.config.server.max_outbound_bytes,
    );
    let heard = Heard::new();
    let writer = write_loop(
        runtime.clone(),
        write_side,
        replies,
        rx,
        outbox.state().clone(),
        heard.clone(),
    );
    let conn = Connection {
        state: state.clone(),
        user,
        outbox: outbox.clone(),
        client_tools: Default::default(),
    };
    let subscriber = weft_runtime::FrameSink::id(outbox.as_ref());
    drop(outbox);
    // The writer is a task of its own: a frame going out wakes only it, not the reader (whose
    // every poll refills tungstenite's read buffer and polls its timers). Aborted if this
    // task is dropped.
    let mut writer = AbortOnDropHandle::new(tokio::spawn(writer));
    tokio::select! {
        _ = &mut writer => {}
        () = read_loop(conn, stream, heard) => {
            // Let the writer flush a close frame; the connection's senders are gone now.
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut writer).await;
        }
    }
    // Idempotent: covers a writer that ended first.
    runtime.detach(subscriber);
    runtime.metrics.open_sockets.dec();
}

/// Read and handle the client's frames until it closes, breaks the protocol, sends a frame
/// over the limit, loses its key, or the server stops.
async fn read_loop(
    conn: Connection,
    mut stream: WebSocketStream<socket::ReadSide>,
    heard: Arc<Heard>,
) {
    let runtime = conn.state.runtime.clone();
    let limit = runtime.config.server.max_frame_bytes;
    let recheck_every = Duration::from_millis(runtime.config.server.auth_recheck_ms.max(10));
    let mut recheck =
        tokio::time::interval_at(tokio::time::Instant::now() + recheck_every, recheck_every);
    loop {
        tokio::select! {
            message = stream.next() => {
                heard.now();
                match message {
                    None | Some(Ok(Message::Close(_))) => {
                        heard.closed.store(true, Ordering::Relaxed);
                        // Tungstenite writes its answer to the close (to the writer) when
                        // flushed; it refuses to send anything more.
                        let _ = futures::SinkExt::flush(&mut stream).await;
                        break;
                    }
                    Some(Err(e)) => {
                        let (code, reason) = close_for(e);
                        conn.outbox.close(code, reason);
                        break;
                    }
                    Some(Ok(frame @ (Message::Text(_) | Message::Binary(_)))) => {
                        if frame.len() > limit {
                            conn.outbox.close(CLOSE_TOO_BIG, format!("frame over {limit} bytes"));
                            break;
                        }
                        heard.binary.store(frame.is_binary(), Ordering::Relaxed);
                        let decoded = match frame {
                            Message::Text(text) => decode_json(&text),
                            other => decode_msgpack(&other.into_data()),
                        };
                        // Boxed: a frame's handling (a turn's start) lives on the heap while
                        // it runs, not in every waiting socket's task.
                        Box::pin(conn.handle(decoded)).await;
                    }
                    // Pings are answered by tungstenite (through the writer).
                    Some(Ok(_)) => {}
                }
            },
            () = runtime.shutdown.cancelled() => {
                conn.outbox.close(CLOSE_SERVICE_RESTART, "server restarting; reconnect and resume");
                break;
            }
            _ = recheck.tick() => {
                if !conn.key_still_valid().await {
                    conn.outbox.close(CLOSE_KEY_REVOKED, "api key revoked");
                    break;
                }
            }
        }
    }
    conn.detach();
}

/// The close code a read error deserves: invalid UTF-8 1007, oversize 1009, any other
/// protocol violation 1002.
fn close_for(error: tungstenite::Error) -> (u16, String) {
    tracing::debug!(%error, "websocket read failed");
    match error {
        tungstenite::Error::Utf8(_) => (CLOSE_INVALID_DATA, "invalid UTF-8 in a text frame".into()),
        tungstenite::Error::Capacity(_) => (CLOSE_TOO_BIG, "frame too large".into()),
        _ => (CLOSE_PROTOCOL_ERROR, "websocket protocol violation".into()),
    }
}

/// Most frames written in one batch.
const FRAMES_PER_BATCH: usize = 32;

/// A ping with no payload.
const PING: [u8; 2] = [0x80 | Opcode::Ping as u8, 0];

/// Write queued frames in batches (one write per batch) and tungstenite's replies, ping, and
/// drop clients that stop reading or answering.
async fn write_loop(
    runtime: Arc<weft_runtime::Runtime>,
    mut socket: WriteSide,
    replies: Arc<Replies>,
    rx: flume::Receiver<Outbound>,
    queue: Arc<OutboxState>,
    heard: Arc<Heard>,
) {
    let server = &runtime.config.server;
    let ping_every = Duration::from_millis(server.ping_interval_ms.max(10));
    let write_timeout = Duration::from_millis(server.write_timeout_ms.max(1));
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
    loop {
        let bytes = tokio::select! {
            biased;
            () = queue.overflow.notified() => {
                tracing::info!(queued = queue.queued(), "closing a connection that stopped reading");
                runtime.metrics.slow_clients.inc();
                close_now(&mut socket, CLOSE_TRY_AGAIN_LATER, "outbound queue full").await;
                return;
            }
            () = replies.ready.notified() => replies.take(),
            received = rx.recv_async() => {
                let Ok(first) = received else { break };
                // Made for each batch, not kept: a socket waits with nothing queued.
                let mut batch = Vec::with_capacity(1 + rx.len().min(FRAMES_PER_BATCH - 1));
                batch.push(first);
                batch.extend(rx.try_iter().take(FRAMES_PER_BATCH - 1));
                let wire = if heard.binary.load(Ordering::Relaxed) { Wire::MsgPack } else { Wire::Json };
                let (bytes, taken, close) = lay_out(&mut batch, wire, replies.take());
                queue.taken(taken);
                if let Some((code, reason)) = close {
                    if !bytes.is_empty() {
                        let _ = within(write_timeout, socket.send(&bytes)).await;
                    }
                    close_now(&mut socket, code, &reason).await;
                    return;
                }
                bytes
            }
            _ = ping.tick() => {
                let silent = heard.silent_for();
                if silent > ping_every * 2 + ping_every / 2 {
                    tracing::info!(?silent, "closing a connection that stopped answering pings");
                    close_now(&mut socket, CLOSE_GOING_AWAY, "no pong").await;
                    return;
                }
                PING.to_vec()
            }
        };
        if bytes.is_empty() {
            continue;
        }
        match within(write_timeout, socket.send(&bytes)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return,
            Err(_) => {
                tracing::info!("closing a connection whose writes stalled");
                runtime.metrics.slow_clients.inc();
                close_now(&mut socket, CLOSE_TRY_AGAIN_LATER, "write timed out").await;
                return;
            }
        }
    }
    // Every sender is gone: answer the client's close, or close, then end.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut bytes = replies.take();
        if !heard.closed.load(Ordering::Relaxed) {
            put_frame(&mut bytes, Opcode::Close, &[]);
        }
        if socket.send(&bytes).await.is_ok() {
            socket.shutdown().await;
        }
    })
    .await;
}

/// The frames of `batch` (taken out) up to a close, laid out after `replies` in one buffer of
/// the size they need; the bytes they held in the queue; the close, if one came.
fn lay_out(
    batch: &mut Vec<Outbound>,
    wire: Wire,
    replies: Vec<u8>,
) -> (Vec<u8>, usize, Option<(u16, String)>) {
    // The frames up to a close; their payloads are lent by them, copied once into `bytes`.
    let end = batch
        .iter()
        .position(|out| matches!(out, Outbound::Close(..)))
        .unwrap_or(batch.len());
    let frames = || {
        batch[..end].iter().filter_map(|out| match out {
            Outbound::Frame(frame) => Some(frame),
            Outbound::Close(..) => None,
        })
    };
    let (mut size, mut taken) = (0, 0);
    for frame in frames() {
        size += frame_len(message(frame, wire).1.len());
        taken += frame.len();
    }
    let mut bytes = replies;
    bytes.reserve_exact(size);
    for frame in frames() {
        let (opcode, payload) = message(frame, wire);
        put_frame(&mut bytes, opcode, payload);
    }
    let close = match batch.get_mut(end) {
        Some(Outbound::Close(code, reason)) => Some((*code, std::mem::take(reason))),
        _ => None,
    };
    batch.clear();
    (bytes, taken, close)
}

/// `write` if it finishes within `limit`. A write the socket takes at once (almost every one)
/// never arms a timer.
async fn within<T>(
    limit: Duration,
    write: impl std::future::Future<Output = T>,
) -> Result<T, tokio::time::error::Elapsed> {
    let mut write = std::pin::pin!(write);
    match (&mut write).now_or_never() {
        Some(done) => Ok(done),
        None => tokio::time::timeout(limit, write).await,
    }
}

/// Send a close frame if the socket takes it within a second, then end the connection.
async fn close_now(socket: &mut WriteSide, code: u16, reason: &str) {
    let frame = close_frame(code, reason);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        if socket.send(&frame).await.is_ok() {
            socket.shutdown().await;
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use weft_protocol::{ServerEvent, ServerFrame};
    use weft_runtime::SharedFrame;

    use super::*;

    fn frame(text: &str) -> Arc<SharedFrame> {
        SharedFrame::encode(&ServerFrame::bare(ServerEvent::error(
            ErrorCode::InvalidJson,
            text,
            None,
        )))
    }

    /// The frames up to a close are laid out after the replies, each once, in the client's
    /// format; what they held in the queue is counted by their JSON; what follows the close
    /// is dropped with the batch.
    #[test]
    fn a_batch_is_laid_out_up_to_its_close() {
        let (a, b, after) = (frame("one"), frame("two"), frame("after the close"));
        for wire in [Wire::Json, Wire::MsgPack] {
            let mut batch = vec![
                Outbound::Frame(a.clone()),
                Outbound::Frame(b.clone()),
                Outbound::Close(1008, "too slow".into()),
                Outbound::Frame(after.clone()),
            ];
            let (bytes, taken, close) = lay_out(&mut batch, wire, b"pong".to_vec());

            let mut expected = b"pong".to_vec();
            for f in [&a, &b] {
                let (opcode, payload) = message(f, wire);
                put_frame(&mut expected, opcode, payload);
            }
            assert_eq!(bytes, expected);
            assert_eq!(bytes.capacity(), bytes.len(), "made to its size");
            assert_eq!(taken, a.len() + b.len());
            assert_eq!(close, Some((1008, "too slow".to_owned())));
            assert!(batch.is_empty());
        }
    }

    #[test]
    fn a_batch_without_a_close_is_laid_out_whole() {
        let a = frame("one");
        let mut batch = vec![Outbound::Frame(a.clone())];
        let (bytes, taken, close) = lay_out(&mut batch, Wire::Json, Vec::new());
        let mut expected = Vec::new();
        put_frame(&mut expected, Opcode::Text, a.json_slice());
        assert_eq!((bytes, taken, close), (expected, a.len(), None));
    }
}
