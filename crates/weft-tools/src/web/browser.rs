//! `browser {action, url?, selector?, text?}` (external: it asks in Default mode): headless
//! Chromium over CDP. One browser process per server, started on first use; one isolated
//! browser context per turn, disposed when the turn ends. Every connection the browser makes
//! — any page, pop-up or worker, WebSockets, beacons, redirects — goes through a local proxy
//! that checks and pins its target with the SSRF guard ([`super::proxy`]); the turn's page
//! also has each request paused and checked before it goes, for a clear error. Screenshots become assets when an asset sink is given, else data URLs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::fetch::{
    ContinueRequestParams, EnableParams, EventRequestPaused, FailRequestParams,
};
use chromiumoxide::cdp::browser_protocol::network::ErrorReason;
use chromiumoxide::cdp::browser_protocol::target::{
    CloseTargetParams, CreateBrowserContextParams, CreateTargetParams, EventTargetCreated,
};
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::Page;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{Mutex, OnceCell};
use tokio_util::sync::CancellationToken;
use weft_core::{Tool, ToolContext, ToolError};

use super::guard::NetPolicy;
use super::proxy::GuardProxy;

/// Where generated files (screenshots, media) are kept.
#[async_trait]
pub trait AssetSink: Send + Sync {
    /// Keep `bytes` for `owner`, made by `source` (a tool call or message id, so the files go
    /// when their thread does); the asset's id.
    async fn put(
        &self,
        owner: &str,
        kind: &str,
        media_type: &str,
        source: &str,
        bytes: Vec<u8>,
    ) -> Result<String, String>;
}

/// Chromium's bypass rule that takes away its own implicit one for loopback: nothing goes
/// around the proxy.
const NO_BYPASS: &str = "<-loopback>";

/// Most characters of page text an answer carries.
const TEXT_CHARS: usize = 20_000;
/// How long one action may take.
const ACTION_TIMEOUT: Duration = Duration::from_secs(30);
/// After a click, how long to let the page settle.
const SETTLE: Duration = Duration::from_millis(400);

pub struct BrowserTool {
    executable: PathBuf,
    policy: Arc<NetPolicy>,
    assets: Option<Arc<dyn AssetSink>>,
    browser: OnceCell<Arc<Running>>,
    /// Turn scope id → that turn's page.
    sessions: Arc<Mutex<HashMap<u64, Session>>>,
}

struct Running {
    browser: Browser,
    _profile: tempfile::TempDir,
    /// Every connection the browser makes goes through it (and its guard).
    proxy: GuardProxy,
}

#[derive(Clone)]
struct Session {
    context: BrowserContextId,
    page: Arc<Page>,
}

impl BrowserTool {
    /// The tool, if `executable` exists (the browser starts on first use).
    pub fn new(
        executable: PathBuf,
        policy: NetPolicy,
        assets: Option<Arc<dyn AssetSink>>,
    ) -> Option<Self> {
        executable.exists().then(|| BrowserTool {
            executable,
            policy: Arc::new(policy),
            assets,
            browser: OnceCell::new(),
            sessions: Arc::default(),
        })
    }

    async fn running(&self) -> Result<Arc<Running>, String> {
        self.browser
            .get_or_try_init(|| async {
                let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
                let proxy = GuardProxy::start(self.policy.clone())
                    .await
                    .map_err(|e| format!("cannot start the browser's proxy: {e}"))?;
                let config = BrowserConfig::builder()
                    .chrome_executable(&self.executable)
                    .no_sandbox()
                    .new_headless_mode()
                    .user_data_dir(profile.path())
                    .args([
                        "--disable-gpu",
                        "--disable-dev-shm-usage",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--no-first-run",
                    ])
                    // Everything through the guard: loopback too (Chromium bypasses the
                    // proxy for it unless told not to), and no UDP of WebRTC's around it.
                    .arg(format!("--proxy-server={}", proxy.url()))
                    .arg(format!("--proxy-bypass-list={NO_BYPASS}"))
                    .arg("--force-webrtc-ip-handling-policy=disable_non_proxied_udp")
                    .build()?;
                let (browser, mut handler) = Browser::launch(config)
                    .await
                    .map_err(|e| format!("cannot start the browser: {e}"))?;
                tokio::spawn(async move { while handler.next().await.is_some() {} });
                Ok::<_, String>(Arc::new(Running {
                    browser,
                    _profile: profile,
                    proxy,
                }))
            })
            .await
            .cloned()
    }

