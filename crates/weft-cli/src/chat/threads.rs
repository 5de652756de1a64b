//! The REST side of the terminal client: `weft threads`, and checking a `--thread` exists.

use anyhow::{bail, Context};
use serde_json::Value;

fn get(url: &str, path: &str, api_key: Option<&str>) -> reqwest::RequestBuilder {
    let request = reqwest::Client::new().get(format!("{}{path}", super::address::base(url)));
    match api_key {
        Some(key) => request.bearer_auth(key),
        None => request,
    }
}

/// Fail unless `thread` is one of the caller's threads.
pub async fn ensure_exists(url: &str, thread: &str, api_key: Option<&str>) -> anyhow::Result<()> {
    let response = get(url, &format!("/threads/{thread}/messages"), api_key)
        .send()
        .await
        .with_context(|| format!("cannot reach {url} (is `weft serve` running?)"))?;
    match response.status().as_u16() {
        200 => Ok(()),
        404 | 403 => bail!("no thread `{thread}` of yours on {url} (`weft threads` lists them)"),
        status => bail!("{url} answered {status} for thread `{thread}`"),
    }
}

/// `weft threads`: the caller's threads, newest first.
pub async fn list(url: &str, api_key: Option<&str>) -> anyhow::Result<()> {
    let response = get(url, "/threads", api_key)
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    if !response.status().is_success() {
        bail!("{} answered {}", url, response.status());
    }
    let threads: Vec<Value> = response.json().await?;
    if threads.is_empty() {
        println!("no threads yet");
    }
    for t in threads {
        let active = if t["active"] == true { " ●" } else { "" };
        println!(
            "{}  {:<8} {}  {}{active}",
            t["id"].as_str().unwrap_or(""),
            t["permission_mode"].as_str().unwrap_or(""),
            t["updated_at"].as_str().unwrap_or(""),
            t["title"].as_str().unwrap_or("")
        );
    }
    Ok(())
}
