//! The scripted provider: answers from a script, never from a network (PROTOCOL.md).
//!
//! The conversation is the first whose `match` is a substring of the history's first user
//! message (`"*"` matches anything) and whose `system`, if it has one, is a substring of the
//! system prompt; the step is the number of assistant messages so far.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use weft_core::{
    Capabilities, ChatMessage, FinishReason, Provider, ProviderError, ProviderEvent,
    ProviderRequest, ProviderStream, Role, ToolCallRequest, Usage,
};

#[derive(Debug, Clone, Deserialize)]
pub struct Script {
    pub conversations: Vec<Conversation>,
    /// Pretend the model cannot call tools (to exercise plain-chat degradation).
    #[serde(default = "yes")]
    pub tools: bool,
    /// Pretend the model makes one tool call per response.
    #[serde(default = "yes")]
    pub parallel_tool_calls: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
pub struct Conversation {
    #[serde(rename = "match")]
    pub pattern: String,
    /// Only when the system prompt holds this (an execution mode's, say).
    #[serde(default)]
    pub system: Option<String>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Step {
    #[serde(default)]
    pub text: Option<String>,
    /// Shared with every stream that sends them: a stream holds the script's chunks, not a
    /// copy (10,000 streaming turns would otherwise each keep theirs).
    #[serde(default)]
    pub chunks: Option<Arc<[String]>>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Reasoning ("thinking") streamed before the text.
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub usage: Option<ScriptUsage>,
    /// Wait this long before answering.
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Wait this long before each chunk after the first (for mid-stream stop tests).
    #[serde(default)]
    pub chunk_delay_ms: Option<u64>,
    /// Stream `chunks` this many times over (big outputs without a big script).
    #[serde(default)]
    pub repeat_chunks: Option<u64>,
    #[serde(default)]
    pub error: Option<InjectedError>,
    #[serde(default)]
    pub repeat: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ScriptedCall {
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct ScriptUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
}

/// Fault injection. With text or chunks, the text streams first and the error cuts the stream.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InjectedError {
    HttpStatus { status: u16 },
    Timeout,
    MalformedToolArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read script {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("script is not valid: {0}")]
    Parse(#[from] serde_json::Error),
}

pub struct ScriptedProvider {
    script: Script,
    next_id: AtomicU64,
}

impl ScriptedProvider {
    pub fn new(script: Script) -> Self {
        ScriptedProvider {
            script,
            next_id: AtomicU64::new(1),
        }
    }

    pub fn from_json(text: &str) -> Result<Self, ScriptError> {
        Ok(Self::new(serde_json::from_str(text)?))
    }

    pub fn from_value(value: Value) -> Result<Self, ScriptError> {
        Ok(Self::new(serde_json::from_value(value)?))
    }

    pub fn from_file(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text)
    }

    fn conversation(
        &self,
        system: &str,
        messages: &[ChatMessage],
    ) -> Result<&Conversation, ProviderError> {
        let first_user = messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(ChatMessage::text)
            .unwrap_or_default();
        self.script
            .conversations
            .iter()
            .filter(|c| {
                c.system
                    .as_ref()
                    .is_none_or(|s| system.contains(s.as_str()))
            })
            .find(|c| c.pattern == "*" || first_user.contains(&c.pattern))
            .ok_or_else(|| {
                ProviderError::Other(format!(
                    "scripted provider: no conversation matches {first_user:?}"
                ))
            })
    }

    fn step<'a>(
        conversation: &'a Conversation,
        messages: &[ChatMessage],
    ) -> Result<&'a Step, ProviderError> {
        let index = messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        match conversation.steps.get(index) {
            Some(step) => Ok(step),
            None => match conversation.steps.last() {
                Some(last) if last.repeat => Ok(last),
                _ => Err(ProviderError::Other(format!(
                    "scripted provider: conversation {:?} has no step {index}",
                    conversation.pattern
                ))),
            },
        }
    }

