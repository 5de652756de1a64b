//! Media over a real socket: `generate_image` against a mock Images API (asking first in
//! Default mode, retried after a 500), speech from a mock speech API and from the real
//! `espeak-ng`, route 2 answering with `image_url` / `audio_url` parts kept in the thread,
//! assets served with ranges, the prompt API's `file` outputs, and every bad media request
//! with its clear error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use base64::Engine as _;
use serde_json::{json, Value};
use support::{of_type, TestServer};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR-not-a-real-image";

fn script() -> Value {
    json!({"conversations": [
        {"match": "draw a loom", "steps": [
            {"tool_calls": [{"id": "g", "name": "generate_image", "arguments": {"prompt": "a loom at dawn", "size": "512x512"}}]},
            {"text": "drawn", "repeat": true}]},
        {"match": "say hello", "steps": [
            {"tool_calls": [{"id": "s", "name": "text_to_speech", "arguments": {"text": "Hello from Weft"}}]},
            {"text": "said", "repeat": true}]},
        {"match": "*", "steps": [{"text": "ok", "repeat": true}]}
    ]})
}

async fn images_api() -> MockServer {
    let server = MockServer::start().await;
    let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
    // The first call fails like a busy provider; the retry succeeds.
    Mock::given(method("POST"))
        .and(path("/v1/images/generations"))
        .respond_with(ResponseTemplate::new(500))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/images/generations"))
        .and(header("Authorization", "Bearer img-key"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"data": [{"b64_json": b64}]})),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/audio/speech"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(b"ID3fake-mp3".to_vec(), "audio/mpeg"),
        )
        .mount(&server)
        .await;
    server
}

async fn media_server(api: &MockServer, speech_api: bool) -> TestServer {
    let url = format!("{}/v1", api.uri());
    TestServer::start_with(script(), move |c| {
        c.media.image_url = Some(url.clone());
        c.media.image_api_key = Some("img-key".into());
        c.media.max_retries = 2;
        if speech_api {
            c.media.speech_url = Some(url);
        }
    })
    .await
}

