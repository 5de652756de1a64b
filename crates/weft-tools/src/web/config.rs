//! `[web]`: the search backend (none: no `web_search`), `fetch_url`'s caps, the hosts the
//! guard trusts, and where Chromium is for the `browser` tool.

use std::path::PathBuf;

use serde::Deserialize;

/// `[web]`: the search backend (none: no `web_search`) and `fetch_url`'s caps.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct WebConfig {
    /// `searxng`, `brave` or `tavily`; absent: no `web_search` tool.
    pub search_backend: Option<super::SearchBackend>,
    /// The backend's base URL (required for SearXNG).
    pub search_url: Option<String>,
    pub search_api_key: Option<String>,
    pub search_max_results: usize,
    pub search_timeout_ms: u64,
    /// Most bytes of one page `fetch_url` reads.
    pub fetch_max_bytes: usize,
    pub fetch_timeout_ms: u64,
    /// Host names `fetch_url` may reach whatever they resolve to (an intranet wiki).
    pub allowed_hosts: Vec<String>,
    /// Chromium for the `browser` tool; the tool is left out when it is not there.
    pub browser_executable: PathBuf,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            search_backend: None,
            search_url: None,
            search_api_key: None,
            search_max_results: 5,
            search_timeout_ms: 15_000,
            fetch_max_bytes: 2 * 1024 * 1024,
            fetch_timeout_ms: 15_000,
            allowed_hosts: Vec::new(),
            browser_executable: PathBuf::from("/usr/bin/chromium"),
        }
    }
}

impl WebConfig {
    /// The web tools' settings, with the policy's private-network switch.
    pub fn settings(&self, allow_private_network: bool) -> super::WebSettings {
        use std::time::Duration;
        super::WebSettings {
            net: super::NetPolicy {
                allow_private_network,
                allowed_hosts: self
                    .allowed_hosts
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
            },
            search: self
                .search_backend
                .clone()
                .map(|backend| super::SearchSettings {
                    backend,
                    url: self.search_url.clone(),
                    api_key: self.search_api_key.clone(),
                    max_results: self.search_max_results.clamp(1, 20),
                    timeout: Duration::from_millis(self.search_timeout_ms),
                }),
            fetch_max_bytes: self.fetch_max_bytes.max(1024),
            fetch_timeout: Duration::from_millis(self.fetch_timeout_ms.max(100)),
        }
    }
}
