//! Anthropic Messages API with streaming: content-block events, `tool_use` blocks assembled
//! from `input_json_delta`, thinking kept apart, usage from `message_start`/`message_delta`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_core::{
    Capabilities, FinishReason, Provider, ProviderError, ProviderEvent, ProviderRequest,
    ProviderStream, Role, ToolCallRequest, Usage,
};
use weft_protocol::{ContentPart, MessageContent};

use crate::http::{send, sse, Endpoint, HttpOptions};
use crate::openai::{arguments_object, decode};
use crate::pairing::{keeps_result, kept_calls, paired_ids};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const API_VERSION: &str = "2023-06-01";
/// `max_tokens` is required by the API.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

pub struct AnthropicProvider {
    endpoint: Endpoint,
}

impl AnthropicProvider {
    /// Whether the models behind the endpoint make several tool calls in one response
    /// (`[providers.anthropic] parallel_tool_calls`); without, each request asks for one.
    pub fn with_parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.endpoint.parallel_tool_calls = parallel;
        self
    }

    pub fn new(
        base_url: Option<&str>,
        api_key: Option<&str>,
        options: HttpOptions,
    ) -> Result<Self, ProviderError> {
        Ok(AnthropicProvider {
            endpoint: Endpoint::new(DEFAULT_BASE_URL, base_url, api_key, options)?,
        })
    }
}

fn image_block(url: &str) -> Value {
    // data:<media type>;base64,<data> → a base64 source; anything else → a URL source.
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((media_type, data)) = rest.split_once(";base64,") {
            return json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}});
        }
    }
    json!({"type": "image", "source": {"type": "url", "url": url}})
}

fn user_blocks(content: &MessageContent) -> Vec<Value> {
    match content {
        MessageContent::Text(t) => vec![json!({"type": "text", "text": t})],
        MessageContent::Parts(parts) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => json!({"type": "text", "text": text}),
                ContentPart::ImageUrl { image_url } => image_block(image_url),
                ContentPart::AudioUrl { audio_url } => {
                    json!({"type": "text", "text": format!("[audio: {audio_url}]")})
                }
            })
            .collect(),
    }
}

/// The request body: tool results go back as `tool_result` blocks in a user turn, and
/// consecutive turns of one role are merged (the API wants them alternating).
pub fn request_body(request: &ProviderRequest) -> Value {
    let paired = paired_ids(&request.messages);
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in request.messages.iter() {
        let (role, blocks) = match m.role {
            Role::User => ("user", user_blocks(&m.content)),
            Role::Assistant => {
                let mut blocks = Vec::new();
                let text = m.text();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for c in kept_calls(m, &paired) {
                    blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": arguments_object(&c.arguments)}));
                }
                ("assistant", blocks)
            }
            Role::Tool if keeps_result(m, &paired) => (
                "user",
                vec![
                    json!({"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.text(), "is_error": m.is_error}),
                ],
            ),
            Role::Tool => continue,
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
        "stream": true,
    });
    if !request.system.is_empty() {
        body["system"] = json!(&*request.system);
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    if !request.tools.is_empty() {
        body["tools"] = json!(request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect::<Vec<_>>());
        if request.single_tool_call {
            body["tool_choice"] = json!({"type": "auto", "disable_parallel_tool_use": true});
        }
    }
    body
}

/// Turns Messages-API stream events into provider events.
#[derive(Default)]
pub struct EventDecoder {
    /// Open tool_use blocks by index: (id, name, partial JSON).
    tools: BTreeMap<u64, (String, String, String)>,
    usage: Usage,
    finish: Option<FinishReason>,
    stopped: bool,
}

impl EventDecoder {
    pub fn feed(&mut self, event: &str, data: &str) -> Result<Vec<ProviderEvent>, ProviderError> {
        let v: Value = serde_json::from_str(data)
            .map_err(|e| ProviderError::Protocol(format!("bad event: {e}")))?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        let mut out = Vec::new();
        match kind {
            "message_start" => {
                let usage = &v["message"]["usage"];
                self.usage.input_tokens = usage["input_tokens"].as_u64().unwrap_or(0);
                self.usage.output_tokens = usage["output_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let block = &v["content_block"];
                match block["type"].as_str() {
                    Some("tool_use") => {
                        let id = block["id"].as_str().unwrap_or_default().to_owned();
                        let name = block["name"].as_str().unwrap_or_default().to_owned();
                        self.tools.insert(index, (id, name, String::new()));
                    }
                    Some("text") => {
                        if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            out.push(ProviderEvent::TextDelta(text.to_owned()));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &v["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        if let Some(text) = delta["text"].as_str().filter(|t| !t.is_empty()) {
                            out.push(ProviderEvent::TextDelta(text.to_owned()));
                        }
                    }
                    Some("input_json_delta") => {
                        if let Some((_, _, json)) = self.tools.get_mut(&index) {
                            json.push_str(delta["partial_json"].as_str().unwrap_or_default());
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(text) = delta["thinking"].as_str() {
                            out.push(ProviderEvent::ReasoningDelta(text.to_owned()));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some((id, name, json)) = self.tools.remove(&index) {
                    let arguments = if json.trim().is_empty() {
                        "{}".to_owned()
                    } else {
                        json
                    };
                    out.push(ProviderEvent::ToolCall(ToolCallRequest {
                        id,
                        name,
                        arguments: arguments.into(),
                    }));
                }
            }
            "message_delta" => {
                if let Some(n) = v["usage"]["output_tokens"].as_u64() {
                    self.usage.output_tokens = n;
                }
                if let Some(n) = v["usage"]["input_tokens"].as_u64() {
                    self.usage.input_tokens = n;
                }
                if let Some(reason) = v["delta"]["stop_reason"].as_str() {
                    self.finish = Some(match reason {
                        "end_turn" | "stop_sequence" => FinishReason::Stop,
                        "tool_use" => FinishReason::ToolCalls,
                        "max_tokens" => FinishReason::Length,
                        "refusal" => FinishReason::ContentFilter,
                        other => FinishReason::Other(other.to_owned()),
                    });
                }
            }
            "message_stop" => {
                self.stopped = true;
                out.push(ProviderEvent::Usage(self.usage));
                out.push(ProviderEvent::Finish(
                    self.finish.clone().unwrap_or(FinishReason::Stop),
                ));
            }
            "error" => {
                let message = v["error"]["message"].as_str().unwrap_or("unknown error");
                let kind = v["error"]["type"].as_str().unwrap_or("error");
                return Err(ProviderError::Other(format!("{kind}: {message}")));
            }
            _ => {}
        }
        Ok(out)
    }

    pub fn end(&mut self) -> Result<Vec<ProviderEvent>, ProviderError> {
        if self.stopped {
            Ok(Vec::new())
        } else {
            Err(ProviderError::Protocol(
                "the stream ended before message_stop".into(),
            ))
        }
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
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
        let url = format!("{}/v1/messages", self.endpoint.base_url);
        let client = self.endpoint.client.clone();
        let key = self.endpoint.api_key.clone();
        let build = move || {
            let mut r = client
                .post(&url)
                .header("anthropic-version", API_VERSION)
                .json(&body);
            if let Some(key) = &key {
                r = r.header("x-api-key", key);
            }
            r
        };
        let response = send(&build, &self.endpoint.options, &cancel).await?;
        let events = sse(response, self.endpoint.options.read_timeout);
        Ok(decode(
            events,
            EventDecoder::default(),
            |d, e| d.feed(&e.event, &e.data),
            EventDecoder::end,
        ))
    }
}