async fn asset(
    server: &TestServer,
    url: &str,
    range: Option<&str>,
) -> (u16, String, Vec<u8>, Option<String>) {
    let mut request = reqwest::Client::new().get(server.url(url));
    if let Some(range) = range {
        request = request.header("Range", range);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let content_range = response
        .headers()
        .get("content-range")
        .map(|v| v.to_str().unwrap().to_owned());
    (
        status,
        kind,
        response.bytes().await.unwrap().to_vec(),
        content_range,
    )
}

#[tokio::test]
async fn generate_image_asks_first_retries_a_500_and_keeps_the_image() {
    let api = images_api().await;
    let server = media_server(&api, false).await;
    let mut c = server.client().await;
    c.chat(None, "draw a loom", json!({})).await;
    let ask = c
        .recv_until(|f| f["type"] == "tool_approval_request")
        .await
        .pop()
        .unwrap();
    assert_eq!(ask["name"], "generate_image");
    c.send(json!({"type": "tool_approval_response", "tool_call_id": ask["tool_call_id"], "decision": "allow"}))
        .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");
    let result: Value = serde_json::from_str(&server.last_tool_result()).unwrap();
    assert_eq!(result["mime_type"], "image/png");
    let (status, kind, bytes, _) = asset(&server, result["url"].as_str().unwrap(), None).await;
    assert_eq!(
        (status, kind.as_str(), bytes.as_slice()),
        (200, "image/png", PNG)
    );
    let sent: Vec<Value> = api
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(sent.len(), 2, "one 500, one retry");
    assert_eq!(sent[1]["prompt"], "a loom at dawn");
    assert_eq!(sent[1]["size"], "512x512");
    // A tool's file goes with its thread too.
    let thread = frames[0]["thread_id"].as_str().unwrap();
    let (status, _) = server
        .call(
            reqwest::Method::DELETE,
            &format!("/threads/{thread}"),
            None,
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(
        asset(&server, result["url"].as_str().unwrap(), None)
            .await
            .0,
        404
    );
    server.stop().await;
}

#[tokio::test]
async fn route_two_answers_with_media_parts_kept_in_the_thread() {
    let api = images_api().await;
    let server = media_server(&api, false).await;
    let mut c = server.client().await;
    c.chat(
        None,
        "",
        json!({"media_generation": {"mode": "image", "prompt": "a loom"}}),
    )
    .await;
    let frames = c.turn().await;
    assert!(of_type(&frames, "error").is_empty(), "{frames:?}");
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["status"], "completed");
    let image = message["content"][0]["image_url"].as_str().unwrap();
    assert_eq!(message["content"][0]["type"], "image_url");
    assert_eq!(asset(&server, image, None).await.1, "image/png");
    let thread = frames[0]["thread_id"].as_str().unwrap();

    // Speech offline with espeak-ng (scripts/test.sh installs it), in the same thread.
    assert!(
        std::path::Path::new("/usr/bin/espeak-ng").exists(),
        "espeak-ng is not installed: ./scripts/test.sh installs it"
    );
    c.chat(
        Some(thread),
        "",
        json!({"media_generation": {"mode": "speech", "text": "Hello from Weft"}}),
    )
    .await;
    let frames = c.turn().await;
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["content"][0]["type"], "audio_url", "{message}");
    let audio = message["content"][0]["audio_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, kind, wav, _) = asset(&server, &audio, None).await;
    assert_eq!(
        (status, kind.as_str(), &wav[..4]),
        (200, "audio/wav", &b"RIFF"[..])
    );
    assert_eq!(&wav[8..12], b"WAVE");
    // Real speech: the data chunk's length over the byte rate is a plausible duration.
    let byte_rate = u32::from_le_bytes([wav[28], wav[29], wav[30], wav[31]]);
    let seconds = (wav.len() - 44) as f64 / f64::from(byte_rate);
    assert!((0.5..10.0).contains(&seconds), "{seconds} s");
    // Players seek with ranges.
    let (status, _, part, range) = asset(&server, &audio, Some("bytes=0-99")).await;
    assert_eq!((status, part.len()), (206, 100));
    assert_eq!(range.unwrap(), format!("bytes 0-99/{}", wav.len()));
    // The bytes' SHA-256 is their ETag; a client that has them gets 304.
    let sha = {
        use sha2::Digest;
        format!("\"{}\"", hex::encode(sha2::Sha256::digest(&wav)))
    };
    let response = reqwest::Client::new()
        .get(server.url(&audio))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["etag"].to_str().unwrap(), sha);
    let response = reqwest::Client::new()
        .get(server.url(&audio))
        .header("If-None-Match", &sha)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 304);
    assert!(response.bytes().await.unwrap().is_empty());
    let (status, _, tail, _) = asset(&server, &audio, Some("bytes=-10")).await;
    assert_eq!((status, tail.as_slice()), (206, &wav[wav.len() - 10..]));
    let (status, _, _, range) =
        asset(&server, &audio, Some(&format!("bytes={}-", wav.len() + 5))).await;
    assert_eq!(
        (status, range.unwrap()),
        (416, format!("bytes */{}", wav.len()))
    );

    // Both answers are in the thread.
    let (_, messages) = server
        .get(&format!("/threads/{thread}/messages"), None)
        .await;
    let kinds: Vec<Value> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"][0]["type"].clone())
        .collect();
    assert_eq!(kinds, [json!("image_url"), json!("audio_url")]);

    // Deleting the thread deletes its files, bytes included.
    let files = |dir: &std::path::Path| walk(dir).len();
    let dir = server.state.runtime.config.assets.dir.clone();
    assert_eq!(files(&dir), 2);
    let (status, _) = server
        .call(
            reqwest::Method::DELETE,
            &format!("/threads/{thread}"),
            None,
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(asset(&server, image, None).await.0, 404);
    assert_eq!(asset(&server, &audio, None).await.0, 404);
    assert_eq!(files(&dir), 0);
    server.stop().await;
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[tokio::test]
async fn generated_media_are_the_prompt_apis_file_outputs() {
    let api = images_api().await;
    let server = media_server(&api, true).await;
    let (status, prompt) = server
        .call(
            reqwest::Method::POST,
            "/prompt",
            None,
            Some(json!({"input": "draw a loom", "permission_mode": "auto"})),
        )
        .await;
    assert_eq!(status, 200, "{prompt}");
    assert_eq!(prompt["state"], "completed", "{prompt}");
    let files: Vec<&Value> = prompt["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["type"] == "file")
        .collect();
    assert_eq!(files.len(), 1, "{prompt}");
    assert_eq!(files[0]["kind"], "image");
    let url = files[0]["url"].as_str().unwrap();
    assert!(url.starts_with("/assets/"), "{url}");
    let (status, _, bytes, _) = asset(&server, url, None).await;
    assert_eq!((status, bytes.as_slice()), (200, PNG));
    server.stop().await;
}

#[tokio::test]
async fn speech_through_an_api_is_mp3() {
    let api = images_api().await;
    let server = media_server(&api, true).await;
    let mut c = server.client().await;
    c.chat(None, "say hello", json!({"permission_mode": "auto"}))
        .await;
    c.turn().await;
    let result: Value = serde_json::from_str(&server.last_tool_result()).unwrap();
    assert_eq!(result["mime_type"], "audio/mpeg");
    let spoken = api
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.url.path() == "/v1/audio/speech")
        .unwrap();
    let body: Value = serde_json::from_slice(&spoken.body).unwrap();
    assert_eq!(
        (body["input"].as_str(), body["voice"].as_str()),
        (Some("Hello from Weft"), Some("alloy"))
    );
    server.stop().await;
}

#[tokio::test]
async fn bad_media_requests_get_clear_errors() {
    let refusing = MockServer::start().await;
    Mock::given(path("/v1/images/generations"))
        .respond_with(
            ResponseTemplate::new(400)
                .set_body_json(json!({"error": {"message": "content policy"}})),
        )
        .mount(&refusing)
        .await;
    let server = media_server(&refusing, false).await;
    let mut c = server.client().await;
    for (media, code) in [
        (json!({"mode": "video", "prompt": "x"}), "invalid_field"),
        (json!({"mode": "image", "prompt": "  "}), "invalid_field"),
        (
            json!({"mode": "image", "prompt": "x", "size": "9x9"}),
            "invalid_field",
        ),
    ] {
        c.chat(None, "", json!({"media_generation": media})).await;
        let error = c.recv_until(|f| f["type"] == "error").await.pop().unwrap();
        assert_eq!(error["code"], code, "{media}");
    }
    // The provider refuses: the turn ends failed, with an error frame that says why.
    c.chat(
        None,
        "",
        json!({"media_generation": {"mode": "image", "prompt": "forbidden"}}),
    )
    .await;
    let frames = c.turn().await;
    let message = &of_type(&frames, "message")[0]["message"];
    assert_eq!(message["status"], "failed");
    let error = of_type(&frames, "error")[0];
    assert!(
        error["message"].as_str().unwrap().contains("HTTP 400"),
        "{error}"
    );
    server.stop().await;

    // No image generator configured: the route says so.
    let bare = TestServer::start(script()).await;
    let mut c = bare.client().await;
    c.chat(
        None,
        "",
        json!({"media_generation": {"mode": "image", "prompt": "x"}}),
    )
    .await;
    let error = c.recv_until(|f| f["type"] == "error").await.pop().unwrap();
    assert_eq!(error["code"], "unsupported_route");
    bare.stop().await;
}

#[tokio::test]
async fn a_file_over_the_asset_limit_is_refused_clearly() {
    let api = images_api().await;
    let url = format!("{}/v1", api.uri());
    let server = TestServer::start_with(script(), move |c| {
        c.media.image_url = Some(url);
        c.media.image_api_key = Some("img-key".into());
        c.assets.max_bytes = 16;
    })
    .await;
    let mut c = server.client().await;
    c.chat(
        None,
        "",
        json!({"media_generation": {"mode": "image", "prompt": "a loom"}}),
    )
    .await;
    let frames = c.turn().await;
    assert_eq!(
        of_type(&frames, "message")[0]["message"]["status"],
        "failed"
    );
    let error = of_type(&frames, "error")[0];
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("over the 16 bytes"),
        "{error}"
    );
    server.stop().await;
}

