//! The OpenAPI document: generated from the handlers' types, committed as `docs/openapi.json`
//! (regenerate with `WEFT_WRITE_OPENAPI=1`), complete (every REST operation, each with its
//! responses and an id), and served as is at `GET /openapi.json`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;

use serde_json::{json, Value};
use support::TestServer;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

fn generated() -> Value {
    aide::generate::on_error(|error| panic!("the OpenAPI document is incomplete: {error}"));
    serde_json::to_value(weft_server::rest::openapi::document()).unwrap()
}

#[test]
fn the_committed_document_is_the_generated_one() {
    let document = generated();
    let text = serde_json::to_string_pretty(&document).unwrap() + "\n";
    let path = committed_path();
    if std::env::var_os("WEFT_WRITE_OPENAPI").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "docs/openapi.json is out of date: run WEFT_WRITE_OPENAPI=1 cargo test -p weft-server --test openapi"
    );
}

#[test]
fn every_operation_is_described() {
    let document = generated();
    assert_eq!(document["openapi"], "3.1.0");
    let mut operations = 0;
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            operations += 1;
            let name = format!("{method} {path}");
            assert!(operation["operationId"].is_string(), "{name} has no id");
            let responses = operation["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|status| status.starts_with('2')),
                "{name} documents no success"
            );
            let public = matches!(path.as_str(), "/healthz" | "/metrics" | "/modes");
            assert!(
                public || responses.contains_key("default"),
                "{name} documents no error"
            );
            assert_eq!(
                operation["security"].is_array(),
                !public,
                "{name}: a key is needed exactly where the handler asks who calls"
            );
            for parameter in path.split('/').filter(|s| s.starts_with('{')) {
                let name_of = parameter.trim_matches(|c| c == '{' || c == '}');
                assert!(
                    operation["parameters"].as_array().is_some_and(|ps| ps
                        .iter()
                        .any(|p| p["name"] == name_of && p["in"] == "path")),
                    "{name} does not describe its `{name_of}`"
                );
            }
        }
    }
    assert_eq!(operations, 32, "the REST API's operations");
}

#[tokio::test]
async fn the_server_serves_the_committed_document_to_anyone() {
    let server = TestServer::start(json!({"conversations": []})).await;
    let (status, served) = server.get("/openapi.json", None).await;
    assert_eq!(status, 200);
    let committed: Value =
        serde_json::from_str(&std::fs::read_to_string(committed_path()).unwrap()).unwrap();
    assert_eq!(served, committed);
}
