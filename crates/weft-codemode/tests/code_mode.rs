//! Code mode in the engine: the scripted provider answers with code, which runs in QuickJS
//! and calls tools through the same gate, budget and events as classic mode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_codemode::{CodeMode, Limits};
use weft_core::{
    AgentMemory, ChatMessage, EventSink, ExecutionMode, NoRecord, PermissionGate, Provider,
    ProviderError, ProviderRequest, ProviderStream, RateCard, Tool, ToolContext, ToolError,
    Toolbelt, TurnEnd, TurnOutcome, TurnSpec,
};
use weft_protocol::{
    AgentConfig, ApprovalDecision, PermissionMode, PolicyClass, ServerEvent, ToolCallStatus,
    ToolCategory,
};
use weft_providers::ScriptedProvider;

/// Records what the model is sent.
struct Recording {
    inner: ScriptedProvider,
    requests: Mutex<Vec<ProviderRequest>>,
}

#[async_trait]
impl Provider for Recording {
    fn name(&self) -> &str {
        "scripted"
    }
    fn capabilities(&self, model: &str) -> weft_core::Capabilities {
        self.inner.capabilities(model)
    }
    async fn stream(
        &self,
        request: ProviderRequest,
        cancel: CancellationToken,
    ) -> Result<ProviderStream, ProviderError> {
        self.requests.lock().push(request.clone());
        self.inner.stream(request, cancel).await
    }
}

/// A tool that answers after a delay, counting how many run at once.
struct Slow {
    name: &'static str,
    category: ToolCategory,
    delay: Duration,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

impl Slow {
    fn new(name: &'static str, category: ToolCategory, delay_ms: u64) -> Self {
        Slow {
            name,
            category,
            delay: Duration::from_millis(delay_ms),
            running: Arc::default(),
            peak: Arc::default(),
            calls: Arc::default(),
        }
    }
}

#[async_trait]
impl Tool for Slow {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "a test tool"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    }
    fn policy_class(&self) -> PolicyClass {
        PolicyClass::Safe
    }
    fn category(&self) -> ToolCategory {
        self.category
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        let q = args["q"].as_str().unwrap_or_default();
        if q == "fail" {
            return Err(ToolError::model("no such thing"));
        }
        Ok(json!({"q": q, "answer": format!("{q}!")}).to_string())
    }
}

struct Run {
    provider: Arc<Recording>,
    gate: PermissionGate,
    config: AgentConfig,
    limits: Limits,
    tools: Vec<Arc<dyn Tool>>,
    user: String,
}

fn code(body: &str) -> Value {
    json!({"text": format!("Running it.\n```js\n{body}\n```")})
}

impl Run {
    fn new(steps: Vec<Value>) -> Run {
        let script = json!({"conversations": [{"match": "*", "steps": steps}]});
        Run {
            provider: Arc::new(Recording {
                inner: ScriptedProvider::from_value(script).unwrap(),
                requests: Mutex::new(Vec::new()),
            }),
            gate: PermissionGate::new(PermissionMode::Auto),
            config: AgentConfig::default(),
            limits: Limits::default(),
            tools: Vec::new(),
            user: "go".into(),
        }
    }

    fn spec(&self, events: EventSink) -> TurnSpec {
        let toolbelt = Toolbelt::new(self.tools.clone());
        let mode = CodeMode::new(self.limits);
        TurnSpec {
            provider: self.provider.clone(),
            model: "test-model".into(),
            system_prompt: mode
                .system_prompt(&toolbelt, self.gate.mode(), false)
                .into(),
            history: vec![ChatMessage::user(self.user.as_str())],
            toolbelt,
            config: Arc::new(self.config.clone()),
            gate: self.gate.clone(),
            rate_card: Arc::new(RateCard::new()),
            events,
            cancel: CancellationToken::new(),
            memory: AgentMemory::new(),
            user_id: Arc::from("tester"),
            workspace_root: None,
            recorder: Arc::new(NoRecord),
            planner: None,
            context_window: 128_000,
            artifacts: None,
            resume: None,
            pace: None,
            chunk_interval: std::time::Duration::ZERO,
        }
    }

    async fn go(&self) -> (TurnOutcome, Vec<ServerEvent>) {
        let (sink, mut rx) = EventSink::channel();
        let outcome = CodeMode::new(self.limits).run(self.spec(sink)).await;
        let mut events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            events.push(e);
        }
        (outcome, events)
    }

    fn requests(&self) -> Vec<ProviderRequest> {
        self.provider.requests.lock().clone()
    }
}

