//! `GET /assets/{id}`: an asset's bytes, to its owner only (404 for anyone else's), with its
//! SHA-256 as the ETag and one byte range when asked.

use std::sync::Arc;

use aide::transform::TransformOperation;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use weft_protocol::ErrorCode;
use weft_services::assets::AssetError;

use super::openapi::add_response;
use super::paths::IdPath;
use super::{ApiError, Rest};
use crate::auth::AuthUser;
use crate::state::ServerState;

/// `GET /assets/{id}` as the OpenAPI document describes it.
pub fn describe(operation: TransformOperation<'_>) -> TransformOperation<'_> {
    operation
        .id("getAsset")
        .tag("assets")
        .summary("An asset's bytes (ETag, one byte range)")
        .with(|mut operation| {
            let op = operation.inner_mut();
            add_response(
                op,
                200,
                "The bytes, of the asset's media type.",
                Some("*/*"),
            );
            add_response(op, 206, "The range asked for.", Some("*/*"));
            add_response(op, 304, "Unchanged since the ETag given.", None);
            add_response(op, 416, "The range is outside the asset.", None);
            operation
        })
}

/// `GET /assets/{id}`: the bytes of one of the caller's assets (404 for anyone else's).
pub async fn serve(
    State(state): State<Arc<ServerState>>,
    Path(IdPath { id }): Path<IdPath>,
    user: AuthUser,
    headers: HeaderMap,
) -> Rest<Response> {
    let assets = &state.runtime.assets;
    let asset = match assets.find(&user.id, &id).await {
        Ok(asset) => asset,
        Err(AssetError::NotFound) => {
            return Err(ApiError::new(ErrorCode::AssetNotFound, "no such asset"))
        }
        Err(e) => return Err(ApiError::internal(e)),
    };
    // The bytes' SHA-256 is their ETag: a client holding them gets 304 and no body.
    let etag = asset.sha256.as_ref().map(|sha| format!("\"{sha}\""));
    if let Some(etag) = &etag {
        let held = headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
        if held {
            return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag.clone())]).into_response());
        }
    }
    let size = u64::try_from(asset.size).unwrap_or(0);
    // One range (`bytes=a-b`, `a-`, `-n`) answers 206 with that slice; audio and video players
    // seek this way. A range outside the asset answers 416.
    let wanted = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(|v| http_range_header::parse_range_header(v).and_then(|r| r.validate(size)));
    let (status, range) = match wanted {
        None => (StatusCode::OK, 0..size),
        Some(Ok(ranges)) => match ranges.first() {
            Some(r) if ranges.len() == 1 => (StatusCode::PARTIAL_CONTENT, *r.start()..*r.end() + 1),
            _ => (StatusCode::OK, 0..size),
        },
        Some(Err(_)) => {
            return Ok((
                StatusCode::RANGE_NOT_SATISFIABLE,
                [(header::CONTENT_RANGE, format!("bytes */{size}"))],
            )
                .into_response())
        }
    };
    let bytes = assets
        .read(&asset, range.clone())
        .await
        .map_err(ApiError::internal)?;
    let mut response = (
        status,
        [
            (header::CONTENT_TYPE, asset.media_type.clone()),
            (header::CACHE_CONTROL, "private, max-age=3600".to_owned()),
            (header::ACCEPT_RANGES, "bytes".to_owned()),
        ],
        bytes,
    )
        .into_response();
    if let Some(value) = etag.and_then(|e| header::HeaderValue::from_str(&e).ok()) {
        response.headers_mut().insert(header::ETAG, value);
    }
    if status == StatusCode::PARTIAL_CONTENT {
        let value = format!("bytes {}-{}/{size}", range.start, range.end - 1);
        if let Ok(value) = header::HeaderValue::from_str(&value) {
            response.headers_mut().insert(header::CONTENT_RANGE, value);
        }
    }
    Ok(response)
}
