//! MCP servers as tools (`rmcp`): each configured server the policy allows is started (stdio:
//! a child process) or reached (streamable HTTP) at start-up, its tools listed and offered as
//! `mcp__<server>__<tool>` with the server's category (default `external`: they ask in
//! Default mode). A call has a timeout, is cancelled on the server when the turn stops, and
//! its progress notifications become `mcp_progress` frames. A server whose connection drops
//! (a child process that died) is reconnected with backoff; calls meanwhile wait for it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientNotification, ClientRequest,
    ContentBlock, Notification, ProgressNotificationParam, Request, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde::Deserialize;
use serde_json::{Map, Value};
use weft_core::{Tool, ToolContext, ToolError};
use weft_protocol::{PolicyClass, ToolCategory};

/// `[[mcp.servers]]`: a child process (`command`, `args`, `env`) or a URL.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    pub name: String,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub url: Option<String>,
    /// What its tools do, for the gate (default `external`).
    #[serde(default)]
    pub category: Option<ToolCategory>,
    /// How long one call may take.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_timeout_ms() -> u64 {
    60_000
}

/// The client side: progress notifications go to whoever waits for that token; a changed
/// tool list wakes the server's refresher.
struct Handler {
    progress: ProgressDispatcher,
    changed: Arc<tokio::sync::Notify>,
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
}

type Service = RunningService<RoleClient, Handler>;

/// One server: its connection (none while it is being reconnected).
struct Server {
    name: String,
    category: ToolCategory,
    timeout: Duration,
    config: McpServerConfig,
    /// Notified when the server says its tools changed.
    changed: Arc<tokio::sync::Notify>,
    service: tokio::sync::RwLock<Option<Arc<Service>>>,
    reconnecting: std::sync::atomic::AtomicBool,
    reconnected: tokio::sync::Notify,
}

/// How long, at most, an answered call waits for progress reports still on their way.
const PROGRESS_GRACE: Duration = Duration::from_millis(100);

/// Backoff between reconnection attempts.
const FIRST_RETRY: Duration = Duration::from_millis(250);
const LAST_RETRY: Duration = Duration::from_secs(30);

impl Server {
    /// The live connection, waiting (up to the call timeout) while it is being remade.
    async fn current(&self) -> Result<Arc<Service>, String> {
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
    fn reconnect(self: &Arc<Self>, dead: &Arc<Service>) {
        let server = self.clone();
        let dead = dead.clone();
        tokio::spawn(async move {
            {
                let mut slot = server.service.write().await;
                if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, &dead)) {
                    *slot = None;
                }
            }
            if server
                .reconnecting
                .swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                return;
            }
            let mut wait = FIRST_RETRY;
            loop {
                match start(&server.config, &server.changed).await {
                    Ok(service) => {
                        tracing::info!(server = %server.name, "MCP server reconnected");
                        *server.service.write().await = Some(Arc::new(service));
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(server = %server.name, error = %e, ?wait, "MCP server still down");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(LAST_RETRY);
                    }
                }
            }
            server
                .reconnecting
                .store(false, std::sync::atomic::Ordering::SeqCst);
            server.reconnected.notify_waiters();
        });
    }
}

/// A server's name and its tools.
type ServerTools = (String, Vec<Arc<dyn Tool>>);

/// The connected servers' tools, kept current: a server that says its tools changed is
/// listed again, and [`McpTools::version`] moves on.
#[derive(Default)]
pub struct McpTools {
    /// Per server, in configuration order.
    tools: parking_lot::RwLock<Vec<ServerTools>>,
    version: std::sync::atomic::AtomicU64,
}

impl McpTools {
    /// Every server's tools as they are now.
    pub fn current(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .read()
            .iter()
            .flat_map(|(_, tools)| tools.iter().cloned())
            .collect()
    }

    /// Changes whenever a server's tools do.
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn replace(&self, server: &str, tools: Vec<Arc<dyn Tool>>) {
        let mut all = self.tools.write();
        match all.iter_mut().find(|(name, _)| name == server) {
            Some(slot) => slot.1 = tools,
            None => all.push((server.to_owned(), tools)),
        }
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Connect to every server `allowed` names, and list their tools. A server that cannot be
/// reached is logged and left out; the others still work.
pub async fn connect(configs: &[McpServerConfig], allowed: &[String]) -> Arc<McpTools> {
    let hub = Arc::new(McpTools::default());
    for config in configs {
        if !allowed.contains(&config.name) {
            tracing::info!(server = %config.name, "MCP server not in policy.allowed_mcp_servers: left out");
            continue;
        }
        match open(config).await {
            Ok(server) => match list(&server).await {
                Ok(tools) => {
                    hub.replace(&server.name, tools);
                    refresh_on_change(&hub, server);
                }
                Err(e) => {
                    tracing::warn!(server = %config.name, error = %e, "cannot list MCP tools")
                }
            },
            Err(e) => tracing::warn!(server = %config.name, error = %e, "MCP server unavailable"),
        }
    }
    hub
}

/// List `server`'s tools again each time it says they changed (while the hub lives).
fn refresh_on_change(hub: &Arc<McpTools>, server: Arc<Server>) {
    let hub = Arc::downgrade(hub);
    tokio::spawn(async move {
        loop {
            server.changed.notified().await;
            let Some(hub) = hub.upgrade() else { break };
            match list(&server).await {
                Ok(tools) => {
                    tracing::info!(server = %server.name, tools = tools.len(), "MCP tools changed");
                    hub.replace(&server.name, tools);
                }
                Err(e) => {
                    tracing::warn!(server = %server.name, error = %e, "cannot list MCP tools")
                }
            }
        }
    });
}

/// Start (or reach) the server and complete the MCP handshake.
async fn start(
    config: &McpServerConfig,
    changed: &Arc<tokio::sync::Notify>,
) -> Result<Service, String> {
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
            .serve(StreamableHttpClientTransport::from_uri(url.as_str()))
            .await
            .map_err(|e| e.to_string())?,
        _ => return Err("give exactly one of `command` and `url`".to_owned()),
    })
}

