//! The record as the next turn's provider history: calls kept with their results, summaries
//! replacing what they summarized, pruning oldest first by tokens, never split.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use weft_protocol::RecordedCall;

use std::collections::HashSet;

use weft_core::{ChatMessage, Role, TokenCounter};
use weft_protocol::RecordEntry;
use weft_record::history::{provider_history, NO_ANSWER};
use weft_store::{ItemRow, MessageRow};

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
        reasoning: None,
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