    /// This turn's page, opened (in a fresh browser context) if it has none.
    async fn session(&self, ctx: &ToolContext) -> Result<Session, String> {
        let id = ctx.scope.id();
        if let Some(session) = self.sessions.lock().await.get(&id) {
            return Ok(session.clone());
        }
        let running = self.running().await?;
        let browser = &running.browser;
        // A context does not take the command line's proxy: it is given again here.
        let context = browser
            .create_browser_context(
                CreateBrowserContextParams::builder()
                    .proxy_server(running.proxy.url())
                    .proxy_bypass_list(NO_BYPASS)
                    .build(),
            )
            .await
            .map_err(|e| e.to_string())?;
        let target = CreateTargetParams::builder()
            .url("about:blank")
            .browser_context_id(context.clone())
            .build()?;
        let page = Arc::new(browser.new_page(target).await.map_err(|e| e.to_string())?);
        guard_requests(&page, self.policy.clone()).await?;
        let ended = CancellationToken::new();
        close_popups(&running, &context, &page, ended.clone()).await?;
        let session = Session { context, page };
        self.sessions.lock().await.insert(id, session.clone());
        // The turn's end disposes its context (and with it the page).
        let (sessions, running) = (self.sessions.clone(), running.clone());
        ctx.scope.on_end(move || {
            ended.cancel();
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    if let Some(session) = sessions.lock().await.remove(&id) {
                        let _ = running
                            .browser
                            .dispose_browser_context(session.context)
                            .await;
                    }
                });
            }
        });
        Ok(session)
    }

    async fn act(&self, args: &Value, ctx: &ToolContext) -> Result<Value, String> {
        let action = args["action"].as_str().ok_or("`action` is required")?;
        let selector = || {
            args["selector"]
                .as_str()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("`{action}` needs a `selector`"))
        };
        match action {
            "open" => {
                let url = args["url"].as_str().ok_or("`open` needs a `url`")?;
                let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
                self.policy.check_url(&parsed)?;
                check_name(&self.policy, &parsed).await?;
                let page = self.session(ctx).await?.page;
                page.goto(url)
                    .await
                    .map_err(|e| format!("cannot open {url}: {e}"))?;
                describe(&page, true).await
            }
            "click" => {
                let page = self.open_page(ctx).await?;
                let element = page
                    .find_element(selector()?)
                    .await
                    .map_err(|e| format!("no element matches: {e}"))?;
                element.click().await.map_err(|e| e.to_string())?;
                tokio::time::sleep(SETTLE).await;
                describe(&page, false).await
            }
            "type" => {
                let text = args["text"].as_str().ok_or("`type` needs `text`")?;
                let page = self.open_page(ctx).await?;
                let element = page
                    .find_element(selector()?)
                    .await
                    .map_err(|e| format!("no element matches: {e}"))?;
                element.click().await.map_err(|e| e.to_string())?;
                element.type_str(text).await.map_err(|e| e.to_string())?;
                Ok(json!({"typed": text.chars().count()}))
            }
            "extract" => {
                let page = self.open_page(ctx).await?;
                let text = match args["selector"].as_str().filter(|s| !s.is_empty()) {
                    Some(selector) => page
                        .find_element(selector)
                        .await
                        .map_err(|e| format!("no element matches: {e}"))?
                        .inner_text()
                        .await
                        .map_err(|e| e.to_string())?
                        .unwrap_or_default(),
                    None => page_text(&page).await?,
                };
                Ok(json!({"text": clip(&text)}))
            }
            "screenshot" => {
                let page = self.open_page(ctx).await?;
                let png = page
                    .screenshot(ScreenshotParams::builder().build())
                    .await
                    .map_err(|e| e.to_string())?;
                match &self.assets {
                    Some(assets) => {
                        let id = assets
                            .put(&ctx.user_id, "image", "image/png", &ctx.tool_call_id, png)
                            .await?;
                        Ok(
                            json!({"asset_id": id, "url": format!("/assets/{id}"), "mime_type": "image/png"}),
                        )
                    }
                    None => Ok(json!({
                        "url": format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png)),
                        "mime_type": "image/png"
                    })),
                }
            }
            other => Err(format!(
                "unknown action `{}`: open, click, type, extract or screenshot",
                weft_protocol::clip(other, 32)
            )),
        }
    }

    /// The turn's page, which `open` must have made.
    async fn open_page(&self, ctx: &ToolContext) -> Result<Arc<Page>, String> {
        self.sessions
            .lock()
            .await
            .get(&ctx.scope.id())
            .map(|s| s.page.clone())
            .ok_or_else(|| "no page is open in this turn: use `open` first".to_owned())
    }
}

