//! One run of model-written JavaScript in QuickJS, on the calling (blocking) thread: a fresh
//! runtime with a memory limit and stack size, a CPU-time limit through the interrupt
//! handler, and no host access but the functions defined here. Tool calls leave as messages
//! and come back as results; in between the thread waits, off the clock.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rquickjs::context::intrinsic;
use rquickjs::function::{Opt, Rest};
use rquickjs::prelude::Coerced;
use rquickjs::{
    CatchResultExt, CaughtError, Context, Ctx, Exception, Function, Object, Persistent, Promise,
    Runtime, Value,
};
use serde::Deserialize;

/// What a run may use.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct Limits {
    /// CPU time of one run (time spent waiting for tools does not count).
    pub max_ms_per_run: u64,
    /// Heap of one run.
    pub max_memory_bytes: usize,
    /// Stack of one run.
    pub max_stack_bytes: usize,
    /// Text one run may show the user with `output()` (the turn's `max_output_bytes` applies
    /// as well).
    pub max_output_bytes_per_run: usize,
    /// Text one run may `log()`.
    pub max_log_bytes_per_run: usize,
    /// Bytes of keys and values `store()` may keep for a turn.
    pub max_store_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ms_per_run: 10_000,
            max_memory_bytes: 64 << 20,
            max_stack_bytes: 1 << 20,
            max_output_bytes_per_run: 1 << 20,
            max_log_bytes_per_run: 64 << 10,
            max_store_bytes: 1 << 20,
        }
    }
}

/// Messages from a run that may wait for the host before the run goes on.
pub const TO_HOST_QUEUE: usize = 16;

/// From the sandbox to the host.
#[derive(Debug, Clone, PartialEq)]
pub enum ToHost {
    /// `await tools.<name>(args)`: `args` is JSON text.
    Tool { id: u64, name: String, args: String },
    /// `output(text)`.
    Output(String),
}

/// From the host to the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub enum FromHost {
    /// A tool call's result: its text, and whether it failed.
    ToolDone { id: u64, ok: bool, content: String },
    /// The turn is stopping.
    Stop,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `Ok`: the JSON of what the code returned (`None`: nothing); `Err`: why it failed.
    pub outcome: Result<Option<String>, String>,
    /// `done()` was called: with the JSON of its value, if any.
    pub done: Option<Option<String>>,
    pub logs: Vec<String>,
    /// CPU time the run used.
    pub cpu: Duration,
}

/// CPU time spent running JavaScript, against the limit.
struct Clock {
    limit: Duration,
    used: Cell<Duration>,
    since: Cell<Option<Instant>>,
    tripped: Cell<bool>,
}

impl Clock {
    fn start(&self) {
        self.since.set(Some(Instant::now()));
    }

    fn stop(&self) {
        if let Some(since) = self.since.take() {
            self.used.set(self.used.get() + since.elapsed());
        }
    }

    fn total(&self) -> Duration {
        self.used.get() + self.since.get().map_or(Duration::ZERO, |s| s.elapsed())
    }

    fn over(&self) -> bool {
        let over = self.total() > self.limit;
        if over {
            self.tripped.set(true);
        }
        over
    }
}

/// What the host functions hold during a run.
#[derive(Default)]
struct HostState {
    next_id: u64,
    /// Each tool call waiting for its result: its promise's resolve and reject.
    pending: HashMap<u64, (Persistent<Function<'static>>, Persistent<Function<'static>>)>,
    logs: Vec<String>,
    done: Option<Option<String>>,
    /// `store()` values as JSON text.
    store: HashMap<String, String>,
    /// Bytes shown with `output()`, logged with `log()`, and kept by `store()` so far.
    output_bytes: usize,
    log_bytes: usize,
    store_bytes: usize,
}

/// Bytes a `store()` map holds (keys and values).
fn store_bytes(store: &HashMap<String, String>) -> usize {
    store.iter().map(|(k, v)| k.len() + v.len()).sum()
}

/// The error code gets when a host buffer would pass its bound.
fn over_bound<'js>(ctx: &Ctx<'js>, what: &str, max: usize, key: &str) -> rquickjs::Error {
    let message = format!("{what} passed {max} bytes (code.{key}); nothing more was kept");
    match Exception::from_message(ctx.clone(), &message) {
        Ok(e) => ctx.throw(e.into_value()),
        Err(e) => e,
    }
}

/// The built-in objects code gets: no `eval` of strings beyond the run itself, no modules.
type Intrinsics = (
    intrinsic::Eval,
    intrinsic::Json,
    intrinsic::Promise,
    intrinsic::MapSet,
    intrinsic::RegExp,
    intrinsic::RegExpCompiler,
    intrinsic::Date,
);

