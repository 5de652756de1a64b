//! The server's configuration, one TOML file: `config/default.toml` (or `--config FILE`),
//! every crate's table in it, then environment overrides exactly as PROTOCOL.md lists them,
//! strict keys and checks at load.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use weft_core::{ContextWindows, RateCard};
use weft_protocol::AgentConfig;

#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub provider: weft_providers::ProviderConfig,
    pub providers: weft_providers::ProvidersConfig,
    pub policy: PolicyConfig,
    pub auth: AuthConfig,
    pub limits: LimitsConfig,
    pub agent: AgentConfig,
    /// Extra or overriding model prices (USD per million tokens).
    pub pricing: RateCard,
    /// Extra or overriding model context windows (tokens), beside the prices.
    pub context_windows: ContextWindows,
    pub assets: weft_services::assets::AssetsConfig,
    /// Code mode's sandbox limits.
    pub code: weft_codemode::Limits,
    pub workflow: weft_workflow::WorkflowConfig,
    /// Web search and page fetching.
    pub web: weft_tools::web::WebConfig,
    /// An embeddings endpoint for hybrid collection search (absent: full text only).
    pub embeddings: weft_services::embeddings::EmbeddingsConfig,
    /// Image and speech generation.
    pub media: weft_providers::MediaConfig,
    /// MCP servers whose tools the agent may use (those `policy.allowed_mcp_servers` names).
    pub mcp: weft_tools::mcp::McpConfig,
    /// Replicas sharing one database: turn leases and the heartbeat.
    pub cluster: weft_cluster::leases::ClusterConfig,
    /// OpenTelemetry traces.
    pub telemetry: TelemetryConfig,
}

/// OpenTelemetry GenAI traces (a span per turn, model call and tool call), exported over
/// OTLP/HTTP; off unless an endpoint is set.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP address (`http://collector:4318`; `/v1/traces` is added);
    /// also `OTEL_EXPORTER_OTLP_ENDPOINT`. Empty: no traces.
    pub otlp_endpoint: String,
    /// Put prompts, answers, tool arguments and results in the spans.
    pub capture_content: bool,
    /// The `service.name` of the spans (also `OTEL_SERVICE_NAME`).
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: String::new(),
            capture_content: false,
            service_name: "weft".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ServerConfig {
    pub bind: String,
    pub max_frame_bytes: usize,
    /// How long a turn keeps running after its socket drops, waiting for `resume_chat`.
    pub detach_grace_ms: u64,
    pub ping_interval_ms: u64,
    /// On SIGTERM, how long running turns may take to finish before they are stopped.
    pub shutdown_timeout_ms: u64,
    /// How often a connection re-checks that its API key is still live.
    pub auth_recheck_ms: u64,
    /// How long a finished turn's frames stay available to `resume_chat`.
    pub replay_retention_ms: u64,
    /// Bytes of frames a turn keeps for `resume_chat` (older ones go; a client resuming from
    /// before them gets the stored snapshot).
    pub replay_max_bytes: usize,
    /// A client whose unsent frames pass this many bytes is disconnected (close 1013).
    pub max_outbound_bytes: usize,
    /// A client whose socket takes no data for this long is disconnected (close 1013).
    pub write_timeout_ms: u64,
    /// Most sockets open at once (websockets included); unset: the process's file limit
    /// minus a reserve for the database and files.
    pub max_connections: Option<usize>,
    /// A request head must arrive within this long of the connection (or of the previous
    /// request on a kept-alive connection).
    pub header_timeout_ms: u64,
    /// Connections one address may hold before any of them authenticates (0: no cap). Behind
    /// a proxy every client has the proxy's address: raise it or set 0 there.
    pub max_unauthenticated_per_address: usize,
    /// Websockets one user may hold open at once (0: no cap).
    pub max_sockets_per_user: usize,
    /// The largest REST request body (a document's text, a graph, an agent); past it 413
    /// `too_large`.
    pub max_request_bytes: usize,
    /// The longest a running turn's next round (and a new turn's first, in a burst of up to
    /// 1,024 starts) waits for the turns that began starting before it (so a burst's first
    /// frames go out sooner); 0: rounds never wait.
    pub start_priority_ms: u64,
    /// The least time between two text chunks of one response (the first goes at once, the
    /// last as soon as the response ends; what streams meanwhile goes out together): fewer
    /// frames for every socket and client; 0: each piece as the model sends it.
    pub chunk_interval_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1:8080".to_owned(),
            max_frame_bytes: 1 << 20,
            detach_grace_ms: 600_000,
            ping_interval_ms: 25_000,
            shutdown_timeout_ms: 30_000,
            auth_recheck_ms: 25_000,
            replay_retention_ms: 300_000,
            replay_max_bytes: 1 << 20,
            max_outbound_bytes: 8 << 20,
            write_timeout_ms: 30_000,
            max_connections: None,
            header_timeout_ms: 10_000,
            max_unauthenticated_per_address: 128,
            max_sockets_per_user: 64,
            max_request_bytes: 16 << 20,
            start_priority_ms: 100,
            chunk_interval_ms: 50,
        }
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct DatabaseConfig {
    pub url: String,
    /// SQLite durability: `normal` (WAL; survives a crashed or killed process, a power loss
    /// may lose the last commits) or `full` (fsync on every commit).
    pub sqlite_synchronous: String,
    /// PostgreSQL: how long one of Weft's transactions may wait for its next statement before
    /// the server ends its session (0: no limit), so a replica frozen mid-write does not hold
    /// up the others waiting on the rows it locked.
    pub stalled_transaction_ms: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: "sqlite://data/weft.db".to_owned(),
            sqlite_synchronous: "normal".to_owned(),
            stalled_transaction_ms: weft_store::StoreSettings::default().stalled_transaction_ms,
        }
    }
}

