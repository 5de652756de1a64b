//! Weft's server: `/ws` (one actor per connection), routing of chat frames, turns with
//! live approvals and replay, REST, metrics, and a graceful shutdown that persists turns.

pub mod agents;
pub mod assets;
pub mod audit;
pub mod auth;
pub mod client_tools;
pub mod codec;
pub mod collections;
pub mod commands;
pub mod config;
pub mod connection;
pub mod embeddings;
pub mod history;
pub mod knowledge;
pub mod limits;
pub mod listener;
pub mod media;
pub mod media_route;
pub mod metrics;
pub mod outbox;
pub mod persist;
pub mod prompt_view;
pub mod prompts_api;
pub mod providers;
pub mod read_artifact;
pub mod record;
pub mod recovery;
pub mod replay;
pub mod rest;
pub mod runner;
pub mod state;
pub mod threads;
pub mod trace;
pub mod web;
pub mod workflow_run;
pub mod workflows;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
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
        .route("/threads/{id}/items", get(rest::thread_items))
        .route(
            "/threads/{id}/messages/{message_id}/trace",
            get(rest::message_trace),
        )
        .route("/threads/{id}", axum::routing::delete(rest::delete_thread))
        .route("/agents", get(agents::list).post(agents::create))
        .route(
            "/agents/{name}",
            get(agents::get).put(agents::replace).delete(agents::delete),
        )
        .route("/assets/{id}", get(assets::serve))
        .route("/modes", get(rest::modes))
        .route(
            "/collections",
            get(collections::list).post(collections::create),
        )
        .route(
            "/collections/{name}",
            axum::routing::delete(collections::delete),
        )
        .route(
            "/collections/{name}/documents",
            get(collections::documents).post(collections::add_document),
        )
        .route("/node-types", get(workflows::node_types))
        .route("/workflows", get(workflows::list).post(workflows::create))
        .route(
            "/workflows/{id}",
            get(workflows::get)
                .put(workflows::replace)
                .delete(workflows::delete),
        )
        .route("/workflows/{id}/runs", axum::routing::post(workflows::run))
        .route("/prompt", axum::routing::post(prompts_api::create))
        .route("/prompts/{id}", get(prompts_api::get))
        .route("/prompts/{id}/events", get(prompts_api::events))
        .route(
            "/prompts/{id}/approve",
            axum::routing::post(prompts_api::approve),
        )
        .route(
            "/prompts/{id}/reject",
            axum::routing::post(prompts_api::reject),
        )
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
    let limits = listener::Limits {
        max_connections: state.config.server.connection_cap(),
        header_timeout: Duration::from_millis(state.config.server.header_timeout_ms),
    };
    tracing::info!(
        max_connections = limits.max_connections,
        "listening on {addr}"
    );
    let token = state.shutdown.clone();
    tokio::spawn(janitor(state.clone()));
    listener::accept(listener, router(state.clone()), limits, async move {
        shutdown.await;
        token.cancel();
    })
    .await;
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
                state.limits.sweep();
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