/// Close every other page of `context` as it opens (pop-ups, `target=_blank` links): what
/// they ask for meets the proxy's guard anyway, and a page left in front of the turn's own
/// stops its clicks from being handled.
async fn close_popups(
    running: &Arc<Running>,
    context: &BrowserContextId,
    page: &Page,
    ended: CancellationToken,
) -> Result<(), String> {
    let mut created = running
        .browser
        .event_listener::<EventTargetCreated>()
        .await
        .map_err(|e| e.to_string())?;
    let (running, context, own) = (running.clone(), context.clone(), page.target_id().clone());
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                () = ended.cancelled() => return,
                event = created.next() => match event {
                    Some(event) => event,
                    None => return,
                },
            };
            let info = &event.target_info;
            if info.r#type == "page"
                && info.target_id != own
                && info.browser_context_id.as_ref() == Some(&context)
            {
                tracing::info!(url = %info.url, "closing a page the browser tool's page opened");
                let close = CloseTargetParams::new(info.target_id.clone());
                let _ = running.browser.execute(close).await;
            }
        }
    });
    Ok(())
}

/// Pause every request the page makes and let through only what the guard allows.
async fn guard_requests(page: &Arc<Page>, policy: Arc<NetPolicy>) -> Result<(), String> {
    let mut paused = page
        .event_listener::<EventRequestPaused>()
        .await
        .map_err(|e| e.to_string())?;
    page.execute(EnableParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let page = page.clone();
    tokio::spawn(async move {
        while let Some(event) = paused.next().await {
            let allowed = match reqwest::Url::parse(&event.request.url) {
                // The page's own documents (about:, data:, blob:) never touch the network.
                Ok(url) if matches!(url.scheme(), "about" | "data" | "blob") => true,
                Ok(url) => {
                    policy.check_url(&url).is_ok() && check_name(&policy, &url).await.is_ok()
                }
                Err(_) => false,
            };
            let id = event.request_id.clone();
            let answer = if allowed {
                page.execute(ContinueRequestParams::new(id))
                    .await
                    .map(|_| ())
            } else {
                tracing::info!(url = %event.request.url, "browser request refused by the network guard");
                page.execute(FailRequestParams::new(id, ErrorReason::BlockedByClient))
                    .await
                    .map(|_| ())
            };
            if answer.is_err() {
                break;
            }
        }
    });
    Ok(())
}

/// A host name's addresses, checked (literal addresses were checked with the URL).
async fn check_name(policy: &NetPolicy, url: &reqwest::Url) -> Result<(), String> {
    let Some(url::Host::Domain(name)) = url.host() else {
        return Ok(());
    };
    let port = url.port_or_known_default().unwrap_or(80);
    policy.resolve(name, port).await.map(|_| ())
}

async fn page_text(page: &Page) -> Result<String, String> {
    page.evaluate("document.body ? document.body.innerText : ''")
        .await
        .map_err(|e| e.to_string())?
        .into_value::<String>()
        .map_err(|e| e.to_string())
}

/// Where the page is, its title, and (after `open`) its text.
async fn describe(page: &Page, with_text: bool) -> Result<Value, String> {
    let url = page.url().await.map_err(|e| e.to_string())?;
    let title = page.get_title().await.map_err(|e| e.to_string())?;
    let mut answer = json!({"url": url, "title": title});
    if with_text {
        answer["text"] = json!(clip(&page_text(page).await?));
    }
    Ok(answer)
}

fn clip(text: &str) -> String {
    if text.chars().count() <= TEXT_CHARS {
        return text.to_owned();
    }
    let cut: String = text.chars().take(TEXT_CHARS).collect();
    format!("{cut}\n[… the rest of the page was left out]")
}

#[async_trait]
impl Tool for BrowserTool {
    weft_core::tool_meta! {
        name: "browser",
        description: "Drive a real web browser: `open` a URL (returns its text), `type` text into the \
    element a CSS `selector` finds, `click` one, `extract` the text of the page or a selector, \
    take a `screenshot`. The page stays open for the rest of this turn.",
        class: Network,
        category: External,
        parameters: json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["open", "click", "type", "extract", "screenshot"]},
            "url": {"type": "string"},
            "selector": {"type": "string", "description": "A CSS selector."},
            "text": {"type": "string"}
        }, "required": ["action"]}),
    }

    /// One page per turn: actions happen in order.
    fn parallel_safe(&self) -> bool {
        false
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        match tokio::time::timeout(ACTION_TIMEOUT, self.act(&args, ctx)).await {
            Ok(Ok(answer)) => Ok(answer.to_string()),
            Ok(Err(message)) => Err(ToolError::model(message)),
            Err(_) => Err(ToolError::model(format!(
                "the browser did not finish within {} s",
                ACTION_TIMEOUT.as_secs()
            ))),
        }
    }
}
