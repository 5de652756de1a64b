//! Weft's HTTP and websocket doors: `/ws` (one actor per connection; each frame becomes a
//! runtime call), the REST API, the reference web client, and the listener that keeps
//! connections bounded. Everything else — turns, threads, the record, the services — is the
//! runtime's ([`weft_runtime`]).

pub mod auth;
pub mod codec;
pub mod commands;
pub mod connection;
pub mod error;
pub mod listener;
pub mod outbox;
pub mod rest;
pub mod state;
pub mod web;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use axum::Router;
use tokio::net::TcpListener;

pub use state::ServerState;
pub use weft_runtime::config::{self, Config};
pub use weft_runtime::{Providers, Runtime};

use rest::{agents, assets, collections, health, prompts, threads, workflows};

pub fn router(state: Arc<ServerState>) -> Router {
    let max_request_bytes = state.runtime.config.server.max_request_bytes;
    Router::new()
        .route("/ws", get(connection::ws_handler))
        .route("/threads", get(threads::list))
        .route("/threads/{id}", delete(threads::delete))
        .route("/threads/{id}/messages", get(threads::messages))
        .route("/threads/{id}/items", get(threads::items))
        .route(
            "/threads/{id}/messages/{message_id}/trace",
            get(threads::trace),
        )
        .route("/agents", get(agents::list).post(agents::create))
        .route(
            "/agents/{name}",
            get(agents::get).put(agents::replace).delete(agents::delete),
        )
        .route("/assets/{id}", get(assets::serve))
        .route("/modes", get(health::modes))
        .route(
            "/collections",
            get(collections::list).post(collections::create),
        )
        .route("/collections/{name}", delete(collections::delete))
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
        .route("/workflows/{id}/runs", post(workflows::run))
        .route("/prompt", post(prompts::create))
        .route("/prompts/{id}", get(prompts::get))
        .route("/prompts/{id}/events", get(prompts::events))
        .route("/prompts/{id}/approve", post(prompts::approve))
        .route("/prompts/{id}/reject", post(prompts::reject))
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
        .merge(web::routes())
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .with_state(state)
}

/// Serve until `shutdown` resolves; then stop accepting, close sockets (1012: reconnect), let running
/// turns finish within `server.shutdown_timeout_ms`, stop the rest, and wait for them to
/// persist what they produced.
pub async fn serve(
    state: Arc<ServerState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let runtime = state.runtime.clone();
    let server = &runtime.config.server;
    let limits = listener::Limits {
        max_connections: listener::connection_cap(server.max_connections),
        header_timeout: Duration::from_millis(server.header_timeout_ms),
        max_unauthenticated_per_address: server.max_unauthenticated_per_address,
    };
    tracing::info!(
        max_connections = limits.max_connections,
        "listening on {addr}"
    );
    let token = runtime.shutdown.clone();
    tokio::spawn(runtime.clone().janitor());
    listener::accept(listener, router(state), limits, async move {
        shutdown.await;
        token.cancel();
    })
    .await;
    runtime.drain_turns().await;
    runtime.store.close().await;
    Ok(())
}
