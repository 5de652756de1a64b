//! OpenAI Chat Completions with `stream: true` (usage included). The base URL is
//! configurable, so the same adapter serves Ollama, vLLM, the llama.cpp server, LiteLLM and
//! other OpenAI-compatible servers.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;
use weft_core::{
    Capabilities, FinishReason, Provider, ProviderError, ProviderEvent, ProviderRequest,
    ProviderStream, Role, ToolCallRequest, Usage,
};
use weft_protocol::{ContentPart, MessageContent};

use crate::http::{send, sse, Endpoint, HttpOptions};
use crate::pairing::{keeps_result, kept_calls, paired_ids};

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

pub struct OpenAiProvider {
    endpoint: Endpoint,
}

impl OpenAiProvider {
    /// Whether the models behind the endpoint make several tool calls in one response
    /// (`[providers.openai] parallel_tool_calls`); without, each request asks for one.
    pub fn with_parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.endpoint.parallel_tool_calls = parallel;
        self
    }

    pub fn new(
        base_url: Option<&str>,
        api_key: Option<&str>,
        options: HttpOptions,
    ) -> Result<Self, ProviderError> {
        Ok(OpenAiProvider {
            endpoint: Endpoint::new(DEFAULT_BASE_URL, base_url, api_key, options)?,
        })
    }
}

/// The request body for a generation.
pub fn request_body(request: &ProviderRequest) -> Value {
    let paired = paired_ids(&request.messages);
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": &*request.system}));
    }
    for m in request.messages.iter() {
        match m.role {
            Role::User => {
                messages.push(json!({"role": "user", "content": user_content(&m.content)}))
            }
            Role::Assistant => {
                let calls: Vec<Value> = kept_calls(m, &paired)
                    .into_iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
                let text = m.text();
                let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
                if !calls.is_empty() {
                    msg["tool_calls"] = json!(calls);
                } else if text.is_empty() {
                    continue;
                }
                messages.push(msg);
            }
            Role::Tool if keeps_result(m, &paired) => messages
                .push(json!({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.text()})),
            Role::Tool => {}
        }
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(max) = request.max_tokens {
        // Reasoning models take only the newer name; compatible servers know the older one.
        let reasoning = ["o1", "o3", "o4", "gpt-5"]
            .iter()
            .any(|p| request.model.starts_with(p));
        let key = if reasoning {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[key] = json!(max);
    }
    if let Some(schema) = &request.response_schema {
        body["response_format"] = json!({"type": "json_schema", "json_schema": {
            "name": "answer", "schema": schema.as_ref(), "strict": false}});
    }
    if !request.tools.is_empty() {
        body["tools"] = json!(request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect::<Vec<_>>());
        if request.single_tool_call {
            body["parallel_tool_calls"] = json!(false);
        }
    }
    body
}

fn user_content(content: &MessageContent) -> Value {
    match content {
        MessageContent::Text(t) => json!(t),
        MessageContent::Parts(parts) => json!(parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => json!({"type": "text", "text": text}),
                ContentPart::ImageUrl { image_url } =>
                    json!({"type": "image_url", "image_url": {"url": image_url}}),
                ContentPart::AudioUrl { audio_url } =>
                    json!({"type": "text", "text": format!("[audio: {audio_url}]")}),
            })
            .collect::<Vec<_>>()),
    }
}

/// Turns streamed chunks into provider events, assembling tool calls per index.
#[derive(Default)]
pub struct ChunkDecoder {
    calls: BTreeMap<u64, (String, String, String)>,
    finish: Option<FinishReason>,
    done: bool,
}

