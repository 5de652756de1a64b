//! One provider call: stream text to the client as chunks, collect tool calls and usage.

use std::sync::Arc;
use std::time::Instant;

use futures::{FutureExt, StreamExt};
use weft_protocol::ServerEvent;

use crate::budget::BudgetTrip;
use crate::clock::millis;
use crate::level::Level;
use crate::message::{ChatMessage, ToolCallRequest};
use crate::provider::{
    ProviderError, ProviderEvent, ProviderRequest, ProviderStream, ToolSpec, Usage,
};
use crate::record::ModelCallRecord;
use crate::telemetry;
use crate::turn::Turn;

pub(crate) struct Sampled {
    pub text: String,
    /// The model's reasoning before its answer (kept up to [`MAX_REASONING_BYTES`]).
    pub reasoning: String,
    pub tool_calls: Vec<ToolCallRequest>,
    pub usage: Usage,
}

pub(crate) enum SampleError {
    /// The turn is stopping (cancelled or a budget tripped).
    Stopped,
    Provider(String),
}

/// Call the level's model once. Text is appended to `all_text` as it streams, so partial
/// text survives an error or a stop; a quiet level (the planner) streams nothing out.
pub(crate) async fn sample(
    turn: &Turn,
    level: &Level,
    messages: Arc<Vec<ChatMessage>>,
    all_text: &mut String,
) -> Result<Sampled, SampleError> {
    if let Err(trip) = turn.budget.take_llm_call() {
        turn.trip(trip);
        return Err(SampleError::Stopped);
    }
    let llm = &level.llm;
    let tools: Arc<[ToolSpec]> = if llm.capabilities.tools {
        level.specs.clone()
    } else {
        Arc::from([])
    };
    let request = ProviderRequest {
        model: llm.model.to_string(),
        system: level.system.clone(),
        messages,
        tools,
        max_tokens: turn.config.max_tokens,
        temperature: turn.config.temperature,
        response_schema: level.response_schema.clone(),
        single_tool_call: !llm.capabilities.parallel_tool_calls,
    };
    let started = Instant::now();
    let mut call = CallAccount {
        turn,
        level,
        started,
        usage: Usage::default(),
        tool_calls: 0,
        span: telemetry::model_call_span(llm.provider.name(), &llm.model),
    };

    // The work is polled first: cancellation only registers a waiter when the work is pending.
    let opened = tokio::select! {
        biased;
        opened = llm.provider.stream(request, turn.cancel.clone()) => opened,
        () = turn.cancel.cancelled() => return Err(call.close(Some("cancelled"), SampleError::Stopped)),
    };
    let mut stream = match opened {
        Ok(stream) => stream,
        Err(e) => return Err(call.close(Some(&e.to_string()), failed(turn, &e))),
    };

    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    let mut held = None;
    // When the next text chunk may go out (none yet: the first goes at once).
    let mut next_chunk_at: Option<tokio::time::Instant> = None;
    loop {
        if turn.is_stopped() {
            return Err(call.close(Some("cancelled"), SampleError::Stopped));
        }
        let next = match held.take() {
            Some(next) => next,
            None => tokio::select! {
                biased;
                next = stream.next() => next,
                () = turn.cancel.cancelled() => return Err(call.close(Some("cancelled"), SampleError::Stopped)),
            },
        };
        let mut next = coalesce(next, &mut stream, &mut held);
        if let (Some(at), None) = (next_chunk_at, &held) {
            next = gather_until(at, next, &mut stream, &mut held, &turn.cancel).await;
        }
        match next {
            None => break,
            Some(Err(e)) => return Err(call.close(Some(&e.to_string()), failed(turn, &e))),
            Some(Ok(ProviderEvent::TextDelta(delta))) => {
                if let Some(trip) = stream_text(turn, level, delta, &mut text, all_text) {
                    turn.trip(trip);
                    return Err(call.close(Some("output cap reached"), SampleError::Stopped));
                }
                if !turn.chunk_interval.is_zero() && !level.quiet {
                    next_chunk_at = Some(tokio::time::Instant::now() + turn.chunk_interval);
                }
            }
            Some(Ok(ProviderEvent::ToolCall(call_request))) => {
                let size = call_request.arguments.len() + call_request.name.len();
                if let Err((_, trip)) = turn.budget.take_output_bytes(size) {
                    turn.trip(trip);
                    return Err(call.close(Some("output cap reached"), SampleError::Stopped));
                }
                call.tool_calls += 1;
                tool_calls.push(call_request)
            }
            Some(Ok(ProviderEvent::Usage(usage))) => call.usage.add(usage),
            Some(Ok(ProviderEvent::ReasoningDelta(delta))) => {
                stream_reasoning(turn, level, delta, &mut reasoning)
            }
            Some(Ok(ProviderEvent::Finish(_))) => {}
        }
    }
    call.close(None, ());
    telemetry::model_call_output(&call.span, &text);
    Ok(Sampled {
        text,
        reasoning,
        tool_calls,
        usage: call.usage,
    })
}

/// What a provider's error means for the turn. Once the turn is stopped, its provider's
/// stream is cancelled too and may end with an error of its own ("cancelled") before the
/// turn's token is seen: that is the stop's doing, not the provider failing (the turn ends
/// `cancelled`, not `provider_error`).
fn failed(turn: &Turn, error: &ProviderError) -> SampleError {
    if turn.is_stopped() {
        SampleError::Stopped
    } else {
        SampleError::Provider(error.to_string())
    }
}

