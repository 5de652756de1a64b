//! `weft chat`: a terminal client. Streams text, draws nested tool calls as an indented tree
//! with their status, and asks for approvals inline.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

pub struct ChatOptions {
    pub url: String,
    pub api_key: Option<String>,
    pub thread: Option<String>,
    /// Execution mode (`classic`, `code`).
    pub mode: Option<String>,
    pub permission_mode: Option<String>,
    pub message: Option<String>,
}

type Input = Lines<BufReader<Stdin>>;
type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Close codes after which the client reconnects and resumes: the server restarting (1012,
/// a deploy), going away (1001), or dropping a client that fell behind (1013).
const RECONNECT_CODES: [u16; 3] = [1001, 1012, 1013];
/// How long reconnecting keeps trying before giving up.
const RECONNECT_FOR: Duration = Duration::from_secs(30);

pub async fn run(options: ChatOptions) -> anyhow::Result<()> {
    let mut ws = connect(&options).await?;
    let mut input: Input = BufReader::new(tokio::io::stdin()).lines();
    let mut thread = options.thread.clone();
    let mut first = options.message.clone();
    let one_shot = first.is_some();
    loop {
        let text = match first.take() {
            Some(text) => text,
            None => {
                print!("\n› ");
                std::io::stdout().flush()?;
                match input.next_line().await? {
                    Some(line) if line.trim().is_empty() => continue,
                    Some(line) if matches!(line.trim(), "/quit" | "/exit") => return Ok(()),
                    Some(line) => line,
                    None => return Ok(()),
                }
            }
        };
        let mut data = json!({"content": text});
        if let Some(id) = &thread {
            data["thread_id"] = json!(id);
        }
        if let Some(mode) = &options.permission_mode {
            data["permission_mode"] = json!(mode);
        }
        if let Some(mode) = &options.mode {
            data["mode"] = json!(mode);
        }
        send(&mut ws, json!({"command": "chat_message", "data": data})).await?;
        let mut progress = Progress::default();
        while let Streamed::Dropped(why) = stream_turn(&mut ws, &mut input, &mut progress).await? {
            let Some(id) = progress.thread.clone() else {
                bail!("the server closed the connection ({why}) before the turn started");
            };
            eprintln!("\n(the connection closed: {why}; reconnecting to resume…)");
            ws = reconnect(&options).await?;
            let resume = json!({"command": "resume_chat",
                "data": {"thread_id": id, "last_seq": progress.last_seq}});
            send(&mut ws, resume).await?;
        }
        thread = progress.thread.or(thread);
        if one_shot {
            return Ok(());
        }
    }
}

async fn connect(options: &ChatOptions) -> anyhow::Result<Socket> {
    let ws_url = format!(
        "{}/ws",
        options.url.trim_end_matches('/').replacen("http", "ws", 1)
    );
    let mut request = ws_url.as_str().into_client_request()?;
    if let Some(key) = &options.api_key {
        request
            .headers_mut()
            .insert("Authorization", format!("Bearer {key}").parse()?);
    }
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .with_context(|| format!("cannot connect to {ws_url} (is `weft serve` running?)"))?;
    Ok(ws)
}

/// Connect again, with backoff, for up to [`RECONNECT_FOR`].
async fn reconnect(options: &ChatOptions) -> anyhow::Result<Socket> {
    let deadline = Instant::now() + RECONNECT_FOR;
    let mut backoff = Duration::from_millis(100);
    loop {
        match connect(options).await {
            Ok(ws) => return Ok(ws),
            Err(e) if Instant::now() + backoff > deadline => return Err(e),
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

async fn send(ws: &mut Socket, frame: Value) -> anyhow::Result<()> {
    ws.send(Message::Text(frame.to_string().into())).await?;
    Ok(())
}

/// What the client knows of the turn it shows: its thread and the last `seq` it saw.
#[derive(Default)]
struct Progress {
    thread: Option<String>,
    last_seq: u64,
}

/// How a turn's stream ended.
enum Streamed {
    /// Its final chunk (or an error outside any thread).
    Ended,
    /// The connection went in a way worth reconnecting for (why, for the user).
    Dropped(String),
}

/// Print one turn's frames until its final chunk.
async fn stream_turn(
    ws: &mut Socket,
    input: &mut Input,
    progress: &mut Progress,
) -> anyhow::Result<Streamed> {
    let mut at_line_start = true;
    while let Some(message) = ws.next().await {
        let body = match message {
            Ok(Message::Text(body)) => body,
            Ok(Message::Close(frame)) => {
                let code = frame.as_ref().map(|f| u16::from(f.code));
                let reason = frame.map(|f| f.reason.to_string()).unwrap_or_default();
                return match code {
                    Some(code) if RECONNECT_CODES.contains(&code) => {
                        Ok(Streamed::Dropped(format!("{code} {reason}")))
                    }
                    _ => bail!("the server closed the connection: {reason}"),
                };
            }
            Ok(_) => continue,
            Err(e) => return Ok(Streamed::Dropped(e.to_string())),
        };
        let f: Value = serde_json::from_str(&body)?;
        if let Some(id) = f["thread_id"].as_str() {
            progress.thread = Some(id.to_owned());
        }
        if let Some(seq) = f["seq"].as_u64() {
            progress.last_seq = progress.last_seq.max(seq);
        }
        let depth = f["depth"].as_u64().unwrap_or(0) as usize;
        let pad = "  ".repeat(depth + 1);
        let mut line = |text: String| {
            if !at_line_start {
                println!();
            }
            println!("{text}");
            at_line_start = true;
        };
        match f["type"].as_str().unwrap_or_default() {
            "chunk" if f["done"] == true && depth == 0 => {
                if !at_line_start {
                    println!();
                }
                return Ok(Streamed::Ended);
            }
            "chunk" if depth == 0 => {
                print!("{}", f["content"].as_str().unwrap_or_default());
                std::io::stdout().flush()?;
                at_line_start = false;
            }
            "chunk" => {}
            "tool_call_update" if f["status"] == "start" => {
                let title = f["args"]["title"]
                    .as_str()
                    .map(|t| format!(" “{t}”"))
                    .unwrap_or_default();
                line(format!(
                    "{pad}├─ {}{title} …",
                    f["name"].as_str().unwrap_or("?")
                ));
            }
            "tool_call_update" => line(call_ended(&f, &pad)),
            "tool_approval_request" => {
                line(format!(
                    "{pad}? {} wants to run with {} ({})",
                    f["name"].as_str().unwrap_or("?"),
                    f["args"],
                    f["category"].as_str().unwrap_or("")
                ));
                let decision = ask(input).await?;
                let reply = json!({"type": "tool_approval_response", "tool_call_id": f["tool_call_id"], "decision": decision});
                ws.send(Message::Text(reply.to_string().into())).await?;
            }
            "budget_exceeded" if f["ends_turn"] != false => {
                line(format!(
                    "! budget reached: {} (limit {}, used {})",
                    f["reason"].as_str().unwrap_or("?"),
                    f["limit"],
                    f["observed"]
                ));
            }
            "cost_summary" => line(format!(
                "({} model calls, {} tool calls, {} in / {} out tokens, ${:.4})",
                f["llm_calls"],
                f["tool_calls"],
                f["input_tokens"],
                f["output_tokens"],
                f["cost_usd"].as_f64().unwrap_or(0.0)
            )),
            "turn_resumed" => line(
                "(the server running this turn stopped; the turn was taken up again and goes on)"
                    .to_owned(),
            ),
            "error" => {
                line(format!(
                    "error [{}]: {}",
                    f["code"].as_str().unwrap_or("?"),
                    f["message"].as_str().unwrap_or("")
                ));
                if f["thread_id"].is_null() {
                    return Ok(Streamed::Ended);
                }
            }
            _ => {}
        }
    }
    Ok(Streamed::Dropped("the connection ended".to_owned()))
}

/// A call's card closing: its name, whether it succeeded, the start of its result.
fn call_ended(f: &Value, pad: &str) -> String {
    let ok = f["is_error"] != true;
    let result: String = f["result"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .take(100)
        .collect();
    format!(
        "{pad}└─ {} {} {}",
        f["name"].as_str().unwrap_or("?"),
        if ok { "✓" } else { "✗" },
        result.replace('\n', " ")
    )
}

async fn ask(input: &mut Input) -> anyhow::Result<&'static str> {
    loop {
        print!("    allow? [y]es / [a]lways for this chat / [n]o: ");
        std::io::stdout().flush()?;
        let answer = input.next_line().await?.unwrap_or_default();
        match answer.trim().to_lowercase().as_str() {
            "y" | "yes" => return Ok("allow"),
            "a" | "always" => return Ok("allow_for_chat"),
            "n" | "no" | "" => return Ok("deny"),
            _ => continue,
        }
    }
}

/// `weft threads`: the caller's threads, newest first.
pub async fn list_threads(url: &str, api_key: Option<&str>) -> anyhow::Result<()> {
    let mut request = reqwest::Client::new().get(format!("{}/threads", url.trim_end_matches('/')));
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    if !response.status().is_success() {
        bail!("{} answered {}", url, response.status());
    }
    let threads: Vec<Value> = response.json().await?;
    if threads.is_empty() {
        println!("no threads yet");
    }
    for t in threads {
        let active = if t["active"] == true { " ●" } else { "" };
        println!(
            "{}  {:<8} {}  {}{active}",
            t["id"].as_str().unwrap_or(""),
            t["permission_mode"].as_str().unwrap_or(""),
            t["updated_at"].as_str().unwrap_or(""),
            t["title"].as_str().unwrap_or("")
        );
    }
    Ok(())
}
