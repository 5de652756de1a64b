//! Workload W1 (shared/bench/WORKLOAD.md) in-process: 10 rounds × 4 parallel no-op tool calls
//! per turn through `run_classic_turn`, with a stateless fake provider behind `Provider`.
//!
//! `w1 all` runs every measurement in fresh child processes (3 each) and prints medians as
//! `peer,metric,value,unit`; `w1 run --metric … --mode … --runtime …` is one such process.

use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use clap::{Parser, Subcommand, ValueEnum};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_bench::{median, rss_kib};
use weft_core::{
    AgentMemory, ChatMessage, EventSink, FinishReason, PermissionGate, Provider, ProviderError,
    ProviderEvent, ProviderRequest, ProviderStream, RateCard, Role, Tool, ToolCallRequest,
    ToolContext, ToolError, Toolbelt, TurnEnd, TurnSpec, Usage,
};
use weft_protocol::{AgentConfig, PermissionMode, ServerEvent};

const K: usize = 10;
const P: usize = 4;
const T: usize = 200;
const WARMUP: usize = 20;
const N_CONC: usize = 1000;

#[global_allocator]
static ALLOC: weft_bench::counting::Counting = weft_bench::counting::Counting;

static TOOL_CALLS: AtomicU64 = AtomicU64::new(0);
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static MAX_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

#[derive(Parser)]
#[command(about = "Workload W1: agent-loop overhead, in-process")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Every metric, each in fresh processes, medians printed as CSV.
    All {
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
    /// One measurement in this process.
    Run {
        #[arg(long, value_enum)]
        metric: Metric,
        #[arg(long, value_enum)]
        mode: Mode,
        #[arg(long, value_enum)]
        runtime: Runtime,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Metric {
    Sequential,
    Concurrent,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Gen,
    Stream,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Runtime {
    CurrentThread,
    MultiThread,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Gen => "gen",
            Mode::Stream => "stream",
        }
    }
}

impl Runtime {
    fn peer(self) -> &'static str {
        match self {
            Runtime::CurrentThread => "weft-current_thread",
            Runtime::MultiThread => "weft-multi_thread_2",
        }
    }
    fn arg(self) -> &'static str {
        match self {
            Runtime::CurrentThread => "current-thread",
            Runtime::MultiThread => "multi-thread",
        }
    }
}

/// The stateless fake model: the round is the number of tool results in the history / P.
struct FakeModel {
    mode: Mode,
}

fn final_chunks() -> Vec<String> {
    (0..20).map(|j| format!("w{j:03} ")).collect()
}

#[async_trait]
impl Provider for FakeModel {
    fn name(&self) -> &str {
        "w1-fake"
    }

    async fn stream(
        &self,
        request: ProviderRequest,
        _cancel: CancellationToken,
    ) -> Result<ProviderStream, ProviderError> {
        tokio::task::yield_now().await;
        let results = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count();
        let round = results / P;
        let usage = ProviderEvent::Usage(Usage {
            input_tokens: 10,
            output_tokens: 10,
        });
        let mut events = Vec::with_capacity(24);
        if round < K {
            events.extend((0..P).map(|j| {
                Ok(ProviderEvent::ToolCall(ToolCallRequest {
                    id: format!("call_{round}_{j}"),
                    name: "noop".to_owned(),
                    arguments: format!("{{\"i\":{j}}}").into(),
                }))
            }));
            events.push(Ok(usage));
            events.push(Ok(ProviderEvent::Finish(FinishReason::ToolCalls)));
        } else {
            match self.mode {
                Mode::Gen => events.push(Ok(ProviderEvent::TextDelta(final_chunks().concat()))),
                Mode::Stream => events.extend(
                    final_chunks()
                        .into_iter()
                        .map(|c| Ok(ProviderEvent::TextDelta(c))),
                ),
            }
            events.push(Ok(usage));
            events.push(Ok(ProviderEvent::Finish(FinishReason::Stop)));
        }
        Ok(stream::iter(events).boxed())
    }
}

struct Noop;