/// Where a run's results go, before its sandbox is torn down (off the caller's path).
pub type Reply<'a> = Box<dyn FnOnce(Report, HashMap<String, String>) + 'a>;

/// Run `code` (the body of an async function: `await` and `return` work at its top level).
/// `store` carries `store()`/`recall()` values (JSON text) from one run of a turn to the next;
/// the report and the store go to `reply` as soon as the run ends.
#[allow(clippy::too_many_arguments)]
pub fn run(
    code: &str,
    tool_names: &[String],
    limits: Limits,
    store: HashMap<String, String>,
    to_host: &tokio::sync::mpsc::Sender<ToHost>,
    from_host: &mpsc::Receiver<FromHost>,
    stop: &Arc<AtomicBool>,
    reply: Reply<'_>,
) {
    let clock = Rc::new(Clock {
        limit: Duration::from_millis(limits.max_ms_per_run),
        used: Cell::new(Duration::ZERO),
        since: Cell::new(None),
        tripped: Cell::new(false),
    });
    let runtime = match Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            return reply(
                failed(format!("the sandbox could not start: {e}"), &clock),
                store,
            )
        }
    };
    runtime.set_memory_limit(limits.max_memory_bytes);
    runtime.set_max_stack_size(limits.max_stack_bytes);
    {
        let clock = clock.clone();
        let stop = stop.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || {
            stop.load(Ordering::Relaxed) || clock.over()
        })));
    }
    let context = match Context::custom::<Intrinsics>(&runtime) {
        Ok(context) => context,
        Err(e) => {
            return reply(
                failed(format!("the sandbox could not start: {e}"), &clock),
                store,
            )
        }
    };
    let host = Rc::new(RefCell::new(HostState {
        store_bytes: store_bytes(&store),
        store,
        ..HostState::default()
    }));
    let outcome = context.with(|ctx| {
        if let Err(e) = install(&ctx, tool_names, &host, to_host, &limits) {
            return Err(format!("the sandbox could not start: {e}"));
        }
        clock.start();
        let wrapped = format!("(async () => {{ {code}\n}})()");
        let started: Result<Promise, _> = ctx.eval(wrapped).catch(&ctx);
        let result = match started {
            Ok(promise) => drive(&ctx, &promise, &host, from_host, &clock, stop),
            Err(e) => Err(describe(e)),
        };
        clock.stop();
        // Persistent handles must not outlive their runtime.
        host.borrow_mut().pending.clear();
        result
    });
    let outcome = if clock.tripped.get() {
        Err(format!(
            "stopped: the run used more than {} ms of CPU time (code.max_ms_per_run)",
            limits.max_ms_per_run
        ))
    } else if stop.load(Ordering::Relaxed) {
        Err("stopped: the turn was stopped".to_owned())
    } else {
        outcome
    };
    let mut host = host.take();
    reply(
        Report {
            outcome,
            done: host.done.take(),
            logs: std::mem::take(&mut host.logs),
            cpu: clock.total(),
        },
        std::mem::take(&mut host.store),
    );
    // The context and runtime are dropped here, after the reply.
}

fn failed(message: String, clock: &Clock) -> Report {
    Report {
        outcome: Err(message),
        done: None,
        logs: Vec::new(),
        cpu: clock.total(),
    }
}

/// A value as text: strings as they are, anything else as JSON.
fn text_of<'js>(ctx: &Ctx<'js>, value: Value<'js>) -> String {
    if let Some(s) = value.as_string() {
        return s.to_string().unwrap_or_default();
    }
    if value.is_undefined() {
        return "undefined".to_owned();
    }
    ctx.json_stringify(value)
        .ok()
        .flatten()
        .and_then(|s| s.to_string().ok())
        .unwrap_or_default()
}

/// Define what the code sees: `tools.<name>()`, `output`, `log`, `done`, `store`, `recall`.
fn install<'js>(
    ctx: &Ctx<'js>,
    tool_names: &[String],
    host: &Rc<RefCell<HostState>>,
    to_host: &tokio::sync::mpsc::Sender<ToHost>,
    limits: &Limits,
) -> rquickjs::Result<()> {
    let globals = ctx.globals();
    let tools = Object::new(ctx.clone())?;
    for name in tool_names {
        tools.set(name.as_str(), tool_function(ctx, name, host, to_host)?)?;
    }
    globals.set("tools", tools)?;
    globals.set("output", output_function(ctx, host, to_host, limits)?)?;
    globals.set("log", log_function(ctx, host, limits)?)?;
    globals.set("done", done_function(ctx, host)?)?;
    globals.set("store", store_function(ctx, host, limits)?)?;
    globals.set("recall", recall_function(ctx, host)?)?;
    Ok(())
}

