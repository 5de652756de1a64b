//! The web tools against local HTTP servers (wiremock): the SSRF guard (literal addresses,
//! names that resolve to loopback, redirects), `fetch_url` with the guard relaxed (HTML to
//! Markdown, content types, the size cap), and `web_search` against a mock of each backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_core::{AgentMemory, EventSink, Tool, ToolContext, TurnScope};
use weft_tools::web::{
    is_public, FetchUrl, NetPolicy, SearchBackend, SearchSettings, WebSearch, WebSettings,
};
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn ctx() -> ToolContext {
    ToolContext {
        tool_call_id: "c".into(),
        parent_id: None,
        depth: 0,
        user_id: Arc::from("tester"),
        workspace_root: None,
        result_max_bytes: 50_000,
        read_max_bytes: 16 << 20,
        cancel: CancellationToken::new(),
        events: EventSink::detached(),
        memory: AgentMemory::new(),
        emit_progress: false,
        nested: None,
        scope: TurnScope::new(),
    }
}

fn fetcher(net: NetPolicy, max_bytes: usize) -> FetchUrl {
    FetchUrl::new(&WebSettings {
        net,
        fetch_max_bytes: max_bytes,
        fetch_timeout: Duration::from_secs(2),
        ..WebSettings::default()
    })
    .unwrap()
}

async fn fetch(tool: &FetchUrl, url: &str) -> Result<String, String> {
    tool.call(json!({ "url": url }), &ctx())
        .await
        .map_err(|e| e.to_string())
}

#[test]
fn non_public_addresses_are_recognised() {
    for ip in [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "::ffff:10.1.2.3",
        "64:ff9b::a9fe:a9fe",
        "2001:db8::1",
    ] {
        assert!(
            !is_public(ip.parse::<IpAddr>().unwrap()),
            "{ip} is not public"
        );
    }
    for ip in [
        "93.184.216.34",
        "1.1.1.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
    ] {
        assert!(is_public(ip.parse::<IpAddr>().unwrap()), "{ip} is public");
    }
}

#[tokio::test]
async fn the_guard_refuses_private_addresses_names_and_schemes() {
    let tool = fetcher(NetPolicy::default(), 1 << 20);
    for url in [
        "http://127.0.0.1/",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]/",
    ] {
        let error = fetch(&tool, url).await.unwrap_err();
        assert!(error.contains("refused"), "{url}: {error}");
    }
    // A name is resolved first and refused when it resolves to loopback.
    let error = fetch(&tool, "http://localhost:9/").await.unwrap_err();
    assert!(error.contains("refused: localhost is"), "{error}");
    let error = fetch(&tool, "file:///etc/passwd").await.unwrap_err();
    assert!(error.contains("only http and https"), "{error}");
}

#[tokio::test]
async fn a_redirect_to_a_private_address_is_refused() {
    let inner = MockServer::start().await;
    Mock::given(path("/secret"))
        .respond_with(ResponseTemplate::new(200).set_body_string("internal secret"))
        .mount(&inner)
        .await;
    let port = inner.address().port();
    let outer = MockServer::start().await;
    for (from, to) in [
        ("/name", format!("http://localhost:{port}/secret")),
        ("/literal", format!("http://127.0.0.2:{port}/secret")),
        (
            "/metadata",
            "http://169.254.169.254/latest/meta-data/".to_owned(),
        ),
    ] {
        Mock::given(path(from))
            .respond_with(ResponseTemplate::new(302).insert_header("Location", to.as_str()))
            .mount(&outer)
            .await;
    }
    // The operator trusts the first hop's host (wiremock listens on 127.0.0.1), nothing else:
    // a redirected name is resolved and checked, a redirected address is checked.
    let tool = fetcher(
        NetPolicy {
            allow_private_network: false,
            allowed_hosts: ["127.0.0.1".to_owned()].into(),
        },
        1 << 20,
    );
    for (from, expected) in [
        ("/name", "refused: localhost is"),
        ("/literal", "refused: 127.0.0.2 is"),
        ("/metadata", "refused: 169.254.169.254 is"),
    ] {
        let error = fetch(&tool, &format!("{}{from}", outer.uri()))
            .await
            .unwrap_err();
        assert!(error.contains(expected), "{from}: {error}");
    }
    assert!(inner.received_requests().await.unwrap().is_empty());
}

fn relaxed() -> NetPolicy {
    NetPolicy {
        allow_private_network: true,
        ..NetPolicy::default()
    }
}

