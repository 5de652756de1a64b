//! Web tools: `web_search` (a configured backend), and `fetch_url` and `browser` (behind the
//! SSRF guard).

pub mod browser;
pub mod config;
pub mod fetch;
pub mod guard;
pub mod proxy;
pub mod search;

use std::sync::Arc;
use std::time::Duration;

use weft_core::Tool;

pub use browser::{AssetSink, BrowserTool};
pub use config::WebConfig;
pub use fetch::{to_markdown, FetchUrl, Page};
pub use guard::{is_public, NetPolicy};
pub use search::{SearchBackend, SearchSettings, WebSearch};

/// How the web tools are set up.
#[derive(Debug, Clone)]
pub struct WebSettings {
    pub net: NetPolicy,
    /// None: no `web_search` tool.
    pub search: Option<SearchSettings>,
    pub fetch_max_bytes: usize,
    pub fetch_timeout: Duration,
}

impl Default for WebSettings {
    fn default() -> Self {
        WebSettings {
            net: NetPolicy::default(),
            search: None,
            fetch_max_bytes: 2 * 1024 * 1024,
            fetch_timeout: Duration::from_secs(15),
        }
    }
}

/// `fetch_url`, and `web_search` when a backend is configured.
pub fn web_tools(settings: &WebSettings) -> Result<Vec<Arc<dyn Tool>>, String> {
    let mut tools: Vec<Arc<dyn Tool>> = vec![Arc::new(
        FetchUrl::new(settings).map_err(|e| format!("cannot build the web client: {e}"))?,
    )];
    if let Some(search) = &settings.search {
        tools.push(Arc::new(WebSearch::new(search.clone())?));
    }
    Ok(tools)
}
