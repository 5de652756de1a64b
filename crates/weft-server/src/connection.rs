//! One websocket connection: a reader that decodes and handles frames, and a writer that
//! encodes outbound frames (in the format the client last used), pings, and closes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::auth::{authenticate, User};
use crate::codec::{decode_json, decode_msgpack, encode, Wire};
use crate::commands::Connection;
use crate::state::AppState;
use crate::threads::Outbound;

pub const CLOSE_TOO_BIG: u16 = 1009;
pub const CLOSE_GOING_AWAY: u16 = 1001;
pub const CLOSE_KEY_REVOKED: u16 = 4001;

#[derive(Debug, Deserialize)]
pub struct WsQuery {
    api_key: Option<String>,
}

/// `GET /ws`: authenticate, then upgrade (a refused key is HTTP 401).
pub async fn ws_handler(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<WsQuery>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let user = match authenticate(&state, &headers, query.api_key.as_deref()).await {
        Ok(user) => user,
        Err(status) => return status.into_response(),
    };
    let limit = state.config.server.max_frame_bytes;
    // tungstenite's own cap sits above ours, so an oversize frame reaches us and gets 1009.
    let hard_cap = limit.saturating_mul(2).max(limit + 64 * 1024);
    upgrade
        // Small socket buffers keep an idle connection cheap; frames are flushed as sent.
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_message_size(hard_cap)
        .max_frame_size(hard_cap)
        .on_upgrade(move |socket| run(state, user, socket))
}

async fn run(state: Arc<AppState>, user: User, socket: WebSocket) {
    let conn_id = state.next_conn_id();
    state.metrics.open_sockets.inc();
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Outbound>();
    let binary = Arc::new(AtomicBool::new(false));

    let ping_every = Duration::from_millis(state.config.server.ping_interval_ms.max(10));
    let writer_binary = binary.clone();
    let writer = async move {
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        loop {
            tokio::select! {
                out = rx.recv() => match out {
                    Some(Outbound::Frame(frame)) => {
                        let wire = if writer_binary.load(Ordering::Relaxed) { Wire::MsgPack } else { Wire::Json };
                        let Some(message) = encode(&frame, wire) else { continue };
                        if sink.send(message).await.is_err() {
                            break;
                        }
                    }
                    Some(Outbound::Close(code, reason)) => {
                        let _ = sink.send(Message::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
                        break;
                    }
                    None => break,
                },
                _ = ping.tick() => {
                    if sink.send(Message::Ping(Default::default())).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = sink.close().await;
    };

    let conn = Connection {
        state: state.clone(),
        user,
        id: conn_id,
        tx: tx.clone(),
    };
    let limit = state.config.server.max_frame_bytes;
    let recheck_every = Duration::from_millis(state.config.server.auth_recheck_ms.max(10));
    let reader = async move {
        let mut recheck =
            tokio::time::interval_at(tokio::time::Instant::now() + recheck_every, recheck_every);
        loop {
            tokio::select! {
                message = stream.next() => match message {
                    None | Some(Ok(Message::Close(_))) => break,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "websocket read failed");
                        let _ = conn.tx.send(Outbound::Close(CLOSE_TOO_BIG, "frame too large or malformed".into()));
                        break;
                    }
                    Some(Ok(Message::Text(text))) => {
                        if text.len() > limit {
                            let _ = conn.tx.send(Outbound::Close(CLOSE_TOO_BIG, format!("frame over {limit} bytes")));
                            break;
                        }
                        binary.store(false, Ordering::Relaxed);
                        conn.handle(decode_json(&text)).await;
                    }
                    Some(Ok(Message::Binary(bytes))) => {
                        if bytes.len() > limit {
                            let _ = conn.tx.send(Outbound::Close(CLOSE_TOO_BIG, format!("frame over {limit} bytes")));
                            break;
                        }
                        binary.store(true, Ordering::Relaxed);
                        conn.handle(decode_msgpack(&bytes)).await;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                },
                () = conn.state.shutdown.cancelled() => {
                    let _ = conn.tx.send(Outbound::Close(CLOSE_GOING_AWAY, "server shutting down".into()));
                    break;
                }
                _ = recheck.tick() => {
                    if !conn.key_still_valid().await {
                        let _ = conn.tx.send(Outbound::Close(CLOSE_KEY_REVOKED, "api key revoked".into()));
                        break;
                    }
                }
            }
        }
        conn.detach();
    };

    drop(tx);
    tokio::pin!(writer);
    tokio::select! {
        () = &mut writer => {}
        () = reader => {
            // Let the writer flush a close frame; the connection's senders are gone now.
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut writer).await;
        }
    }
    // Idempotent: covers a writer that ended first.
    detach_orphans(&state, conn_id);
    state.metrics.open_sockets.dec();
}

/// Unsubscribe a closed connection; turns it leaves with nobody listening keep running for
/// the grace period (0: stop now), then stop unless someone resumed them.
pub fn detach_orphans(state: &Arc<AppState>, conn_id: u64) {
    let grace = state.config.server.detach_grace_ms;
    for (thread, generation) in state.hub.detach(conn_id) {
        if grace == 0 {
            thread.stop_if_still_detached(generation);
            continue;
        }
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(grace)).await;
            if thread.stop_if_still_detached(generation) {
                tracing::info!(thread = %thread.id, "stopped a turn nobody resumed");
            }
        });
    }
}
