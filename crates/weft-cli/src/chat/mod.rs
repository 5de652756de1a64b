//! `weft chat`: a terminal client. Streams text, draws nested tool calls as an indented tree,
//! asks for approvals inline, has local commands (`/help`, `/mode`, `/stop`, `/quit`), stops
//! the running turn on Ctrl-C (a second one quits), and reconnects to resume a turn whose
//! connection dropped.

mod address;
mod render;
mod threads;

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

pub use threads::list as list_threads;

use render::{Printer, Shown};

pub struct ChatOptions {
    pub url: String,
    pub api_key: Option<String>,
    pub thread: Option<String>,
    /// Execution mode (`classic`, `code`).
    pub mode: Option<String>,
    pub permission_mode: Option<String>,
    pub message: Option<String>,
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Close codes after which the client reconnects and resumes: the server restarting (1012,
/// a deploy), going away (1001), or dropping a client that fell behind (1013).
const RECONNECT_CODES: [u16; 3] = [1001, 1012, 1013];
/// How long reconnecting keeps trying before giving up.
const RECONNECT_FOR: Duration = Duration::from_secs(30);

const HELP: &str = "\
local commands (never sent to the model):
  /help                       this list
  /mode [plan|default|auto]   show or set the permission mode of this chat
  /stop                       stop the running turn (Ctrl-C does too; a second Ctrl-C quits)
  /quit, /exit                leave (Ctrl-C or Ctrl-D at the prompt too)";

pub async fn run(options: ChatOptions) -> anyhow::Result<()> {
    if let Some(thread) = &options.thread {
        threads::ensure_exists(&options.url, thread, options.api_key.as_deref()).await?;
    }
    let ws = connect(&options).await?;
    let mut session = Session {
        ws,
        input: Some(keyboard()),
        interrupts: signal(SignalKind::interrupt())?,
        thread: options.thread.clone(),
        permission_mode: options.permission_mode.clone(),
        typed_ahead: Vec::new(),
        options,
    };
    if let Some(text) = session.options.message.take() {
        // One message, then exit.
        match text.strip_prefix('/') {
            Some(command) => session.local(command, &mut Printer::default()).await?,
            None => session.turn(&text).await?,
        };
        return Ok(());
    }
    // Until stdin closes (Ctrl-D, or the end of what was piped in).
    while session.input.is_some() {
        anstream::print!("\n› ");
        std::io::Write::flush(&mut anstream::stdout())?;
        let line = tokio::select! {
            line = next_line(&mut session.input) => line?,
            _ = session.interrupts.recv() => None,
        };
        let Some(line) = line else { return Ok(()) };
        let line = line.trim();
        let outcome = match line.strip_prefix('/') {
            _ if line.is_empty() => continue,
            Some(command) => session.local(command, &mut Printer::default()).await?,
            None => session.turn(line).await?,
        };
        if let Outcome::Quit = outcome {
            return Ok(());
        }
    }
    Ok(())
}

/// What the user asked for, besides going on.
enum Outcome {
    Continue,
    Quit,
}

/// One terminal conversation: the socket, stdin (until it closes), the thread and mode.
struct Session {
    ws: Socket,
    /// Lines typed (or piped in), until stdin closes.
    input: Option<Keyboard>,
    /// Ctrl-C: at the prompt it quits; during a turn it stops the turn, and a second quits.
    interrupts: Signal,
    thread: Option<String>,
    permission_mode: Option<String>,
    /// Lines typed during a turn before any approval asked for them: answers, in order.
    typed_ahead: Vec<String>,
    options: ChatOptions,
}

impl Session {
    async fn send(&mut self, frame: Value) -> anyhow::Result<()> {
        self.ws
            .send(Message::Text(frame.to_string().into()))
            .await?;
        Ok(())
    }

    /// A local command (without its `/`).
    async fn local(&mut self, command: &str, out: &mut Printer) -> anyhow::Result<Outcome> {
        let mut words = command.split_whitespace();
        match (words.next().unwrap_or(""), words.next()) {
            ("quit" | "exit", _) => return Ok(Outcome::Quit),
            ("help", _) => out.line(HELP),
            ("stop", _) => match self.thread.clone() {
                Some(id) => {
                    self.send(json!({"command": "stop", "data": {"thread_id": id}}))
                        .await?;
                    out.note("(stopping the turn…)");
                }
                None => out.note("(nothing to stop)"),
            },
            ("mode", None) => out.note(format!(
                "(permission mode: {})",
                self.permission_mode
                    .as_deref()
                    .unwrap_or("the thread's (default)")
            )),
            ("mode", Some(mode @ ("plan" | "default" | "auto"))) => {
                self.permission_mode = Some(mode.to_owned());
                if let Some(id) = self.thread.clone() {
                    self.send(json!({"command": "set_permission_mode",
                        "data": {"thread_id": id, "permission_mode": mode}}))
                        .await?;
                }
                out.note(format!("(permission mode: {mode})"));
            }
            ("mode", Some(other)) => out.note(format!(
                "(no permission mode `{other}`: plan, default or auto)"
            )),
            (other, _) => out.note(format!("(no command /{other}: /help lists them)")),
        }
        Ok(Outcome::Continue)
    }

    /// Send `text` and show its turn to the end, reconnecting to resume it if the connection
    /// drops.
    async fn turn(&mut self, text: &str) -> anyhow::Result<Outcome> {
        let mut data = json!({"content": text});
        if let Some(id) = &self.thread {
            data["thread_id"] = json!(id);
        }
        if let Some(mode) = &self.permission_mode {
            data["permission_mode"] = json!(mode);
        }
        if let Some(mode) = &self.options.mode {
            data["mode"] = json!(mode);
        }
        self.send(json!({"command": "chat_message", "data": data}))
            .await?;
        let new_thread = self.thread.is_none();
        let mut progress = Progress::default();
        let mut out = Printer::default();
        loop {
            match self.stream(&mut progress, &mut out).await? {
                Streamed::Ended => break,
                Streamed::Quit => return Ok(Outcome::Quit),
                Streamed::Dropped(why) => {
                    let Some(id) = progress.thread.clone() else {
                        bail!("the server closed the connection ({why}) before the turn started");
                    };
                    out.warn(format!(
                        "(the connection closed: {why}; reconnecting to resume…)"
                    ));
                    self.ws = reconnect(&self.options).await?;
                    self.send(json!({"command": "resume_chat",
                        "data": {"thread_id": id, "last_seq": progress.last_seq}}))
                        .await?;
                }
            }
        }
        if let (true, Some(id)) = (new_thread, &self.thread) {
            out.note(format!("(new thread {id}: continue it with --thread {id})"));
        }
        Ok(Outcome::Continue)
    }

    /// Show one turn's frames until its final chunk; meanwhile answer approvals from what is
    /// typed, run local commands, and stop the turn on Ctrl-C (quit on a second one).
    async fn stream(
        &mut self,
        progress: &mut Progress,
        out: &mut Printer,
    ) -> anyhow::Result<Streamed> {
        let mut asked = Asked::default();
        loop {
            let event = tokio::select! {
                message = self.ws.next() => Event::Socket(message),
                line = next_line(&mut self.input) => Event::Typed(line?),
                _ = self.interrupts.recv() => Event::Interrupt,
            };
            match event {
                Event::Socket(message) => {
                    let f = match frame(message) {
                        Ok(Some(f)) => f,
                        Ok(None) => continue,
                        Err(streamed) => return streamed,
                    };
                    progress.saw(&f);
                    // A new chat's thread, known from its first frame (for /stop, /mode).
                    if self.thread.is_none() {
                        self.thread = progress.thread.clone();
                    }
                    match out.frame(&f) {
                        Shown::Ended => return Ok(Streamed::Ended),
                        Shown::Approval(id) => asked.ids.push(id),
                        Shown::Nothing => {}
                    }
                }
                Event::Typed(None) => {}
                Event::Typed(Some(line)) => match line.trim().strip_prefix('/') {
                    Some(command) => {
                        if let Outcome::Quit = self.local(command, out).await? {
                            return Ok(Streamed::Quit);
                        }
                    }
                    None => self.typed_ahead.push(line),
                },
                Event::Interrupt if progress.stopping => return Ok(Streamed::Quit),
                Event::Interrupt => {
                    progress.stopping = true;
                    self.local("stop", out).await?;
                    out.note("(Ctrl-C again quits)");
                }
            }
            self.answer(&mut asked, out).await?;
        }
    }

    /// Answer the oldest pending approval from what was typed: `y`, `a` (for this chat) or
    /// `n`; an empty line, or stdin closed, denies.
    async fn answer(&mut self, asked: &mut Asked, out: &mut Printer) -> anyhow::Result<()> {
        while let Some(id) = asked.ids.first().cloned() {
            let decision = if self.typed_ahead.is_empty() {
                if self.input.is_some() {
                    if asked.prompted.as_ref() != Some(&id) {
                        out.prompt("    allow? [y]es / [a]lways for this chat / [n]o: ");
                        asked.prompted = Some(id);
                    }
                    return Ok(());
                }
                "deny"
            } else {
                match self.typed_ahead.remove(0).trim().to_lowercase().as_str() {
                    "y" | "yes" => "allow",
                    "a" | "always" => "allow_for_chat",
                    "n" | "no" | "" => "deny",
                    other => {
                        out.note(format!("(`{other}`: answer y, a or n)"));
                        asked.prompted = None;
                        continue;
                    }
                }
            };
            asked.ids.remove(0);
            self.send(
                json!({"type": "tool_approval_response", "tool_call_id": id, "decision": decision}),
            )
            .await?;
        }
        Ok(())
    }
}

/// What a running turn's loop woke up for.
enum Event {
    Socket(Option<Result<Message, tokio_tungstenite::tungstenite::Error>>),
    Typed(Option<String>),
    Interrupt,
}

type Keyboard = tokio::sync::mpsc::UnboundedReceiver<std::io::Result<String>>;

/// Stdin's lines, read on a thread of their own: a read waiting for the user never holds up
/// leaving (a read on the runtime's blocking pool would, until stdin closed).
fn keyboard() -> Keyboard {
    let (lines, keyboard) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    keyboard
}

/// The next line of stdin; `None` once it has closed, and from then on it never comes.
async fn next_line(input: &mut Option<Keyboard>) -> anyhow::Result<Option<String>> {
    let Some(keyboard) = input.as_mut() else {
        return std::future::pending().await;
    };
    let line = keyboard.recv().await.transpose()?;
    if line.is_none() {
        *input = None;
    }
    Ok(line)
}

/// A websocket message as a frame: `Ok(None)` for anything but text, `Err` when the
/// connection went (and whether it is worth reconnecting).
fn frame(
    message: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
) -> Result<Option<Value>, anyhow::Result<Streamed>> {
    let body = match message {
        Some(Ok(Message::Text(body))) => body,
        Some(Ok(Message::Close(frame))) => {
            let code = frame.as_ref().map(|f| u16::from(f.code));
            let reason = frame.map(|f| f.reason.to_string()).unwrap_or_default();
            return Err(match code {
                Some(code) if RECONNECT_CODES.contains(&code) => {
                    Ok(Streamed::Dropped(format!("{code} {reason}")))
                }
                _ => Err(anyhow::anyhow!(
                    "the server closed the connection: {reason}"
                )),
            });
        }
        Some(Ok(_)) => return Ok(None),
        Some(Err(e)) => return Err(Ok(Streamed::Dropped(e.to_string()))),
        None => return Err(Ok(Streamed::Dropped("the connection ended".to_owned()))),
    };
    serde_json::from_str(&body)
        .map(Some)
        .map_err(|e| Err(e.into()))
}

/// The approvals of a turn waiting for an answer, oldest first, and which one was prompted for.
#[derive(Default)]
struct Asked {
    ids: Vec<String>,
    prompted: Option<String>,
}

/// What the client knows of the turn it shows: its thread, the last `seq` it saw, whether
/// the user asked it to stop.
#[derive(Default)]
struct Progress {
    thread: Option<String>,
    last_seq: u64,
    stopping: bool,
}

impl Progress {
    fn saw(&mut self, f: &Value) {
        if let Some(id) = f["thread_id"].as_str() {
            self.thread = Some(id.to_owned());
        }
        if let Some(seq) = f["seq"].as_u64() {
            self.last_seq = self.last_seq.max(seq);
        }
    }
}

/// How a turn's stream ended.
enum Streamed {
    /// Its final chunk (or an error outside any thread).
    Ended,
    /// The user quit (a second Ctrl-C, `/quit`).
    Quit,
    /// The connection went in a way worth reconnecting for (why, for the user).
    Dropped(String),
}

async fn connect(options: &ChatOptions) -> anyhow::Result<Socket> {
    let ws_url = address::websocket(&options.url);
    let mut request = ws_url.as_str().into_client_request()?;
    if let Some(key) = &options.api_key {
        request
            .headers_mut()
            .insert("Authorization", format!("Bearer {key}").parse()?);
    }
    let (ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(read_config()), false)
        .await
        .with_context(|| format!("cannot connect to {ws_url} (is `weft serve` running?)"))?;
    Ok(ws)
}

/// How the client reads the server's frames. tungstenite's default read buffer is 128 KiB and
/// it zeroes the room left in it before every read: a stream's frames are a few hundred bytes,
/// so most of a streaming client's CPU went to `memset`. A bigger frame gets room made for it.
fn read_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(8 * 1024)
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
