//! A server's tool as a Weft tool, `mcp__<server>__<tool>`: a call with the server's timeout,
//! cancelled on the server when the turn stops, its progress notifications reported as they
//! come, its content blocks turned into text the model can read.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientNotification, ClientRequest,
    ContentBlock, Notification, Request, ResourceContents, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{json, Map, Value};
use weft_core::{Tool, ToolContext, ToolError};
use weft_protocol::{PolicyClass, ToolCategory};

use super::server::{Failure, Server, Service};

/// How long, at most, an answered call waits for progress reports still on their way.
const PROGRESS_GRACE: Duration = Duration::from_millis(100);

/// The server's tools, as Weft tools (none for a server without the tools capability, such
/// as one that only offers resources or prompts).
pub(super) async fn list(server: &Arc<Server>) -> Result<Vec<Arc<dyn Tool>>, String> {
    let service = server.current().await?;
    let has_tools = service
        .peer_info()
        .is_none_or(|info| info.capabilities.tools.is_some());
    if !has_tools {
        return Ok(Vec::new());
    }
    let listed = service.list_all_tools().await.map_err(|e| e.to_string())?;
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
    for tool in listed {
        let schema = Value::Object((*tool.input_schema).clone());
        // A schema that does not compile would make providers refuse every request.
        if let Err(e) = jsonschema::validator_for(&schema) {
            tracing::warn!(server = %server.name, tool = %tool.name, error = %e, "MCP tool left out: its input schema does not compile");
            continue;
        }
        let name = weft_name(&server.name, &tool.name);
        if tools.iter().any(|t| t.name() == name) {
            tracing::warn!(server = %server.name, tool = %tool.name, "MCP tool left out: its name clashes with another's as `{name}`");
            continue;
        }
        tools.push(Arc::new(McpTool {
            name,
            remote_name: tool.name.to_string(),
            description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
            schema,
            server: server.clone(),
        }));
    }
    Ok(tools)
}

/// Longest tool name providers accept.
const MAX_NAME: usize = 64;

/// `mcp__<server>__<tool>` in the characters providers accept in a tool's name (letters,
/// digits, `_`, `-`; others become `_`), at most 64 of them (a longer one is cut and ends
/// with a hash of the whole, so it stays unique).
fn weft_name(server: &str, tool: &str) -> String {
    let full = format!("mcp__{server}__{tool}");
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_NAME {
        return clean;
    }
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    full.hash(&mut hasher);
    let suffix = format!("_{:08x}", hasher.finish() as u32);
    format!("{}{suffix}", &clean[..MAX_NAME - suffix.len()])
}

struct McpTool {
    /// `mcp__<server>__<tool>`.
    name: String,
    /// The tool's name on its server.
    remote_name: String,
    description: String,
    schema: Value,
    server: Arc<Server>,
}

impl McpTool {
    async fn run(&self, args: Map<String, Value>, ctx: &ToolContext) -> Result<String, String> {
        let service = self.server.current().await?;
        let outcome = self.call(&service, args, ctx).await;
        self.server.settle(&service, outcome)
    }

