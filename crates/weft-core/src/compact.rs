//! Compaction (`budget_awareness = "limit:<n>"`): before a model call whose prompt passes the
//! limit, the model summarizes the oldest rounds and the summary replaces them — in this
//! level's history and, at the root, in the record the next turn's history is built from.
//! When even that cannot bring the prompt under the limit, the level stops.

use std::sync::Arc;

use weft_protocol::BudgetReason;

use crate::budget::BudgetTrip;
use crate::level::Level;
use crate::message::{ChatMessage, Role};
use crate::prompts;
use crate::sample::{sample, SampleError};
use crate::toolbelt::Toolbelt;
use crate::turn::Turn;

/// Longest piece of one message a summary is made from.
const MESSAGE_CLIP_BYTES: usize = 4_000;

/// Why the prompt could not be made to fit.
pub(crate) enum Unfit {
    /// Over the limit even after compacting (or nothing left to compact).
    TooLarge(BudgetTrip),
    /// The turn is stopping.
    Stopped,
}

/// Bring `history` under the context limit, compacting if needed.
pub(crate) async fn fit(
    turn: &Arc<Turn>,
    level: &Level,
    history: &mut Arc<Vec<ChatMessage>>,
) -> Result<(), Unfit> {
    let Some(limit) = turn.context.limit() else {
        return Ok(());
    };
    let Some(observed) = over(turn, level, limit, history) else {
        return Ok(());
    };
    let units = units(history);
    let fixed = turn.context.fixed_tokens(&level.system, &level.specs);
    // Keep the newest units that fit in half the limit (the newest always), summarize the rest.
    let mut kept_tokens = fixed;
    let mut keep_from = units.len().saturating_sub(1);
    for (i, unit) in units.iter().enumerate().rev().skip(1) {
        let tokens: u64 = unit.iter().map(|m| turn.context.message_tokens(m)).sum();
        if kept_tokens + tokens > limit / 2 {
            break;
        }
        kept_tokens += tokens;
        keep_from = i;
    }
    if keep_from == 0 {
        return Err(Unfit::TooLarge(trip(limit, observed)));
    }
    let (older, newer) = units.split_at(keep_from);
    let transcript = transcript(older, usize::try_from(limit).unwrap_or(usize::MAX));
    // Boxed: a summary is made rarely, and its future kept inline would size every turn's.
    let summary = match Box::pin(summarize(turn, level, &transcript)).await {
        Ok(summary) => summary,
        Err(SampleError::Stopped) => return Err(Unfit::Stopped),
        Err(SampleError::Provider(e)) => {
            tracing::warn!(error = %e, "compaction failed");
            return Err(Unfit::TooLarge(trip(limit, observed)));
        }
    };
    let kept: Vec<ChatMessage> = newer.iter().flatten().cloned().cloned().collect();
    if level.is_root() {
        turn.recorder.summary(level.place(), &summary, kept.len());
    }
    let mut compacted = Vec::with_capacity(kept.len() + 1);
    compacted.push(ChatMessage::user(prompts::summary_message(&summary)));
    compacted.extend(kept);
    *history = Arc::new(compacted);
    match over(turn, level, limit, history) {
        None => Ok(()),
        Some(observed) => Err(Unfit::TooLarge(trip(limit, observed))),
    }
}

fn over(turn: &Turn, level: &Level, limit: u64, history: &[ChatMessage]) -> Option<u64> {
    turn.context
        .prompt_tokens_over(limit, &level.system, &level.specs, history)
}

fn trip(limit: u64, observed: u64) -> BudgetTrip {
    BudgetTrip {
        reason: BudgetReason::Context,
        limit: limit as f64,
        observed: observed as f64,
    }
}

/// The history in pieces kept or dropped whole: a user message, or an assistant message with
/// the results that follow it.
fn units(history: &[ChatMessage]) -> Vec<Vec<&ChatMessage>> {
    let mut units: Vec<Vec<&ChatMessage>> = Vec::new();
    for message in history {
        match (message.role, units.last_mut()) {
            (Role::Tool, Some(unit)) => unit.push(message),
            _ => units.push(vec![message]),
        }
    }
    units
}

/// The messages as plain text for the summarizer, each clipped, the whole under `max_bytes`
/// (its head and tail kept).
fn transcript(units: &[Vec<&ChatMessage>], max_bytes: usize) -> String {
    let mut out = String::new();
    for message in units.iter().flatten() {
        let who = match message.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool result",
        };
        out.push_str(who);
        out.push_str(": ");
        out.push_str(clip(&message.text(), MESSAGE_CLIP_BYTES));
        for call in &message.tool_calls {
            out.push_str(&format!(
                "\n  (called {} with {})",
                call.name,
                clip(&call.arguments, MESSAGE_CLIP_BYTES / 4)
            ));
        }
        out.push_str("\n\n");
    }
    if out.len() <= max_bytes {
        return out;
    }
    let half = max_bytes / 2;
    let head = clip(&out, half);
    let mut tail_start = out.len() - half;
    while !out.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!("{head}\n[…]\n{}", &out[tail_start..])
}

fn clip(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// One quiet model call, without tools, that returns the summary.
async fn summarize(turn: &Turn, level: &Level, transcript: &str) -> Result<String, SampleError> {
    let summarizer = Level {
        depth: level.depth,
        parent_id: level.parent_id.clone(),
        record_parent: level.record_parent.clone(),
        system: prompts::COMPACT_PROMPT.into(),
        toolbelt: Toolbelt::default(),
        specs: Arc::from([]),
        output_schema: None,
        llm: level.llm.clone(),
        quiet: true,
        response_schema: None,
    };
    let messages = Arc::new(vec![ChatMessage::user(prompts::compact_request(
        transcript,
    ))]);
    let mut ignored = String::new();
    let sampled = sample(turn, &summarizer, messages, &mut ignored).await?;
    let summary = sampled.text.trim();
    if summary.is_empty() {
        return Err(SampleError::Provider("the summary came back empty".into()));
    }
    Ok(summary.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCallRequest;

    #[test]
    fn units_keep_results_with_their_call() {
        let call = ToolCallRequest {
            id: "a".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        };
        let history = vec![
            ChatMessage::user("hi"),
            ChatMessage::assistant("", vec![call]),
            ChatMessage::tool_result("a", "text", false),
            ChatMessage::assistant("done", vec![]),
            ChatMessage::user("more"),
        ];
        let sizes: Vec<usize> = units(&history).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![1, 2, 1, 1]);
    }

    #[test]
    fn a_long_transcript_keeps_head_and_tail() {
        let history: Vec<ChatMessage> = (0..100)
            .map(|i| ChatMessage::user(format!("message number {i}")))
            .collect();
        let units = units(&history);
        let text = transcript(&units, 400);
        assert!(text.len() <= 420, "{}", text.len());
        assert!(text.starts_with("User: message number 0"));
        assert!(text.trim_end().ends_with("message number 99"));
    }
}
