//! `AppState`: everything the handlers share, built once at start-up.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft_core::{compose_toolbelt, ModeRegistry, RateCard, ToolPolicy, Toolbelt};
use weft_protocol::{AgentConfig, ChatContext, PolicyClass};
use weft_store::Store;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::providers::Providers;
use crate::threads::{ConnId, ThreadHub};

pub struct AppState {
    pub config: Config,
    pub store: Store,
    pub providers: Providers,
    pub modes: ModeRegistry,
    /// The composed toolbelts, one per chat context, built (and their schemas compiled) once.
    thread_toolbelt: Toolbelt,
    editor_toolbelt: Toolbelt,
    pub agent: Arc<AgentConfig>,
    pub rate_card: Arc<RateCard>,
    pub hub: ThreadHub,
    pub metrics: Metrics,
    /// Every running turn, so shutdown can wait for them.
    pub turns: TaskTracker,
    /// Cancelled when the server starts shutting down.
    pub shutdown: CancellationToken,
    /// The canonical workspace root (created at start-up).
    pub workspace_root: Option<Arc<Path>>,
    /// No API keys and a loopback bind: connections are the local user.
    pub local_user_allowed: bool,
    next_conn: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Store(#[from] weft_store::StoreError),
    #[error(transparent)]
    Providers(#[from] crate::providers::ProviderSetupError),
    #[error("cannot prepare the workspace root {path}: {source}")]
    Workspace {
        path: String,
        source: std::io::Error,
    },
}

/// The user when no keys are configured on a loopback bind.
pub const LOCAL_USER: &str = "local";

impl AppState {
    /// Build the state: sync configured API keys into the store, prepare the workspace.
    pub async fn new(
        config: Config,
        store: Store,
        providers: Providers,
        bind: SocketAddr,
    ) -> Result<Arc<AppState>, StartupError> {
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
        let local_user_allowed = config.auth.api_keys.is_empty() && bind.ip().is_loopback();
        if local_user_allowed {
            store.ensure_user(LOCAL_USER).await?;
        } else if config.auth.api_keys.is_empty() {
            tracing::warn!(
                %bind,
                "no API keys are configured and the bind is not loopback: every connection will be refused \
                 (set [auth] api_keys or WEFT_API_KEYS)"
            );
        }

        let root = &config.policy.workspace_root;
        let workspace = std::fs::create_dir_all(root)
            .and_then(|()| root.canonicalize())
            .map_err(|source| StartupError::Workspace {
                path: root.display().to_string(),
                source,
            })?;

        let workspace: Arc<Path> = Arc::from(workspace.as_path());
        let tools = weft_tools::builtin_tools();
        let toolbelt = |context: &ChatContext| {
            let mut policy = ToolPolicy::for_context(context, Some(workspace.to_path_buf()));
            policy.allow_private_network = config.policy.allow_private_network;
            if config.policy.allow_secrets {
                policy.classes.insert(PolicyClass::Secrets);
            }
            compose_toolbelt(&tools, &policy, context)
        };
        let thread_toolbelt = toolbelt(&ChatContext::Thread);
        let editor_toolbelt = toolbelt(&ChatContext::Editor { workflow_id: None });
        let mut rate_card = RateCard::with_common_models();
        rate_card.merge(&config.pricing);
        Ok(Arc::new(AppState {
            agent: Arc::new(config.agent.clone()),
            rate_card: Arc::new(rate_card),
            store,
            providers,
            modes: ModeRegistry::new(),
            thread_toolbelt,
            editor_toolbelt,
            hub: ThreadHub::default(),
            metrics: Metrics::default(),
            turns: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            workspace_root: Some(workspace),
            local_user_allowed,
            next_conn: AtomicU64::new(1),
            config,
        }))
    }

    /// The session toolbelt for a chat context (registered ∩ policy ∩ context).
    pub fn toolbelt_for(&self, context: &ChatContext) -> Toolbelt {
        match context {
            ChatContext::Thread => self.thread_toolbelt.clone(),
            ChatContext::Editor { .. } => self.editor_toolbelt.clone(),
        }
    }

    pub fn next_conn_id(&self) -> ConnId {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }
}