/// Start a server.
async fn open(config: &McpServerConfig) -> Result<Arc<Server>, String> {
    let changed = Arc::new(tokio::sync::Notify::new());
    let service = start(config, &changed).await?;
    tracing::info!(server = %config.name, "MCP server connected");
    Ok(Arc::new(Server {
        name: config.name.clone(),
        category: config.category.unwrap_or(ToolCategory::External),
        timeout: Duration::from_millis(config.timeout_ms),
        config: config.clone(),
        changed,
        service: tokio::sync::RwLock::new(Some(Arc::new(service))),
        reconnecting: std::sync::atomic::AtomicBool::new(false),
        reconnected: tokio::sync::Notify::new(),
    }))
}

/// The server's tools, as Weft tools.
async fn list(server: &Arc<Server>) -> Result<Vec<Arc<dyn Tool>>, String> {
    let service = server.current().await?;
    let listed = service.list_all_tools().await.map_err(|e| e.to_string())?;
    Ok(listed
        .into_iter()
        .map(|tool| {
            Arc::new(McpTool {
                name: format!("mcp__{}__{}", server.name, tool.name),
                remote_name: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                schema: Value::Object((*tool.input_schema).clone()),
                server: server.clone(),
            }) as Arc<dyn Tool>
        })
        .collect())
}

struct McpTool {
    /// `mcp__<server>__<tool>`.
    name: String,
    /// The tool's name on its server.
    remote_name: String,
    description: String,
    schema: Value,
    server: Arc<Server>,
}

impl McpTool {
    async fn run(&self, args: Map<String, Value>, ctx: &ToolContext) -> Result<String, String> {
        let service = self.server.current().await?;
        match self.call(&service, args, ctx).await {
            Err(Failure::Connection(e)) => {
                self.server.reconnect(&service);
                Err(format!(
                    "the connection to the server was lost ({e}); it is being restarted"
                ))
            }
            Err(Failure::Call(e)) => Err(e),
            Ok(text) => Ok(text),
        }
    }

    async fn call(
        &self,
        service: &Service,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<String, Failure> {
        let peer = service.peer();
        let request = ClientRequest::CallToolRequest(Request::new(
            CallToolRequestParams::new(self.remote_name.clone()).with_arguments(args),
        ));
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(self.server.timeout);
        let handle = peer
            .send_cancellable_request(request, options)
            .await
            .map_err(Failure::from)?;
        let (id, token) = (handle.id.clone(), handle.progress_token.clone());
        let mut progress = service.service().progress.subscribe(token).await;
        let response = handle.await_response();
        tokio::pin!(response);
        // Whether the last progress seen said there is more to come.
        let mut unfinished = false;
        loop {
            tokio::select! {
                answer = &mut response => {
                    // Progress and the answer travel apart: let a report sent just before the
                    // answer still reach the user.
                    let grace = tokio::time::Instant::now() + PROGRESS_GRACE;
                    while unfinished {
                        match tokio::time::timeout_at(grace, progress.next()).await {
                            Ok(Some(update)) => {
                                unfinished = update.total.is_some_and(|t| update.progress < t);
                                ctx.progress(update.progress, update.total, update.message.clone());
                            }
                            _ => break,
                        }
                    }
                    return match answer.map_err(Failure::from)? {
                        ServerResult::CallToolResult(result) => {
                            let text = text_of(&result.content, result.structured_content.as_ref());
                            if result.is_error == Some(true) { Err(Failure::Call(text)) } else { Ok(text) }
                        }
                        other => Err(Failure::Call(format!("unexpected answer: {other:?}"))),
                    };
                }
                Some(update) = progress.next() => {
                    unfinished = update.total.is_some_and(|t| update.progress < t);
                    ctx.progress(update.progress, update.total, update.message.clone());
                }
                () = ctx.cancel.cancelled() => {
                    let notice = ClientNotification::CancelledNotification(Notification::new(
                        CancelledNotificationParam::new(Some(id), Some("the turn stopped".to_owned())),
                    ));
                    let _ = peer.send_notification(notice).await;
                    return Err(Failure::Call("cancelled".to_owned()));
                }
            }
        }
    }
}

/// Why a call gave no result: the call itself, or the connection under it.
enum Failure {
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

/// The text of a result: its text blocks, else its structured content, else a summary.
fn text_of(content: &[ContentBlock], structured: Option<&Value>) -> String {
    let texts: Vec<&str> = content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    match structured {
        Some(value) => value.to_string(),
        None => format!("({} non-text content blocks)", content.len()),
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn policy_class(&self) -> PolicyClass {
        PolicyClass::Network
    }

    fn category(&self) -> ToolCategory {
        self.server.category
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            _ => return Err(ToolError::model("arguments must be an object")),
        };
        self.run(args, ctx)
            .await
            .map_err(|e| ToolError::model(format!("{} (MCP server `{}`)", e, self.server.name)))
    }
}
