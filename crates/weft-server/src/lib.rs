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
mod socket;
pub mod state;
mod upgrade;
pub mod web;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

pub use state::ServerState;
pub use weft_runtime::config::{self, Config};
pub use weft_runtime::{Providers, Runtime};

/// Every route: the REST API (described at `GET /openapi.json`), `/ws`, the web client.
pub fn router(state: Arc<ServerState>) -> Router {
    let max_request_bytes = state.runtime.config.server.max_request_bytes;
    aide::generate::on_error(|error| tracing::warn!(%error, "the OpenAPI document is incomplete"));
    let mut api = aide::openapi::OpenApi::default();
    let rest = rest::openapi::describe(rest::routes(), &mut api);
    let document = Arc::new(api);
    rest.route("/ws", get(connection::ws_handler))
        .route(
            "/openapi.json",
            get(move || async move { axum::Json(document) }),
        )
        .merge(web::routes())
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .with_state(state)
}

/// Serve until `shutdown` resolves; then stop accepting, close sockets (1012: reconnect), let running
/// turns finish within `server.shutdown_timeout_ms`, stop the rest, and wait for them to
/// persist what they produced.
/// How long shutdown waits for the store's last writes and its connections to close.
const STORE_CLOSE_WAIT: Duration = Duration::from_secs(5);

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
    // Its last batch and its connections; a database that stopped answering holds no
    // shutdown up (what was not committed is as a crash leaves it).
    if tokio::time::timeout(STORE_CLOSE_WAIT, runtime.store.close())
        .await
        .is_err()
    {
        tracing::warn!("the database did not close in time");
    }
    Ok(())
}