/// `tools.<name>(args)`: a promise settled when the host sends the call's result.
fn tool_function<'js>(
    ctx: &Ctx<'js>,
    name: &str,
    host: &Rc<RefCell<HostState>>,
    to_host: &tokio::sync::mpsc::Sender<ToHost>,
) -> rquickjs::Result<Function<'js>> {
    let host = host.clone();
    let to_host = to_host.clone();
    let tool = name.to_owned();
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, args: Opt<Value<'js>>| -> rquickjs::Result<Promise<'js>> {
            let args = match args.0.filter(|a| !a.is_undefined()) {
                Some(value) => ctx
                    .json_stringify(value)?
                    .map_or_else(|| Ok("{}".to_owned()), |s| s.to_string())?,
                None => "{}".to_owned(),
            };
            let (promise, resolve, reject) = ctx.promise()?;
            let mut state = host.borrow_mut();
            state.next_id += 1;
            let id = state.next_id;
            let sent = to_host.blocking_send(ToHost::Tool {
                id,
                name: tool.clone(),
                args,
            });
            if sent.is_ok() {
                state.pending.insert(
                    id,
                    (
                        Persistent::save(&ctx, resolve),
                        Persistent::save(&ctx, reject),
                    ),
                );
            } else {
                let error = Exception::from_message(ctx.clone(), "the host is gone")?;
                reject.call::<_, ()>((error,))?;
            }
            Ok(promise)
        },
    )
}

/// `output(text)`: shown to the user; at most `max_output_bytes_per_run` a run, and the
/// run waits while the host is behind.
fn output_function<'js>(
    ctx: &Ctx<'js>,
    host: &Rc<RefCell<HostState>>,
    to_host: &tokio::sync::mpsc::Sender<ToHost>,
    limits: &Limits,
) -> rquickjs::Result<Function<'js>> {
    let (host, to_host, max) = (
        host.clone(),
        to_host.clone(),
        limits.max_output_bytes_per_run,
    );
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, text: Value<'js>| -> rquickjs::Result<()> {
            let text = text_of(&ctx, text);
            {
                let mut state = host.borrow_mut();
                if state.output_bytes + text.len() > max {
                    return Err(over_bound(
                        &ctx,
                        "output()",
                        max,
                        "max_output_bytes_per_run",
                    ));
                }
                state.output_bytes += text.len();
            }
            let _ = to_host.blocking_send(ToHost::Output(text));
            Ok(())
        },
    )
}

/// `log(...)`: lines for the model's result, at most `max_log_bytes_per_run` a run.
fn log_function<'js>(
    ctx: &Ctx<'js>,
    host: &Rc<RefCell<HostState>>,
    limits: &Limits,
) -> rquickjs::Result<Function<'js>> {
    let (host, max) = (host.clone(), limits.max_log_bytes_per_run);
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, args: Rest<Value<'js>>| -> rquickjs::Result<()> {
            let line: Vec<String> = args.0.into_iter().map(|v| text_of(&ctx, v)).collect();
            let line = line.join(" ");
            let mut state = host.borrow_mut();
            if state.log_bytes + line.len() > max {
                return Err(over_bound(&ctx, "log()", max, "max_log_bytes_per_run"));
            }
            state.log_bytes += line.len();
            state.logs.push(line);
            Ok(())
        },
    )
}

/// `done(value?)`: the turn ends after this run.
fn done_function<'js>(
    ctx: &Ctx<'js>,
    host: &Rc<RefCell<HostState>>,
) -> rquickjs::Result<Function<'js>> {
    let host = host.clone();
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, value: Opt<Value<'js>>| -> rquickjs::Result<()> {
            let json = match value.0.filter(|v| !v.is_undefined()) {
                Some(v) => ctx.json_stringify(v)?.map(|s| s.to_string()).transpose()?,
                None => None,
            };
            host.borrow_mut().done = Some(json);
            Ok(())
        },
    )
}

