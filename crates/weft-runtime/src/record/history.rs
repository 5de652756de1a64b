//! A thread's stored record as the provider history for its next turn: user messages,
//! assistant messages with their tool calls, and the results the model saw, pruned oldest
//! first to `max_history_tokens` without ever separating a call from its result or starting
//! with anything but a user message.

use std::collections::{HashMap, HashSet};

use weft_core::{prompts, ChatMessage, Role, ToolCallRequest};
use weft_protocol::{MessageContent, RecordEntry};
use weft_store::{ItemRow, MessageRow};

use super::entries;
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
                        arguments: c.arguments,
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
            RecordEntry::User { .. } | RecordEntry::Subtask { .. } => {}
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use weft_protocol::RecordedCall;

    use super::*;

    fn message(id: &str, role: &str, text: &str, status: &str) -> MessageRow {
        MessageRow {
            id: id.into(),
            thread_id: "t".into(),
            role: role.into(),
            content: json!(text),
            execution_tree: None,
            permission_mode: None,
            status: status.into(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            created_at: 0,
            position: 0,
            metadata: None,
        }
    }

    fn item(turn: &str, entry: RecordEntry) -> ItemRow {
        let results = matches!(entry, RecordEntry::ToolResult { .. });
        ItemRow {
            thread_id: "t".into(),
            message_id: turn.into(),
            position: 0,
            kind: if results { "tool_results" } else { "assistant" }.into(),
            parent_id: None,
            depth: 0,
            body: if results {
                serde_json::to_string(&[entry]).unwrap()
            } else {
                serde_json::to_string(&entry).unwrap()
            },
            created_at: 0,
        }
    }

    fn assistant(text: &str, calls: &[&str]) -> RecordEntry {
        RecordEntry::Assistant {
            id: None,
            text: text.into(),
            tool_calls: calls
                .iter()
                .map(|c| RecordedCall {
                    id: format!("{c}~w"),
                    call_id: (*c).into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a.txt"}"#.into(),
                })
                .collect(),
            partial: false,
        }
    }

    fn result(call: &str, text: &str) -> RecordEntry {
        RecordEntry::ToolResult {
            tool_call_id: format!("{call}~w"),
            call_id: call.into(),
            name: "read_file".into(),
            result: text.into(),
            is_error: false,
            metadata: None,
        }
    }

    fn shape(history: &[ChatMessage]) -> Vec<String> {
        history
            .iter()
            .map(|m| match m.role {
                Role::User => format!("user {}", m.text()),
                Role::Assistant => {
                    let ids: Vec<&str> = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
                    format!("assistant {:?} [{}]", m.text(), ids.join(","))
                }
                Role::Tool => format!(
                    "tool {} {}",
                    m.tool_call_id.as_deref().unwrap_or("?"),
                    m.text()
                ),
            })
            .collect()
    }

    const BPE: fn() -> TokenCounter = || TokenCounter::for_model("gpt-4o");

    #[test]
    fn calls_and_results_of_earlier_turns_are_replayed() {
        let messages = vec![
            message("u1", "user", "read a.txt", "completed"),
            message("a1", "assistant", "It says hi.", "completed"),
            message("u2", "user", "what did it say?", "completed"),
        ];
        let items = vec![
            item("a1", assistant("", &["c1"])),
            item("a1", result("c1", "hi")),
            item("a1", assistant("It says hi.", &[])),
        ];
        assert_eq!(
            shape(&provider_history(&messages, &items, 10_000, BPE())),
            vec![
                "user read a.txt",
                "assistant \"\" [c1]",
                "tool c1 hi",
                "assistant \"It says hi.\" []",
                "user what did it say?",
            ]
        );
    }

    #[test]
    fn an_unanswered_call_is_dropped_and_an_empty_turn_still_answers() {
        let messages = vec![
            message("u1", "user", "go", "completed"),
            message("a1", "assistant", "", "interrupted"),
            message("u2", "user", "again", "completed"),
            message("a2", "assistant", "", "cancelled"),
            message("u3", "user", "now", "completed"),
        ];
        let items = vec![
            item("a1", assistant("partial", &["c1", "c2"])),
            item("a1", result("c1", "one")),
        ];
        assert_eq!(
            shape(&provider_history(&messages, &items, 10_000, BPE())),
            vec![
                "user go",
                "assistant \"partial\" [c1]",
                "tool c1 one",
                "user again",
                format!("assistant {NO_ANSWER:?} []").as_str(),
                "user now",
            ]
        );
    }

    #[test]
    fn pruning_keeps_calls_with_their_results_and_starts_with_a_user_message() {
        // Far over the limit: 40 turns, each a call with a 2 000-character result.
        let mut messages = Vec::new();
        let mut items = Vec::new();
        for t in 0..40 {
            messages.push(message(
                &format!("u{t}"),
                "user",
                &format!("question {t}"),
                "completed",
            ));
            messages.push(message(&format!("a{t}"), "assistant", "done", "completed"));
            let call = format!("c{t}");
            items.push(item(&format!("a{t}"), assistant("", &[call.as_str()])));
            items.push(item(&format!("a{t}"), result(&call, &"word ".repeat(400))));
            items.push(item(&format!("a{t}"), assistant("done", &[])));
        }
        messages.push(message("last", "user", "and now?", "completed"));
        for limit in [1u64, 500, 1_000, 3_000, 7_777] {
            let history = provider_history(&messages, &items, limit, BPE());
            assert_eq!(
                history.first().map(|m| m.role),
                Some(Role::User),
                "limit {limit}"
            );
            assert_eq!(
                history.last().map(ChatMessage::text).as_deref(),
                Some("and now?")
            );
            let calls: HashSet<&str> = history
                .iter()
                .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
                .collect();
            let results: Vec<&str> = history
                .iter()
                .filter_map(|m| m.tool_call_id.as_deref())
                .collect();
            assert_eq!(calls.len(), results.len(), "limit {limit}");
            assert!(results.iter().all(|r| calls.contains(r)), "limit {limit}");
            if limit > 1 {
                let tokens: u64 = history.iter().map(|m| BPE().message(m)).sum();
                assert!(
                    tokens <= limit,
                    "{tokens} tokens kept for a limit of {limit}"
                );
            }
        }
        assert_eq!(provider_history(&messages, &items, 1, BPE()).len(), 1);
        assert!(provider_history(&messages, &items, 7_777, BPE()).len() > 4);
    }
}
