//! `GET /healthz` (the database answers with the schema this build needs; MCP servers are
//! reported, never fatal), `GET /metrics` (Prometheus), `GET /modes`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::state::ServerState;

/// `GET /modes`: the execution modes, with how many rounds each allows the server's agent.
pub async fn modes(State(state): State<Arc<ServerState>>) -> Response {
    let runtime = &state.runtime;
    let modes: Vec<Value> = runtime
        .modes
        .list()
        .iter()
        .map(|m| {
            json!({
                "name": m.name(),
                "display_name": m.display_name(),
                "max_rounds": m.max_rounds(&runtime.agent),
            })
        })
        .collect();
    Json(modes).into_response()
}

/// Healthy means the database answers and has the schema this build needs.
pub async fn healthz(State(state): State<Arc<ServerState>>) -> Response {
    let runtime = &state.runtime;
    match runtime.store.schema_versions().await {
        Ok((applied, needed)) if applied >= needed => {
            let mcp: serde_json::Map<String, Value> = runtime
                .mcp_status()
                .into_iter()
                .map(|(name, connected, tools)| {
                    (name, json!({"connected": connected, "tools": tools}))
                })
                .collect();
            Json(json!({
                "status": "ok",
                "provider": runtime.providers.default_name(),
                "demo": runtime.providers.is_demo(),
                "schema": applied,
                "mcp": mcp,
                "replica": runtime.leases.replica_id(),
                "turns": runtime.leases.held(),
                "bus": runtime.bus.as_ref().map(|bus| {
                    if bus.is_connected() { "connected" } else { "disconnected" }
                }),
            }))
            .into_response()
        }
        Ok((applied, needed)) => {
            tracing::warn!(
                applied,
                needed,
                "health check: the database schema is out of date"
            );
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "database schema out of date", "schema": applied, "needed": needed})),
            )
                .into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "health check: database unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "database unavailable"})),
            )
                .into_response()
        }
    }
}

pub async fn metrics(State(state): State<Arc<ServerState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.runtime.metrics.render(),
    )
        .into_response()
}