/// `store(key, value)`: kept as JSON for the turn's later runs, at most `max_store_bytes`.
fn store_function<'js>(
    ctx: &Ctx<'js>,
    host: &Rc<RefCell<HostState>>,
    limits: &Limits,
) -> rquickjs::Result<Function<'js>> {
    let (host, max) = (host.clone(), limits.max_store_bytes);
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, key: Coerced<String>, value: Value<'js>| -> rquickjs::Result<()> {
            let json = ctx
                .json_stringify(value)?
                .map_or_else(|| Ok("null".to_owned()), |s| s.to_string())?;
            let mut state = host.borrow_mut();
            let replaced = state.store.get(&key.0).map_or(0, |v| key.0.len() + v.len());
            let after = state.store_bytes - replaced + key.0.len() + json.len();
            if after > max {
                return Err(over_bound(&ctx, "store()", max, "max_store_bytes"));
            }
            state.store_bytes = after;
            state.store.insert(key.0, json);
            Ok(())
        },
    )
}

/// `recall(key)`: what `store()` kept, or `undefined`.
fn recall_function<'js>(
    ctx: &Ctx<'js>,
    host: &Rc<RefCell<HostState>>,
) -> rquickjs::Result<Function<'js>> {
    let host = host.clone();
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, key: Coerced<String>| -> rquickjs::Result<Value<'js>> {
            let json = host.borrow().store.get(&key.0).cloned();
            match json {
                Some(json) => ctx.json_parse(json),
                None => Ok(Value::new_undefined(ctx)),
            }
        },
    )
}

/// Run jobs until the code's promise settles, feeding tool results in as they come.
fn drive<'js>(
    ctx: &Ctx<'js>,
    promise: &Promise<'js>,
    host: &Rc<RefCell<HostState>>,
    from_host: &mpsc::Receiver<FromHost>,
    clock: &Clock,
    stop: &AtomicBool,
) -> Result<Option<String>, String> {
    loop {
        while ctx.execute_pending_job() {}
        if let Some(result) = promise.result::<Value>() {
            return match result.catch(ctx) {
                Ok(value) => Ok(to_json(ctx, value)),
                Err(e) => Err(describe(e)),
            };
        }
        if clock.tripped.get() || stop.load(Ordering::Relaxed) {
            return Err("stopped".to_owned());
        }
        if host.borrow().pending.is_empty() {
            return Err(
                "the code is waiting on a promise that nothing will settle (only tool calls \
                 resolve; there are no timers)"
                    .to_owned(),
            );
        }
        clock.stop();
        let message = from_host.recv();
        clock.start();
        match message {
            Ok(FromHost::ToolDone { id, ok, content }) => {
                settle(ctx, host, id, ok, content).map_err(|e| describe(CaughtError::Error(e)))?;
            }
            Ok(FromHost::Stop) | Err(_) => return Err("stopped".to_owned()),
        }
    }
}

/// Resolve a tool call's promise with its result (parsed when it is JSON), or reject it with
/// an `Error` carrying the message.
fn settle<'js>(
    ctx: &Ctx<'js>,
    host: &Rc<RefCell<HostState>>,
    id: u64,
    ok: bool,
    content: String,
) -> rquickjs::Result<()> {
    let Some((resolve, reject)) = host.borrow_mut().pending.remove(&id) else {
        return Ok(());
    };
    let (resolve, reject) = (resolve.restore(ctx)?, reject.restore(ctx)?);
    if ok {
        let value = match ctx.json_parse(content.clone()) {
            Ok(value) => value,
            Err(_) => {
                // Not JSON: the text itself (and no exception left pending).
                ctx.catch();
                rquickjs::String::from_str(ctx.clone(), &content)?.into_value()
            }
        };
        resolve.call::<_, ()>((value,))
    } else {
        let error = Exception::from_message(ctx.clone(), &content)?;
        reject.call::<_, ()>((error,))
    }
}

fn to_json<'js>(ctx: &Ctx<'js>, value: Value<'js>) -> Option<String> {
    if value.is_undefined() {
        return None;
    }
    ctx.json_stringify(value)
        .ok()
        .flatten()
        .and_then(|s| s.to_string().ok())
}

/// An exception as the model should read it: the error and where.
fn describe(error: CaughtError<'_>) -> String {
    match error {
        CaughtError::Exception(e) => {
            let message = e.message().unwrap_or_default();
            let name = e
                .get::<_, String>("name")
                .unwrap_or_else(|_| "Error".to_owned());
            let mut text = if message.is_empty() {
                name
            } else {
                format!("{name}: {message}")
            };
            if let Some(stack) = e.stack().filter(|s| !s.trim().is_empty()) {
                text.push('\n');
                text.push_str(stack.trim_end());
            }
            text
        }
        CaughtError::Value(value) => format!(
            "uncaught: {}",
            value
                .as_string()
                .and_then(|s| s.to_string().ok())
                .unwrap_or_else(|| format!("{value:?}"))
        ),
        CaughtError::Error(e) => e.to_string(),
    }
}
