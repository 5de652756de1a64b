//! Headless Chromium driven over WebDriver (fantoccini), for the reference web client's
//! tests: the server crate's own and the replica tests that kill a real `weft serve`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// One browser at a time: two cores do not run several Chromiums well.
pub static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub struct Browser {
    pub client: Client,
    _driver: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Browser {
        Self::start_with(&[]).await
    }

    /// A browser whose system prefers dark pages.
    pub async fn start_dark() -> Browser {
        Self::start_with(&["--force-dark-mode"]).await
    }

    async fn start_with(extra_args: &[&str]) -> Browser {
        let chromium =
            std::env::var("WEFT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let chromedriver =
            std::env::var("WEFT_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        assert!(
            std::path::Path::new(&chromium).exists() && std::path::Path::new(&chromedriver).exists(),
            "headless Chromium is needed: scripts/test.sh installs Debian's chromium and chromium-driver"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = tokio::process::Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let mut args = json!([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
            format!("--user-data-dir={}", profile.path().display())
        ]);
        args.as_array_mut()
            .unwrap()
            .extend(extra_args.iter().map(|a| json!(a)));
        let caps = json!({"goog:chromeOptions": {"binary": chromium, "args": args}});
        let caps = caps.as_object().unwrap().clone();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            match ClientBuilder::native()
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("cannot start a Chromium session: {e}"),
            }
        };
        Browser {
            client,
            _driver: driver,
            _profile: profile,
        }
    }

    /// Open the page at `url` and wait until its socket is up.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap();
        self.wait("document.getElementById('connection').classList.contains('up')")
            .await;
    }

    /// Poll a JavaScript expression until it is truthy.
    pub async fn wait(&self, expr: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let v = self.js(expr).await;
            if !(v.is_null() || v == json!(false) || v == json!("") || v == json!(0)) {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for `{expr}`");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn js(&self, expr: &str) -> Value {
        self.client
            .execute(&format!("return ({expr});"), vec![])
            .await
            .unwrap()
    }

    pub async fn say(&self, text: &str) {
        let input = self.client.find(Locator::Css("#input")).await.unwrap();
        input.send_keys(text).await.unwrap();
        self.click("#send").await;
    }

    /// Click the element `css` finds, once the page shows it (a list the page fetches after
    /// it connects comes a moment later), found again if the page replaced it meanwhile.
    pub async fn click(&self, css: &str) {
        self.wait(&format!("document.querySelector({}) !== null", json!(css)))
            .await;
        for attempt in 0.. {
            let element = self.client.find(Locator::Css(css)).await.unwrap();
            match element.click().await {
                Ok(()) => return,
                Err(e) if attempt < 3 && e.to_string().contains("stale") => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("cannot click {css}: {e}"),
            }
        }
    }

    pub async fn pick_mode(&self, mode: &str) {
        self.click("#mode-button").await;
        self.click(&format!("#mode-menu li[data-mode='{mode}']"))
            .await;
        self.wait(&format!(
            "document.getElementById('mode-button').dataset.mode === '{mode}'"
        ))
        .await;
    }

    pub async fn shot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../artifacts/screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// A screenshot for the README as well: written to `docs/screenshots/` when
    /// `WEFT_WRITE_SCREENSHOTS` is set (they are committed), else only to the artifacts.
    pub async fn doc_shot(&self, name: &str) {
        self.shot(name).await;
        if std::env::var_os("WEFT_WRITE_SCREENSHOTS").is_some() {
            let png = self.client.screenshot().await.unwrap();
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
        }
    }

    /// The viewport `width` × `height` CSS pixels (a phone: 390 × 844).
    pub async fn viewport(&self, width: u32, height: u32) {
        self.client.set_window_size(width, height).await.unwrap();
        // The window's frame, if any, comes off the viewport: make up for it once.
        let inner = self.js("[window.innerWidth, window.innerHeight]").await;
        let (w, h) = (
            inner[0].as_u64().unwrap() as u32,
            inner[1].as_u64().unwrap() as u32,
        );
        if (w, h) != (width, height) {
            self.client
                .set_window_size(2 * width - w, 2 * height - h)
                .await
                .unwrap();
        }
    }

    /// axe-core's violations on the page as it is, of `impacts` (e.g. serious, critical):
    /// each as `rule: target, …`.
    pub async fn accessibility_violations(&self, impacts: &[&str]) -> Vec<String> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../web-fixtures/test/node_modules/axe-core/axe.min.js");
        let axe = std::fs::read_to_string(&path).expect(
            "axe-core is needed: scripts/test.sh installs it (npm ci --prefix web-fixtures/test)",
        );
        self.client.execute(&axe, vec![]).await.unwrap();
        let run = r#"const done = arguments[arguments.length - 1];
            axe.run(document, { resultTypes: ["violations"] })
              .then((r) => done(r.violations.map((v) => ({ id: v.id, impact: v.impact, targets: v.nodes.map((n) => n.target.join(" ")) }))))
              .catch((e) => done([{ id: "axe failed: " + e, impact: "critical", targets: [] }]));"#;
        let violations = self.client.execute_async(run, vec![]).await.unwrap();
        violations
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| impacts.iter().any(|i| v["impact"] == *i))
            .map(|v| {
                format!(
                    "{} ({}): {}",
                    v["id"].as_str().unwrap_or("?"),
                    v["impact"],
                    v["targets"]
                )
            })
            .collect()
    }

    /// Sends `key` (fantoccini's `Key`, or text) to whatever has the focus.
    pub async fn press(&self, key: &str) {
        let focused = self.client.active_element().await.unwrap();
        focused.send_keys(key).await.unwrap();
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// The text of the newest answer on the page, as rendered (Markdown): its blocks (one per
/// round of the model), each trimmed, joined by a space.
pub const ANSWER: &str = "(() => { const m = [...document.querySelectorAll('.message.assistant')].pop(); return m && Array.from(m.querySelectorAll(':scope > .flow > .text'), (t) => t.textContent.trim()).filter(Boolean).join(' '); })()";
