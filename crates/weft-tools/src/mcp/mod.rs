//! MCP servers as tools (`rmcp`): each configured server the policy allows is started (stdio:
//! a child process) or reached (streamable HTTP) at start-up, its tools listed and offered as
//! `mcp__<server>__<tool>` with the server's category (default `external`: they ask in
//! Default mode), its resources and prompts through `mcp__read_resource` and
//! `mcp__get_prompt` (read). A call has a timeout, is cancelled on the server when the turn
//! stops, and its progress notifications become `mcp_progress` frames. A server whose
//! connection drops (a child process that died) is reconnected with backoff; calls meanwhile
//! wait for it. A server that says its lists changed is listed again.

mod catalog;
mod server;
mod tool;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use backon::Retryable;
use serde::Deserialize;
use weft_core::Tool;
use weft_protocol::ToolCategory;

pub use catalog::{GET_PROMPT, READ_RESOURCE};
use server::{Catalog, Server};

/// `[mcp]`: the servers whose tools the agent may use (those the policy's
/// `allowed_mcp_servers` names).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct McpConfig {
    pub servers: Vec<McpServerConfig>,
}

/// `[[mcp.servers]]`: a child process (`command`, `args`, `env`) or a URL.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
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
    /// With `url`: headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// With `url`: the environment variable holding a bearer token (`Authorization: Bearer …`),
    /// so the secret stays out of the file.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
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

/// What one server offers now.
struct Offer {
    /// Its place in the configuration (the toolbelt keeps that order).
    rank: usize,
    server: Arc<Server>,
    tools: Vec<Arc<dyn Tool>>,
    catalog: Catalog,
}

/// Per server, in configuration order, and the catalog tools made from them all.
#[derive(Default)]
struct Offers {
    servers: Vec<Offer>,
    catalog_tools: Vec<Arc<dyn Tool>>,
}

/// The connected servers' tools, kept current: a server that says its tools, resources or
/// prompts changed is listed again, and [`McpTools::version`] moves on.
#[derive(Default)]
pub struct McpTools {
    offers: parking_lot::RwLock<Offers>,
    /// The allowed servers' names, in configuration order (connected or not).
    expected: parking_lot::RwLock<Vec<String>>,
    version: AtomicU64,
}

impl McpTools {
    /// Every server's tools as they are now, then the resource and prompt tools.
    pub fn current(&self) -> Vec<Arc<dyn Tool>> {
        let offers = self.offers.read();
        offers
            .servers
            .iter()
            .flat_map(|offer| offer.tools.iter().cloned())
            .chain(offers.catalog_tools.iter().cloned())
            .collect()
    }

    /// Each allowed server, in configuration order: its name, whether it is connected now, and
    /// how many tools it offers (for `GET /healthz`).
    pub fn status(&self) -> Vec<(String, bool, usize)> {
        let offers = self.offers.read();
        self.expected
            .read()
            .iter()
            .map(
                |name| match offers.servers.iter().find(|o| &o.server.name == name) {
                    Some(offer) => (name.clone(), offer.server.is_up(), offer.tools.len()),
                    None => (name.clone(), false, 0),
                },
            )
            .collect()
    }

    /// Whether `server` is one of the allowed servers (connected or not).
    pub fn is_allowed(&self, server: &str) -> bool {
        self.expected.read().iter().any(|name| name == server)
    }

    /// Changes whenever a server's tools do.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    fn replace(&self, offer: Offer) {
        let mut offers = self.offers.write();
        let Offers {
            servers: all,
            catalog_tools,
        } = &mut *offers;
        match all.iter_mut().find(|o| o.server.name == offer.server.name) {
            Some(slot) => *slot = offer,
            None => {
                all.push(offer);
                all.sort_by_key(|o| o.rank);
            }
        }
        let catalogs: Vec<(Arc<Server>, Catalog)> = all
            .iter()
            .map(|o| (o.server.clone(), o.catalog.clone()))
            .collect();
        *catalog_tools = catalog::tools(&catalogs);
        self.version.fetch_add(1, Ordering::SeqCst);
    }
}

