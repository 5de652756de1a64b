//! Server configuration: `config/default.toml` (or `--config FILE`), then environment
//! overrides, exactly as PROTOCOL.md lists them.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use weft_core::RateCard;
use weft_protocol::AgentConfig;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub provider: ProviderConfig,
    pub providers: ProvidersConfig,
    pub policy: PolicyConfig,
    pub auth: AuthConfig,
    pub agent: AgentConfig,
    /// Extra or overriding model prices (USD per million tokens).
    pub pricing: RateCard,
}

#[derive(Debug, Clone, Deserialize)]
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
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct DatabaseConfig {
    pub url: String,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: "sqlite://data/weft.db".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ProviderConfig {
    /// `openai`, `anthropic`, `scripted`; absent → picked from the environment.
    pub default: Option<String>,
    pub model: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ProvidersConfig {
    pub scripted: ScriptedConfig,
    pub openai: RemoteProviderConfig,
    pub anthropic: RemoteProviderConfig,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ScriptedConfig {
    pub script: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct RemoteProviderConfig {
    pub api_key: Option<String>,
    pub base_url: Option<String>,
    /// Retries after the first attempt on 429, 5xx and "overloaded".
    pub max_retries: usize,
    pub connect_timeout_ms: u64,
    /// Longest wait for response headers, and between two chunks of a stream.
    pub read_timeout_ms: u64,
}

impl Default for RemoteProviderConfig {
    fn default() -> Self {
        RemoteProviderConfig {
            api_key: None,
            base_url: None,
            max_retries: 3,
            connect_timeout_ms: 10_000,
            read_timeout_ms: 120_000,
        }
    }
}

impl RemoteProviderConfig {
    pub fn http_options(&self) -> weft_providers::HttpOptions {
        weft_providers::HttpOptions {
            connect_timeout: std::time::Duration::from_millis(self.connect_timeout_ms),
            read_timeout: std::time::Duration::from_millis(self.read_timeout_ms),
            max_retries: self.max_retries,
            ..weft_providers::HttpOptions::default()
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct PolicyConfig {
    pub workspace_root: PathBuf,
    pub allow_private_network: bool,
    /// Opt in to `secrets`-class tools.
    pub allow_secrets: bool,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            workspace_root: PathBuf::from("workspace"),
            allow_private_network: false,
            allow_secrets: false,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AuthConfig {
    pub api_keys: Vec<ApiKeyEntry>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ApiKeyEntry {
    pub key: String,
    pub user: String,
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
        config
            .agent
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(config)
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text).map_err(|source| ConfigError::Parse {
            path: path.display().to_string(),
            source,
        })
    }

    pub fn from_toml(text: &str) -> Result<Config, toml::de::Error> {
        toml::from_str(text)
    }

    /// Environment overrides (PROTOCOL.md); `env` is a lookup so tests can pass their own.
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) {
        if let Some(v) = env("WEFT_BIND") {
            self.server.bind = v;
        }
        if let Some(v) = env("WEFT_DATABASE_URL").or_else(|| env("DATABASE_URL")) {
            self.database.url = v;
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

    /// The provider to use when a message names none: configured, else from the environment
    /// (a script, then OpenAI, then Anthropic), else the built-in demo.
    pub fn default_provider(&self) -> String {
        if let Some(p) = &self.provider.default {
            return p.clone();
        }
        if self.providers.scripted.script.is_some() {
            "scripted".to_owned()
        } else if self.providers.openai.api_key.is_some()
            || self.providers.openai.base_url.is_some()
        {
            "openai".to_owned()
        } else if self.providers.anthropic.api_key.is_some() {
            "anthropic".to_owned()
        } else {
            "demo".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_optional_and_env_overrides_win() {
        let mut config = Config::from_toml(
            r#"
            [server]
            bind = "0.0.0.0:9000"
            [agent]
            max_total_tool_calls = 7
            [auth]
            api_keys = [{ key = "k-alice", user = "alice" }]
            [pricing]
            "my-model" = { input_per_mtok = 1.0, output_per_mtok = 2.0 }
            "#,
        )
        .unwrap();
        assert_eq!(config.server.max_frame_bytes, 1 << 20);
        assert_eq!(config.agent.max_total_tool_calls, 7);
        assert_eq!(config.agent.max_depth, 3);
        assert!(config.pricing.rate("my-model").is_some());
        let env = |k: &str| match k {
            "WEFT_BIND" => Some("127.0.0.1:1".to_owned()),
            "DATABASE_URL" => Some("postgres://x/y".to_owned()),
            "WEFT_SCRIPT" => Some("s.json".to_owned()),
            "WEFT_API_KEYS" => Some("k1:alice, k2:bob,broken".to_owned()),
            _ => None,
        };
        config.apply_env(env);
        assert_eq!(config.server.bind, "127.0.0.1:1");
        assert_eq!(config.database.url, "postgres://x/y");
        assert_eq!(config.default_provider(), "scripted");
        let keys: Vec<_> = config
            .auth
            .api_keys
            .iter()
            .map(|k| (k.key.as_str(), k.user.as_str()))
            .collect();
        assert_eq!(keys, vec![("k1", "alice"), ("k2", "bob")]);
    }

    #[test]
    fn weft_database_url_beats_database_url() {
        let mut config = Config::default();
        config.apply_env(|k| match k {
            "WEFT_DATABASE_URL" => Some("sqlite://a.db".to_owned()),
            "DATABASE_URL" => Some("postgres://b".to_owned()),
            _ => None,
        });
        assert_eq!(config.database.url, "sqlite://a.db");
    }

    #[test]
    fn provider_falls_back_to_the_environment_then_the_demo() {
        let mut config = Config::default();
        assert_eq!(config.default_provider(), "demo");
        config.apply_env(|k| (k == "OPENAI_API_KEY").then(|| "sk".to_owned()));
        assert_eq!(config.default_provider(), "openai");
    }
}
