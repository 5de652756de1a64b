//! Spans in the OpenTelemetry GenAI conventions: one per turn (`invoke_agent`), per model
//! call (`chat`) and per tool call (`execute_tool`), nested as the work is (a subtask's model
//! and tool calls under its `run_subtask` call). They carry the target [`TARGET`], so an
//! exporter can take these and nothing else; without one they cost a disabled span each.

use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::Empty;
use tracing::Span;
use weft_protocol::{ToolResultMetadata, ToolResultStatus};

/// The `tracing` target of every GenAI span.
pub const TARGET: &str = "gen_ai";

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Whether prompts, answers, tool arguments and results go into spans (off by default: they
/// may hold what users would not want in a tracing system).
pub fn set_capture_content(capture: bool) {
    CAPTURE_CONTENT.store(capture, Ordering::Relaxed);
}

pub fn capture_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// A whole turn: the agent invoked on a thread.
pub fn turn_span(thread_id: &str, agent: &str, message_id: &str, mode: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = format!("invoke_agent {agent}"),
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = thread_id,
        weft.message.id = message_id,
        weft.mode = mode,
        weft.turn.status = Empty,
        otel.status_code = Empty,
    )
}

/// How a turn ended (`completed`, `cancelled`, `provider_error`, …).
pub fn turn_ended(span: &Span, status: &str) {
    span.record("weft.turn.status", status);
    span.record(
        "otel.status_code",
        if status == "completed" { "ok" } else { "error" },
    );
}

/// One model call.
pub fn model_call_span(provider: &str, model: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.output.messages = Empty,
        "error.type" = Empty,
        otel.status_code = Empty,
    )
}

/// A model call's end: its usage and why it stopped.
pub fn model_call_ended(
    span: &Span,
    input_tokens: u64,
    output_tokens: u64,
    tool_calls: u32,
    error: Option<&str>,
) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.usage.input_tokens", input_tokens);
    span.record("gen_ai.usage.output_tokens", output_tokens);
    let finish = match (error, tool_calls) {
        (Some(_), _) => "error",
        (None, 0) => "stop",
        (None, _) => "tool_calls",
    };
    span.record("gen_ai.response.finish_reasons", format!("[\"{finish}\"]"));
    if let Some(error) = error {
        span.record("error.type", error);
        span.record("otel.status_code", "error");
    }
}

/// A model call's answer text, when content is captured.
pub fn model_call_output(span: &Span, text: &str) {
    if capture_content() {
        span.record("gen_ai.output.messages", text);
    }
}

/// One tool call (the gate and any approval included).
pub fn tool_call_span(name: &str, call_id: &str, arguments: &str) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = format!("execute_tool {name}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = call_id,
        "gen_ai.tool.type" = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        weft.tool.outcome = Empty,
        weft.approval.status = Empty,
        otel.status_code = Empty,
    );
    if capture_content() {
        span.record("gen_ai.tool.call.arguments", arguments);
    }
    span
}

/// A tool call's end: its outcome (`success`, `error`, `rejected`, `timed_out`), its
/// approval (`not_required`, `approved`, …), its result when content is captured.
pub fn tool_call_ended(span: &Span, metadata: &ToolResultMetadata, result: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("weft.tool.outcome", metadata.status.as_str());
    span.record("weft.approval.status", metadata.approval_status.as_str());
    if metadata.status != ToolResultStatus::Success {
        span.record("otel.status_code", "error");
    }
    if capture_content() {
        span.record("gen_ai.tool.call.result", result);
    }
}
