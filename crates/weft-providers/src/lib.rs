//! Model providers behind `weft_core::Provider`.
//!
//! * [`openai`]: Chat Completions streaming (also Ollama, vLLM, llama.cpp server, LiteLLM).
//! * [`anthropic`]: the Messages API streaming.
//! * [`scripted`]: the deterministic test double of PROTOCOL.md.
//! * [`media`]: image and speech generation (OpenAI-compatible APIs, `espeak-ng` offline).
//! * [`config`] and [`registry`]: the provider tables of the config and the providers built
//!   from them.

pub mod anthropic;
pub mod config;
pub mod http;
pub mod media;
pub mod media_config;
pub mod openai;
mod pairing;
pub mod registry;
pub mod scripted;

pub use anthropic::AnthropicProvider;
pub use config::{ProviderConfig, ProvidersConfig, RemoteProviderConfig, ScriptedConfig};
pub use http::HttpOptions;
pub use media_config::{MediaConfig, MediaGenerators};
pub use openai::OpenAiProvider;
pub use registry::{ProviderSetupError, Providers, DEMO_SCRIPT};
pub use scripted::{Script, ScriptError, ScriptedProvider};