/// A small in-memory S3: PUT, GET (with one range), HEAD and DELETE of `/<bucket>/<key>`, and
/// the bulk delete.
#[derive(Clone, Default)]
struct FakeS3 {
    objects: std::sync::Arc<parking_lot::Mutex<std::collections::HashMap<String, Vec<u8>>>>,
}

impl wiremock::Respond for FakeS3 {
    fn respond(&self, request: &wiremock::Request) -> ResponseTemplate {
        let key = request.url.path().to_owned();
        let mut objects = self.objects.lock();
        match request.method.as_str() {
            "PUT" => {
                objects.insert(key, request.body.clone());
                ResponseTemplate::new(200).insert_header("ETag", "\"e1\"")
            }
            "DELETE" => {
                objects.remove(&key);
                ResponseTemplate::new(204)
            }
            // Bulk delete (`POST /<bucket>?delete`): every `<Key>` in the body.
            "POST" => {
                let body = String::from_utf8_lossy(&request.body).into_owned();
                let mut deleted = String::new();
                for part in body.split("<Key>").skip(1) {
                    let name = part.split("</Key>").next().unwrap_or_default();
                    objects.remove(&format!("{key}/{name}"));
                    deleted.push_str(&format!("<Deleted><Key>{name}</Key></Deleted>"));
                }
                ResponseTemplate::new(200).set_body_string(format!(
                    "<?xml version=\"1.0\"?><DeleteResult>{deleted}</DeleteResult>"
                ))
            }
            _ => match objects.get(&key) {
                None => ResponseTemplate::new(404).set_body_string(
                    "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code></Error>",
                ),
                Some(bytes) => {
                    let found = |status: u16| {
                        ResponseTemplate::new(status)
                            .insert_header("ETag", "\"e1\"")
                            .insert_header("Last-Modified", "Sun, 22 Nov 2026 10:00:00 GMT")
                    };
                    let range = request
                        .headers
                        .get("range")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("bytes="))
                        .and_then(|v| v.split_once('-'))
                        .and_then(|(a, b)| {
                            Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?))
                        });
                    match range {
                        Some((start, end)) => {
                            let end = end.min(bytes.len() - 1);
                            found(206)
                                .insert_header(
                                    "Content-Range",
                                    format!("bytes {start}-{end}/{}", bytes.len()).as_str(),
                                )
                                .set_body_bytes(bytes[start..=end].to_vec())
                        }
                        None => found(200).set_body_bytes(bytes.clone()),
                    }
                }
            },
        }
    }
}

