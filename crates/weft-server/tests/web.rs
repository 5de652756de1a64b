//! The web tools in real turns: `web_search` through the configured backend (a local SearXNG
//! mock), `fetch_url` refused on loopback by default and allowed when the policy says so,
//! and the web tools as workflow nodes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::{of_type, TestServer};
use weft_tools::web::SearchBackend;
use wiremock::matchers::{path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn script(page: &str) -> Value {
    json!({"conversations": [
        {"match": "search", "steps": [
            {"tool_calls": [{"id": "ws", "name": "web_search", "arguments": {"query": "weft"}}]},
            {"text": "found", "repeat": true}]},
        {"match": "fetch", "steps": [
            {"tool_calls": [{"id": "fu", "name": "fetch_url", "arguments": {"url": page}}]},
            {"text": "read", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

async fn page_server() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(path("/search"))
        .and(query_param("q", "weft"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"results": [
            {"title": "Weft", "url": "https://weft.example/", "content": "A chat-agent server"}]})))
        .mount(&server)
        .await;
    Mock::given(path("/page"))
        .respond_with(ResponseTemplate::new(200).set_body_raw("<h1>Local page</h1>", "text/html"))
        .mount(&server)
        .await;
    server
}

/// The result the model saw for the turn's one tool call.
async fn tool_result(server: &TestServer, content: &str) -> String {
    let mut c = server.client().await;
    c.chat(None, content, json!({})).await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");
    let request = server.provider.requests().pop().unwrap();
    request.messages.last().unwrap().text()
}

#[tokio::test]
async fn web_search_and_fetch_url_in_a_turn() {
    let pages = page_server().await;
    let page = format!("{}/page", pages.uri());
    let server = TestServer::start_with(script(&page), |c| {
        c.web.search_backend = Some(SearchBackend::Searxng);
        c.web.search_url = Some(pages.uri());
    })
    .await;
    let found = tool_result(&server, "search the web").await;
    assert_eq!(
        serde_json::from_str::<Value>(&found).unwrap(),
        json!({"results": [{"title": "Weft", "url": "https://weft.example/", "snippet": "A chat-agent server"}]})
    );
    // The mock listens on loopback: refused by default.
    let refused = tool_result(&server, "fetch the page").await;
    assert!(refused.contains("refused: 127.0.0.1 is"), "{refused}");
    assert!(pages
        .received_requests()
        .await
        .unwrap()
        .iter()
        .all(|r| r.url.path() != "/page"));
    // Both are nodes too.
    let (_, types) = server.get("/node-types?query=web", None).await;
    assert!(types.to_string().contains("web_search"));
    server.stop().await;
}

#[tokio::test]
async fn fetch_url_reaches_a_private_address_only_when_the_policy_allows() {
    let pages = page_server().await;
    let page = format!("{}/page", pages.uri());
    let server = TestServer::start_with(script(&page), |c| {
        c.policy.allow_private_network = true;
    })
    .await;
    let read = tool_result(&server, "fetch the page").await;
    assert!(read.contains("# Local page"), "{read}");
    // No backend configured: no web_search tool.
    let request = server.provider.requests().pop().unwrap();
    let names: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"fetch_url") && !names.contains(&"web_search"));
    server.stop().await;
}
