//! `Runtime`: everything turns share, built once at start-up — the store, the providers and
//! modes, the composed toolbelts, the services (assets, knowledge, media, workflows, MCP),
//! the live threads, per-user limits, metrics — and the shutdown token.

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;
use weft_cluster::leases::Leases;
use weft_cluster::leases::Recovery;
use weft_cluster::recovery::{recover_orphaned_turns, spawn_heartbeat, Resumer, Sweep};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft_core::{
    compose_toolbelt, ContextWindows, ModeRegistry, RateCard, Tool, ToolPolicy, Toolbelt,
};
use weft_protocol::{AgentConfig, ChatContext, ErrorCode};
use weft_store::Store;
use weft_tools::knowledge::KnowledgeBase;
use weft_tools::web::AssetSink;
use weft_workflow::{NodeRegistry, Workflows};

use crate::limits::UserLimits;
use crate::metrics::Metrics;
use crate::starts::Starts;
use crate::threads::ThreadHub;
use weft_cluster::bus::{Bus, CommandHandler};
use weft_config::Config;
use weft_frames::frame::{SubscriberId, SubscriberIds};
use weft_frames::Refusal;
use weft_providers::{MediaGenerators, Providers};
use weft_services::assets::AssetStore;
use weft_services::embeddings::Embedder;
use weft_services::knowledge::Knowledge;
use weft_services::read_artifact::ReadArtifact;
use weft_services::workflows::StoreLibrary;
use weft_tools::client::PendingClientCalls;