/// The shortest `[database] stalled_transaction_ms` other than 0.
pub const MIN_STALLED_TRANSACTION_MS: u64 = 1_000;

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct PolicyConfig {
    pub workspace_root: PathBuf,
    pub allow_private_network: bool,
    /// Every user works in `workspace_root` itself instead of `workspace_root/<user>`.
    pub shared_workspace: bool,
    /// The `[[mcp.servers]]` whose tools are offered (an explicit allow-list; none by default).
    pub allowed_mcp_servers: Vec<String>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            workspace_root: PathBuf::from("workspace"),
            allow_private_network: false,
            shared_workspace: false,
            allowed_mcp_servers: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct AuthConfig {
    pub api_keys: Vec<ApiKeyEntry>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct ApiKeyEntry {
    pub key: String,
    pub user: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StrictError {
    #[error(transparent)]
    Parse(toml::de::Error),
    #[error("unknown key `{0}`")]
    Unknown(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config {path} is not valid: {source}")]
    Parse {
        path: String,
        source: toml::de::Error,
    },
    #[error("config {path}: unknown key `{key}`")]
    UnknownKey { path: String, key: String },
    #[error("config is not valid: {0}")]
    Invalid(String),
}

impl Config {
    /// Load `path`, or `config/default.toml` when it exists, else built-in defaults; then
    /// apply the environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let default_path = Path::new("config/default.toml");
        let mut config = match path {
            Some(p) => Self::from_file(p)?,
            None if default_path.exists() => Self::from_file(default_path)?,
            None => Config::default(),
        };
        config.apply_env(|k| std::env::var(k).ok().filter(|v| !v.is_empty()));
        config.validate()?;
        Ok(config)
    }

    /// The providers `[provider]` and `[providers]` describe.
    pub fn build_providers(
        &self,
    ) -> Result<weft_providers::Providers, weft_providers::ProviderSetupError> {
        weft_providers::Providers::from_config(&self.provider, &self.providers)
    }

    /// How the store's connections behave (SQLite durability validated at load).
    pub fn store_settings(&self) -> weft_store::StoreSettings {
        weft_store::StoreSettings {
            sqlite_sync: weft_store::SqliteSync::parse(&self.database.sqlite_synchronous)
                .unwrap_or_default(),
            stalled_transaction_ms: self.database.stalled_transaction_ms,
        }
    }

    /// Read a config file. A key Weft does not know is an error naming it (a typo would
    /// otherwise silently keep a default); `agent.max_tokens`, which used to be the
    /// cumulative token budget, is taken with a warning.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        if toml::from_str::<toml::Value>(&text)
            .ok()
            .and_then(|v| v.get("agent")?.get("max_tokens").cloned())
            .is_some()
        {
            tracing::warn!(
                config = %shown,
                "agent.max_tokens now caps each model response; the cumulative token budget of a turn is agent.max_turn_tokens"
            );
        }
        Self::from_toml_strict(&text).map_err(|e| match e {
            StrictError::Parse(source) => ConfigError::Parse {
                path: shown.clone(),
                source,
            },
            StrictError::Unknown(key) => ConfigError::UnknownKey {
                path: shown.clone(),
                key,
            },
        })
    }

    /// Parse TOML, ignoring unknown keys (for tests and embedding).
    pub fn from_toml(text: &str) -> Result<Config, toml::de::Error> {
        toml::from_str(text)
    }

    /// Parse TOML; the first unknown key is an error.
    pub fn from_toml_strict(text: &str) -> Result<Config, StrictError> {
        let mut unknown = Vec::new();
        let deserializer = toml::Deserializer::new(text);
        let config: Config = serde_ignored::deserialize(deserializer, |path| {
            unknown.push(path.to_string());
        })
        .map_err(StrictError::Parse)?;
        match unknown.into_iter().next() {
            Some(key) => Err(StrictError::Unknown(key)),
            None => Ok(config),
        }
    }

    /// Values that are wrong whatever the rest: user names must be identifiers (they name
    /// workspace directories), durability must be known.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.agent
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if weft_store::SqliteSync::parse(&self.database.sqlite_synchronous).is_none() {
            return Err(ConfigError::Invalid(format!(
                "database.sqlite_synchronous must be \"normal\" or \"full\", got {:?}",
                self.database.sqlite_synchronous
            )));
        }
        let stalled = self.database.stalled_transaction_ms;
        if stalled != 0 && stalled < MIN_STALLED_TRANSACTION_MS {
            return Err(ConfigError::Invalid(format!(
                "database.stalled_transaction_ms must be 0 (no limit) or at least \
                 {MIN_STALLED_TRANSACTION_MS} (a busy writer's transaction must not be taken \
                 for a stalled one), got {stalled}"
            )));
        }
        self.cluster.validate().map_err(ConfigError::Invalid)?;
        if !self.cluster.nats_url.is_empty() && self.database.url.starts_with("sqlite:") {
            return Err(ConfigError::Invalid(
                "cluster.nats_url is set but the database is SQLite: replicas share one \
                 PostgreSQL database (SQLite is one process's file); unset nats_url or use \
                 PostgreSQL"
                    .to_owned(),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for server in &self.mcp.servers {
            if !weft_protocol::is_identifier(&server.name) || server.name.contains("__") {
                return Err(ConfigError::Invalid(format!(
                    "mcp.servers: name {:?} must be 1 to 128 characters of A-Z a-z 0-9 . _ : - without `__`",
                    weft_protocol::clip(&server.name, 64)
                )));
            }
            if !names.insert(server.name.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "mcp.servers: two servers are named {:?}",
                    server.name
                )));
            }
            if server.command.is_some() == server.url.is_some() {
                return Err(ConfigError::Invalid(format!(
                    "mcp.servers {:?}: give exactly one of `command` and `url`",
                    server.name
                )));
            }
        }
        for entry in &self.auth.api_keys {
            if !weft_protocol::is_user_name(&entry.user) {
                return Err(ConfigError::Invalid(format!(
                    "auth.api_keys: user {:?} must be 1 to 128 characters of A-Z a-z 0-9 . _ : - \
                     not starting with `.`",
                    weft_protocol::clip(&entry.user, 64)
                )));
            }
        }
        Ok(())
    }

    /// Environment overrides (PROTOCOL.md); `env` is a lookup so tests can pass their own.
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) {
        if let Some(v) = env("WEFT_BIND") {
            self.server.bind = v;
        }
        if let Some(v) = env("WEFT_DATABASE_URL").or_else(|| env("DATABASE_URL")) {
            self.database.url = v;
        }
        if let Some(v) = env("WEFT_REPLICA_ID") {
            self.cluster.replica_id = v;
        }
        if let Some(v) = env("WEFT_NATS_URL") {
            self.cluster.nats_url = v;
        }
        if let Some(v) = env("OTEL_EXPORTER_OTLP_ENDPOINT") {
            self.telemetry.otlp_endpoint = v;
        }
        if let Some(v) = env("OTEL_SERVICE_NAME") {
            self.telemetry.service_name = v;
        }
        if let Some(v) = env("WEFT_PROVIDER") {
            self.provider.default = Some(v);
        }
        if let Some(v) = env("WEFT_MODEL") {
            self.provider.model = Some(v);
        }
        if let Some(v) = env("WEFT_SCRIPT") {
            self.providers.scripted.script = Some(PathBuf::from(v));
        }
        if let Some(v) = env("WEFT_WORKSPACE") {
            self.policy.workspace_root = PathBuf::from(v);
        }
        if let Some(v) = env("OPENAI_API_KEY") {
            self.providers.openai.api_key = Some(v);
        }
        if let Some(v) = env("OPENAI_BASE_URL") {
            self.providers.openai.base_url = Some(v);
        }
        if let Some(v) = env("ANTHROPIC_API_KEY") {
            self.providers.anthropic.api_key = Some(v);
        }
        if let Some(v) = env("ANTHROPIC_BASE_URL") {
            self.providers.anthropic.base_url = Some(v);
        }
        // Containers: `key:user,key2:user2` replaces the configured keys.
        if let Some(v) = env("WEFT_API_KEYS") {
            self.auth.api_keys = v
                .split(',')
                .filter_map(|pair| pair.trim().split_once(':'))
                .map(|(key, user)| ApiKeyEntry {
                    key: key.trim().to_owned(),
                    user: user.trim().to_owned(),
                })
                .filter(|e| !e.key.is_empty() && !e.user.is_empty())
                .collect();
        }
    }

    /// The provider to use when a message names none (see
    /// [`weft_providers::ProvidersConfig::default_provider`]).
    pub fn default_provider(&self) -> String {
        self.providers.default_provider(&self.provider)
    }
}

/// `[limits]`: per-user limits.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct LimitsConfig {
    /// Turns one user may have running at once (0: no limit).
    pub turns_per_user: usize,
    /// Chat messages one user may send per minute, in bursts of up to this many (0: no limit).
    pub messages_per_minute: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            turns_per_user: 16,
            messages_per_minute: 120,
        }
    }
}
