//! The `browser` tool in headless Chromium against local test pages: open, type into a form,
//! click, extract the result, a screenshot kept as the user's asset; the network guard
//! refusing a private address by default and a redirect to one when only the first host is
//! trusted; and a hostile page trying every way to reach an internal service (images, an
//! iframe, fetch, a beacon, a worker, a redirect, a WebSocket, a pop-up, a `_blank` link).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::{of_type, thread_of, TestServer};
use wiremock::matchers::path;
use wiremock::{Mock, MockServer, ResponseTemplate};

const FORM: &str = "<html><head><title>Greeter</title></head><body>\
<input id=\"name\"><button id=\"go\" onclick=\"document.getElementById('out').textContent = \
'Hello, ' + document.getElementById('name').value\">Go</button><div id=\"out\"></div></body></html>";

fn call(id: &str, args: Value) -> Value {
    json!({"tool_calls": [{"id": id, "name": "browser", "arguments": args}]})
}

fn script(base: &str) -> Value {
    json!({"conversations": [
        {"match": "greet through the form", "steps": [
            call("o", json!({"action": "open", "url": format!("{base}/form")})),
            call("t", json!({"action": "type", "selector": "#name", "text": "Ada"})),
            call("c", json!({"action": "click", "selector": "#go"})),
            call("e", json!({"action": "extract", "selector": "#out"})),
            call("s", json!({"action": "screenshot"})),
            {"text": "done", "repeat": true}]},
        {"match": "just open the form", "steps": [
            call("o", json!({"action": "open", "url": format!("{base}/form")})),
            {"text": "done", "repeat": true}]},
        {"match": "follow the redirect", "steps": [
            call("r", json!({"action": "open", "url": format!("{base}/redirect")})),
            call("x", json!({"action": "extract"})),
            {"text": "done", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

async fn pages() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(path("/form"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(FORM, "text/html"))
        .mount(&server)
        .await;
    let secret = format!("http://localhost:{}/secret", server.address().port());
    Mock::given(path("/redirect"))
        .respond_with(ResponseTemplate::new(302).insert_header("Location", secret.as_str()))
        .mount(&server)
        .await;
    Mock::given(path("/secret"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw("<p>internal secret</p>", "text/html"),
        )
        .mount(&server)
        .await;
    server
}

/// The browser calls' results of a thread, in order.
async fn results(server: &TestServer, thread: &str) -> Vec<(bool, String)> {
    let (_, items) = server.get(&format!("/threads/{thread}/items"), None).await;
    items
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "tool_result" && i["name"] == "browser")
        .map(|i| {
            (
                i["is_error"] == true,
                i["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn turn(server: &TestServer, text: &str) -> String {
    let mut c = server.client().await;
    c.chat(None, text, json!({"permission_mode": "auto"})).await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");
    thread_of(&frames)
}

#[tokio::test]
async fn the_browser_fills_a_form_reads_the_result_and_takes_a_screenshot() {
    let site = pages().await;
    let server = TestServer::start_with(script(&site.uri()), |c| {
        c.policy.allow_private_network = true;
    })
    .await;
    let thread = turn(&server, "greet through the form").await;
    let results = results(&server, &thread).await;
    assert_eq!(results.len(), 5, "{results:?}");
    assert!(results.iter().all(|(error, _)| !error), "{results:?}");
    let opened: Value = serde_json::from_str(&results[0].1).unwrap();
    assert_eq!(opened["title"], "Greeter");
    let extracted: Value = serde_json::from_str(&results[3].1).unwrap();
    assert_eq!(extracted["text"], "Hello, Ada");
    let shot: Value = serde_json::from_str(&results[4].1).unwrap();
    assert_eq!(shot["mime_type"], "image/png");
    let id = shot["asset_id"].as_str().unwrap();
    let response = reqwest::get(server.url(&format!("/assets/{id}")))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "image/png");
    let png = response.bytes().await.unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    server.stop().await;
}

#[tokio::test]
async fn the_browser_asks_first_in_default_mode_and_a_denial_opens_nothing() {
    let site = pages().await;
    let server = TestServer::start_with(script(&site.uri()), |c| {
        c.policy.allow_private_network = true;
    })
    .await;
    let mut c = server.client().await;
    c.chat(
        None,
        "just open the form",
        json!({"permission_mode": "default"}),
    )
    .await;
    let frames = c.recv_until(|f| f["type"] == "tool_approval_request").await;
    let request = frames.last().unwrap();
    assert_eq!(
        (request["name"].as_str(), request["category"].as_str()),
        (Some("browser"), Some("external"))
    );
    c.send(json!({"type": "tool_approval_response", "tool_call_id": request["tool_call_id"], "decision": "deny"}))
        .await;
    let frames = c.turn().await;
    let thread = thread_of(&frames);
    let results = results(&server, &thread).await;
    assert_eq!(results.len(), 1);
    assert!(
        results[0].0 && results[0].1.contains("denied"),
        "{results:?}"
    );
    assert!(
        site.received_requests().await.unwrap().is_empty(),
        "no page was opened"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_guard_refuses_private_pages_and_redirects_to_them() {
    let site = pages().await;
    // By default the local site itself is refused.
    let server = TestServer::start(script(&site.uri())).await;
    let thread = turn(&server, "greet through the form").await;
    let first = &results(&server, &thread).await[0];
    assert!(
        first.0 && first.1.contains("refused: 127.0.0.1 is"),
        "{first:?}"
    );
    server.stop().await;

    // Trusting 127.0.0.1 lets the first page through, not the redirect to `localhost`.
    let server = TestServer::start_with(script(&site.uri()), |c| {
        c.web.allowed_hosts = vec!["127.0.0.1".into()];
    })
    .await;
    let thread = turn(&server, "follow the redirect").await;
    let results = results(&server, &thread).await;
    assert!(
        results[0].1.contains("ERR_BLOCKED_BY_CLIENT"),
        "{results:?}"
    );
    assert!(
        !results
            .iter()
            .any(|(_, text)| text.contains("internal secret")),
        "{results:?}"
    );
    let reached: Vec<String> = site
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.url.path().to_owned())
        .collect();
    assert!(reached.contains(&"/redirect".to_owned()), "{reached:?}");
    assert!(!reached.contains(&"/secret".to_owned()), "{reached:?}");
    server.stop().await;
}

/// A page that tries every way a page has to reach `internal` behind the tool's back.
fn attack_page(site: &str, internal: &str) -> String {
    format!(
        r#"<html><head><title>Attack</title></head><body>
<img src="{internal}/img"><img src="{site}/ok.png">
<iframe src="{internal}/iframe"></iframe>
<img src="{site}/redirect-inside">
<a id="blank" href="{internal}/blank" target="_blank">x</a>
<script>
fetch("{internal}/fetch").catch(() => {{}});
navigator.sendBeacon("{internal}/beacon", "x");
const worker = new Worker(URL.createObjectURL(new Blob(
  ['fetch("{internal}/worker").catch(() => {{}})'], {{type: "text/javascript"}})));
try {{ new WebSocket("{ws}/ws"); }} catch (e) {{}}
window.open("{internal}/popup");
document.getElementById("blank").click();
</script><div id="out">loaded</div></body></html>"#,
        ws = internal.replacen("http", "ws", 1)
    )
}

/// A TCP service that counts every connection made to it.
async fn internal_service() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((_stream, peer)) = listener.accept().await {
            eprintln!("the internal service was reached from {peer}");
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (format!("http://localhost:{port}"), hits)
}

#[tokio::test]
async fn no_page_worker_socket_or_popup_reaches_an_internal_service() {
    let (internal, hits) = internal_service().await;
    let site = MockServer::start().await;
    let page = attack_page(&site.uri(), &internal);
    Mock::given(path("/attack"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(page, "text/html"))
        .mount(&site)
        .await;
    Mock::given(path("/ok.png"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(Vec::<u8>::new(), "image/png"))
        .mount(&site)
        .await;
    Mock::given(path("/redirect-inside"))
        .respond_with(
            ResponseTemplate::new(302).insert_header("Location", format!("{internal}/redirected")),
        )
        .mount(&site)
        .await;
    let script = json!({"conversations": [{"match": "*", "steps": [
        call("o", json!({"action": "open", "url": format!("{}/attack", site.uri())})),
        call("w", json!({"action": "click", "selector": "#out"})),
        call("e", json!({"action": "extract", "selector": "#out"})),
        {"text": "done", "repeat": true}
    ]}]});
    // The page's own host is trusted; `localhost` (the internal service) is not.
    let server = TestServer::start_with(script, |c| {
        c.web.allowed_hosts = vec!["127.0.0.1".into()];
    })
    .await;
    let thread = turn(&server, "attack").await;
    let results = results(&server, &thread).await;
    assert!(results.iter().all(|(error, _)| !error), "{results:?}");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the internal service was reached"
    );
    let reached: Vec<String> = site
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.url.path().to_owned())
        .collect();
    assert!(reached.contains(&"/ok.png".to_owned()), "{reached:?}");
    assert!(
        reached.contains(&"/redirect-inside".to_owned()),
        "{reached:?}"
    );
    server.stop().await;
}