/// `start`/`end` lines: name, depth, whether nested under a `code.execute`.
fn cards(events: &[ServerEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::ToolCallUpdate {
                name,
                status,
                depth,
                parent_id,
                is_error,
                ..
            } => Some(format!(
                "{} {name} d{depth}{}{}",
                if *status == ToolCallStatus::Start {
                    "start"
                } else {
                    "end"
                },
                if parent_id
                    .as_deref()
                    .is_some_and(|p| p.starts_with("code.execute~"))
                {
                    " nested"
                } else {
                    ""
                },
                if *is_error == Some(true) {
                    " ERROR"
                } else {
                    ""
                }
            )),
            _ => None,
        })
        .collect()
}

fn end_result(events: &[ServerEvent], name: &str) -> String {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            ServerEvent::ToolCallUpdate {
                name: n,
                status: ToolCallStatus::End,
                result,
                ..
            } if n == name => result.clone(),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn two_tool_calls_run_in_parallel_nested_under_the_run() {
    let mut run = Run::new(vec![code(
        "const [a, b] = await Promise.all([tools.lookup({q: 'a'}), tools.lookup({q: 'b'})]);\n\
             output(`${a.answer} and ${b.answer}`);\ndone();",
    )]);
    let lookup = Slow::new("lookup", ToolCategory::Read, 100);
    let peak = lookup.peak.clone();
    run.tools.push(Arc::new(lookup));
    let (outcome, events) = run.go().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(outcome.text, "a! and b!");
    assert_eq!(peak.load(Ordering::SeqCst), 2, "both calls ran at once");
    assert_eq!(
        cards(&events),
        vec![
            "start code.execute d0",
            "start lookup d1 nested",
            "start lookup d1 nested",
            "end lookup d1 nested",
            "end lookup d1 nested",
            "end code.execute d0",
        ]
    );
    // output() streamed as a root chunk.
    assert!(events.iter().any(|e| matches!(
        e,
        ServerEvent::Chunk { content, depth: 0, .. } if content == "a! and b!"
    )));
    // The tree: the run with its two calls under it.
    let names: Vec<(String, bool)> = outcome
        .tree
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.parent_id.is_some()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("code.execute".to_owned(), false),
            ("lookup".to_owned(), true),
            ("lookup".to_owned(), true)
        ]
    );
    // One model call: the code ended the turn with done().
    assert_eq!(run.requests().len(), 1);
    let system = &run.requests()[0].system;
    assert!(
        system.contains("tools.lookup(args: { q: string }): Promise<any>"),
        "{system}"
    );
    assert!(run.requests()[0].tools.is_empty());
}

#[tokio::test]
async fn a_syntax_error_goes_back_to_the_model_which_fixes_it() {
    let run = Run::new(vec![
        code("const x = ;"),
        code("return 40 + 2;"),
        json!({"text": "The answer is 42."}),
    ]);
    let (outcome, events) = run.go().await;
    assert_eq!(outcome.end, TurnEnd::Completed);
    assert_eq!(outcome.text, "The answer is 42.");
    let requests = run.requests();
    assert_eq!(requests.len(), 3);
    let feedback = requests[1].messages.last().unwrap().text();
    assert!(
        feedback.starts_with("[result of running that code]\nerror: SyntaxError"),
        "{feedback}"
    );
    let feedback = requests[2].messages.last().unwrap().text();
    assert!(feedback.contains("ok; returned 42"), "{feedback}");
    assert_eq!(
        cards(&events),
        vec![
            "start code.execute d0",
            "end code.execute d0 ERROR",
            "start code.execute d0",
            "end code.execute d0",
        ]
    );
}

#[tokio::test]
async fn store_recall_log_and_tool_errors_reach_the_model() {
    let mut run = Run::new(vec![
        code("store('n', {count: 2}); log('stored', 2);"),
        code(
            "const n = recall('n');\ntry { await tools.lookup({q: 'fail'}); } catch (e) { log('caught', e.message); }\n\
             done(`count is ${n.count}`);",
        ),
    ]);
    run.tools
        .push(Arc::new(Slow::new("lookup", ToolCategory::Read, 0)));
    let (outcome, events) = run.go().await;
    assert_eq!(outcome.text, "count is 2");
    let first = run.requests()[1].messages.last().unwrap().text();
    assert!(first.contains("logs:\nstored 2"), "{first}");
    let second = end_result(&events, "code.execute");
    assert!(second.contains("caught no such thing"), "{second}");
    assert!(cards(&events).contains(&"end lookup d1 nested ERROR".to_owned()));
}