/// Connect to every server `allowed` names, all at once, and list what they offer. A server
/// that cannot be reached within its `timeout_ms` is logged and tried again in the background
/// with backoff; its tools join when it answers. Images and audio their tools return are
/// kept in `assets`.
pub async fn connect(
    configs: &[McpServerConfig],
    allowed: &[String],
    assets: Option<Arc<dyn crate::web::AssetSink>>,
) -> Arc<McpTools> {
    let hub = Arc::new(McpTools::default());
    *hub.expected.write() = configs
        .iter()
        .filter(|c| allowed.contains(&c.name))
        .map(|c| c.name.clone())
        .collect();
    let attempts = configs.iter().enumerate().filter_map(|(rank, config)| {
        if !allowed.contains(&config.name) {
            tracing::info!(server = %config.name, "MCP server not in policy.allowed_mcp_servers: left out");
            return None;
        }
        Some(join(hub.clone(), rank, config.clone(), assets.clone()))
    });
    futures::future::join_all(attempts).await;
    hub
}

/// Bring one server in, now or (when it is not there yet) in the background.
async fn join(
    hub: Arc<McpTools>,
    rank: usize,
    config: McpServerConfig,
    assets: Option<Arc<dyn crate::web::AssetSink>>,
) {
    let error = match attempt(rank, &config, &assets).await {
        Ok(offer) => return welcome(&hub, offer),
        Err(e) => e,
    };
    tracing::warn!(server = %config.name, error = %error, "MCP server unavailable: trying again in the background");
    let hub = Arc::downgrade(&hub);
    tokio::spawn(async move {
        tokio::time::sleep(server::FIRST_RETRY).await;
        let joined = (|| attempt(rank, &config, &assets))
            .retry(server::backoff())
            .sleep(tokio::time::sleep)
            // Give up once nobody holds the hub (the server shut down).
            .when(|_| hub.strong_count() > 0)
            .notify(|e: &String, wait| {
                tracing::debug!(server = %config.name, error = %e, ?wait, "MCP server still unavailable");
            })
            .await;
        if let (Ok(offer), Some(hub)) = (joined, hub.upgrade()) {
            tracing::info!(server = %config.name, "MCP server connected after all");
            welcome(&hub, offer);
        }
    });
}

/// Start the server and list what it offers.
async fn attempt(
    rank: usize,
    config: &McpServerConfig,
    assets: &Option<Arc<dyn crate::web::AssetSink>>,
) -> Result<Offer, String> {
    let server = Server::open(config, assets.clone()).await?;
    offer(rank, &server).await
}

/// Add a connected server's offer and follow its changes.
fn welcome(hub: &Arc<McpTools>, offer: Offer) {
    let (rank, server) = (offer.rank, offer.server.clone());
    hub.replace(offer);
    refresh_on_change(hub, rank, server);
}

/// What `server` offers: its tools, resources and prompts.
async fn offer(rank: usize, server: &Arc<Server>) -> Result<Offer, String> {
    Ok(Offer {
        rank,
        server: server.clone(),
        tools: tool::list(server).await?,
        catalog: server.catalog().await?,
    })
}

/// List `server` again each time it says what it offers changed (while the hub lives).
fn refresh_on_change(hub: &Arc<McpTools>, rank: usize, server: Arc<Server>) {
    let hub = Arc::downgrade(hub);
    tokio::spawn(async move {
        loop {
            server.changed.notified().await;
            let Some(hub) = hub.upgrade() else { break };
            match offer(rank, &server).await {
                Ok(offer) => {
                    tracing::info!(server = %server.name, tools = offer.tools.len(), "MCP offer changed");
                    hub.replace(offer);
                }
                Err(e) => {
                    tracing::warn!(server = %server.name, error = %e, "cannot list what the MCP server offers")
                }
            }
        }
    });
}
