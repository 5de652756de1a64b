//! A code-mode turn: ask the model, run the code it wrote as a `code.execute` call (its tool
//! calls nested under it), feed the result back, until `done()`, a plain text answer or the
//! round limit — all under the turn's wall clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde_json::{json, Value};
use weft_core::{ChatMessage, HostedTurn, OpenCall, TurnOutcome, TurnSpec};

use crate::history::flatten;
use crate::prompt::{code_result_message, extract_code, CODE_EXECUTE};
use crate::run_result::result_text;
use crate::sandbox::{self, FromHost, Limits, Report, ToHost};

pub async fn run_turn(mut spec: TurnSpec, limits: Limits, max_rounds: u32) -> TurnOutcome {
    let mut history = flatten(std::mem::take(&mut spec.history));
    let hosted = HostedTurn::start(&spec);
    {
        let work = rounds(
            &hosted,
            &spec.system_prompt,
            &mut history,
            limits,
            max_rounds,
        );
        tokio::pin!(work);
        tokio::select! {
            () = &mut work => {}
            () = hosted.wall_clock_out() => {
                hosted.check_wall_clock();
                work.await;
            }
        }
    }
    hosted.finish(history)
}

async fn rounds(
    hosted: &HostedTurn,
    system: &str,
    history: &mut Vec<ChatMessage>,
    limits: Limits,
    max_rounds: u32,
) {
    let tool_names: Vec<String> = crate::code_tools(hosted.toolbelt())
        .names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut store = HashMap::new();
    // A turn taken up after its process died redoes the run it was cut in, whole, and has
    // the rounds its first life left.
    let resume = hosted.take_resume().unwrap_or_default();
    let used = u32::try_from(resume.spent.llm_calls).unwrap_or(u32::MAX);
    let cut = resume
        .cut
        .into_iter()
        .find(|c| c.call.request.name == CODE_EXECUTE);
    if let Some(cut) = cut {
        let code = serde_json::from_str::<Value>(&cut.call.request.arguments)
            .ok()
            .and_then(|args| args["code"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let Ok(open) = hosted.reopen_call(&cut) else {
            return;
        };
        let (content, ended) = run_code(hosted, open, code, &tool_names, limits, &mut store).await;
        history.push(ChatMessage::user(code_result_message(&content)));
        if ended {
            return;
        }
    }
    for _ in used.min(max_rounds)..max_rounds {
        if hosted.is_stopped() {
            return;
        }
        let Ok(answer) = hosted.complete(system, history.clone()).await else {
            return;
        };
        history.push(ChatMessage::assistant(answer.clone(), Vec::new()));
        let Some(code) = extract_code(&answer) else {
            hosted.record_answer(&answer);
            hosted.say(answer.trim());
            return;
        };
        let Ok(open) = hosted.open_call(&answer, CODE_EXECUTE, json!({ "code": code })) else {
            return;
        };
        let (content, ended) = run_code(
            hosted,
            open,
            code.to_owned(),
            &tool_names,
            limits,
            &mut store,
        )
        .await;
        history.push(ChatMessage::user(code_result_message(&content)));
        if ended {
            return;
        }
    }
    if !hosted.is_stopped() {
        hosted.out_of_rounds(max_rounds);
    }
}

/// Run `code` as the call `open`, and close it: its result as recorded, and whether the
/// code ended the turn (`done()`, whose value is then said).
async fn run_code(
    hosted: &HostedTurn,
    open: OpenCall,
    code: String,
    tool_names: &[String],
    limits: Limits,
    store: &mut HashMap<String, String>,
) -> (String, bool) {
    let (report, shown) = execute(hosted, &open, &code, tool_names, limits, store).await;
    let (content, is_error) = result_text(&report, &shown);
    let content = hosted.close_call(open, content, is_error);
    match report.done {
        Some(value) => {
            if let Some(value) = value {
                hosted.say(&display(&value));
            }
            (content, true)
        }
        None => (content, false),
    }
}

/// Run one piece of code on a blocking thread, serving its tool calls and output meanwhile.
/// Returns the run's report and the text it showed the user.
async fn execute(
    hosted: &HostedTurn,
    open: &OpenCall,
    code: &str,
    tool_names: &[String],
    limits: Limits,
    store: &mut HashMap<String, String>,
) -> (Report, String) {
    let (to_host, mut requests) = tokio::sync::mpsc::channel(sandbox::TO_HOST_QUEUE);
    let (answers, from_host) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let (reply, report) = tokio::sync::oneshot::channel();
    {
        let code = code.to_owned();
        let names = tool_names.to_vec();
        let kept = std::mem::take(store);
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || {
            let reply: sandbox::Reply<'_> = Box::new(move |report, kept| {
                let _ = reply.send((report, kept));
            });
            sandbox::run(
                &code, &names, limits, kept, &to_host, &from_host, &stop, reply,
            );
        });
    }

    let mut shown = String::new();
    let mut calls = FuturesUnordered::new();
    let mut report = std::pin::pin!(report);
    let mut finished: Option<(Report, HashMap<String, String>)> = None;
    let mut stopping = false;
    let serve = |request: ToHost, calls: &mut FuturesUnordered<_>, shown: &mut String| match request
    {
        ToHost::Tool { id, name, args } => {
            calls.push(async move { (id, hosted.call_tool(open, &name, args).await) })
        }
        ToHost::Output(text) => {
            // Charged to the turn's `max_output_bytes`: past it the turn stops, as in classic.
            if hosted.say(&text) {
                shown.push_str(&text);
            }
        }
    };
    // Until the run has reported and every call it made has its result (a call the code did
    // not wait for still finishes).
    while finished.is_none() || !calls.is_empty() {
        tokio::select! {
            request = requests.recv(), if finished.is_none() => match request {
                Some(request) => serve(request, &mut calls, &mut shown),
                // The run's thread is done: its report was sent first, unless it died.
                None => finished = Some((&mut report).await.unwrap_or_else(|_| lost_run())),
            },
            reported = &mut report, if finished.is_none() => {
                // What the run sent before it reported is already queued.
                while let Ok(request) = requests.try_recv() {
                    serve(request, &mut calls, &mut shown);
                }
                finished = Some(reported.unwrap_or_else(|_| lost_run()));
            }
            Some((id, outcome)) = calls.next(), if !calls.is_empty() => {
                let _ = answers.send(FromHost::ToolDone {
                    id,
                    ok: !outcome.is_error,
                    content: outcome.content,
                });
            }
            () = hosted.stopped(), if !stopping => {
                stopping = true;
                stop.store(true, Ordering::Relaxed);
                let _ = answers.send(FromHost::Stop);
            }
        }
    }
    let (report, kept) = finished.unwrap_or_else(lost_run);
    *store = kept;
    (report, shown)
}

/// A run that never reported (its thread died), with nothing stored.
fn lost_run() -> (Report, HashMap<String, String>) {
    (crate::run_result::lost(), HashMap::new())
}

/// A `done()` value for the user: strings as they are, anything else as JSON.
fn display(json: &str) -> String {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::String(text)) => text,
        _ => json.to_owned(),
    }
}