/// Keeps a text delta and streams it out (a quiet level only keeps it). The output cap holds
/// while streaming: what fits is kept, and the trip that ends the turn is returned.
fn stream_text(
    turn: &Turn,
    level: &Level,
    mut delta: String,
    text: &mut String,
    all_text: &mut String,
) -> Option<BudgetTrip> {
    let capped = match turn.budget.take_output_bytes(delta.len()) {
        Ok(()) => None,
        Err((fits, trip)) => {
            let mut cut = fits.min(delta.len());
            while cut > 0 && !delta.is_char_boundary(cut) {
                cut -= 1;
            }
            delta.truncate(cut);
            Some(trip)
        }
    };
    text.push_str(&delta);
    if !level.quiet && !delta.is_empty() {
        all_text.push_str(&delta);
        turn.recorder.text(level.place(), &delta);
        turn.events.emit(ServerEvent::Chunk {
            content: delta,
            done: false,
            parent_id: level.parent_id.clone(),
            depth: level.depth,
        });
    }
    capped
}

/// The most of one response's reasoning the record keeps (all of it streams).
pub const MAX_REASONING_BYTES: usize = 256 << 10;

/// Streams reasoning out as its own frames (a quiet level does not) and keeps what fits.
fn stream_reasoning(turn: &Turn, level: &Level, delta: String, reasoning: &mut String) {
    if level.quiet || delta.is_empty() {
        return;
    }
    if reasoning.len() + delta.len() <= MAX_REASONING_BYTES {
        reasoning.push_str(&delta);
    }
    turn.events.emit(ServerEvent::Reasoning {
        content: delta,
        parent_id: level.parent_id.clone(),
        depth: level.depth,
    });
}

/// Text that has already arrived behind a text delta joins it, up to [`CHUNK_MAX_BYTES`] bytes:
/// a turn that fell behind its model (a busy server) sends one chunk where it would have sent
/// many, and does the per-chunk work (record, replay, frame) once. Nothing waits for more
/// text here ([`gather_until`] does, under a chunk interval); the first event that is not
/// text is held for the next round.
fn coalesce(
    next: Option<ProviderItem>,
    stream: &mut ProviderStream,
    held: &mut Option<Option<ProviderItem>>,
) -> Option<ProviderItem> {
    let Some(Ok(ProviderEvent::TextDelta(mut delta))) = next else {
        return next;
    };
    while delta.len() < CHUNK_MAX_BYTES {
        match stream.next().now_or_never() {
            Some(Some(Ok(ProviderEvent::TextDelta(more)))) => delta.push_str(&more),
            Some(other) => {
                *held = Some(other);
                break;
            }
            None => break,
        }
    }
    Some(Ok(ProviderEvent::TextDelta(delta)))
}

/// A text delta held until `at` (the turn's chunk interval since its last chunk), joined by
/// the text that streams in meanwhile, up to [`CHUNK_MAX_BYTES`] bytes. It goes out at once
/// when the response ends or something other than text comes (held for the next round), so
/// only text waits, and never the response's last piece; a stopping turn does not wait.
async fn gather_until(
    at: tokio::time::Instant,
    next: Option<ProviderItem>,
    stream: &mut ProviderStream,
    held: &mut Option<Option<ProviderItem>>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Option<ProviderItem> {
    let Some(Ok(ProviderEvent::TextDelta(mut delta))) = next else {
        return next;
    };
    if tokio::time::Instant::now() >= at {
        return Some(Ok(ProviderEvent::TextDelta(delta)));
    }
    let due = tokio::time::sleep_until(at);
    tokio::pin!(due);
    while delta.len() < CHUNK_MAX_BYTES {
        tokio::select! {
            biased;
            item = stream.next() => match item {
                Some(Ok(ProviderEvent::TextDelta(more))) => delta.push_str(&more),
                other => {
                    *held = Some(other);
                    break;
                }
            },
            () = &mut due => break,
            () = cancel.cancelled() => break,
        }
    }
    Some(Ok(ProviderEvent::TextDelta(delta)))
}

/// The most text one chunk gathers when pieces that arrived together are joined (here, and
/// where a turn's frames are held until its start commits).
pub const CHUNK_MAX_BYTES: usize = 16 << 10;

type ProviderItem = Result<ProviderEvent, ProviderError>;

/// Accounts for one provider call however it ends: usage, cost, the model-call record.
struct CallAccount<'a> {
    turn: &'a Turn,
    level: &'a Level,
    started: Instant,
    usage: Usage,
    tool_calls: u32,
    /// Its `chat` span, open until the call is accounted for.
    span: tracing::Span,
}

impl CallAccount<'_> {
    fn close<T>(&mut self, error: Option<&str>, value: T) -> T {
        telemetry::model_call_ended(
            &self.span,
            self.usage.input_tokens,
            self.usage.output_tokens,
            self.tool_calls,
            error,
        );
        let cost = self.turn.rate_card.cost(&self.level.llm.model, self.usage);
        self.turn.record_model_call(ModelCallRecord {
            provider: self.level.llm.provider.name().to_owned(),
            model: self.level.llm.model.to_string(),
            depth: self.level.depth,
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
            tool_calls: self.tool_calls,
            cost_usd: cost,
            duration_ms: millis(self.started.elapsed()),
            error: error.map(str::to_owned),
        });
        // The response is kept; a cap passed by it ends the turn after this call.
        if let Err(trip) = self.turn.budget.record_usage(self.usage, cost) {
            self.turn.trip(trip);
        }
        value
    }
}