#[tokio::test]
async fn fetch_url_reads_a_local_page_as_markdown_with_the_guard_relaxed() {
    let server = MockServer::start().await;
    let page = "<html><head><title>Weft notes</title><style>p{color:red}</style></head><body>\
        <nav>menu</nav><h2>Facts</h2><p>The loom has <b>42</b> threads. See \
        <a href=\"https://example.org/more\">more</a>.</p><script>alert('x')</script></body></html>";
    Mock::given(path("/page"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(page, "text/html; charset=utf-8"))
        .mount(&server)
        .await;
    Mock::given(path("/moved"))
        .respond_with(ResponseTemplate::new(301).insert_header("Location", "/page"))
        .mount(&server)
        .await;
    Mock::given(path("/image"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(vec![0x89, b'P', b'N', b'G'], "image/png"),
        )
        .mount(&server)
        .await;
    Mock::given(path("/big"))
        .respond_with(ResponseTemplate::new(200).set_body_raw("word ".repeat(10_000), "text/plain"))
        .mount(&server)
        .await;
    Mock::given(path("/missing"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    Mock::given(path("/slow"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;

    let tool = fetcher(relaxed(), 1_000);
    let text = fetch(&tool, &format!("{}/moved", server.uri()))
        .await
        .unwrap();
    assert!(
        text.starts_with(&format!("Source: {}/page", server.uri())),
        "{text}"
    );
    assert!(text.contains("# Weft notes"), "{text}");
    assert!(text.contains("## Facts"), "{text}");
    assert!(text.contains("**42** threads"), "{text}");
    assert!(text.contains("[more](https://example.org/more)"), "{text}");
    for absent in ["alert", "color:red", "menu"] {
        assert!(!text.contains(absent), "{absent} in {text}");
    }

    let error = fetch(&tool, &format!("{}/image", server.uri()))
        .await
        .unwrap_err();
    assert!(error.contains("image/png, not a page of text"), "{error}");
    let big = fetch(&tool, &format!("{}/big", server.uri()))
        .await
        .unwrap();
    assert!(big.ends_with("[the page was longer than 1000 bytes; the rest was not read]"));
    assert!(big.len() < 1_200);
    let error = fetch(&tool, &format!("{}/missing", server.uri()))
        .await
        .unwrap_err();
    assert!(error.contains("HTTP 404"), "{error}");
    let error = fetch(&tool, &format!("{}/slow", server.uri()))
        .await
        .unwrap_err();
    assert!(error.contains("timed out"), "{error}");
}

fn search_tool(backend: SearchBackend, url: String, key: Option<&str>) -> WebSearch {
    WebSearch::new(SearchSettings {
        backend,
        url: Some(url),
        api_key: key.map(str::to_owned),
        max_results: 5,
        timeout: Duration::from_secs(2),
    })
    .unwrap()
}

async fn search(tool: &WebSearch, args: Value) -> Result<Value, String> {
    tool.call(args, &ctx())
        .await
        .map(|text| serde_json::from_str(&text).unwrap())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn web_search_speaks_to_searxng_brave_and_tavily() {
    let expected = json!({"results": [
        {"title": "Weft", "url": "https://weft.example/", "snippet": "A chat-agent server"},
        {"title": "Looms", "url": "https://looms.example/", "snippet": "Weaving"}
    ]});

    let searxng = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/search"))
        .and(query_param("q", "weft server"))
        .and(query_param("format", "json"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"results": [
            {"title": "Weft", "url": "https://weft.example/", "content": "A chat-agent server"},
            {"title": "Looms", "url": "https://looms.example/", "content": "Weaving"}
        ]})))
        .mount(&searxng)
        .await;
    let tool = search_tool(SearchBackend::Searxng, searxng.uri(), None);
    assert_eq!(
        search(&tool, json!({"query": "weft server"}))
            .await
            .unwrap(),
        expected
    );

    let brave = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/res/v1/web/search"))
        .and(query_param("q", "weft server"))
        .and(query_param("count", "2"))
        .and(header("X-Subscription-Token", "brave-key"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"web": {"results": [
            {"title": "Weft", "url": "https://weft.example/", "description": "A chat-agent server"},
            {"title": "Looms", "url": "https://looms.example/", "description": "Weaving"}
        ]}})))
        .mount(&brave)
        .await;
    let tool = search_tool(SearchBackend::Brave, brave.uri(), Some("brave-key"));
    assert_eq!(
        search(&tool, json!({"query": "weft server", "max_results": 2}))
            .await
            .unwrap(),
        expected
    );

    let tavily = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/search"))
        .and(header("Authorization", "Bearer tvly-key"))
        .and(body_json(json!({"query": "weft server", "max_results": 5})))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"results": [
            {"title": "Weft", "url": "https://weft.example/", "content": "A chat-agent server", "score": 0.9},
            {"title": "Looms", "url": "https://looms.example/", "content": "Weaving", "score": 0.5}
        ]})))
        .mount(&tavily)
        .await;
    let tool = search_tool(SearchBackend::Tavily, tavily.uri(), Some("tvly-key"));
    assert_eq!(
        search(&tool, json!({"query": "weft server"}))
            .await
            .unwrap(),
        expected
    );
}

#[tokio::test]
async fn a_failing_search_service_is_a_clear_error() {
    let server = MockServer::start().await;
    Mock::given(path("/search"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let tool = search_tool(SearchBackend::Searxng, server.uri(), None);
    let error = search(&tool, json!({"query": "x"})).await.unwrap_err();
    assert!(error.contains("answered HTTP 503"), "{error}");
    let error = search(&tool, json!({"query": " "})).await.unwrap_err();
    assert!(error.contains("`query` is required"), "{error}");
    assert!(WebSearch::new(SearchSettings {
        backend: SearchBackend::Brave,
        url: None,
        api_key: None,
        max_results: 5,
        timeout: Duration::from_secs(1),
    })
    .is_err());
}
