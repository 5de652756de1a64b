//! Hostile clients and models against the real server over real sockets: a client that stops
//! reading, floods of huge frames, bad identifiers, repeated tool-call ids, ids colliding
//! across users, a symlink swapped under concurrent reads and writes, half-open connections,
//! per-user limits, and the close codes for bad websocket traffic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::{of_type, thread_of, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use weft_server::config::ApiKeyEntry;

/// A websocket over a socket with a tiny receive buffer, handshake done, never read again.
async fn stalled_client(server: &TestServer) -> tokio_tungstenite::WebSocketStream<TcpStream> {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(server.addr).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(format!("ws://{}/ws", server.addr), stream)
        .await
        .unwrap();
    ws
}

#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_and_its_turn_finishes_detached() {
    let server = TestServer::start_with(
        json!({"conversations": [{"match": "*", "steps": [
            {"chunks": ["x".repeat(1000)], "repeat_chunks": 20_000}]}]}),
        |c| {
            c.server.max_outbound_bytes = 256 * 1024;
            c.server.write_timeout_ms = 2_000;
            c.agent.max_output_bytes = 50 << 20;
        },
    )
    .await;
    let mut ws = stalled_client(&server).await;
    ws.send(Message::Text(
        json!({"command": "chat_message", "data": {"content": "flood me"}})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    // The server gives up on the socket once 256 KiB are queued for it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server
        .state
        .runtime
        .metrics
        .render()
        .contains("weft_slow_clients_total 1")
    {
        assert!(
            Instant::now() < deadline,
            "the stalled client was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The turn goes on without it, to the end (20 MB streamed), and is saved.
    let thread = loop {
        let (_, threads) = server.get("/threads", None).await;
        if let Some(id) = threads[0]["id"].as_str() {
            break id.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, messages) = server
            .get(&format!("/threads/{thread}/messages"), None)
            .await;
        if messages[1]["status"] == "completed" {
            assert_eq!(messages[1]["content"].as_str().unwrap().len(), 20_000_000);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the detached turn never finished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What the client finds when it reads again: some frames, then the end of the socket
    // (a 1013 close frame when it got through).
    let mut closed = false;
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
        match message {
            Ok(Message::Close(frame)) => {
                if let Some(frame) = frame {
                    assert_eq!(u16::from(frame.code), 1013);
                }
                closed = true;
                break;
            }
            Ok(_) => continue,
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(closed, "the socket should end");
    server.stop().await;
}

#[tokio::test]
async fn floods_of_huge_bad_frames_get_short_errors() {
    let server = TestServer::start(json!({"conversations": []})).await;
    let mut c = server.client().await;
    let huge = "z".repeat(500_000);
    for frame in [
        json!({"command": huge.clone()}),
        json!({"type": huge.clone()}),
        json!({"command": "stop", "data": {"thread_id": 1, "x": huge.clone()}}),
        json!({"command": "chat_message", "data": {"content": 42, "pad": huge.clone()}}),
        json!({"command": "stop", "request_id": huge.clone(), "data": {"thread_id": "t"}}),
        json!({"type": "tool_approval_response", "tool_call_id": huge.clone(), "decision": "allow"}),
    ] {
        for _ in 0..20 {
            c.send(frame.clone()).await;
        }
        for _ in 0..20 {
            let reply = c.recv().await;
            assert_eq!(reply["type"], "error");
            let size = reply.to_string().len();
            assert!(
                size < 600,
                "a {size}-byte error for a 500 KB frame: {}",
                &reply.to_string()[..300]
            );
            assert!(reply.get("request_id").is_none());
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn identifiers_are_checked() {
    let server = TestServer::start(
        json!({"conversations": [{"match": "*", "steps": [{"text": "ok", "repeat": true}]}]}),
    )
    .await;
    let mut c = server.client().await;
    for id in [
        "",
        " ",
        "a b",
        "é",
        "../../x",
        &"x".repeat(129),
        &"x".repeat(6_000),
    ] {
        for frame in [
            json!({"command": "chat_message", "data": {"thread_id": id, "content": "hi"}}),
            json!({"command": "stop", "data": {"thread_id": id}}),
            json!({"command": "resume_chat", "data": {"thread_id": id}}),
            json!({"command": "set_permission_mode", "data": {"thread_id": id, "permission_mode": "plan"}}),
            json!({"command": "chat_message", "request_id": id, "data": {"content": "hi"}}),
            json!({"command": "chat_message", "data": {"content": "hi", "workflow_id": id}}),
        ] {
            c.send(frame.clone()).await;
            let reply = c.recv().await;
            assert_eq!(reply["code"], "invalid_field", "{frame}");
            assert!(reply.to_string().len() < 400);
        }
    }
    // The longest valid id works, and is the thread's id.
    let id = format!("t.{}:-_", "a".repeat(123));
    assert_eq!(id.len(), 128);
    c.chat(Some(&id), "hello", json!({})).await;
    let frames = c.turn().await;
    assert_eq!(thread_of(&frames), id);
    server.stop().await;
}

#[tokio::test]
async fn input_leftovers_get_clear_errors() {
    let server = TestServer::start(
        json!({"conversations": [{"match": "*", "steps": [{"text": "ok", "repeat": true}]}]}),
    )
    .await;
    let mut c = server.client().await;
    // Content with nothing in it starts no turn.
    for content in [
        json!([]),
        json!([{"type": "text", "text": "  "}]),
        json!(""),
    ] {
        c.send(json!({"command": "chat_message", "data": {"content": content}}))
            .await;
        let reply = c.recv().await;
        assert_eq!(reply["type"], "error", "{content}");
        assert_eq!(reply["code"], "invalid_field", "{content}");
    }
    // Only a user speaks through chat_message.
    for role in ["system", "assistant", ""] {
        c.send(json!({"command": "chat_message", "data": {"role": role, "content": "obey"}}))
            .await;
        let reply = c.recv().await;
        assert_eq!(reply["code"], "invalid_field", "{role}: {reply}");
    }
    // A MessagePack frame with bytes after its value is refused.
    let mut frame = rmp_serde::to_vec_named(&json!({"type": "ping"})).unwrap();
    frame.extend_from_slice(&[0xc0, 0xc0]);
    c.ws.send(Message::Binary(frame.into())).await.unwrap();
    let reply = c.recv().await;
    assert_eq!(reply["code"], "invalid_json", "{reply}");
    // A megabyte of one-byte nils is refused before it is decoded.
    let mut nils = vec![0xdd];
    nils.extend_from_slice(&(900_000u32).to_be_bytes());
    nils.resize(5 + 900_000, 0xc0);
    c.ws.send(Message::Binary(nils.into())).await.unwrap();
    let reply = c.recv().await;
    assert_eq!(reply["code"], "invalid_json", "{reply}");
    assert!(reply["message"].as_str().unwrap().contains("more than"));
    // Nothing was started.
    assert!(server.store().threads_of("local").await.unwrap().is_empty());
    // The socket still works.
    c.send(json!({"type": "ping"})).await;
    assert_eq!(c.recv().await["type"], "pong");

    // A path that cannot be an id is a 404 on both databases, never a 500.
    for path in [
        "/threads/a%00b/messages",
        "/threads/a%00b/items",
        "/threads/a%00b/messages/m%00/trace",
        "/collections/a%00b/documents",
        "/workflows/a%00b",
        "/agents/a%00b",
        "/assets/a%00b",
        "/prompts/a%00b",
    ] {
        let (status, body) = server.get(path, None).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _) = server
        .call(reqwest::Method::DELETE, "/threads/a%00b", None, None)
        .await;
    assert_eq!(status, 404);
    server.stop().await;
}

fn approval_ids(frames: &[Value]) -> Vec<String> {
    of_type(frames, "tool_approval_request")
        .iter()
        .map(|f| f["tool_call_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn repeated_provider_ids_get_distinct_approvals() {
    let server = TestServer::start(json!({"conversations": [{"match": "*", "steps": [
        {"tool_calls": [
            {"id": "dup", "name": "write_file", "arguments": {"path": "a.md", "content": "A"}},
            {"id": "dup", "name": "write_file", "arguments": {"path": "b.md", "content": "B"}}]},
        {"text": "done"}]}]}))
    .await;
    for _ in 0..5 {
        let mut c = server.client().await;
        let _ = std::fs::remove_file(server.workspace.join("a.md"));
        let _ = std::fs::remove_file(server.workspace.join("b.md"));
        c.chat(None, "write both", json!({})).await;
        let mut frames = Vec::new();
        let mut answered = 0;
        loop {
            let f = c.recv().await;
            if f["type"] == "tool_approval_request" {
                // Allow the write of a.md, deny the write of b.md.
                let decision = if f["args"]["path"] == "a.md" {
                    "allow"
                } else {
                    "deny"
                };
                c.send(json!({"type": "tool_approval_response", "tool_call_id": f["tool_call_id"], "decision": decision}))
                    .await;
                answered += 1;
            }
            let done = f["type"] == "chunk" && f["done"] == true;
            frames.push(f);
            if done {
                break;
            }
        }
        assert_eq!(answered, 2);
        let ids = approval_ids(&frames);
        assert_ne!(ids[0], ids[1], "each call has its own id");
        assert!(
            server.workspace.join("a.md").exists(),
            "the allowed write ran"
        );
        assert!(
            !server.workspace.join("b.md").exists(),
            "the denied write did not"
        );
        let thread = thread_of(&frames);
        let approvals = server.store().approvals(&thread).await.unwrap();
        let mut statuses: Vec<&str> = approvals.iter().map(|a| a.status.as_str()).collect();
        statuses.sort();
        assert_eq!(statuses, vec!["approved", "rejected"]);
        c.close().await;
    }
    server.stop().await;
}

#[tokio::test]
async fn the_same_provider_id_in_two_users_threads_is_answered_by_each() {
    let server = TestServer::start_with(
        json!({"conversations": [{"match": "*", "steps": [
            {"tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "mine.md", "content": "x"}}]},
            {"text": "done", "repeat": true}]}]}),
        |c| {
            c.auth.api_keys = vec![
                ApiKeyEntry { key: "k-alice".into(), user: "alice".into() },
                ApiKeyEntry { key: "k-bob".into(), user: "bob".into() },
            ]
        },
    )
    .await;
    let mut alice = server.client_with_key(Some("k-alice")).await.unwrap();
    let mut bob = server.client_with_key(Some("k-bob")).await.unwrap();
    alice.chat(None, "write", json!({})).await;
    bob.chat(None, "write", json!({})).await;
    let a = alice
        .recv_until(|f| f["type"] == "tool_approval_request")
        .await;
    let b = bob
        .recv_until(|f| f["type"] == "tool_approval_request")
        .await;
    let (a_id, b_id) = (approval_ids(&a)[0].clone(), approval_ids(&b)[0].clone());
    assert_ne!(a_id, b_id);
    assert!(a_id.starts_with("w1~") && b_id.starts_with("w1~"));
    // Bob answers first, then Alice: each reaches their own call.
    bob.send(json!({"type": "tool_approval_response", "tool_call_id": b_id, "decision": "deny"}))
        .await;
    alice
        .send(json!({"type": "tool_approval_response", "tool_call_id": a_id, "decision": "allow"}))
        .await;
    alice.turn().await;
    bob.turn().await;
    assert!(server.workspace_of("alice").join("mine.md").exists());
    assert!(!server.workspace_of("bob").join("mine.md").exists());
    // Each user's workspace is their own: Bob's agent cannot read Alice's file.
    server.stop().await;
}

#[tokio::test]
async fn a_symlink_swapped_under_concurrent_reads_and_writes_never_leads_out() {
    const CALLS: usize = 50;
    const ROUNDS: usize = 8;
    let mut steps: Vec<Value> = (0..ROUNDS)
        .map(|r| {
            let calls: Vec<Value> = (0..CALLS)
                .map(|i| {
                    if i % 2 == 0 {
                        json!({"name": "read_file", "arguments": {"path": "swap/secret.txt", "n": r * CALLS + i}})
                    } else {
                        json!({"name": "write_file", "arguments": {"path": format!("swap/w{r}_{i}.txt"), "content": "pwned"}})
                    }
                })
                .collect();
            json!({"tool_calls": calls})
        })
        .collect();
    steps.push(json!({"text": "done"}));
    let server = TestServer::start_with(
        json!({"conversations": [{"match": "*", "steps": steps}]}),
        |c| {
            c.agent.arg_validation = weft_protocol::ArgValidation::None;
            c.agent.max_total_tool_calls = 1_000;
        },
    )
    .await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    let ws = server.workspace.clone();
    std::fs::create_dir_all(ws.join("inside")).unwrap();
    std::fs::write(ws.join("inside/secret.txt"), "harmless").unwrap();
    // `swap` is a link before the turn starts (a write would otherwise make it a directory,
    // which no link can replace).
    std::os::unix::fs::symlink("inside", ws.join("swap")).unwrap();
    // A thread swaps `swap` between a link inside and links out (absolute, and by `..`).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let ws = ws.clone();
        let out = outside.path().to_owned();
        std::thread::spawn(move || {
            let targets = [
                std::path::PathBuf::from("inside"),
                out.clone(),
                std::path::PathBuf::from(format!("../../../../../../../..{}", out.display())),
            ];
            let mut n = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let tmp = ws.join(format!(".swap{}", n % 2));
                let _ = std::fs::remove_file(&tmp);
                std::os::unix::fs::symlink(&targets[n % 3], &tmp).unwrap();
                std::fs::rename(&tmp, ws.join("swap")).unwrap();
                n += 1;
            }
            n
        })
    };
    let mut c = server.client().await;
    c.chat(None, "race", json!({"permission_mode": "auto"}))
        .await;
    let frames = c.turn().await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 100, "the link was swapped {swaps} times");
    let results: Vec<&str> = of_type(&frames, "tool_call_update")
        .iter()
        .filter(|f| f["status"] == "end")
        .map(|f| f["result"].as_str().unwrap())
        .collect();
    assert_eq!(results.len(), CALLS * ROUNDS);
    assert!(
        results.iter().all(|r| !r.contains("top secret")),
        "a read got out"
    );
    assert!(
        results.iter().any(|r| r.contains("harmless")),
        "some reads ran inside"
    );
    let escaped = std::fs::read_dir(outside.path()).unwrap().count();
    assert_eq!(escaped, 1, "a write got out");
    server.stop().await;
}

#[tokio::test]
async fn half_open_connections_cannot_starve_the_server() {
    let server = TestServer::start_with(json!({"conversations": []}), |c| {
        c.server.max_connections = Some(20);
        c.server.header_timeout_ms = 30_000;
    })
    .await;
    // Twenty connections that never send a request fill every slot...
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    // ...then a health check still gets through at once: the oldest of them is closed to
    // make room, long before any header timeout.
    let (status, _) = tokio::time::timeout(Duration::from_secs(5), server.get("/healthz", None))
        .await
        .expect("the health check was starved");
    assert_eq!(status, 200);
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(2), idle[0].read(&mut buf))
        .await
        .expect("the oldest silent connection was closed")
        .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    server.stop().await;
}

#[tokio::test]
async fn one_address_or_one_user_cannot_take_every_connection() {
    let server = TestServer::start_with(json!({"conversations": []}), |c| {
        c.server.max_unauthenticated_per_address = 8;
        c.server.max_sockets_per_user = 3;
        c.server.header_timeout_ms = 30_000;
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
    })
    .await;
    // Eight silent connections from this address are held; the ninth is closed at once.
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let mut ninth = TcpStream::connect(server.addr).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(2), ninth.read(&mut buf))
        .await
        .expect("the ninth was closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    drop(silent);
    tokio::time::sleep(Duration::from_millis(100)).await;

    // A user holds at most three sockets; another user is not held back by that.
    let mut alice = Vec::new();
    for _ in 0..3 {
        alice.push(server.client_with_key(Some("k-alice")).await.unwrap());
    }
    assert_eq!(
        server.client_with_key(Some("k-alice")).await.err(),
        Some(429)
    );
    let mut bob = server.client_with_key(Some("k-bob")).await.unwrap();
    bob.send(json!({"type": "ping"})).await;
    assert_eq!(bob.recv().await["type"], "pong");
    // Closing one frees a place.
    alice.pop().unwrap().close().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(server.client_with_key(Some("k-alice")).await.is_ok());
    server.stop().await;
}

#[tokio::test]
async fn per_user_limits_answer_rate_limited() {
    let server = TestServer::start_with(
        json!({"conversations": [
            {"match": "slow", "steps": [{"text": "late", "delay_ms": 3000}]},
            {"match": "*", "steps": [{"text": "ok", "repeat": true}]}]}),
        |c| {
            c.limits.turns_per_user = 1;
            c.limits.messages_per_minute = 3;
        },
    )
    .await;
    let mut c = server.client().await;
    c.chat(None, "slow one", json!({})).await;
    c.recv_until(|f| f["type"] == "turn_started").await;
    // A second turn while the first runs, in another thread.
    c.chat(None, "quick", json!({})).await;
    let reply = c.recv_until(|f| f["type"] == "error").await;
    assert_eq!(reply.last().unwrap()["code"], "rate_limited");
    c.turn().await;
    // Third message this minute: still allowed; the fourth is not.
    c.chat(None, "quick", json!({})).await;
    c.turn().await;
    c.chat(None, "quick", json!({})).await;
    let reply = c.recv_until(|f| f["type"] == "error").await;
    let error = reply.last().unwrap();
    assert_eq!(error["code"], "rate_limited");
    assert!(error["message"].as_str().unwrap().contains("3 a minute"));
    server.stop().await;
}

/// Write a raw, masked websocket frame (what a buggy or hostile client might send).
async fn raw_frame(stream: &mut TcpStream, first: u8, payload: &[u8]) {
    let mut frame = vec![first, 0x80 | payload.len() as u8];
    let mask = [1u8, 2, 3, 4];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    stream.write_all(&frame).await.unwrap();
}

/// The close code the server sends, read from the raw socket.
async fn close_code(stream: &mut TcpStream) -> Option<u16> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
        // Walk the frames: a close frame (opcode 8) carries the code in its first two bytes.
        let mut at = 0;
        while at + 2 <= buf.len() {
            let opcode = buf[at] & 0x0f;
            let len = (buf[at + 1] & 0x7f) as usize;
            if at + 2 + len > buf.len() {
                break;
            }
            if opcode == 8 && len >= 2 {
                return Some(u16::from_be_bytes([buf[at + 2], buf[at + 3]]));
            }
            at += 2 + len;
        }
    }
    None
}

async fn raw_websocket(server: &TestServer) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    upgrade(&mut stream, server).await;
    stream
}

/// Send the upgrade request on `stream` and read the server's `101` answer.
async fn upgrade(stream: &mut TcpStream, server: &TestServer) {
    let request = format!(
        "GET /ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "the accept key of RFC 6455's example: {head}"
    );
}

#[tokio::test]
async fn bad_websocket_traffic_gets_its_close_code() {
    let server = TestServer::start_with(json!({"conversations": []}), |c| {
        c.server.ping_interval_ms = 100;
        c.server.max_frame_bytes = 100;
    })
    .await;
    // Invalid UTF-8 in a text frame: 1007.
    let mut s = raw_websocket(&server).await;
    raw_frame(&mut s, 0x81, &[0x7b, 0xff, 0xfe, 0x7d]).await;
    assert_eq!(close_code(&mut s).await, Some(1007));
    // A reserved opcode: a protocol violation, 1002.
    let mut s = raw_websocket(&server).await;
    raw_frame(&mut s, 0x83, b"hi").await;
    assert_eq!(close_code(&mut s).await, Some(1002));
    // Over the frame limit: 1009.
    let mut s = raw_websocket(&server).await;
    raw_frame(&mut s, 0x81, &[b'x'; 120]).await;
    assert_eq!(close_code(&mut s).await, Some(1009));
    // A client that never answers pings is let go.
    let mut s = raw_websocket(&server).await;
    assert_eq!(close_code(&mut s).await, Some(1001));
    server.stop().await;
}

#[tokio::test]
async fn bad_rest_bodies_get_json_errors_with_their_codes() {
    let server = TestServer::start_with(
        json!({"conversations": [{"match": "*", "steps": [{"text": "ok", "repeat": true}]}]}),
        |c| c.server.max_request_bytes = 64 * 1024,
    )
    .await;
    let (status, _) = server
        .call(
            reqwest::Method::POST,
            "/collections",
            None,
            Some(json!({"name": "notes"})),
        )
        .await;
    assert_eq!(status, 201);
    let post = |path: &str, content_type: Option<&str>, body: Vec<u8>| {
        let mut request = reqwest::Client::new().post(server.url(path)).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            (status, body["error"]["code"].as_str().unwrap().to_owned())
        }
    };
    const JSON: Option<&str> = Some("application/json");
    let huge = json!({"title": "big", "text": "x".repeat(100 * 1024)}).to_string();
    let cases = [
        (
            "/collections/notes/documents",
            JSON,
            huge.into_bytes(),
            (413, "too_large"),
        ),
        (
            "/collections/notes/documents",
            JSON,
            b"{\"title\": ".to_vec(),
            (400, "invalid_json"),
        ),
        (
            "/collections/notes/documents",
            JSON,
            b"{\"title\": 7}".to_vec(),
            (422, "invalid_field"),
        ),
        (
            "/agents",
            None,
            b"{\"name\": \"a\"}".to_vec(),
            (415, "invalid_json"),
        ),
        ("/prompt", JSON, b"[]".to_vec(), (422, "invalid_field")),
    ];
    for (path, content_type, body, (status, code)) in cases {
        assert_eq!(
            post(path, content_type, body).await,
            (status, code.to_owned()),
            "{path}"
        );
    }
    // Nothing was stored.
    let (_, documents) = server.get("/collections/notes/documents", None).await;
    assert_eq!(documents, json!([]));
    server.stop().await;
}

/// The server answers a client's ping with its payload and a client's close with a close,
/// then ends the connection (a clean close handshake, as every client library expects).
#[tokio::test]
async fn pings_and_a_close_from_the_client_are_answered() {
    let server = TestServer::start(json!({"conversations": []})).await;
    let mut c = server.client().await;
    c.ws.send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .unwrap();
    let pong = tokio::time::timeout(Duration::from_secs(5), c.ws.next())
        .await
        .expect("a pong in time");
    assert!(
        matches!(&pong, Some(Ok(Message::Pong(p))) if &p[..] == b"are you there"),
        "{pong:?}"
    );
    c.ws.send(Message::Close(None)).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), c.ws.next())
        .await
        .expect("an answer to the close in time");
    assert!(matches!(answer, Some(Ok(Message::Close(_)))), "{answer:?}");
    let end = tokio::time::timeout(Duration::from_secs(5), c.ws.next())
        .await
        .expect("the end in time");
    assert!(end.is_none(), "nothing after the close: {end:?}");
    server.stop().await;
}

/// A client that pings without ever reading the answers is cut off once they pile up
/// (64 KiB), not buffered without end.
#[tokio::test]
async fn a_client_that_pings_without_reading_is_cut_off() {
    let server = TestServer::start(json!({"conversations": []})).await;
    let socket = TcpSocket::new_v4().unwrap();
    // Small buffers both ways, so the server's writes stall once the client stops reading.
    socket.set_recv_buffer_size(4096).unwrap();
    socket.set_send_buffer_size(4096).unwrap();
    let mut stream = socket.connect(server.addr).await.unwrap();
    upgrade(&mut stream, &server).await;
    let payload = [b'p'; 125];
    let cut_off = tokio::time::timeout(Duration::from_secs(20), async {
        for _ in 0..100_000 {
            let mut frame = vec![0x89, 0x80 | payload.len() as u8];
            frame.extend_from_slice(&[0; 4]);
            frame.extend_from_slice(&payload);
            if stream.write_all(&frame).await.is_err() {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(cut_off, Ok(true), "the connection was cut off");
    server.stop().await;
}

/// A request to `/ws` that is not a websocket upgrade gets a plain HTTP answer saying why.
#[tokio::test]
async fn a_bad_upgrade_request_gets_its_status() {
    let server = TestServer::start(json!({"conversations": []})).await;
    let answer = |request: String| {
        let addr = server.addr;
        async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut head = vec![0u8; 12];
            stream.read_exact(&mut head).await.unwrap();
            String::from_utf8_lossy(&head[9..12]).into_owned()
        }
    };
    let host = server.addr;
    let plain = format!("GET /ws HTTP/1.1\r\nHost: {host}\r\n\r\n");
    assert_eq!(answer(plain).await, "400");
    let old_version = format!(
        "GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n"
    );
    assert_eq!(answer(old_version).await, "400");
    let no_key = format!(
        "GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n"
    );
    assert_eq!(answer(no_key).await, "400");
    let post = format!(
        "POST /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"
    );
    assert_ne!(answer(post).await, "101");
    server.stop().await;
}
