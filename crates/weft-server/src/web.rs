//! The reference web client (`web-fixtures/`), embedded in the binary and served at `/`.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("../../../web-fixtures/index.html");
const APP: &str = include_str!("../../../web-fixtures/app.js");
/// The page's connection: the TypeScript client SDK, served as it is published.
const CLIENT: &str = include_str!("../../../clients/typescript/weft-client.js");
const RENDER: &str = include_str!("../../../web-fixtures/render.js");
const WORKFLOWS: &str = include_str!("../../../web-fixtures/workflows.js");
const STYLE: &str = include_str!("../../../web-fixtures/style.css");

fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    const JS: &str = "text/javascript; charset=utf-8";
    Router::new()
        .route(
            "/",
            get(|| async { file("text/html; charset=utf-8", INDEX) }),
        )
        .route("/app.js", get(|| async { file(JS, APP) }))
        .route("/weft-client.js", get(|| async { file(JS, CLIENT) }))
        .route("/render.js", get(|| async { file(JS, RENDER) }))
        .route("/workflows.js", get(|| async { file(JS, WORKFLOWS) }))
        .route(
            "/style.css",
            get(|| async { file("text/css; charset=utf-8", STYLE) }),
        )
}
