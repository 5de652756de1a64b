//! Knowledge over real HTTP and a real socket: collections REST (names, ownership, shared
//! collections, documents from text, Markdown, HTML and a URL), the collection tools in a
//! turn, hybrid ranking against a mock embeddings server, and long-term memory reaching the
//! system prompt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use reqwest::Method;
use serde_json::{json, Value};
use support::{of_type, TestServer};
use weft_server::config::ApiKeyEntry;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const ALICE: Option<&str> = Some("k-alice");
const BOB: Option<&str> = Some("k-bob");

fn script() -> Value {
    json!({"conversations": [
        {"match": "ask the atlas", "steps": [
            {"tool_calls": [{"id": "q", "name": "query_collection", "arguments": {"collection": "atlas", "query": "What do the weavers of Moonfall eat?", "k": 3}}]},
            {"text": "answered", "repeat": true}]},
        {"match": "search everything", "steps": [
            {"tool_calls": [{"id": "s", "name": "search_collections", "arguments": {"query": "feline"}}]},
            {"text": "searched", "repeat": true}]},
        {"match": "what can I search", "steps": [
            {"tool_calls": [{"id": "l", "name": "list_collections", "arguments": {}}]},
            {"text": "listed", "repeat": true}]},
        {"match": "note my colour", "steps": [
            {"tool_calls": [{"id": "r", "name": "remember", "arguments": {"fact": "The user's favourite colour is teal."}}]},
            {"text": "noted", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

fn keys(c: &mut weft_server::config::Config) {
    c.auth.api_keys = vec![
        ApiKeyEntry {
            key: "k-alice".into(),
            user: "alice".into(),
        },
        ApiKeyEntry {
            key: "k-bob".into(),
            user: "bob".into(),
        },
    ];
    c.policy.allow_private_network = true;
}

const PLACES: [(&str, &str); 6] = [
    ("Moonfall", "plums"),
    ("Ironvale", "herring"),
    ("Larkspur", "figs"),
    ("Oakhaven", "pears"),
    ("Thornbury", "cherries"),
    ("Valewood", "olives"),
];

async fn post(server: &TestServer, path: &str, key: Option<&str>, body: Value) -> (u16, Value) {
    server.call(Method::POST, path, key, Some(body)).await
}

async fn atlas(server: &TestServer) {
    let (status, _) = post(
        server,
        "/collections",
        ALICE,
        json!({"name": "atlas", "description": "places", "shared": true}),
    )
    .await;
    assert_eq!(status, 201);
    for (place, food) in PLACES {
        let text = format!(
            "Weaving towns keep records.\n\nThe weavers of {place} eat {food} in winter.\n\n\
             Weavers eat well everywhere in winter."
        );
        let (status, doc) = post(
            server,
            "/collections/atlas/documents",
            ALICE,
            json!({"title": place, "text": text}),
        )
        .await;
        assert_eq!(status, 201, "{doc}");
    }
}

#[tokio::test]
async fn collections_rest_names_ownership_and_formats() {
    let pages = MockServer::start().await;
    Mock::given(path("/guide"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            "<html><title>Guide</title><body><h2>Looms</h2><p>A loom holds the warp.</p></body></html>",
            "text/html",
        ))
        .mount(&pages)
        .await;
    let server = TestServer::start_with(script(), keys).await;
    atlas(&server).await;
    for (body, code) in [
        (json!({"name": "atlas"}), 409),
        (json!({"name": "_memory"}), 422),
        (json!({"name": "has space"}), 422),
        (json!({"name": ""}), 422),
    ] {
        let (status, _) = post(&server, "/collections", ALICE, body.clone()).await;
        assert_eq!(status, code, "{body}");
    }
    let (status, _) = post(&server, "/collections", ALICE, json!({"name": "notes"})).await;
    assert_eq!(status, 201);
    let (status, md) = post(&server, "/collections/notes/documents", ALICE,
        json!({"title": "md", "text": "# Title\n\nSome *markdown*.", "format": "markdown", "metadata": {"lang": "en"}})).await;
    assert_eq!((status, md["metadata"]["lang"].clone()), (201, json!("en")));
    let (status, html) = post(&server, "/collections/notes/documents", ALICE,
        json!({"title": "html", "text": "<p>Hello <b>there</b></p><script>x()</script>", "format": "html"})).await;
    assert_eq!(status, 201, "{html}");
    let (status, url) = post(
        &server,
        "/collections/notes/documents",
        ALICE,
        json!({"url": format!("{}/guide", pages.uri())}),
    )
    .await;
    assert_eq!(status, 201, "{url}");
    assert_eq!(url["source"], format!("{}/guide", pages.uri()));
    let (status, bad) = post(
        &server,
        "/collections/notes/documents",
        ALICE,
        json!({"title": "both", "text": "a", "url": "http://x"}),
    )
    .await;
    assert_eq!(
        (status, bad["error"]["code"].clone()),
        (422, json!("invalid_field"))
    );
    let (_, docs) = server.get("/collections/notes/documents", ALICE).await;
    assert_eq!(docs.as_array().unwrap().len(), 3);

    // Bob sees alice's shared atlas (not her private notes), and cannot change either.
    let (_, list) = server.get("/collections", BOB).await;
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["atlas"]);
    let (status, _) = server.get("/collections/notes/documents", BOB).await;
    assert_eq!(status, 404);
    let (status, _) = post(
        &server,
        "/collections/atlas/documents",
        BOB,
        json!({"title": "x", "text": "y"}),
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = server
        .call(Method::DELETE, "/collections/atlas", BOB, None)
        .await;
    assert_eq!(status, 404);
    let (status, _) = server
        .call(Method::DELETE, "/collections/notes", ALICE, None)
        .await;
    assert_eq!(status, 204);
    let (status, _) = server.get("/collections/notes/documents", ALICE).await;
    assert_eq!(status, 404);
    server.stop().await;
}

#[tokio::test]
async fn query_collection_in_a_turn_returns_the_right_chunk_first_for_another_user_too() {
    let server = TestServer::start_with(script(), keys).await;
    atlas(&server).await;
    // Bob queries alice's shared atlas.
    let mut c = server.client_with_key(BOB).await.unwrap();
    c.chat(None, "ask the atlas", json!({})).await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");
    let request = server.provider.requests().pop().unwrap();
    let result: Value = serde_json::from_str(&request.messages.last().unwrap().text()).unwrap();
    let first = &result["hits"][0];
    assert_eq!(first["title"], "Moonfall", "{result}");
    assert!(first["chunk"].as_str().unwrap().contains("plums"));
    assert!(first["document"].as_str().unwrap().starts_with("doc_"));
    assert!(first["score"].as_f64().unwrap() > 0.0);
    assert_eq!(first["collection"], "atlas");
    assert!(result["hits"].as_array().unwrap().len() <= 3);
    server.stop().await;
}

/// A toy embedding: one dimension per concept, synonyms sharing one.
struct ConceptVectors;

const CONCEPTS: [&[&str]; 4] = [
    &["cat", "cats", "feline", "kitten"],
    &["dog", "dogs", "canine"],
    &["loom", "weaving"],
    &["river", "water"],
];

fn vector_of(text: &str) -> Vec<f32> {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).collect();
    let mut v: Vec<f32> = CONCEPTS
        .iter()
        .map(|syns| words.iter().filter(|w| syns.contains(w)).count() as f32)
        .collect();
    v.push(0.01); // never all zero
    v
}

impl Respond for ConceptVectors {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let data: Vec<Value> = body["input"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"index": i, "embedding": vector_of(t.as_str().unwrap())}))
            .collect();
        ResponseTemplate::new(200).set_body_json(json!({"data": data, "model": body["model"]}))
    }
}

#[tokio::test]
async fn hybrid_ranking_finds_by_meaning_what_full_text_misses() {
    let embeddings = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ConceptVectors)
        .mount(&embeddings)
        .await;
    let url = format!("{}/v1", embeddings.uri());
    let server = TestServer::start_with(script(), |c| {
        keys(c);
        c.embeddings.url = Some(url);
    })
    .await;
    let (status, _) = post(&server, "/collections", ALICE, json!({"name": "pets"})).await;
    assert_eq!(status, 201);
    for (title, text) in [
        ("dogs", "Dogs guard the yard and bark at the river."),
        ("cats", "The cat sleeps by the loom all afternoon."),
        ("rivers", "The river floods the meadow each spring."),
    ] {
        let (status, _) = post(
            &server,
            "/collections/pets/documents",
            ALICE,
            json!({"title": title, "text": text}),
        )
        .await;
        assert_eq!(status, 201);
    }
    // "feline" appears in no document: full text alone finds nothing, the vectors find the cat.
    let mut c = server.client_with_key(ALICE).await.unwrap();
    c.chat(None, "search everything", json!({})).await;
    c.turn().await;
    let request = server.provider.requests().pop().unwrap();
    let result: Value = serde_json::from_str(&request.messages.last().unwrap().text()).unwrap();
    assert_eq!(result["hits"][0]["title"], "cats", "{result}");
    // Each ingested chunk and each query was embedded.
    assert!(embeddings.received_requests().await.unwrap().len() >= 4);
    // With pgvector the database found the nearest chunks; elsewhere the server compared them.
    assert_eq!(
        server
            .state
            .runtime
            .store
            .vectors_in_database()
            .await
            .unwrap(),
        support::use_pgvector()
    );
    server.stop().await;
}

#[tokio::test]
async fn memory_tools_and_recall_into_the_system_prompt() {
    let server = TestServer::start_with(script(), keys).await;
    let mut c = server.client_with_key(ALICE).await.unwrap();
    c.chat(None, "hello", json!({})).await;
    c.turn().await;
    let plain = server.provider.requests().pop().unwrap();
    assert!(!plain
        .tools
        .iter()
        .any(|t| t.name == "remember" || t.name == "recall"));

    c.chat(
        None,
        "note my colour",
        json!({"memory_enabled": true, "permission_mode": "auto"}),
    )
    .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");
    let with_memory = server.provider.requests().pop().unwrap();
    assert!(with_memory.tools.iter().any(|t| t.name == "remember"));
    assert_eq!(with_memory.messages.last().unwrap().text(), "remembered");

    c.chat(
        None,
        "which colour do I like?",
        json!({"memory_enabled": true}),
    )
    .await;
    c.turn().await;
    let recalled = server.provider.requests().pop().unwrap();
    assert!(
        recalled
            .system
            .contains("The user's favourite colour is teal."),
        "{}",
        recalled.system
    );
    // Memory is the user's own: bob recalls nothing, and it is not a listed collection.
    let mut b = server.client_with_key(BOB).await.unwrap();
    b.chat(
        None,
        "which colour do I like?",
        json!({"memory_enabled": true}),
    )
    .await;
    b.turn().await;
    let bobs = server.provider.requests().pop().unwrap();
    assert!(!bobs.system.contains("teal"));
    let (_, list) = server.get("/collections", ALICE).await;
    assert!(list.as_array().unwrap().is_empty(), "{list}");
    server.stop().await;
}

#[tokio::test]
async fn list_collections_in_a_turn_shows_the_users_own_and_shared_ones() {
    let server = TestServer::start_with(script(), keys).await;
    atlas(&server).await;
    let (status, _) = post(
        &server,
        "/collections",
        ALICE,
        json!({"name": "diary", "description": "private"}),
    )
    .await;
    assert_eq!(status, 201);
    let listed = |key| {
        let server = &server;
        async move {
            let mut c = server.client_with_key(key).await.unwrap();
            c.chat(None, "what can I search", json!({})).await;
            let frames = c.turn().await;
            assert!(
                of_type(&frames, "tool_approval_request").is_empty(),
                "a read tool"
            );
            let request = server.provider.requests().pop().unwrap();
            let result: Value =
                serde_json::from_str(&request.messages.last().unwrap().text()).unwrap();
            let mut names: Vec<(String, String)> = result["collections"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_owned(),
                        c["description"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            names.sort();
            names
        }
    };
    let own = |n: &str, d: &str| (n.to_owned(), d.to_owned());
    assert_eq!(
        listed(ALICE).await,
        [own("atlas", "places"), own("diary", "private")]
    );
    // Bob sees the shared atlas, not alice's diary.
    assert_eq!(listed(BOB).await, [own("atlas", "places")]);
    server.stop().await;
}