#[async_trait]
impl Tool for Noop {
    weft_core::tool_meta! {
        name: "noop",
        description: "No-op tool: returns a fixed 100-byte string.",
        class: Safe,
        category: Read,
        parameters: json!({"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}),
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        TOOL_CALLS.fetch_add(1, Ordering::Relaxed);
        Ok("r".repeat(100))
    }
}

struct Bench {
    provider: Arc<dyn Provider>,
    toolbelt: Toolbelt,
    config: Arc<AgentConfig>,
    rate_card: Arc<RateCard>,
    mode: Mode,
}

impl Bench {
    fn new(mode: Mode) -> Self {
        Bench {
            provider: Arc::new(FakeModel { mode }),
            toolbelt: Toolbelt::new(vec![Arc::new(Noop)]),
            config: Arc::new(AgentConfig::default()),
            rate_card: Arc::new(RateCard::new()),
            mode,
        }
    }

    fn spec(&self, events: EventSink) -> TurnSpec {
        TurnSpec {
            provider: self.provider.clone(),
            model: "w1".to_owned(),
            system_prompt: "You are a benchmark agent.".into(),
            history: vec![ChatMessage::user("Run workload W1.")],
            toolbelt: self.toolbelt.clone(),
            config: self.config.clone(),
            gate: PermissionGate::new(PermissionMode::Auto),
            rate_card: self.rate_card.clone(),
            events,
            cancel: CancellationToken::new(),
            memory: AgentMemory::new(),
            user_id: std::sync::Arc::from("bench"),
            workspace_root: None,
            recorder: std::sync::Arc::new(weft_core::NoRecord),
            planner: None,
            context_window: 128_000,
            artifacts: None,
            resume: None,
            pace: None,
            chunk_interval: std::time::Duration::ZERO,
        }
    }

    /// One turn; returns its final text (built from streamed deltas in stream mode).
    async fn turn(self: Arc<Self>) -> String {
        let now = IN_FLIGHT.fetch_add(1, Ordering::Relaxed) + 1;
        MAX_IN_FLIGHT.fetch_max(now, Ordering::Relaxed);
        let text = match self.mode {
            Mode::Gen => {
                let outcome = weft_core::run_classic_turn(self.spec(EventSink::detached())).await;
                assert_eq!(outcome.end, TurnEnd::Completed);
                outcome.text
            }
            Mode::Stream => {
                let (sink, mut rx) = EventSink::channel();
                let run = weft_core::run_classic_turn(self.spec(sink));
                let read = async move {
                    let mut text = String::new();
                    while let Some(event) = rx.recv().await {
                        if let ServerEvent::Chunk {
                            content, depth: 0, ..
                        } = event
                        {
                            text.push_str(&content);
                        }
                    }
                    text
                };
                let (outcome, text) = tokio::join!(run, read);
                assert_eq!(outcome.end, TurnEnd::Completed);
                text
            }
        };
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
        text
    }
}

fn runtime(kind: Runtime) -> tokio::runtime::Runtime {
    let built = match kind {
        Runtime::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Runtime::MultiThread => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
    };
    match built {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("w1: cannot build the runtime: {e}");
            std::process::exit(2);
        }
    }
}

fn check(ok: bool, what: &str) {
    if !ok {
        eprintln!("w1: check failed: {what}");
        std::process::exit(1);
    }
}

fn run_one(metric: Metric, mode: Mode, kind: Runtime) {
    let rt = runtime(kind);
    let bench = Arc::new(Bench::new(mode));
    let expected = final_chunks().concat();
    let peer = kind.peer();
    let m = mode.name();
    rt.block_on(async {
        for _ in 0..WARMUP {
            check(bench.clone().turn().await == expected, "warm-up text");
        }
        let calls_before = TOOL_CALLS.load(Ordering::Relaxed);
        match metric {
            Metric::Sequential => {
                let started = Instant::now();
                for _ in 0..T {
                    check(bench.clone().turn().await == expected, "final text");
                }
                let us = started.elapsed().as_secs_f64() * 1e6 / (T * K) as f64;
                check(
                    TOOL_CALLS.load(Ordering::Relaxed) - calls_before == (T * K * P) as u64,
                    "tool counter",
                );
                println!("{peer},overhead_per_round_{m},{us:.2},us");
            }
            Metric::Concurrent => {
                let (_, rss_before) = rss_kib();
                let heap_before = weft_bench::counting::live();
                weft_bench::counting::reset_peak();
                MAX_IN_FLIGHT.store(0, Ordering::Relaxed);
                let started = Instant::now();
                let handles: Vec<_> = (0..N_CONC)
                    .map(|_| tokio::spawn(bench.clone().turn()))
                    .collect();
                for handle in handles {
                    check(
                        matches!(handle.await, Ok(ref text) if *text == expected),
                        "final text",
                    );
                }
                let wall = started.elapsed().as_secs_f64();
                let (peak, _) = rss_kib();
                check(
                    TOOL_CALLS.load(Ordering::Relaxed) - calls_before == (N_CONC * K * P) as u64,
                    "tool counter",
                );
                println!("{peer},conc1000_wall_{m},{wall:.3},s");
                println!(
                    "{peer},conc1000_peak_rss_{m},{:.1},MB",
                    peak as f64 / 1024.0
                );
                println!(
                    "{peer},conc1000_mem_per_turn_{m},{:.2},KB",
                    peak.saturating_sub(rss_before) as f64 / N_CONC as f64
                );
                let heap = weft_bench::counting::peak().saturating_sub(heap_before) as f64
                    / 1024.0
                    / N_CONC as f64;
                println!("{peer},conc1000_heap_per_turn_{m},{heap:.2},KB");
                println!(
                    "{peer},conc1000_max_inflight_{m},{},turns",
                    MAX_IN_FLIGHT.load(Ordering::Relaxed)
                );
            }
        }
    });
}

fn run_all(reps: usize) {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("w1: cannot find my own binary: {e}");
            std::process::exit(2);
        }
    };
    println!("peer,metric,value,unit");
    for kind in [Runtime::CurrentThread, Runtime::MultiThread] {
        for metric in [Metric::Sequential, Metric::Concurrent] {
            for mode in [Mode::Gen, Mode::Stream] {
                // metric name → (unit, values over the reps)
                let mut rows: Vec<(String, String, String, Vec<f64>)> = Vec::new();
                for _ in 0..reps {
                    let metric_arg = if metric == Metric::Sequential {
                        "sequential"
                    } else {
                        "concurrent"
                    };
                    let out = Command::new(&exe)
                        .args([
                            "run",
                            "--metric",
                            metric_arg,
                            "--mode",
                            mode.name(),
                            "--runtime",
                            kind.arg(),
                        ])
                        .output();
                    let out = match out {
                        Ok(out) if out.status.success() => out,
                        Ok(out) => {
                            eprintln!("w1: child failed: {}", String::from_utf8_lossy(&out.stderr));
                            std::process::exit(1);
                        }
                        Err(e) => {
                            eprintln!("w1: cannot start child: {e}");
                            std::process::exit(1);
                        }
                    };
                    for line in String::from_utf8_lossy(&out.stdout).lines() {
                        let cols: Vec<&str> = line.split(',').collect();
                        let [peer, name, value, unit] = cols[..] else {
                            continue;
                        };
                        let Ok(value) = value.parse::<f64>() else {
                            continue;
                        };
                        match rows.iter_mut().find(|r| r.1 == name) {
                            Some(row) => row.3.push(value),
                            None => rows.push((
                                peer.to_owned(),
                                name.to_owned(),
                                unit.to_owned(),
                                vec![value],
                            )),
                        }
                    }
                }
                for (peer, name, unit, mut values) in rows {
                    println!("{peer},{name},{},{unit}", median(&mut values));
                }
            }
        }
    }
}

fn main() {
    match Cli::parse().command {
        Cmd::All { reps } => run_all(reps),
        Cmd::Run {
            metric,
            mode,
            runtime,
        } => run_one(metric, mode, runtime),
    }
}
