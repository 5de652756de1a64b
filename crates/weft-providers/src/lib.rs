//! Model providers behind `weft_core::Provider`.
//!
//! * [`openai`]: Chat Completions streaming (also Ollama, vLLM, llama.cpp server, LiteLLM).
//! * [`anthropic`]: the Messages API streaming.
//! * [`scripted`]: the deterministic test double of PROTOCOL.md.
//! * [`media`]: image and speech generation (OpenAI-compatible APIs, `espeak-ng` offline).

pub mod anthropic;
pub mod http;
pub mod media;
pub mod openai;
mod pairing;
pub mod scripted;

pub use anthropic::AnthropicProvider;
pub use http::HttpOptions;
pub use openai::OpenAiProvider;
pub use scripted::{Script, ScriptError, ScriptedProvider};
