//! One MCP server's connection: started (a child process) or reached (streamable HTTP),
//! reconnected with backoff when it drops, and asked for what it offers (tools, resources,
//! resource templates, prompts).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{ProgressNotificationParam, Prompt, Resource, ResourceTemplate};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::sync::{Notify, RwLock};
use weft_core::ToolContext;
use weft_protocol::ToolCategory;

use super::McpServerConfig;
use crate::web::AssetSink;

/// The client side: progress notifications go to whoever waits for that token; a changed
/// list (tools, resources or prompts) wakes the server's refresher.
pub(super) struct Handler {
    pub(super) progress: ProgressDispatcher,
    changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }
}

pub(super) type Service = RunningService<RoleClient, Handler>;

/// Backoff between connection attempts: 250 ms, doubling to 30 s, without end.
pub(super) const FIRST_RETRY: Duration = Duration::from_millis(250);
const LAST_RETRY: Duration = Duration::from_secs(30);

pub(super) fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(FIRST_RETRY)
        .with_max_delay(LAST_RETRY)
        .without_max_times()
}

/// What a server offers besides its tools (empty where it has no such capability).
#[derive(Default, Clone)]
pub(super) struct Catalog {
    pub(super) resources: Vec<Resource>,
    pub(super) templates: Vec<ResourceTemplate>,
    pub(super) prompts: Vec<Prompt>,
}

/// One server: its connection (none while it is being reconnected).
pub(super) struct Server {
    pub(super) name: String,
    pub(super) category: ToolCategory,
    pub(super) timeout: Duration,
    /// Where images and audio its tools return are kept (none: they are only described).
    pub(super) assets: Option<Arc<dyn AssetSink>>,
    config: McpServerConfig,
    /// Notified when the server says its tools, resources or prompts changed.
    pub(super) changed: Arc<Notify>,
    service: RwLock<Option<Arc<Service>>>,
    reconnecting: AtomicBool,
    reconnected: Notify,
}

impl Server {
    /// Start (or reach) the server and complete the MCP handshake.
    pub(super) async fn open(
        config: &McpServerConfig,
        assets: Option<Arc<dyn AssetSink>>,
    ) -> Result<Arc<Server>, String> {
        let changed = Arc::new(Notify::new());
        let service = start(config, &changed).await?;
        tracing::info!(server = %config.name, "MCP server connected");
        Ok(Arc::new(Server {
            name: config.name.clone(),
            category: config.category.unwrap_or(ToolCategory::External),
            timeout: Duration::from_millis(config.timeout_ms),
            assets,
            config: config.clone(),
            changed,
            service: RwLock::new(Some(Arc::new(service))),
            reconnecting: AtomicBool::new(false),
            reconnected: Notify::new(),
        }))
    }

    /// Whether it is connected now (not being reconnected).
    pub(super) fn is_up(&self) -> bool {
        self.service.try_read().map_or(true, |s| s.is_some())
    }

