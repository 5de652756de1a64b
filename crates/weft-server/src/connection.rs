//! One websocket connection: a reader that decodes and handles frames, and a writer that
//! takes every frame already queued, writes them in the format the client last used, and
//! flushes once. A client that stops reading (queue over its byte bound, or a write stalled
//! past the timeout) or stops answering pings is disconnected; its turns keep running.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures::stream::SplitSink;
use futures::{FutureExt, SinkExt, StreamExt};
use tokio_util::task::AbortOnDropHandle;
use weft_protocol::ErrorCode;

use crate::auth::AuthUser;
use crate::codec::{decode_json, decode_msgpack, Wire};
use crate::commands::Connection;
use crate::error::ApiError;
use crate::outbox::{message, Outbound, Outbox, OutboxState};
use crate::state::{ServerState, SocketSlot};

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
    upgrade: WebSocketUpgrade,
) -> Response {
    let Some(slot) = state.sockets.open(&user.id) else {
        return ApiError::new(
            ErrorCode::RateLimited,
            "too many open sockets for this user (server.max_sockets_per_user)",
        )
        .into_response();
    };
    let server = &state.runtime.config.server;
    let limit = server.max_frame_bytes;
    // tungstenite's own cap sits above ours, so an oversize frame reaches us and gets 1009.
    let hard_cap = limit.saturating_mul(2).max(limit + 64 * 1024);
    upgrade
        // Small read buffer keeps an idle connection cheap; writes are batched by the writer
        // (fed, then flushed once) and bounded like the queue in front of them.
        .read_buffer_size(4 * 1024)
        .write_buffer_size(WRITE_BATCH_BYTES)
        .max_write_buffer_size(server.max_outbound_bytes.max(WRITE_BATCH_BYTES * 2))
        .max_message_size(hard_cap)
        .max_frame_size(hard_cap)
        .on_upgrade(move |socket| run(state, user, slot, socket))
}

/// tungstenite writes to the socket once this much is buffered, else on flush. Its buffer
/// keeps its size per connection, so this stays small.
const WRITE_BATCH_BYTES: usize = 8 * 1024;

async fn run(state: Arc<ServerState>, user: AuthUser, _slot: SocketSlot, socket: WebSocket) {
    let runtime = state.runtime.clone();
    runtime.metrics.open_sockets.inc();
    let (sink, mut stream) = socket.split();
    let (outbox, rx) = Outbox::new(
        runtime.next_subscriber_id(),
        runtime.config.server.max_outbound_bytes,
    );
    let binary = Arc::new(AtomicBool::new(false));
    let last_heard = Arc::new(AtomicU64::new(0));
    let clock = tokio::time::Instant::now();

    let writer = write_loop(
        runtime.clone(),
        sink,
        rx,
        outbox.state().clone(),
        binary.clone(),
        last_heard.clone(),
        clock,
    );

    let conn = Connection {
        state: state.clone(),
        user,
        outbox: outbox.clone(),
        client_tools: Default::default(),
    };
    let limit = runtime.config.server.max_frame_bytes;
    let recheck_every = Duration::from_millis(runtime.config.server.auth_recheck_ms.max(10));
    let reader = async move {
        let mut recheck =
            tokio::time::interval_at(tokio::time::Instant::now() + recheck_every, recheck_every);
        loop {
            tokio::select! {
                message = stream.next() => {
                    last_heard.store(clock.elapsed().as_millis() as u64, Ordering::Relaxed);
                    match message {
                        None | Some(Ok(Message::Close(_))) => break,
                        Some(Err(e)) => {
                            let (code, reason) = close_for(e);
                            conn.outbox.close(code, reason);
                            break;
                        }
                        Some(Ok(Message::Text(text))) => {
                            if text.len() > limit {
                                conn.outbox.close(CLOSE_TOO_BIG, format!("frame over {limit} bytes"));
                                break;
                            }
                            binary.store(false, Ordering::Relaxed);
                            // Boxed: a frame's handling (a turn's start) lives on the heap while
                            // it runs, not in every waiting socket's task.
                            Box::pin(conn.handle(decode_json(&text))).await;
                        }
                        Some(Ok(Message::Binary(bytes))) => {
                            if bytes.len() > limit {
                                conn.outbox.close(CLOSE_TOO_BIG, format!("frame over {limit} bytes"));
                                break;
                            }
                            binary.store(true, Ordering::Relaxed);
                            Box::pin(conn.handle(decode_msgpack(&bytes))).await;
                        }
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    }
                },
                () = conn.state.runtime.shutdown.cancelled() => {
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
    };

    let subscriber = weft_runtime::FrameSink::id(outbox.as_ref());
    drop(outbox);
    // The writer is a task of its own: a frame going out wakes only it, not the reader (whose
    // every poll refills tungstenite's read buffer and polls its timers). Aborted if this
    // task is dropped.
    let mut writer = AbortOnDropHandle::new(tokio::spawn(writer));
    tokio::select! {
        _ = &mut writer => {}
        () = reader => {
            // Let the writer flush a close frame; the connection's senders are gone now.
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut writer).await;
        }
    }
    // Idempotent: covers a writer that ended first.
    runtime.detach(subscriber);
    runtime.metrics.open_sockets.dec();
}

/// The close code a read error deserves: invalid UTF-8 1007, oversize 1009, any other
/// protocol violation 1002.
fn close_for(error: axum::Error) -> (u16, String) {
    let inner = error.into_inner();
    tracing::debug!(error = %inner, "websocket read failed");
    match inner.downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Utf8(_)) => {
            (CLOSE_INVALID_DATA, "invalid UTF-8 in a text frame".into())
        }
        Some(tungstenite::Error::Capacity(_)) => (CLOSE_TOO_BIG, "frame too large".into()),
        _ if inner.downcast_ref::<std::str::Utf8Error>().is_some() => {
            (CLOSE_INVALID_DATA, "invalid UTF-8 in a text frame".into())
        }
        _ => (CLOSE_PROTOCOL_ERROR, "websocket protocol violation".into()),
    }
}

