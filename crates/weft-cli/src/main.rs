//! The `weft` binary: `serve` the chat-agent server, `migrate` the database, `chat` from a
//! terminal, list `threads`.

mod allocator;
mod chat;
mod telemetry;

/// mimalloc: less memory per small allocation and faster than the system allocator for a
/// server that holds thousands of small turns and connections. Built without transparent
/// huge pages (`no_thp`): a 2 MiB page zeroed on first touch for a few small turns cost ~6 %
/// of the peak RSS under load; CPU is the same either way (docs/BENCHMARKS.md). Version 2
/// (`v2`), not the crate's default 3: it holds ~4 KiB less a running W1 turn for the same
/// CPU, and as much in W2. Asked for aligned blocks only where they are needed
/// ([`allocator`]). (The `system-alloc` feature leaves the system allocator in place, for
/// heap profilers that hook malloc.)
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use weft_server::{Config, ServerState};
use weft_store::Store;

#[derive(Parser)]
#[command(name = "weft", version, about = "Weft: a websocket chat-agent server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve {
        /// Config file (default: config/default.toml when present).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on (overrides config and WEFT_BIND).
        #[arg(long)]
        bind: Option<String>,
    },
    /// Apply database migrations and exit.
    Migrate {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Chat with a running server from the terminal (one message, or interactive).
    Chat {
        /// Server address: its base URL or its `/ws` address.
        #[arg(long, env = "WEFT_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        #[arg(long, env = "WEFT_API_KEY")]
        api_key: Option<String>,
        /// Continue this thread (one of yours: an unknown id is an error).
        #[arg(long)]
        thread: Option<String>,
        /// Execution mode: `classic` (tool calls) or `code` (the model writes JavaScript).
        /// `plan`, `default` and `auto` are read as --permission-mode (the old spelling).
        #[arg(long)]
        mode: Option<String>,
        /// Permission mode for this chat.
        #[arg(long, value_parser = ["plan", "default", "auto"])]
        permission_mode: Option<String>,
        /// Deprecated: the agent decides for itself now; accepted and ignored.
        #[arg(long, hide = true)]
        agent: bool,
        /// Send this message and exit after the answer (otherwise: interactive).
        message: Vec<String>,
    },
    /// List your threads.
    Threads {
        #[arg(long, env = "WEFT_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        #[arg(long, env = "WEFT_API_KEY")]
        api_key: Option<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = Cli::parse().command;
    if !matches!(command, Command::Serve { .. }) {
        telemetry::init_log();
    }
    match command {
        Command::Serve { config, bind } => serve(config, bind).await,
        Command::Chat {
            url,
            api_key,
            thread,
            mode,
            permission_mode,
            agent,
            message,
        } => {
            if agent {
                eprintln!("warning: --agent is deprecated and has no effect: the agent decides for itself when to plan and delegate");
            }
            let message = (!message.is_empty()).then(|| message.join(" "));
            let (mode, permission_mode) = match mode {
                Some(m) if matches!(m.as_str(), "plan" | "default" | "auto") => {
                    (None, permission_mode.or(Some(m)))
                }
                other => (other, permission_mode),
            };
            chat::run(chat::ChatOptions {
                url,
                api_key,
                thread,
                mode,
                permission_mode,
                message,
            })
            .await
        }
        Command::Threads { url, api_key } => chat::list_threads(&url, api_key.as_deref()).await,
        Command::Migrate { config } => {
            let config = Config::load(config.as_deref())?;
            let store = Store::connect(&config.database.url).await?;
            store.migrate().await?;
            println!("migrations applied to {}", redact(&config.database.url));
            Ok(())
        }
    }
}

async fn serve(config_path: Option<PathBuf>, bind: Option<String>) -> anyhow::Result<()> {
    let mut config = Config::load(config_path.as_deref())?;
    if let Some(bind) = bind {
        config.server.bind = bind;
    }
    // Held to the end: dropping it sends the spans still waiting.
    let _traces = telemetry::init(&config.telemetry)?;
    let store = Store::connect_with(&config.database.url, config.store_settings())
        .await
        .with_context(|| format!("cannot open the database {}", redact(&config.database.url)))?;
    store.migrate().await.context("cannot apply migrations")?;
    let providers = config.build_providers()?;
    if providers.is_demo() {
        tracing::warn!("DEMO MODE: no model is configured, a built-in script answers. Set OPENAI_API_KEY, ANTHROPIC_API_KEY or OPENAI_BASE_URL for a real model.");
    }
    let listener = tokio::net::TcpListener::bind(&config.server.bind)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.bind))?;
    let addr: SocketAddr = listener.local_addr()?;
    let deadline = Duration::from_millis(config.server.shutdown_timeout_ms) + SHUTDOWN_GRACE;
    let state = ServerState::start(config, store, providers, addr).await?;
    weft_server::serve(state, listener, shutdown_signal(deadline)).await?;
    tracing::info!("stopped");
    Ok(())
}

/// How long a shutdown may take beyond `shutdown_timeout_ms` (the turns' time) before the
/// process exits whatever it still waits for: sockets closing, the bus and the database
/// flushed, each bounded on its own well within this.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

/// Resolves at SIGTERM or Ctrl-C, and from then on the process ends within `deadline`: a
/// dependency that hangs (a bus or database that stopped answering, a tool's server) cannot
/// hold a deploy up. A turn cut that way is taken up as after a crash.
async fn shutdown_signal(deadline: Duration) {
    stop_requested().await;
    tracing::info!(deadline_ms = deadline.as_millis() as u64, "shutting down");
    let watchdog = std::thread::Builder::new()
        .name("shutdown-deadline".into())
        .spawn(move || {
            std::thread::sleep(deadline);
            eprintln!("weft: shutdown did not finish within {deadline:?}; exiting now");
            std::process::exit(1);
        });
    if let Err(e) = watchdog {
        tracing::warn!(error = %e, "cannot bound the shutdown's time");
    }
}

async fn stop_requested() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// A database URL without its password, for logs.
fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &url[..scheme + 3], user, &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}