pub struct Runtime {
    pub config: Config,
    pub store: Store,
    pub providers: Providers,
    pub modes: ModeRegistry,
    /// The composed toolbelts, one per chat context, built (and their schemas compiled) once.
    thread_toolbelt: Toolbelt,
    editor_toolbelt: Toolbelt,
    pub agent: Arc<AgentConfig>,
    pub rate_card: Arc<RateCard>,
    /// Each model's context window (the model catalogue beside the rate card).
    pub context_windows: ContextWindows,
    /// Offloaded tool results and other assets.
    pub assets: Arc<AssetStore>,
    /// Every node type workflows can use; none when workflows are disabled.
    pub node_registry: Option<Arc<NodeRegistry>>,
    pub hub: ThreadHub,
    /// Image and speech generators (the media tools and the media route).
    pub media: Arc<MediaGenerators>,
    /// Collections and long-term memory.
    pub knowledge: Arc<Knowledge>,
    /// MCP servers' tools, which may change while the server runs.
    mcp: McpState,
    /// Client-run tool calls waiting for the client's answer.
    pub client_calls: Arc<PendingClientCalls>,
    pub limits: UserLimits,
    pub metrics: Arc<Metrics>,
    /// This replica's turn leases.
    pub leases: Arc<Leases>,
    /// The bus to the other replicas (none: a single process).
    pub bus: Option<Arc<Bus>>,
    /// Every running turn, so shutdown can wait for them.
    pub turns: TaskTracker,
    /// Turn starts in flight, which running turns let go first between rounds.
    pub starts: Arc<Starts>,
    /// Cancelled when the server starts shutting down.
    pub shutdown: CancellationToken,
    /// The canonical workspace root (created at start-up).
    pub workspace_root: Option<Arc<Path>>,
    subscribers: SubscriberIds,
}

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Store(#[from] weft_store::StoreError),
    #[error("config is not valid: {0}")]
    Config(String),
    #[error("cannot prepare the workspace root {path}: {source}")]
    Workspace {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Bus(String),
    #[error("cannot prepare the asset directory {path}: {source}")]
    Assets {
        path: String,
        source: std::io::Error,
    },
}

/// MCP tools and what composing them again needs.
struct McpState {
    tools: Arc<weft_tools::mcp::McpTools>,
    /// The thread and editor policies.
    policies: [ToolPolicy; 2],
    /// The toolbelts with the MCP tools of `.0`'s version: thread, editor.
    current: parking_lot::Mutex<(u64, Toolbelt, Toolbelt)>,
}

/// How every MCP tool's name starts.
pub(crate) const MCP_PREFIX: &str = "mcp__";

/// The user when no keys are configured on a loopback bind.
pub const LOCAL_USER: &str = "local";

/// Every tool the server has, before policy, and what was built on the way.
struct Tools {
    all: Vec<Arc<dyn Tool>>,
    mcp: Arc<weft_tools::mcp::McpTools>,
    node_registry: Option<Arc<NodeRegistry>>,
}

impl Runtime {
    /// Build the runtime: close what a stopped process left running, sync the configured API
    /// keys into the store (and the local user when `local_user` is allowed), prepare the
    /// workspace, the assets and every tool.
    pub async fn new(
        config: Config,
        store: Store,
        providers: Providers,
        local_user: bool,
    ) -> Result<Arc<Runtime>, StartupError> {
        let metrics = Arc::new(Metrics::default());
        store.observe_writes(metrics.clone());
        let fenced = store.backend() == weft_store::Backend::Postgres;
        let leases = Leases::new(&config.cluster, metrics.cluster.clone(), fenced);
        let bus = match config.cluster.nats_url.as_str() {
            "" => None,
            url => Some(
                Bus::connect(url, leases.replica_id(), metrics.cluster.clone())
                    .await
                    .map_err(StartupError::Bus)?,
            ),
        };
        sync_keys(&config, &store, local_user).await?;
        let workspace = workspace_root(&config)?;
        let assets = Arc::new(asset_store(&config, &store)?);
        let media =
            Arc::new(MediaGenerators::from_config(&config.media).map_err(StartupError::Config)?);
        let knowledge = Arc::new(knowledge(&config, &store)?);
        let tools = tools(&config, &store, &assets, &media, &knowledge).await?;
        let policies = [
            ToolPolicy::for_context(&ChatContext::Thread, Some(workspace.to_path_buf())),
            ToolPolicy::for_context(&editor_context(), Some(workspace.to_path_buf())),
        ];
        let thread_toolbelt = compose_toolbelt(&tools.all, &policies[0], &ChatContext::Thread);
        let editor_toolbelt = compose_toolbelt(&tools.all, &policies[1], &editor_context());
        let mut rate_card = RateCard::with_common_models();
        rate_card.merge(&config.pricing);
        let mut context_windows = ContextWindows::with_common_models();
        context_windows.merge(&config.context_windows);
        let mut modes = ModeRegistry::new();
        modes.register(Arc::new(weft_codemode::CodeMode::new(config.code)));
        let starts = Arc::new(Starts::new(
            Duration::from_millis(config.server.start_priority_ms),
            metrics.start_waits_seconds.clone(),
        ));
        let runtime = Arc::new(Runtime {
            agent: Arc::new(config.agent.clone()),
            rate_card: Arc::new(rate_card),
            context_windows,
            assets,
            node_registry: tools.node_registry,
            store,
            providers,
            modes,
            hub: ThreadHub::new(config.server.replay_max_bytes),
            client_calls: Arc::default(),
            mcp: McpState {
                current: parking_lot::Mutex::new((
                    tools.mcp.version(),
                    thread_toolbelt.clone(),
                    editor_toolbelt.clone(),
                )),
                tools: tools.mcp,
                policies,
            },
            thread_toolbelt,
            editor_toolbelt,
            knowledge,
            media,
            limits: UserLimits::new(&config.limits),
            metrics,
            leases,
            bus,
            turns: TaskTracker::new(),
            starts,
            shutdown: CancellationToken::new(),
            workspace_root: Some(workspace),
            subscribers: SubscriberIds::default(),
            config,
        });
        if let Some(bus) = &runtime.bus {
            let weak: Weak<Runtime> = Arc::downgrade(&runtime);
            let handler: Weak<dyn CommandHandler> = weak;
            bus.serve(handler).await.map_err(StartupError::Bus)?;
        }
        // A misspelt `hitl_tools` name would silently turn an approval off.
        runtime
            .agent
            .validate_tools(|name| runtime.tool_availability(name))
            .map_err(|e| StartupError::Config(format!("[agent] {e}")))?;
        runtime.warn_of_absent_mcp_tools(&runtime.agent);
        runtime.recover().await?;
        Ok(runtime)
    }

    /// Take up (or close) the turns this process's former life, or a dead replica, left
    /// running, then keep renewing this replica's leases and looking for such turns.
    async fn recover(self: &Arc<Self>) -> Result<(), StartupError> {
        let resumes = self.config.cluster.recovery == Recovery::Resume;
        let resumer: Option<Arc<dyn Resumer>> = resumes.then(|| self.clone() as Arc<dyn Resumer>);
        let recovered =
            recover_orphaned_turns(&self.store, &self.leases, Sweep::Startup, resumer).await?;
        if recovered.resumed + recovered.closed > 0 {
            tracing::warn!(
                resumed = recovered.resumed,
                closed = recovered.closed,
                "took up turns left unfinished"
            );
        }
        let weak: Weak<Runtime> = Arc::downgrade(self);
        let resumer: Option<Weak<dyn Resumer>> = resumes.then_some(weak as Weak<dyn Resumer>);
        spawn_heartbeat(&self.leases, self.store.clone(), resumer);
        Ok(())
    }

    /// One of the allowed MCP servers (connected or not).
    pub(crate) fn mcp_allowed(&self, server: &str) -> bool {
        self.mcp.tools.is_allowed(server)
    }

    /// The allowed MCP servers: name, connected now, tools offered.
    pub fn mcp_status(&self) -> Vec<(String, bool, usize)> {
        self.mcp.tools.status()
    }

    /// The session toolbelt for a chat context (registered ∩ policy ∩ context). The editor
    /// context needs a node registry; without one it gets the thread's tools.
    pub fn toolbelt_for(&self, context: &ChatContext) -> Toolbelt {
        let editor = self.editor_available(context);
        let version = self.mcp.tools.version();
        let mut current = self.mcp.current.lock();
        if current.0 != version {
            // A server's tools changed: the MCP part of both toolbelts is composed again.
            let tools = self.mcp.tools.current();
            let thread_mcp = compose_toolbelt(&tools, &self.mcp.policies[0], &ChatContext::Thread);
            let editor_mcp = compose_toolbelt(&tools, &self.mcp.policies[1], &editor_context());
            *current = (
                version,
                self.thread_toolbelt
                    .replacing_prefix(MCP_PREFIX, &thread_mcp),
                self.editor_toolbelt
                    .replacing_prefix(MCP_PREFIX, &editor_mcp),
            );
        }
        if editor {
            current.2.clone()
        } else {
            current.1.clone()
        }
    }

    /// The node registry, or why workflows cannot run here.
    pub fn registry(&self) -> Result<&Arc<NodeRegistry>, Refusal> {
        self.node_registry.as_ref().ok_or_else(|| {
            Refusal::new(
                ErrorCode::UnsupportedRoute,
                "workflows are disabled on this server ([workflow] enabled = false)",
            )
        })
    }

    /// Whether `context` is an editor this server can serve (an editor context needs a node
    /// registry). An editor chat without one is a misconfiguration, logged.
    pub fn editor_available(&self, context: &ChatContext) -> bool {
        if !matches!(context, ChatContext::Editor { .. }) {
            return false;
        }
        if self.node_registry.is_none() {
            tracing::warn!(
                "an editor chat on a server without a node registry ([workflow] enabled = false): \
                 build_workflow and the client's ui_* tools are left out"
            );
            return false;
        }
        true
    }

    /// The workspace a user's tools work in: their own directory under the root, or the
    /// root itself when the workspace is shared. A name that is not a user name (`.`, `..`)
    /// has none: it would name the root or what lies above it.
    pub fn workspace_of(&self, user: &str) -> Option<Arc<Path>> {
        let root = self.workspace_root.as_ref()?;
        if self.config.policy.shared_workspace {
            return Some(root.clone());
        }
        if !weft_protocol::is_user_name(user) {
            return None;
        }
        Some(Arc::from(root.join(user).as_path()))
    }

    /// A fresh subscriber id (a socket, a prompt-API request).
    pub fn next_subscriber_id(&self) -> SubscriberId {
        self.subscribers.next()
    }
}

pub(crate) fn editor_context() -> ChatContext {
    ChatContext::Editor { workflow_id: None }
}

/// The configured API keys are the only live ones; the local user exists when allowed.
async fn sync_keys(config: &Config, store: &Store, local_user: bool) -> Result<(), StartupError> {
    for entry in &config.auth.api_keys {
        store.put_api_key(&entry.key, &entry.user).await?;
    }
    let keys: Vec<&str> = config
        .auth
        .api_keys
        .iter()
        .map(|k| k.key.as_str())
        .collect();
    store.revoke_other_keys(&keys).await?;
    if local_user {
        store.ensure_user(LOCAL_USER).await?;
    }
    Ok(())
}

fn workspace_root(config: &Config) -> Result<Arc<Path>, StartupError> {
    let root = &config.policy.workspace_root;
    let workspace = std::fs::create_dir_all(root)
        .and_then(|()| root.canonicalize())
        .map_err(|source| StartupError::Workspace {
            path: root.display().to_string(),
            source,
        })?;
    Ok(Arc::from(workspace.as_path()))
}

fn asset_store(config: &Config, store: &Store) -> Result<AssetStore, StartupError> {
    match &config.assets.s3 {
        Some(s3) => AssetStore::s3(s3, store.clone(), config.assets.max_bytes)
            .map_err(|e| StartupError::Config(format!("[assets.s3]: {e}"))),
        None => AssetStore::local(&config.assets.dir, store.clone(), config.assets.max_bytes)
            .map_err(|source| StartupError::Assets {
                path: config.assets.dir.display().to_string(),
                source,
            }),
    }
}

fn knowledge(config: &Config, store: &Store) -> Result<Knowledge, StartupError> {
    let web = config.web.settings(config.policy.allow_private_network);
    Ok(Knowledge {
        store: store.clone(),
        embedder: Embedder::from_config(&config.embeddings).map_err(StartupError::Config)?,
        fetcher: weft_tools::web::FetchUrl::new(&web)
            .map_err(|e| StartupError::Config(e.to_string()))?,
    })
}

/// Every tool: the built-ins, `interpreter_run`, the web tools, MCP servers' tools, media, the browser,
/// collections, `read_artifact`, and (with workflows on) the workflow tools over a registry
/// in which every other non-agentic tool is a node.
async fn tools(
    config: &Config,
    store: &Store,
    assets: &Arc<AssetStore>,
    media: &MediaGenerators,
    knowledge: &Arc<Knowledge>,
) -> Result<Tools, StartupError> {
    let mut all = weft_tools::builtin_tools();
    all.push(Arc::new(weft_codemode::InterpreterRun::new(config.code)));
    let web = config.web.settings(config.policy.allow_private_network);
    all.extend(weft_tools::web::web_tools(&web).map_err(StartupError::Config)?);
    let sink: Arc<dyn AssetSink> = assets.clone();
    let mcp = weft_tools::mcp::connect(
        &config.mcp.servers,
        &config.policy.allowed_mcp_servers,
        Some(sink.clone()),
    )
    .await;
    all.extend(mcp.current());
    all.extend(weft_tools::media::media_tools(media, &sink));
    match weft_tools::web::BrowserTool::new(
        config.web.browser_executable.clone(),
        web.net.clone(),
        Some(sink),
    ) {
        Some(browser) => all.push(Arc::new(browser)),
        None => tracing::info!(
            path = %config.web.browser_executable.display(),
            "no Chromium there: the browser tool is left out ([web] browser_executable)"
        ),
    }
    let knowledge_base: Arc<dyn KnowledgeBase> = knowledge.clone();
    all.extend(weft_tools::knowledge::collection_tools(&knowledge_base));
    all.push(Arc::new(ReadArtifact {
        assets: assets.clone(),
    }));
    let node_registry = if config.workflow.enabled {
        let registry = Arc::new(NodeRegistry::with_tools(&Toolbelt::new(all.clone())));
        let workflows = Workflows {
            library: Arc::new(StoreLibrary {
                store: store.clone(),
            }),
            registry: registry.clone(),
            limits: config.workflow.limits(),
        };
        all.extend(workflows.tools());
        Some(registry)
    } else {
        tracing::warn!(
            "[workflow] enabled = false: no node registry, so no workflow tools, no \
             workflow route and no editor context (build_workflow, ui_* tools)"
        );
        None
    };
    Ok(Tools {
        all,
        mcp,
        node_registry,
    })
}