#[tokio::test]
async fn plan_mode_blocks_a_write_from_code() {
    let mut run = Run::new(vec![
        code("await tools.save({q: 'x'});"),
        json!({"text": "I could not save."}),
    ]);
    run.gate = PermissionGate::new(PermissionMode::Plan);
    let save = Slow::new("save", ToolCategory::Write, 0);
    let calls = save.calls.clone();
    run.tools.push(Arc::new(save));
    let (_, events) = run.go().await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the write never ran");
    let result = end_result(&events, "code.execute");
    assert!(result.contains("unavailable in plan mode"), "{result}");
    assert!(cards(&events).contains(&"end save d1 nested ERROR".to_owned()));
}

#[tokio::test]
async fn an_approval_inside_code_waits_for_the_user() {
    for (decision, ran) in [(ApprovalDecision::Allow, 1), (ApprovalDecision::Deny, 0)] {
        let mut run = Run::new(vec![
            code("const r = await tools.save({q: 'x'}); done(r.answer);"),
            json!({"text": "Not saved."}),
        ]);
        run.gate = PermissionGate::new(PermissionMode::Default);
        let save = Slow::new("save", ToolCategory::Write, 0);
        let calls = save.calls.clone();
        run.tools.push(Arc::new(save));
        let gate = run.gate.clone();
        let (sink, mut rx) = EventSink::channel();
        let spec = run.spec(sink);
        let turn = tokio::spawn(async move { CodeMode::new(Limits::default()).run(spec).await });
        let mut events = Vec::new();
        loop {
            let event = rx.recv().await.unwrap();
            if let ServerEvent::ToolApprovalRequest {
                tool_call_id,
                parent_id,
                depth,
                ..
            } = &event
            {
                assert!(parent_id.as_deref().unwrap().starts_with("code.execute~"));
                assert_eq!(*depth, 1);
                assert!(gate.respond(tool_call_id, decision));
                events.push(event);
                break;
            }
            events.push(event);
        }
        let outcome = turn.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), ran);
        if ran == 1 {
            assert_eq!(outcome.text, "x!");
        } else {
            assert_eq!(outcome.text, "Not saved.");
            while let Ok(e) = rx.try_recv() {
                events.push(e);
            }
            assert!(end_result(&events, "code.execute").contains("denied"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_loop_and_a_memory_bomb_end_with_an_error_and_stall_nothing() {
    let mut run = Run::new(vec![
        code("while (true) {}"),
        code("const a = []; while (true) a.push(new Array(100000).fill(7));"),
        json!({"text": "gave up"}),
    ]);
    run.limits = Limits {
        max_ms_per_run: 300,
        max_memory_bytes: 32 << 20,
        ..Limits::default()
    };
    // Another turn keeps running meanwhile on the same runtime.
    let other = tokio::spawn(async {
        let started = Instant::now();
        let mut ticks = 0;
        while started.elapsed() < Duration::from_millis(400) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            ticks += 1;
        }
        ticks
    });
    let started = Instant::now();
    let (outcome, _) = run.go().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(outcome.text, "gave up");
    let requests = run.requests();
    let loop_result = requests[1].messages.last().unwrap().text();
    assert!(
        loop_result.contains("more than 300 ms of CPU time"),
        "{loop_result}"
    );
    let bomb_result = requests[2].messages.last().unwrap().text();
    assert!(bomb_result.contains("out of memory"), "{bomb_result}");
    assert!(other.await.unwrap() >= 20, "the other task kept its pace");
}

#[tokio::test]
async fn a_promise_nothing_settles_is_an_error_not_a_hang() {
    let run = Run::new(vec![
        code("await new Promise(() => {});"),
        json!({"text": "ok"}),
    ]);
    let (_, events) = run.go().await;
    let result = end_result(&events, "code.execute");
    assert!(result.contains("nothing will settle"), "{result}");
}

#[tokio::test]
async fn without_done_the_round_limit_ends_the_turn() {
    let mut run = Run::new(vec![json!({"text": "```js\nlog(1)\n```", "repeat": true})]);
    run.config.max_steps = Some(3);
    let (outcome, events) = run.go().await;
    let TurnEnd::BudgetExceeded(trip) = outcome.end else {
        panic!("{:?}", outcome.end)
    };
    assert_eq!(trip.limit, 3.0);
    assert_eq!(run.requests().len(), 3);
    assert_eq!(
        cards(&events)
            .iter()
            .filter(|c| c.starts_with("end"))
            .count(),
        3
    );
}

#[tokio::test]
async fn earlier_classic_turns_are_readable_context() {
    let mut run = Run::new(vec![json!({"text": "You read a.", "repeat": true})]);
    run.user = "what did I read?".into();
    let history = vec![
        ChatMessage::user("read a"),
        ChatMessage::assistant(
            "",
            vec![weft_core::ToolCallRequest {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: "{\"path\":\"a\"}".into(),
            }],
        ),
        ChatMessage::tool_result("c1", "alpha", false),
        ChatMessage::assistant("It says alpha.", vec![]),
    ];
    let (sink, _rx) = EventSink::channel();
    let mut spec = run.spec(sink);
    spec.history.splice(0..0, history);
    let outcome = CodeMode::new(Limits::default()).run(spec).await;
    assert_eq!(outcome.text, "You read a.");
    let texts: Vec<String> = run.requests()[0]
        .messages
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(
        texts,
        vec![
            "read a",
            "[called read_file with {\"path\":\"a\"}]",
            "[result of read_file]\nalpha",
            "It says alpha.",
            "what did I read?"
        ]
    );
}

#[tokio::test]
async fn output_log_and_store_bombs_get_an_error_and_the_turn_goes_on() {
    let mut run = Run::new(vec![
        code("const s = 'x'.repeat(1 << 20); while (true) log(s);"),
        code("const s = 'x'.repeat(1 << 20); let i = 0; while (true) store('k' + i++, s);"),
        code("const s = 'x'.repeat(1 << 16); while (true) output(s);"),
        json!({"text": "gave up"}),
    ]);
    run.limits = Limits {
        max_ms_per_run: 5_000,
        max_log_bytes_per_run: 64 << 10,
        max_store_bytes: 3 << 20,
        max_output_bytes_per_run: 256 << 10,
        ..Limits::default()
    };
    let (outcome, events) = run.go().await;
    assert_eq!(outcome.end, weft_core::TurnEnd::Completed, "{outcome:?}");
    assert!(outcome.text.ends_with("gave up"), "the turn went on");
    let requests = run.requests();
    let log = requests[1].messages.last().unwrap().text();
    assert!(
        log.contains("log() passed 65536 bytes (code.max_log_bytes_per_run)"),
        "{log}"
    );
    let store = requests[2].messages.last().unwrap().text();
    assert!(
        store.contains("store() passed 3145728 bytes (code.max_store_bytes)"),
        "{store}"
    );
    let output = requests[3].messages.last().unwrap().text();
    assert!(
        output.contains("output() passed 262144 bytes (code.max_output_bytes_per_run)"),
        "{}",
        &output[..200.min(output.len())]
    );
    // What was shown is exactly what fit: four chunks of 64 KiB.
    let shown: usize = events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::Chunk { content, .. } if content.starts_with('x') => Some(content.len()),
            _ => None,
        })
        .sum();
    assert_eq!(shown, 256 << 10);
}

#[tokio::test]
async fn output_counts_against_the_turns_output_cap() {
    let mut run = Run::new(vec![
        code("for (let i = 0; i < 10; i++) output('y'.repeat(1000));"),
        json!({"text": "never"}),
    ]);
    run.config.max_output_bytes = 2_500;
    let (outcome, events) = run.go().await;
    assert!(
        matches!(
            &outcome.end,
            weft_core::TurnEnd::BudgetExceeded(trip) if trip.reason == weft_protocol::BudgetReason::Bytes
        ),
        "{:?}",
        outcome.end
    );
    let shown: usize = events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::Chunk { content, .. } if content.starts_with('y') => Some(content.len()),
            _ => None,
        })
        .sum();
    assert!(shown <= 2_500, "{shown}");
    assert_eq!(run.requests().len(), 1, "the turn stopped");
}
