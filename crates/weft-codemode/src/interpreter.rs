//! `interpreter_run` (seed 003's `interpreter.run`; providers take no `.` in a tool name):
//! classic mode runs a snippet of JavaScript in the same QuickJS sandbox as code mode, under
//! the same `[code]` limits, with no tools reachable from inside. What it returns, shows with
//! `output()` and logs comes back as the call's result. Its category is `execute`: Plan
//! refuses it, Default asks first, Auto runs it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_core::{Tool, ToolContext, ToolError};

use crate::run_result::{lost, result_text};
use crate::sandbox::{self, FromHost, Limits, Report, ToHost};

pub const INTERPRETER_RUN: &str = "interpreter_run";

/// Why a snippet cannot call a tool.
const NO_TOOLS: &str = "interpreter_run has no tools: call them directly instead";

pub struct InterpreterRun {
    limits: Limits,
}

impl InterpreterRun {
    pub fn new(limits: Limits) -> Self {
        InterpreterRun { limits }
    }
}

#[async_trait]
impl Tool for InterpreterRun {
    weft_core::tool_meta! {
        name: INTERPRETER_RUN,
        description: "Run a JavaScript snippet in a sandbox (no network, no files, no tools) and get back what it returns (the body of an async function: `return` works at the top level), what it shows with output(text) and what it logs with log(text). For computing, parsing and transforming data.",
        class: Safe,
        category: Execute,
        parameters: json!({"type": "object", "properties": {
            "code": {"type": "string", "description": "The JavaScript to run."}
        }, "required": ["code"]}),
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let code = args
            .get("code")
            .and_then(Value::as_str)
            .filter(|code| !code.trim().is_empty())
            .ok_or_else(|| ToolError::model("`code` must be JavaScript text"))?
            .to_owned();
        let (mut report, shown) = run_snippet(code, self.limits, ctx).await;
        // There is no turn to end here: a `done(value)` is the snippet's value.
        if let Some(value) = report.done.take() {
            report.outcome = Ok(value);
        }
        let (text, failed) = result_text(&report, &shown);
        if failed {
            Err(ToolError::model(text))
        } else {
            Ok(text)
        }
    }
}

/// Run `code` on a blocking thread, answering any tool call with an error and keeping what
/// it shows, until it reports or the turn stops.
async fn run_snippet(code: String, limits: Limits, ctx: &ToolContext) -> (Report, String) {
    let (to_host, mut requests) = tokio::sync::mpsc::channel(sandbox::TO_HOST_QUEUE);
    let (answers, from_host) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let (reply, report) = tokio::sync::oneshot::channel();
    {
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || {
            let reply: sandbox::Reply<'_> = Box::new(move |report, _| {
                let _ = reply.send(report);
            });
            sandbox::run(
                &code,
                &[],
                limits,
                HashMap::new(),
                &to_host,
                &from_host,
                &stop,
                reply,
            );
        });
    }
    let mut shown = String::new();
    let mut report = std::pin::pin!(report);
    let mut stopping = false;
    loop {
        tokio::select! {
            request = requests.recv() => match request {
                Some(ToHost::Output(text)) => shown.push_str(&text),
                Some(ToHost::Tool { id, .. }) => {
                    let _ = answers.send(FromHost::ToolDone { id, ok: false, content: NO_TOOLS.to_owned() });
                }
                None => return ((&mut report).await.unwrap_or_else(|_| lost()), shown),
            },
            reported = &mut report => {
                while let Ok(request) = requests.try_recv() {
                    if let ToHost::Output(text) = request {
                        shown.push_str(&text);
                    }
                }
                return (reported.unwrap_or_else(|_| lost()), shown);
            }
            () = ctx.cancel.cancelled(), if !stopping => {
                stopping = true;
                stop.store(true, Ordering::Relaxed);
                let _ = answers.send(FromHost::Stop);
            }
        }
    }
}
