//! `Providers`: the providers a server can use, built from config — the scripted test
//! double, the built-in demo script, and (when configured) remote model APIs.

use std::collections::BTreeMap;
use std::sync::Arc;

use weft_core::Provider;

use crate::config::{ProviderConfig, ProvidersConfig};
use crate::{AnthropicProvider, OpenAiProvider, ScriptedProvider};

/// The demo script shown when no model is configured.
pub const DEMO_SCRIPT: &str = include_str!("../../../config/demo-script.json");

pub struct Providers {
    by_name: BTreeMap<String, Arc<dyn Provider>>,
    default: String,
    model: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderSetupError {
    #[error("cannot load the scripted provider's script: {0}")]
    Script(#[from] crate::ScriptError),
    #[error("cannot set up a provider: {0}")]
    Provider(#[from] weft_core::ProviderError),
}

impl Providers {
    pub fn from_config(
        provider: &ProviderConfig,
        providers: &ProvidersConfig,
    ) -> Result<Providers, ProviderSetupError> {
        let mut by_name: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        by_name.insert(
            "demo".to_owned(),
            Arc::new(ScriptedProvider::from_json(DEMO_SCRIPT)?),
        );
        if let Some(path) = &providers.scripted.script {
            by_name.insert(
                "scripted".to_owned(),
                Arc::new(ScriptedProvider::from_file(path)?),
            );
        }
        let openai = &providers.openai;
        if openai.api_key.is_some() || openai.base_url.is_some() {
            let provider = OpenAiProvider::new(
                openai.base_url.as_deref(),
                openai.api_key.as_deref(),
                openai.http_options(),
            )?
            .with_parallel_tool_calls(openai.parallel_tool_calls);
            by_name.insert("openai".to_owned(), Arc::new(provider));
        }
        let anthropic = &providers.anthropic;
        if anthropic.api_key.is_some() || anthropic.base_url.is_some() {
            let provider = AnthropicProvider::new(
                anthropic.base_url.as_deref(),
                anthropic.api_key.as_deref(),
                anthropic.http_options(),
            )?
            .with_parallel_tool_calls(anthropic.parallel_tool_calls);
            by_name.insert("anthropic".to_owned(), Arc::new(provider));
        }
        Ok(Providers {
            by_name,
            default: providers.default_provider(provider),
            model: provider.model.clone(),
        })
    }

    /// Add or replace a provider (tests and embedders).
    pub fn insert(&mut self, name: &str, provider: Arc<dyn Provider>) {
        self.by_name.insert(name.to_owned(), provider);
    }

    pub fn default_name(&self) -> &str {
        &self.default
    }

    pub fn is_demo(&self) -> bool {
        self.default == "demo"
    }

    /// The provider called `name` (the default when `None`) and its name.
    pub fn get(&self, name: Option<&str>) -> Result<(String, Arc<dyn Provider>), String> {
        let name = name.unwrap_or(&self.default);
        self.by_name
            .get(name)
            .map(|p| (name.to_owned(), p.clone()))
            .ok_or_else(|| {
                format!(
                    "provider `{}` is not available; configured: {}",
                    weft_protocol::clip(name, 64),
                    self.by_name.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            })
    }

    /// The model for a message: the one it names, the configured one, or the provider's default.
    pub fn model_for(&self, provider: &str, requested: Option<&str>) -> String {
        if let Some(m) = requested {
            return m.to_owned();
        }
        if provider == self.default {
            if let Some(m) = &self.model {
                return m.clone();
            }
        }
        match provider {
            "openai" => "gpt-4o-mini",
            "anthropic" => "claude-sonnet-4-0",
            other => other,
        }
        .to_owned()
    }
}
