//! `GET /healthz` (the database answers with the schema this build needs; MCP servers are
//! reported, never fatal), `GET /metrics` (Prometheus), `GET /modes`.

use std::collections::BTreeMap;
use std::sync::Arc;

use aide::generate::GenContext;
use aide::openapi::{MediaType, Operation, Response as DocResponse, StatusCode as DocStatus};
use aide::OperationOutput;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use schemars::JsonSchema;
use serde::Serialize;

use crate::state::ServerState;

/// An execution mode.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ModeInfo {
    pub name: String,
    pub display_name: String,
    /// How many rounds it allows the server's agent.
    pub max_rounds: u32,
}

/// `GET /modes`: the execution modes, with how many rounds each allows the server's agent.
pub async fn modes(State(state): State<Arc<ServerState>>) -> Json<Vec<ModeInfo>> {
    let runtime = &state.runtime;
    let modes = runtime
        .modes
        .list()
        .iter()
        .map(|m| ModeInfo {
            name: m.name().to_owned(),
            display_name: m.display_name().to_owned(),
            max_rounds: m.max_rounds(&runtime.agent),
        })
        .collect();
    Json(modes)
}

/// A healthy server.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// The default provider.
    pub provider: String,
    /// Whether the provider is the offline demo.
    pub demo: bool,
    /// The database schema version.
    pub schema: i64,
    /// Each MCP server: connected or not, and its tools.
    pub mcp: BTreeMap<String, McpHealth>,
    /// This replica's id.
    pub replica: String,
    /// Turns this replica runs.
    pub turns: usize,
    /// The bus (`connected`, `disconnected`), absent without one.
    pub bus: Option<String>,
}

/// An MCP server's state.
#[derive(Debug, Serialize, JsonSchema)]
pub struct McpHealth {
    pub connected: bool,
    pub tools: usize,
}

/// A server that cannot serve (503): the database is out of reach or its schema out of date.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Unhealthy {
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needed: Option<i64>,
}

impl IntoResponse for Unhealthy {
    fn into_response(self) -> Response {
        (StatusCode::SERVICE_UNAVAILABLE, Json(self)).into_response()
    }
}

impl OperationOutput for Unhealthy {
    type Inner = Self;

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<DocStatus>, DocResponse)> {
        Json::<Self>::operation_response(ctx, operation)
            .map(|mut response| {
                response.description = "The database is unavailable or out of date.".to_owned();
                (Some(DocStatus::Code(503)), response)
            })
            .into_iter()
            .collect()
    }
}

/// Healthy means the database answers and has the schema this build needs.
pub async fn healthz(State(state): State<Arc<ServerState>>) -> Result<Json<Health>, Unhealthy> {
    let runtime = &state.runtime;
    match runtime.store.schema_versions().await {
        Ok((applied, needed)) if applied >= needed => {
            let mcp = runtime
                .mcp_status()
                .into_iter()
                .map(|(name, connected, tools)| (name, McpHealth { connected, tools }))
                .collect();
            Ok(Json(Health {
                status: "ok".to_owned(),
                provider: runtime.providers.default_name().to_owned(),
                demo: runtime.providers.is_demo(),
                schema: applied,
                mcp,
                replica: runtime.leases.replica_id().to_owned(),
                turns: runtime.leases.held(),
                bus: runtime.bus.as_ref().map(|bus| {
                    let state = if bus.is_connected() {
                        "connected"
                    } else {
                        "disconnected"
                    };
                    state.to_owned()
                }),
            }))
        }
        Ok((applied, needed)) => {
            tracing::warn!(
                applied,
                needed,
                "health check: the database schema is out of date"
            );
            Err(Unhealthy {
                status: "database schema out of date".to_owned(),
                schema: Some(applied),
                needed: Some(needed),
            })
        }
        Err(e) => {
            tracing::warn!(error = %e, "health check: database unavailable");
            Err(Unhealthy {
                status: "database unavailable".to_owned(),
                schema: None,
                needed: None,
            })
        }
    }
}

/// The Prometheus text exposition.
pub struct Metrics(String);

impl IntoResponse for Metrics {
    fn into_response(self) -> Response {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            self.0,
        )
            .into_response()
    }
}

impl OperationOutput for Metrics {
    type Inner = String;

    fn inferred_responses(
        ctx: &mut GenContext,
        _operation: &mut Operation,
    ) -> Vec<(Option<DocStatus>, DocResponse)> {
        let text = MediaType {
            schema: Some(aide::openapi::SchemaObject {
                json_schema: ctx.schema.subschema_for::<String>(),
                example: None,
                external_docs: None,
            }),
            ..MediaType::default()
        };
        let response = DocResponse {
            description: "Prometheus text format 0.0.4.".to_owned(),
            content: [("text/plain".to_owned(), text)].into_iter().collect(),
            ..DocResponse::default()
        };
        vec![(Some(DocStatus::Code(200)), response)]
    }
}

pub async fn metrics(State(state): State<Arc<ServerState>>) -> Metrics {
    Metrics(state.runtime.metrics.render())
}