impl ChunkDecoder {
    /// One SSE `data:` payload.
    pub fn feed(&mut self, data: &str) -> Result<Vec<ProviderEvent>, ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(self
                .finish
                .clone()
                .map(ProviderEvent::Finish)
                .into_iter()
                .collect());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| ProviderError::Protocol(format!("bad chunk: {e}")))?;
        if let Some(error) = chunk.get("error") {
            return Err(ProviderError::Other(format!(
                "provider error in stream: {error}"
            )));
        }
        let mut out = Vec::new();
        for choice in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            if let Some(text) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                out.push(ProviderEvent::TextDelta(text.to_owned()));
            }
            for key in ["reasoning_content", "reasoning"] {
                if let Some(text) = delta
                    .get(key)
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    out.push(ProviderEvent::ReasoningDelta(text.to_owned()));
                }
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                let entry = self.calls.entry(index).or_default();
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    entry.0 = id.to_owned();
                }
                let function = call.get("function").unwrap_or(&Value::Null);
                if let Some(name) = function.get("name").and_then(Value::as_str) {
                    entry.1.push_str(name);
                }
                if let Some(args) = function.get("arguments").and_then(Value::as_str) {
                    entry.2.push_str(args);
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                out.extend(self.take_calls());
                self.finish = Some(match reason {
                    "stop" => FinishReason::Stop,
                    "tool_calls" | "function_call" => FinishReason::ToolCalls,
                    "length" => FinishReason::Length,
                    "content_filter" => FinishReason::ContentFilter,
                    other => FinishReason::Other(other.to_owned()),
                });
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            let get = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
            out.push(ProviderEvent::Usage(Usage {
                input_tokens: get("prompt_tokens"),
                output_tokens: get("completion_tokens"),
            }));
        }
        Ok(out)
    }

    fn take_calls(&mut self) -> Vec<ProviderEvent> {
        std::mem::take(&mut self.calls)
            .into_values()
            .enumerate()
            .map(|(i, (id, name, arguments))| {
                let id = if id.is_empty() {
                    format!("call_{i}")
                } else {
                    id
                };
                ProviderEvent::ToolCall(ToolCallRequest {
                    id,
                    name,
                    arguments: arguments.into(),
                })
            })
            .collect()
    }

    /// The body ended: fine after a finish reason, a cut stream otherwise.
    pub fn end(&mut self) -> Result<Vec<ProviderEvent>, ProviderError> {
        match (&self.finish, self.done) {
            (Some(reason), false) => {
                self.done = true;
                Ok(vec![ProviderEvent::Finish(reason.clone())])
            }
            (Some(_), true) => Ok(Vec::new()),
            (None, _) => Err(ProviderError::Protocol(
                "the stream ended before the response finished".into(),
            )),
        }
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn capabilities(&self, _model: &str) -> Capabilities {
        self.endpoint.capabilities()
    }

    async fn stream(
        &self,
        request: ProviderRequest,
        cancel: CancellationToken,
    ) -> Result<ProviderStream, ProviderError> {
        let body = request_body(&request);
        let url = format!("{}/chat/completions", self.endpoint.base_url);
        let client = self.endpoint.client.clone();
        let key = self.endpoint.api_key.clone();
        let build = move || {
            let mut r = client.post(&url).json(&body);
            if let Some(key) = &key {
                r = r.bearer_auth(key);
            }
            r
        };
        let response = send(&build, &self.endpoint.options, &cancel).await?;
        let events = sse(response, self.endpoint.options.read_timeout);
        Ok(decode(
            events,
            ChunkDecoder::default(),
            |d, e| d.feed(&e.data),
            ChunkDecoder::end,
        ))
    }
}

/// Drive a decoder over SSE events, ending with its `end` check; stops after an error.
pub(crate) fn decode<D: Send + 'static>(
    events: futures::stream::BoxStream<'static, Result<eventsource_stream::Event, ProviderError>>,
    decoder: D,
    feed: fn(&mut D, eventsource_stream::Event) -> Result<Vec<ProviderEvent>, ProviderError>,
    end: fn(&mut D) -> Result<Vec<ProviderEvent>, ProviderError>,
) -> ProviderStream {
    stream::unfold(Some((events, decoder)), move |state| async move {
        let (mut events, mut decoder) = state?;
        let batch = match events.next().await {
            Some(Ok(event)) => feed(&mut decoder, event),
            Some(Err(e)) => Err(e),
            None => {
                let last: Vec<Result<ProviderEvent, ProviderError>> = match end(&mut decoder) {
                    Ok(events) => events.into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
                return Some((last, None));
            }
        };
        match batch {
            Ok(events_out) => Some((
                events_out.into_iter().map(Ok).collect(),
                Some((events, decoder)),
            )),
            Err(e) => Some((vec![Err(e)], None)),
        }
    })
    .flat_map(stream::iter)
    .boxed()
}

/// Parse a JSON object out of tool-call argument text, for adapters that need a value.
pub(crate) fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => Value::Object(Map::new()),
    }
}