type Sink = SplitSink<WebSocket, Message>;

/// Most frames written before one flush.
const FRAMES_PER_BATCH: usize = 32;

/// Write queued frames in batches (one flush per batch), ping, and drop clients that stop
/// reading or answering.
async fn write_loop(
    runtime: Arc<weft_runtime::Runtime>,
    mut sink: Sink,
    rx: flume::Receiver<Outbound>,
    queue: Arc<OutboxState>,
    binary: Arc<AtomicBool>,
    last_heard: Arc<AtomicU64>,
    clock: tokio::time::Instant,
) {
    let server = &runtime.config.server;
    let ping_every = Duration::from_millis(server.ping_interval_ms.max(10));
    let write_timeout = Duration::from_millis(server.write_timeout_ms.max(1));
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
    // Grown by the batches that come, not preallocated: most sockets wait with little queued.
    let mut batch = Vec::new();
    loop {
        tokio::select! {
            biased;
            () = queue.overflow.notified() => {
                tracing::info!(queued = queue.queued(), "closing a connection that stopped reading");
                runtime.metrics.slow_clients.inc();
                close_now(&mut sink, CLOSE_TRY_AGAIN_LATER, "outbound queue full").await;
                return;
            }
            received = rx.recv_async() => {
                let Ok(first) = received else { break };
                batch.push(first);
                batch.extend(rx.try_iter().take(FRAMES_PER_BATCH - 1));
                let wire = if binary.load(Ordering::Relaxed) { Wire::MsgPack } else { Wire::Json };
                let mut close = None;
                let mut bytes = 0;
                let written = within(write_timeout, async {
                    for out in batch.drain(..) {
                        match out {
                            Outbound::Frame(frame) => {
                                bytes += frame.len();
                                sink.feed(message(&frame, wire)).await?;
                            }
                            Outbound::Close(code, reason) => {
                                close = Some((code, reason));
                                break;
                            }
                        }
                    }
                    sink.flush().await
                })
                .await;
                queue.taken(bytes);
                batch.clear();
                match written {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return,
                    Err(_) => {
                        tracing::info!("closing a connection whose writes stalled");
                        runtime.metrics.slow_clients.inc();
                        close_now(&mut sink, CLOSE_TRY_AGAIN_LATER, "write timed out").await;
                        return;
                    }
                }
                if let Some((code, reason)) = close {
                    close_now(&mut sink, code, &reason).await;
                    return;
                }
            }
            _ = ping.tick() => {
                let silent = clock.elapsed().saturating_sub(Duration::from_millis(last_heard.load(Ordering::Relaxed)));
                if silent > ping_every * 2 + ping_every / 2 {
                    tracing::info!(?silent, "closing a connection that stopped answering pings");
                    close_now(&mut sink, CLOSE_GOING_AWAY, "no pong").await;
                    return;
                }
                let pinged = tokio::time::timeout(write_timeout, sink.send(Message::Ping(Default::default()))).await;
                if !matches!(pinged, Ok(Ok(()))) {
                    return;
                }
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
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

/// Send a close frame if the socket takes it within a second, then give up on it.
async fn close_now(sink: &mut Sink, code: u16, reason: &str) {
    let frame = Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }));
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        sink.send(frame).await?;
        sink.close().await
    })
    .await;
}