    async fn call(
        &self,
        service: &Service,
        args: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<String, Failure> {
        let peer = service.peer();
        let request = ClientRequest::CallToolRequest(Request::new(
            CallToolRequestParams::new(self.remote_name.clone()).with_arguments(args),
        ));
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(self.server.timeout);
        let handle = peer
            .send_cancellable_request(request, options)
            .await
            .map_err(Failure::from)?;
        let (id, token) = (handle.id.clone(), handle.progress_token.clone());
        let mut progress = service.service().progress.subscribe(token).await;
        let response = handle.await_response();
        tokio::pin!(response);
        // Whether the last progress seen said there is more to come.
        let mut unfinished = false;
        loop {
            tokio::select! {
                answer = &mut response => {
                    // Progress and the answer travel apart: let a report sent just before the
                    // answer still reach the user.
                    let grace = tokio::time::Instant::now() + PROGRESS_GRACE;
                    while unfinished {
                        match tokio::time::timeout_at(grace, progress.next()).await {
                            Ok(Some(update)) => {
                                unfinished = update.total.is_some_and(|t| update.progress < t);
                                ctx.progress(update.progress, update.total, update.message.clone());
                            }
                            _ => break,
                        }
                    }
                    return match answer.map_err(Failure::from)? {
                        ServerResult::CallToolResult(result) => {
                            let text = text_of(&result.content, result.structured_content.as_ref());
                            if result.is_error == Some(true) {
                                Err(Failure::Call(text))
                            } else {
                                Ok(self.keep_media(&result.content, text, ctx).await)
                            }
                        }
                        other => Err(Failure::Call(format!("unexpected answer: {other:?}"))),
                    };
                }
                Some(update) = progress.next() => {
                    unfinished = update.total.is_some_and(|t| update.progress < t);
                    ctx.progress(update.progress, update.total, update.message.clone());
                }
                () = ctx.cancel.cancelled() => {
                    let notice = ClientNotification::CancelledNotification(Notification::new(
                        CancelledNotificationParam::new(Some(id), Some("the turn stopped".to_owned())),
                    ));
                    let _ = peer.send_notification(notice).await;
                    return Err(Failure::Call("cancelled".to_owned()));
                }
            }
        }
    }
}

impl McpTool {
    /// Images and audio in a result are kept as assets (when there is a store): the result is
    /// then `{"content": <text>, "assets": [{"asset_id", "url", "mime_type"}]}`, so clients
    /// can show them; otherwise it is the text alone.
    async fn keep_media(
        &self,
        content: &[ContentBlock],
        text: String,
        ctx: &ToolContext,
    ) -> String {
        use base64::Engine as _;
        let Some(sink) = &self.server.assets else {
            return text;
        };
        let mut kept = Vec::new();
        let mut notes = Vec::new();
        for block in content {
            let (kind, mime, data) = match block {
                ContentBlock::Image(image) => ("image", &image.mime_type, &image.data),
                ContentBlock::Audio(audio) => ("audio", &audio.mime_type, &audio.data),
                _ => continue,
            };
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
                notes.push(format!("an {kind} block was not valid base64"));
                continue;
            };
            match sink
                .put(&ctx.user_id, kind, mime, &ctx.tool_call_id, bytes)
                .await
            {
                Ok(id) => kept.push(
                    json!({"asset_id": id, "url": format!("/assets/{id}"), "mime_type": mime}),
                ),
                Err(e) => notes.push(format!("an {kind} could not be kept: {e}")),
            }
        }
        if kept.is_empty() && notes.is_empty() {
            return text;
        }
        let mut answer = json!({"content": text, "assets": kept});
        if !notes.is_empty() {
            answer["notes"] = json!(notes);
        }
        answer.to_string()
    }
}

/// The text of a result: every block as text (binary ones described), else its structured
/// content.
pub(super) fn text_of(content: &[ContentBlock], structured: Option<&Value>) -> String {
    if content.is_empty() {
        return structured.map(Value::to_string).unwrap_or_default();
    }
    content
        .iter()
        .map(block_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// One content block as text: text as it is, binary content described by type and size.
pub(super) fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => binary("image", &image.mime_type, &image.data),
        ContentBlock::Audio(audio) => binary("audio", &audio.mime_type, &audio.data),
        ContentBlock::Resource(embedded) => contents_text(&embedded.resource),
        ContentBlock::ResourceLink(link) => format!(
            "[resource link: {} ({}){}]",
            link.uri,
            link.name,
            link.description
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ),
        _ => "[content of a kind this client does not know]".to_owned(),
    }
}

/// A resource's contents as text: its text, or a description of its bytes.
pub(super) fn contents_text(contents: &ResourceContents) -> String {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        ResourceContents::BlobResourceContents {
            uri,
            mime_type,
            blob,
            ..
        } => {
            let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
            match textual(mime, blob) {
                Some(text) => text,
                None => format!("{} at {uri}", binary("binary content", mime, blob)),
            }
        }
        _ => "[resource contents of a kind this client does not know]".to_owned(),
    }
}

/// The text a base64 blob holds, when its type says text and it is UTF-8.
fn textual(mime: &str, blob: &str) -> Option<String> {
    use base64::Engine as _;
    let texty = mime.starts_with("text/") || mime.ends_with("json") || mime.ends_with("xml");
    if !texty {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// `[<what> <mime>, <n> bytes]` for base64 `data`.
fn binary(what: &str, mime: &str, data: &str) -> String {
    format!("[{what} {mime}, {} bytes, not shown]", data.len() / 4 * 3)
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn policy_class(&self) -> PolicyClass {
        PolicyClass::Network
    }

    fn category(&self) -> ToolCategory {
        self.server.category
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            _ => return Err(ToolError::model("arguments must be an object")),
        };
        self.run(args, ctx)
            .await
            .map_err(|e| ToolError::model(format!("{} (MCP server `{}`)", e, self.server.name)))
    }
}
