//! Code-mode round overhead, in-process like W1: turns of 10 rounds, each round one model
//! answer whose code calls 4 no-op tools with `Promise.all`, then a final text answer.
//! Prints microseconds per round for code mode beside classic mode (the same 4 calls as tool
//! calls), and what creating a sandbox alone costs. The fake model answers at once, so what
//! is measured is Weft's own work: prompt, sandbox, dispatch, events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_codemode::{CodeMode, Limits};
use weft_core::{
    AgentMemory, ChatMessage, EventSink, ExecutionMode, FinishReason, PermissionGate, Provider,
    ProviderError, ProviderEvent, ProviderRequest, ProviderStream, RateCard, Role, Tool,
    ToolCallRequest, ToolContext, ToolError, Toolbelt, TurnEnd, TurnSpec, Usage,
};
use weft_protocol::{AgentConfig, PermissionMode};

const ROUNDS: usize = 10;
const CALLS: usize = 4;
const TURNS: usize = 200;
const WARMUP: usize = 20;

/// Answers round `r` (the number of assistant messages so far) with 4 calls, as code or as
/// tool calls, and the last round with text.
struct FakeModel {
    code: bool,
}

#[async_trait]
impl Provider for FakeModel {
    fn name(&self) -> &str {
        "fake"
    }

    async fn stream(
        &self,
        request: ProviderRequest,
        _cancel: CancellationToken,
    ) -> Result<ProviderStream, ProviderError> {
        let round = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let usage = Ok(ProviderEvent::Usage(Usage {
            input_tokens: 10,
            output_tokens: 10,
        }));
        let mut events = Vec::new();
        if round >= ROUNDS {
            events.push(Ok(ProviderEvent::TextDelta("done".into())));
        } else if self.code {
            let calls: Vec<String> = (0..CALLS)
                .map(|i| format!("tools.noop({{i: {i}}})"))
                .collect();
            events.push(Ok(ProviderEvent::TextDelta(format!(
                "```js\nconst r = await Promise.all([{}]);\nlog(r.length);\n```",
                calls.join(", ")
            ))));
        } else {
            events.extend((0..CALLS).map(|i| {
                Ok(ProviderEvent::ToolCall(ToolCallRequest {
                    id: format!("c{round}_{i}"),
                    name: "noop".into(),
                    arguments: format!("{{\"i\":{i}}}").into(),
                }))
            }));
        }
        events.push(usage);
        events.push(Ok(ProviderEvent::Finish(FinishReason::Stop)));
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
        Ok("r".repeat(100))
    }
}

fn spec(code: bool, toolbelt: &Toolbelt, mode: &dyn ExecutionMode) -> TurnSpec {
    let gate = PermissionGate::new(PermissionMode::Auto);
    TurnSpec {
        provider: Arc::new(FakeModel { code }),
        model: "fake".into(),
        system_prompt: mode.system_prompt(toolbelt, gate.mode(), false).into(),
        history: vec![ChatMessage::user("go")],
        toolbelt: toolbelt.clone(),
        config: Arc::new(AgentConfig {
            max_steps: Some(ROUNDS as u32 + 1),
            ..AgentConfig::default()
        }),
        gate,
        rate_card: Arc::new(RateCard::new()),
        events: EventSink::detached(),
        cancel: CancellationToken::new(),
        memory: AgentMemory::new(),
        user_id: Arc::from("bench"),
        workspace_root: None,
        recorder: Arc::new(weft_core::NoRecord),
        planner: None,
        context_window: 128_000,
        artifacts: None,
        resume: None,
        pace: None,
        chunk_interval: std::time::Duration::ZERO,
    }
}

/// Median microseconds per round over `TURNS` sequential turns.
async fn per_round(mode: Arc<dyn ExecutionMode>, code: bool) -> f64 {
    let toolbelt = Toolbelt::new(vec![Arc::new(Noop)]);
    let mut samples = Vec::with_capacity(TURNS);
    for i in 0..WARMUP + TURNS {
        let started = Instant::now();
        let outcome = mode.run(spec(code, &toolbelt, mode.as_ref())).await;
        let took = started.elapsed();
        assert_eq!(outcome.end, TurnEnd::Completed, "{:?}", outcome.end);
        assert_eq!(
            outcome.totals.tool_calls as usize,
            ROUNDS * (CALLS + usize::from(code))
        );
        if i >= WARMUP {
            samples.push(took.as_secs_f64() * 1e6 / ROUNDS as f64);
        }
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median microseconds to create a sandbox and run a trivial program, until its report.
fn sandbox_alone() -> f64 {
    let (to_host, _requests) = tokio::sync::mpsc::channel(weft_codemode::sandbox::TO_HOST_QUEUE);
    let (_answers, from_host) = std::sync::mpsc::channel();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut samples: Vec<Duration> = (0..WARMUP + TURNS)
        .map(|_| {
            let started = Instant::now();
            let mut took = Duration::ZERO;
            weft_codemode::sandbox::run(
                "return 1;",
                &["noop".to_owned()],
                Limits::default(),
                Default::default(),
                &to_host,
                &from_host,
                &stop,
                Box::new(|report, _| {
                    took = started.elapsed();
                    assert_eq!(report.outcome, Ok(Some("1".to_owned())));
                }),
            );
            took
        })
        .skip(WARMUP)
        .collect();
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

fn main() -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let classic = runtime.block_on(per_round(Arc::new(weft_core::ClassicMode), false));
    let code = runtime.block_on(per_round(Arc::new(CodeMode::new(Limits::default())), true));
    let sandbox = sandbox_alone();
    println!("metric,value,unit");
    println!("classic_round_4_calls,{classic:.1},us");
    println!("code_round_4_calls,{code:.1},us");
    println!("sandbox_create_and_run,{sandbox:.1},us");
    Ok(())
}