    fn tool_calls(&self, step: &Step) -> Vec<ToolCallRequest> {
        let malformed = matches!(step.error, Some(InjectedError::MalformedToolArgs));
        step.tool_calls
            .iter()
            .map(|c| {
                let id = c.id.clone().unwrap_or_else(|| {
                    format!("call_{}", self.next_id.fetch_add(1, Ordering::Relaxed))
                });
                let mut arguments = if c.arguments.is_null() {
                    "{}".to_owned()
                } else {
                    weft_core::validate::compact(&c.arguments)
                };
                if malformed {
                    // Cut the closing brace off, as a model that ran out of tokens would.
                    arguments.pop();
                    arguments.push_str(",\"");
                }
                ToolCallRequest {
                    id,
                    name: c.name.clone(),
                    arguments: arguments.into(),
                }
            })
            .collect()
    }
}

fn estimate_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}

fn injected_error(error: &InjectedError) -> Option<ProviderError> {
    match error {
        InjectedError::HttpStatus { status } => Some(ProviderError::Http {
            status: *status,
            message: format!("scripted HTTP {status}"),
        }),
        InjectedError::Timeout => Some(ProviderError::Timeout("scripted timeout".to_owned())),
        InjectedError::MalformedToolArgs => None,
    }
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn capabilities(&self, _model: &str) -> Capabilities {
        Capabilities {
            tools: self.script.tools,
            parallel_tool_calls: self.script.tools && self.script.parallel_tool_calls,
        }
    }

    async fn stream(
        &self,
        request: ProviderRequest,
        cancel: CancellationToken,
    ) -> Result<ProviderStream, ProviderError> {
        let conversation = self.conversation(&request.system, &request.messages)?;
        let step = Self::step(conversation, &request.messages)?;
        if let Some(ms) = step.delay_ms {
            tokio::select! {
                () = cancel.cancelled() => return Err(ProviderError::Other("cancelled".into())),
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            }
        }
        let chunks: Arc<[String]> = match (&step.chunks, &step.text) {
            (Some(chunks), _) => chunks.clone(),
            (None, Some(text)) => Arc::from([text.clone()]),
            (None, None) => Arc::from([]),
        };
        let error = step.error.as_ref().and_then(injected_error);
        if chunks.is_empty() {
            if let Some(error) = error {
                return Err(error);
            }
        }

        let tool_calls = self.tool_calls(step);
        let usage = match step.usage {
            Some(u) => Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
            },
            None => {
                let input: usize = request
                    .messages
                    .iter()
                    .map(|m| m.text().len())
                    .sum::<usize>()
                    + request.system.len();
                let times = step.repeat_chunks.unwrap_or(1) as usize;
                let output: usize = chunks.iter().map(String::len).sum::<usize>() * times
                    + tool_calls
                        .iter()
                        .map(|c| c.arguments.len() + c.name.len())
                        .sum::<usize>();
                Usage {
                    input_tokens: estimate_tokens(input),
                    output_tokens: estimate_tokens(output),
                }
            }
        };
        let finish = if tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        let delay = step.chunk_delay_ms.map(Duration::from_millis);

        // Each chunk is copied only as it is sent.
        let sent = chunks.len() * usize::try_from(step.repeat_chunks.unwrap_or(1)).unwrap_or(1);
        let text = (0..sent).map(move |i| chunks[i % chunks.len()].clone());
        let mut events: Vec<Result<ProviderEvent, ProviderError>> = Vec::new();
        match error {
            Some(error) => events.push(Err(error)),
            None => {
                events.extend(
                    tool_calls
                        .into_iter()
                        .map(|c| Ok(ProviderEvent::ToolCall(c))),
                );
                events.push(Ok(ProviderEvent::Usage(usage)));
                events.push(Ok(ProviderEvent::Finish(finish)));
            }
        }
        let reasoning = step
            .reasoning
            .clone()
            .map(|r| Ok(ProviderEvent::ReasoningDelta(r)));
        let events = reasoning
            .into_iter()
            .chain(text.map(|c| Ok(ProviderEvent::TextDelta(c))))
            .chain(events);
        match delay {
            None => Ok(stream::iter(events).boxed()),
            // Paced as a model is: chunk i is due `i × delay` after the first, however fast
            // the server takes them, so a server that falls behind finds them waiting.
            Some(delay) => {
                let start = tokio::time::Instant::now();
                Ok(stream::iter(events.zip(0u32..))
                    .then(move |(event, i)| async move {
                        let due = start + delay * i;
                        if tokio::time::Instant::now() < due {
                            tokio::time::sleep_until(due).await;
                        }
                        event
                    })
                    .boxed())
            }
        }
    }
}