#[tokio::test]
async fn assets_can_live_in_an_s3_compatible_bucket() {
    let s3 = MockServer::start().await;
    let fake = FakeS3::default();
    Mock::given(wiremock::matchers::path_regex("^/weft"))
        .respond_with(fake.clone())
        .mount(&s3)
        .await;
    let endpoint = s3.uri();
    let server = TestServer::start_with(script(), move |c| {
        c.assets.s3 = Some(weft_services::assets::S3Config {
            bucket: "weft".into(),
            region: "us-east-1".into(),
            endpoint: Some(endpoint),
            access_key_id: Some("key".into()),
            secret_access_key: Some("secret".into()),
        });
    })
    .await;
    let mut c = server.client().await;
    c.chat(
        None,
        "",
        json!({"media_generation": {"mode": "speech", "text": "Hello from the bucket"}}),
    )
    .await;
    let frames = c.turn().await;
    let message = &of_type(&frames, "message")[0]["message"];
    let audio = message["content"][0]["audio_url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(fake.objects.lock().len(), 1, "the bytes are in the bucket");
    let (status, kind, wav, _) = asset(&server, &audio, None).await;
    assert_eq!(
        (status, kind.as_str(), &wav[..4]),
        (200, "audio/wav", &b"RIFF"[..])
    );
    let (status, _, part, range) = asset(&server, &audio, Some("bytes=10-19")).await;
    assert_eq!((status, part.as_slice()), (206, &wav[10..20]));
    assert_eq!(range.unwrap(), format!("bytes 10-19/{}", wav.len()));
    let thread = frames[0]["thread_id"].as_str().unwrap();
    let (status, _) = server
        .call(
            reqwest::Method::DELETE,
            &format!("/threads/{thread}"),
            None,
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert!(
        fake.objects.lock().is_empty(),
        "deleted from the bucket with the thread"
    );
    server.stop().await;
}
