//! `[provider]` and `[providers]`: which provider answers by default, and how each is
//! reached (the scripted test double's script, OpenAI-compatible and Anthropic endpoints).

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ProviderConfig {
    /// `openai`, `anthropic`, `scripted`; absent → picked from the environment.
    pub default: Option<String>,
    pub model: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ProvidersConfig {
    pub scripted: ScriptedConfig,
    pub openai: RemoteProviderConfig,
    pub anthropic: RemoteProviderConfig,
}

#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ScriptedConfig {
    pub script: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct RemoteProviderConfig {
    pub api_key: Option<String>,
    pub base_url: Option<String>,
    /// Retries after the first attempt on 429, 5xx and "overloaded".
    pub max_retries: usize,
    pub connect_timeout_ms: u64,
    /// Longest wait for response headers, and between two chunks of a stream.
    pub read_timeout_ms: u64,
    /// The models behind the endpoint make several tool calls in one response; `false` asks
    /// each request for one call at a time.
    pub parallel_tool_calls: bool,
}

impl Default for RemoteProviderConfig {
    fn default() -> Self {
        RemoteProviderConfig {
            api_key: None,
            base_url: None,
            max_retries: 3,
            connect_timeout_ms: 10_000,
            read_timeout_ms: 120_000,
            parallel_tool_calls: true,
        }
    }
}

impl RemoteProviderConfig {
    pub fn http_options(&self) -> crate::HttpOptions {
        crate::HttpOptions {
            connect_timeout: std::time::Duration::from_millis(self.connect_timeout_ms),
            read_timeout: std::time::Duration::from_millis(self.read_timeout_ms),
            max_retries: self.max_retries,
            ..crate::HttpOptions::default()
        }
    }
}

impl ProvidersConfig {
    /// The provider to use when a message names none: `provider.default`, else from what is
    /// configured (a script, then OpenAI, then Anthropic), else the built-in demo.
    pub fn default_provider(&self, provider: &ProviderConfig) -> String {
        if let Some(p) = &provider.default {
            return p.clone();
        }
        if self.scripted.script.is_some() {
            "scripted".to_owned()
        } else if self.openai.api_key.is_some() || self.openai.base_url.is_some() {
            "openai".to_owned()
        } else if self.anthropic.api_key.is_some() {
            "anthropic".to_owned()
        } else {
            "demo".to_owned()
        }
    }
}
