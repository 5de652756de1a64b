//! `web_search {query, max_results?}` over the backend the operator configured: a SearXNG
//! instance (its JSON API), the Brave Search API or Tavily. Answers
//! `{"results":[{"title","url","snippet"}]}`. The backend is the operator's choice, so it is
//! not behind the SSRF guard (a SearXNG on localhost is normal).

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_core::{Tool, ToolContext, ToolError};

/// Which search service answers, and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchBackend {
    Searxng,
    Brave,
    Tavily,
}

impl SearchBackend {
    fn default_url(&self) -> Option<&'static str> {
        match self {
            SearchBackend::Searxng => None,
            SearchBackend::Brave => Some("https://api.search.brave.com"),
            SearchBackend::Tavily => Some("https://api.tavily.com"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SearchSettings {
    pub backend: SearchBackend,
    /// The service's base URL (SearXNG needs one; the APIs have defaults).
    pub url: Option<String>,
    pub api_key: Option<String>,
    /// Results when the model does not say (at most 20 either way).
    pub max_results: usize,
    pub timeout: Duration,
}

const MOST_RESULTS: usize = 20;

pub struct WebSearch {
    settings: SearchSettings,
    base: String,
    client: reqwest::Client,
}

impl WebSearch {
    pub fn new(settings: SearchSettings) -> Result<Self, String> {
        let base = settings
            .url
            .clone()
            .or_else(|| settings.backend.default_url().map(str::to_owned))
            .ok_or_else(|| format!("web search with {:?} needs a url", settings.backend))?
            .trim_end_matches('/')
            .to_owned();
        if settings.backend != SearchBackend::Searxng && settings.api_key.is_none() {
            return Err(format!(
                "web search with {:?} needs an api_key",
                settings.backend
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .user_agent(concat!("Weft/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(WebSearch {
            settings,
            base,
            client,
        })
    }

    async fn search(&self, query: &str, count: usize) -> Result<Vec<Value>, String> {
        let key = self.settings.api_key.as_deref().unwrap_or_default();
        let request = match self.settings.backend {
            SearchBackend::Searxng => self
                .client
                .get(format!("{}/search", self.base))
                .query(&[("q", query), ("format", "json")]),
            SearchBackend::Brave => self
                .client
                .get(format!("{}/res/v1/web/search", self.base))
                .query(&[("q", query), ("count", &count.to_string())])
                .header("Accept", "application/json")
                .header("X-Subscription-Token", key),
            SearchBackend::Tavily => self
                .client
                .post(format!("{}/search", self.base))
                .bearer_auth(key)
                .json(&json!({"query": query, "max_results": count})),
        };
        let response = request
            .send()
            .await
            .map_err(|e| format!("web search failed: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!(
                "web search failed: the search service answered HTTP {status}"
            ));
        }
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("web search failed: the answer is not JSON: {e}"))?;
        let (list, snippet) = match self.settings.backend {
            SearchBackend::Searxng => (&body["results"], "content"),
            SearchBackend::Brave => (&body["web"]["results"], "description"),
            SearchBackend::Tavily => (&body["results"], "content"),
        };
        Ok(list
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter(|r| r["url"].is_string())
                    .take(count)
                    .map(|r| {
                        json!({
                            "title": r["title"].as_str().unwrap_or_default(),
                            "url": r["url"],
                            "snippet": r[snippet].as_str().unwrap_or_default(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}

#[async_trait]
impl Tool for WebSearch {
    weft_core::tool_meta! {
        name: "web_search",
        description: "Search the web; returns titles, URLs and snippets (read a page with fetch_url).",
        class: Network,
        category: Read,
        parameters: json!({"type": "object", "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": MOST_RESULTS}
        }, "required": ["query"]}),
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let query = args
            .get("query")
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| ToolError::model("`query` is required"))?;
        let count = args
            .get("max_results")
            .and_then(Value::as_u64)
            .map_or(self.settings.max_results, |n| {
                usize::try_from(n).unwrap_or(MOST_RESULTS)
            })
            .clamp(1, MOST_RESULTS);
        let results = self.search(query, count).await.map_err(ToolError::model)?;
        Ok(json!({ "results": results }).to_string())
    }
}
