//! A thread's stored record as the provider history for its next turn: user messages,
//! assistant messages with their tool calls, and the results the model saw, pruned oldest
//! first to `max_history_tokens` without ever separating a call from its result or starting
//! with anything but a user message.

use std::collections::{HashMap, HashSet};

use weft_core::{prompts, ChatMessage, Role, ToolCallRequest};
use weft_protocol::{MessageContent, RecordEntry};
use weft_store::{ItemRow, MessageRow};

use crate::entries;
use weft_core::{bytes_bound, TokenCounter};

/// What the model sees for a turn that ended before producing anything, so a user message
/// is never followed by another without an answer between them.
pub const NO_ANSWER: &str = "[no answer: the turn ended before any reply]";

/// One piece that is kept or dropped whole: a user message, or an assistant message with
/// the results of its calls.
type Unit = Vec<ChatMessage>;

/// Build the history from `messages` (in thread order) and the thread's root-level `items`.
pub fn provider_history(
    messages: &[MessageRow],
    items: &[ItemRow],
    max_tokens: u64,
    counter: TokenCounter,
) -> Vec<ChatMessage> {
    let mut by_turn: HashMap<&str, Vec<RecordEntry>> = HashMap::new();
    for item in items {
        by_turn
            .entry(&item.message_id)
            .or_default()
            .extend(entries(item));
    }
    let mut units: Vec<Unit> = Vec::new();
    for row in messages {
        match row.role.as_str() {
            "user" => {
                let content: MessageContent = serde_json::from_value(row.content.clone())
                    .unwrap_or_else(|_| MessageContent::Text(row.content.to_string()));
                units.push(vec![ChatMessage::user(content)]);
            }
            "assistant" if row.status != "running" => {
                let pieces = by_turn
                    .remove(row.id.as_str())
                    .map(turn_pieces)
                    .unwrap_or_default();
                if !pieces.iter().any(|p| matches!(p, Piece::Unit(_))) {
                    let text = serde_json::from_value::<MessageContent>(row.content.clone())
                        .map(|c| c.text())
                        .unwrap_or_default();
                    let text = if text.is_empty() {
                        NO_ANSWER.to_owned()
                    } else {
                        text
                    };
                    units.push(vec![ChatMessage::assistant(text, Vec::new())]);
                }
                for piece in pieces {
                    match piece {
                        Piece::Unit(unit) => units.push(unit),
                        Piece::Summary { summary, kept } => {
                            units = summarized(std::mem::take(&mut units), &summary, kept);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    prune(units, max_tokens, counter)
}

/// What a turn's root items give the history, in order.
enum Piece {
    Unit(Unit),
    /// A compaction: the summary replaced all but the newest `kept` messages before it.
    Summary {
        summary: String,
        kept: usize,
    },
}

/// The units so far replaced by a summary, keeping the newest units that hold the newest
/// `kept` messages (whole units: never fewer messages).
fn summarized(units: Vec<Unit>, summary: &str, kept: usize) -> Vec<Unit> {
    let mut count = 0usize;
    let mut keep_from = units.len();
    while keep_from > 0 && count < kept {
        keep_from -= 1;
        count += units[keep_from].len();
    }
    let mut out = vec![vec![ChatMessage::user(prompts::summary_message(summary))]];
    out.extend(units.into_iter().skip(keep_from));
    out
}

/// A round as recorded: the assistant message and the results that followed it.
enum Slot {
    Round(ChatMessage, Vec<ChatMessage>),
    Summary(String, usize),
}

/// One turn's root items as pieces: each assistant message with the results of its calls
/// (calls without a result and results without a call are left out), and compactions.
fn turn_pieces(entries: Vec<RecordEntry>) -> Vec<Piece> {
    let mut slots: Vec<Slot> = Vec::new();
    for entry in entries {
        match entry {
            RecordEntry::Assistant {
                text, tool_calls, ..
            } => {
                let calls = tool_calls
                    .into_iter()
                    .map(|c| ToolCallRequest {
                        id: c.call_id,
                        name: c.name,
                        arguments: c.arguments.into(),
                    })
                    .collect();
                slots.push(Slot::Round(ChatMessage::assistant(text, calls), Vec::new()));
            }
            RecordEntry::ToolResult {
                call_id,
                result,
                is_error,
                ..
            } => {
                if let Some(Slot::Round(_, results)) = slots.last_mut() {
                    results.push(ChatMessage::tool_result(call_id, result, is_error));
                }
            }
            RecordEntry::Summary {
                summary,
                kept_messages,
            } => slots.push(Slot::Summary(summary, kept_messages as usize)),
            RecordEntry::User { .. }
            | RecordEntry::Subtask { .. }
            | RecordEntry::Plan { .. }
            | RecordEntry::Node { .. } => {}
        }
    }
    slots
        .into_iter()
        .filter_map(|slot| match slot {
            Slot::Round(assistant, results) => round_unit(assistant, results).map(Piece::Unit),
            Slot::Summary(summary, kept) => Some(Piece::Summary { summary, kept }),
        })
        .collect()
}

/// A round as a unit: only the calls that have a result, each result once. A code-mode run
/// (`code.execute`, no tool a provider knows) reads as its text, then its result as a user
/// message.
fn round_unit(mut assistant: ChatMessage, results: Vec<ChatMessage>) -> Option<Unit> {
    if assistant
        .tool_calls
        .iter()
        .any(|c| c.name == weft_codemode::CODE_EXECUTE)
    {
        let mut unit = vec![ChatMessage::assistant(assistant.text(), Vec::new())];
        unit.extend(
            results
                .iter()
                .take(1)
                .map(|r| ChatMessage::user(weft_codemode::code_result_message(&r.text()))),
        );
        return Some(unit);
    }
    let answered: HashSet<&str> = results
        .iter()
        .filter_map(|r| r.tool_call_id.as_deref())
        .collect();
    assistant
        .tool_calls
        .retain(|c| answered.contains(c.id.as_str()));
    let called: HashSet<String> = assistant.tool_calls.iter().map(|c| c.id.clone()).collect();
    if assistant.tool_calls.is_empty() && assistant.text().is_empty() {
        return None;
    }
    let mut unit = vec![assistant];
    let mut seen = HashSet::new();
    unit.extend(results.into_iter().filter(|r| {
        r.tool_call_id
            .as_ref()
            .is_some_and(|id| called.contains(id) && seen.insert(id.clone()))
    }));
    Some(unit)
}

/// Keep the newest units that fit `max_tokens` (the newest one always), then drop any
/// leading units until the history starts with a user message.
fn prune(units: Vec<Unit>, max_tokens: u64, counter: TokenCounter) -> Vec<ChatMessage> {
    let bound: u64 = units.iter().flatten().map(bytes_bound).sum();
    let keep_from = if bound <= max_tokens {
        0
    } else {
        let mut total = 0u64;
        let mut keep_from = units.len();
        for (i, unit) in units.iter().enumerate().rev() {
            total += unit.iter().map(|m| counter.message(m)).sum::<u64>();
            if total > max_tokens && i + 1 < units.len() {
                break;
            }
            keep_from = i;
        }
        keep_from
    };
    let start = units[keep_from..]
        .iter()
        .position(|u| u.first().is_some_and(|m| m.role == Role::User))
        .map_or(units.len().saturating_sub(1), |p| keep_from + p);
    units.into_iter().skip(start).flatten().collect()
}
