//! The `Provider` trait: streamed generation with text deltas, complete tool calls, usage, finish.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::message::{ChatMessage, ToolCallRequest};

/// What a provider (or a given model behind it) can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Tool calling at all; without it the loop degrades to plain chat.
    pub tools: bool,
    /// Several tool calls in one response.
    pub parallel_tool_calls: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            tools: true,
            parallel_tool_calls: true,
        }
    }
}

/// A tool as advertised to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// One generation request. Cheap to clone: the history and tools are shared.
#[derive(Debug, Clone)]
pub struct ProviderRequest {
    pub model: String,
    pub system: Arc<str>,
    pub messages: Arc<Vec<ChatMessage>>,
    pub tools: Arc<[ToolSpec]>,
    /// The most tokens the response may have; `None`: the provider's default.
    pub max_tokens: Option<u64>,
    /// Sampling temperature; `None`: the provider's default.
    pub temperature: Option<f64>,
    /// The JSON Schema the answer must be JSON of (structured output), where the provider
    /// supports it; the prompt should say so too.
    pub response_schema: Option<Arc<serde_json::Value>>,
    /// Ask for at most one tool call in the response (the model cannot make several).
    pub single_tool_call: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    ToolCalls,
    Length,
    ContentFilter,
    Other(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum ProviderEvent {
    TextDelta(String),
    /// Reasoning or thinking text, kept apart from the answer.
    ReasoningDelta(String),
    /// A complete tool call (adapters assemble argument deltas before emitting it).
    ToolCall(ToolCallRequest),
    Usage(Usage),
    Finish(FinishReason),
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    #[error("provider returned HTTP {status}: {message}")]
    Http { status: u16, message: String },
    #[error("provider timed out: {0}")]
    Timeout(String),
    #[error("provider connection failed: {0}")]
    Transport(String),
    #[error("provider stream was malformed: {0}")]
    Protocol(String),
    #[error("provider is not configured: {0}")]
    Config(String),
    #[error("{0}")]
    Other(String),
}

pub type ProviderStream = BoxStream<'static, Result<ProviderEvent, ProviderError>>;

#[async_trait]
pub trait Provider: Send + Sync {
    /// Short name recorded with every model call (`openai`, `anthropic`, `scripted`, …).
    fn name(&self) -> &str;

    fn capabilities(&self, _model: &str) -> Capabilities {
        Capabilities::default()
    }

    /// Start a generation. Dropping the stream, or cancelling `cancel`, aborts it.
    async fn stream(
        &self,
        request: ProviderRequest,
        cancel: CancellationToken,
    ) -> Result<ProviderStream, ProviderError>;
}
