//! `fetch_url {url}`: one page as readable Markdown (HTML converted, text kept), through the
//! SSRF guard, with a size and a time cap and a content-type check.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};
use weft_core::{Tool, ToolContext, ToolError};

use super::guard::NetPolicy;
use super::WebSettings;

/// Tags whose content is not the page's text.
const SKIPPED_TAGS: [&str; 10] = [
    "script", "style", "noscript", "template", "iframe", "svg", "canvas", "nav", "footer", "form",
];

pub struct FetchUrl {
    client: reqwest::Client,
    policy: Arc<NetPolicy>,
    max_bytes: usize,
}

impl FetchUrl {
    pub fn new(settings: &WebSettings) -> reqwest::Result<Self> {
        Ok(FetchUrl {
            client: settings.net.client(settings.fetch_timeout)?,
            policy: Arc::new(settings.net.clone()),
            max_bytes: settings.fetch_max_bytes,
        })
    }

    /// The page as the tool answers it.
    async fn fetch(&self, url: &str) -> Result<String, String> {
        let page = self.read(url).await?;
        let mut answer = format!("Source: {}\n\n{}", page.url, page.text.trim());
        if page.cut {
            answer.push_str(&format!(
                "\n\n[the page was longer than {} bytes; the rest was not read]",
                self.max_bytes
            ));
        }
        Ok(answer)
    }

    /// One page through the guard, as Markdown or text (also used to ingest documents).
    pub async fn read(&self, url: &str) -> Result<Page, String> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        self.policy.check_url(&url)?;
        let response = self
            .client
            .get(url.clone())
            .header(
                "Accept",
                "text/html, text/plain, text/markdown, application/json;q=0.9, */*;q=0.1",
            )
            .send()
            .await
            .map_err(|e| describe(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{url} answered HTTP {status}"));
        }
        let final_url = response.url().to_string();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("text/html")
            .to_ascii_lowercase();
        let kind = Kind::of(&content_type)
            .ok_or_else(|| format!("{url} is {content_type}, not a page of text"))?;
        let (bytes, cut) = self.read_capped(response).await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = match kind {
            Kind::Html => tokio::task::spawn_blocking(move || to_markdown(&text))
                .await
                .map_err(|e| format!("cannot convert the page: {e}"))??,
            Kind::Text => text,
        };
        Ok(Page {
            url: final_url,
            text: body,
            cut,
        })
    }

    /// The body up to the cap; whether it was cut.
    async fn read_capped(&self, response: reqwest::Response) -> Result<(Vec<u8>, bool), String> {
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| describe(&e))?;
            let room = self.max_bytes - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                return Ok((body, true));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, false))
    }
}

/// A page read by [`FetchUrl::read`].
#[derive(Debug, Clone)]
pub struct Page {
    /// Where it ended up, after redirects.
    pub url: String,
    pub text: String,
    /// Longer than the cap; the rest was not read.
    pub cut: bool,
}

enum Kind {
    Html,
    Text,
}

impl Kind {
    fn of(content_type: &str) -> Option<Kind> {
        let mime = content_type.split(';').next().unwrap_or("").trim();
        match mime {
            "text/html" | "application/xhtml+xml" => Some(Kind::Html),
            "application/json" | "application/xml" | "text/xml" => Some(Kind::Text),
            m if m.starts_with("text/") || m.ends_with("+json") || m.ends_with("+xml") => {
                Some(Kind::Text)
            }
            _ => None,
        }
    }
}

/// HTML as readable Markdown: scripts, styles, navigation and forms dropped, the title as a
/// heading. CPU-bound: run it off the async workers.
pub fn to_markdown(html: &str) -> Result<String, String> {
    let title = title_of(html);
    let markdown = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED_TAGS.to_vec())
        .build()
        .convert(html)
        .map_err(|e| format!("cannot convert the page: {e}"))?;
    Ok(match title {
        Some(title) if !markdown.trim_start().starts_with('#') => {
            format!("# {title}\n\n{markdown}")
        }
        _ => markdown,
    })
}

/// The `<title>`, if the page has one.
fn title_of(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let start = lower.find("<title")?;
    let open_end = start + lower[start..].find('>')? + 1;
    let close = open_end + lower[open_end..].find("</title>")?;
    let title = html[open_end..close]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    (!title.is_empty()).then_some(title)
}

/// A request error with its cause (the guard's refusal is in the source chain).
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    if error.is_timeout() {
        text.push_str(" (timed out)");
    }
    text
}

#[async_trait]
impl Tool for FetchUrl {
    weft_core::tool_meta! {
        name: "fetch_url",
        description: "Fetch a web page (http or https) and read it as Markdown. Public addresses only.",
        class: Network,
        category: Read,
        parameters: json!({"type": "object", "properties": {
            "url": {"type": "string", "description": "The page's address."}
        }, "required": ["url"]}),
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let url = args
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::model("`url` is required"))?;
        self.fetch(url).await.map_err(ToolError::model)
    }
}
