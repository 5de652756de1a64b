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
const MARKDOWN: &str = include_str!("../../../web-fixtures/markdown.js");
/// Vendored from npm by `scripts/vendor-web.sh` (licenses in `web-fixtures/vendor/LICENSES.md`).
const MARKED: &str = include_str!("../../../web-fixtures/vendor/marked.js");
const PURIFY: &str = include_str!("../../../web-fixtures/vendor/purify.js");
const HIGHLIGHT: &str = include_str!("../../../web-fixtures/vendor/highlight.js");

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
        .route("/markdown.js", get(|| async { file(JS, MARKDOWN) }))
        .route("/vendor/marked.js", get(|| async { file(JS, MARKED) }))
        .route("/vendor/purify.js", get(|| async { file(JS, PURIFY) }))
        .route(
            "/vendor/highlight.js",
            get(|| async { file(JS, HIGHLIGHT) }),
        )
        .route(
            "/style.css",
            get(|| async { file("text/css; charset=utf-8", STYLE) }),
        )
}