    /// The live connection, waiting (up to the call timeout) while it is being remade.
    pub(super) async fn current(&self) -> Result<Arc<Service>, String> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let waiting = self.reconnected.notified();
            if let Some(service) = self.service.read().await.clone() {
                return Ok(service);
            }
            if tokio::time::timeout_at(deadline, waiting).await.is_err() {
                return Err("the server is down and not back yet".to_owned());
            }
        }
    }

    /// Drop a dead connection and reconnect in the background, with backoff.
    pub(super) fn reconnect(self: &Arc<Self>, dead: &Arc<Service>) {
        let server = self.clone();
        let dead = dead.clone();
        tokio::spawn(async move {
            {
                let mut slot = server.service.write().await;
                if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, &dead)) {
                    *slot = None;
                }
            }
            if server.reconnecting.swap(true, Ordering::SeqCst) {
                return;
            }
            let restarted = (|| start(&server.config, &server.changed))
                .retry(backoff())
                .sleep(tokio::time::sleep)
                .notify(|e: &String, wait| {
                    tracing::warn!(server = %server.name, error = %e, ?wait, "MCP server still down");
                })
                .await;
            if let Ok(service) = restarted {
                tracing::info!(server = %server.name, "MCP server reconnected");
                *server.service.write().await = Some(Arc::new(service));
            }
            server.reconnecting.store(false, Ordering::SeqCst);
            server.reconnected.notify_waiters();
        });
    }

    /// One request to the server, bounded by its timeout and the turn's stop.
    pub(super) async fn request<T, F, Fut>(
        self: &Arc<Self>,
        ctx: &ToolContext,
        ask: F,
    ) -> Result<T, String>
    where
        F: FnOnce(Arc<Service>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        let service = self.current().await?;
        let answer = tokio::select! {
            answer = tokio::time::timeout(self.timeout, ask(service.clone())) => answer,
            () = ctx.cancel.cancelled() => return Err("cancelled".to_owned()),
        };
        match answer {
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
            Ok(outcome) => self.settle(&service, outcome),
        }
    }

    /// The answer, or the error the model reads; a lost connection is remade in the
    /// background.
    pub(super) fn settle<T>(
        self: &Arc<Self>,
        service: &Arc<Service>,
        outcome: Result<T, Failure>,
    ) -> Result<T, String> {
        match outcome {
            Ok(value) => Ok(value),
            Err(Failure::Call(e)) => Err(e),
            Err(Failure::Connection(e)) => {
                self.reconnect(service);
                Err(format!(
                    "the connection to the server was lost ({e}); it is being restarted"
                ))
            }
        }
    }

    /// Its resources, resource templates and prompts, for those it says it has. A list the
    /// server cannot give (some answer "method not found" for templates) is logged and left
    /// empty: its tools still work.
    pub(super) async fn catalog(&self) -> Result<Catalog, String> {
        let service = self.current().await?;
        let capabilities = service
            .peer_info()
            .map(|info| info.capabilities.clone())
            .unwrap_or_default();
        let mut catalog = Catalog::default();
        if capabilities.resources.is_some() {
            catalog.resources = self.or_empty("resources", service.list_all_resources().await);
            catalog.templates = self.or_empty(
                "resource templates",
                service.list_all_resource_templates().await,
            );
        }
        if capabilities.prompts.is_some() {
            catalog.prompts = self.or_empty("prompts", service.list_all_prompts().await);
        }
        Ok(catalog)
    }

    fn or_empty<T>(&self, what: &str, listed: Result<Vec<T>, rmcp::ServiceError>) -> Vec<T> {
        listed.unwrap_or_else(|e| {
            tracing::warn!(server = %self.name, error = %e, "cannot list the MCP server's {what}");
            Vec::new()
        })
    }
}

/// Why a request gave no answer: the request itself, or the connection under it (which is
/// then remade).
pub(super) enum Failure {
    Call(String),
    Connection(String),
}

impl From<rmcp::ServiceError> for Failure {
    fn from(error: rmcp::ServiceError) -> Self {
        match error {
            rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => {
                Failure::Connection(error.to_string())
            }
            other => Failure::Call(other.to_string()),
        }
    }
}

/// Start (or reach) the server and complete the MCP handshake, within its `timeout_ms` (a
/// server that never answers must not hold up the rest).
async fn start(config: &McpServerConfig, changed: &Arc<Notify>) -> Result<Service, String> {
    let limit = Duration::from_millis(config.timeout_ms);
    tokio::time::timeout(limit, handshake(config, changed))
        .await
        .unwrap_or_else(|_| Err(format!("no handshake within {} ms", config.timeout_ms)))
}

async fn handshake(config: &McpServerConfig, changed: &Arc<Notify>) -> Result<Service, String> {
    let handler = || Handler {
        progress: ProgressDispatcher::new(),
        changed: changed.clone(),
    };
    Ok(match (&config.command, &config.url) {
        (Some(command), None) => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(&config.args).envs(&config.env);
            let transport = TokioChildProcess::new(cmd).map_err(|e| e.to_string())?;
            handler()
                .serve(transport)
                .await
                .map_err(|e| e.to_string())?
        }
        (None, Some(url)) => handler()
            .serve(StreamableHttpClientTransport::from_config(http_config(
                url, config,
            )?))
            .await
            .map_err(|e| e.to_string())?,
        _ => return Err("give exactly one of `command` and `url`".to_owned()),
    })
}

/// The HTTP transport's settings: the URL, the configured headers and the bearer token.
fn http_config(
    url: &str,
    config: &McpServerConfig,
) -> Result<StreamableHttpClientTransportConfig, String> {
    let mut headers = std::collections::HashMap::new();
    for (name, value) in &config.headers {
        let name = http::HeaderName::try_from(name.as_str())
            .map_err(|e| format!("header `{name}`: {e}"))?;
        let value = http::HeaderValue::try_from(value.as_str())
            .map_err(|e| format!("header `{name}`: {e}"))?;
        headers.insert(name, value);
    }
    let mut settings = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers);
    if let Some(variable) = &config.bearer_token_env {
        let token = std::env::var(variable).map_err(|_| {
            format!("the environment variable `{variable}` (bearer_token_env) is not set")
        })?;
        settings = settings.auth_header(token);
    }
    Ok(settings)
}
