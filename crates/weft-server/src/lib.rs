//! Weft's server: `/ws` (one actor per connection), routing of chat frames, turns with
//! live approvals and replay, REST, metrics, and a graceful shutdown that persists turns.

pub mod auth;
pub mod codec;
pub mod commands;
pub mod config;
pub mod connection;
pub mod history;
pub mod metrics;
pub mod persist;
pub mod providers;
pub mod rest;
pub mod runner;
pub mod state;
pub mod threads;
pub mod web;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use tokio::net::TcpListener;

pub use config::Config;
pub use providers::Providers;
pub use state::{AppState, StartupError};

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/ws", get(connection::ws_handler))
        .route("/threads", get(rest::list_threads))
        .route("/threads/{id}/messages", get(rest::thread_messages))
        .route("/threads/{id}", axum::routing::delete(rest::delete_thread))
        .route("/healthz", get(rest::healthz))
        .route("/metrics", get(rest::metrics))
        .merge(web::routes())
        .with_state(state)
}

/// Serve until `shutdown` resolves; then stop accepting, close sockets (1001), let running
/// turns finish within `server.shutdown_timeout_ms`, stop the rest, and wait for them to
/// persist what they produced.
pub async fn serve(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!("listening on {addr}");
    let token = state.shutdown.clone();
    tokio::spawn(janitor(state.clone()));
    // Frames are small and flushed one by one: without TCP_NODELAY, Nagle and delayed ACKs
    // add tens of milliseconds per exchange.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, router(state.clone()))
        .with_graceful_shutdown(async move {
            shutdown.await;
            tracing::info!("shutting down: no new connections");
            token.cancel();
        })
        .await?;
    drain_turns(&state).await;
    state.store.close().await;
    Ok(())
}

/// Periodically forget replay buffers of long-finished turns and idle thread runtimes.
async fn janitor(state: Arc<AppState>) {
    let retention = Duration::from_millis(state.config.server.replay_retention_ms);
    let mut tick =
        tokio::time::interval(retention.clamp(Duration::from_secs(1), Duration::from_secs(60)));
    loop {
        tokio::select! {
            () = state.shutdown.cancelled() => return,
            _ = tick.tick() => {
                let dropped = state.hub.sweep(retention);
                if dropped > 0 {
                    tracing::debug!(dropped, "forgot idle threads");
                }
            }
        }
    }
}

/// Wait for running turns; past the timeout, stop them (they still persist partial work).
pub async fn drain_turns(state: &AppState) {
    state.turns.close();
    let timeout = Duration::from_millis(state.config.server.shutdown_timeout_ms);
    if tokio::time::timeout(timeout, state.turns.wait())
        .await
        .is_err()
    {
        let running = state.hub.active();
        tracing::warn!(
            count = running.len(),
            "stopping turns still running at shutdown"
        );
        for runtime in running {
            runtime.stop();
        }
        state.turns.wait().await;
    }
}
