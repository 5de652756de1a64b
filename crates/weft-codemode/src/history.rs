//! History for a code-mode model, which calls no tools directly: earlier tool calls become
//! text in the assistant message and their results one user message per round, so classic
//! turns stay readable context (and the step count, one per assistant message, is kept).
//! Code runs read as they did when they ran: the response with its code, then the run's
//! result.

use std::collections::HashMap;

use weft_core::{ChatMessage, Role};

use crate::prompt::{code_result_message, CODE_EXECUTE};

/// `history` without tool calls or tool messages.
pub fn flatten(history: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(history.len());
    let mut names: HashMap<String, String> = HashMap::new();
    let mut results: Vec<String> = Vec::new();
    for message in history {
        match message.role {
            Role::Tool => {
                let id = message.tool_call_id.clone().unwrap_or_default();
                let name = names.get(&id).map_or("a tool", String::as_str);
                if name == CODE_EXECUTE {
                    out.push(ChatMessage::user(code_result_message(&message.text())));
                    continue;
                }
                let failed = if message.is_error { " (failed)" } else { "" };
                results.push(format!("[result of {name}{failed}]\n{}", message.text()));
            }
            _ => {
                if !results.is_empty() {
                    out.push(ChatMessage::user(results.join("\n\n")));
                    results.clear();
                }
                if message.role == Role::Assistant && !message.tool_calls.is_empty() {
                    let mut text = message.text();
                    for call in &message.tool_calls {
                        names.insert(call.id.clone(), call.name.clone());
                        if call.name == CODE_EXECUTE {
                            continue;
                        }
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(&format!("[called {} with {}]", call.name, call.arguments));
                    }
                    out.push(ChatMessage::assistant(text, Vec::new()));
                } else {
                    out.push(message);
                }
            }
        }
    }
    if !results.is_empty() {
        out.push(ChatMessage::user(results.join("\n\n")));
    }
    out
}

#[cfg(test)]
mod tests {
    use weft_core::ToolCallRequest;

    use super::*;

    #[test]
    fn calls_and_results_become_text() {
        let call = |id: &str| ToolCallRequest {
            id: id.into(),
            name: "read_file".into(),
            arguments: "{\"path\":\"a\"}".into(),
        };
        let history = vec![
            ChatMessage::user("read a and b"),
            ChatMessage::assistant("Reading.", vec![call("1"), call("2")]),
            ChatMessage::tool_result("1", "alpha", false),
            ChatMessage::tool_result("2", "missing", true),
            ChatMessage::assistant("a says alpha", vec![]),
            ChatMessage::user("now in code"),
        ];
        let flat = flatten(history);
        let texts: Vec<(Role, String)> = flat.iter().map(|m| (m.role, m.text())).collect();
        assert_eq!(
            texts,
            vec![
                (Role::User, "read a and b".into()),
                (
                    Role::Assistant,
                    "Reading.\n[called read_file with {\"path\":\"a\"}]\n[called read_file with {\"path\":\"a\"}]".into()
                ),
                (
                    Role::User,
                    "[result of read_file]\nalpha\n\n[result of read_file (failed)]\nmissing".into()
                ),
                (Role::Assistant, "a says alpha".into()),
                (Role::User, "now in code".into()),
            ]
        );
        assert!(flat.iter().all(|m| m.tool_calls.is_empty()));
    }

    #[test]
    fn a_code_run_reads_as_it_ran() {
        let run = ToolCallRequest {
            id: "c".into(),
            name: CODE_EXECUTE.into(),
            arguments: "{\"code\":\"return 1\"}".into(),
        };
        let history = vec![
            ChatMessage::user("count"),
            ChatMessage::assistant("```js\nreturn 1\n```", vec![run]),
            ChatMessage::tool_result("c", "ok; returned 1", false),
        ];
        let texts: Vec<String> = flatten(history).iter().map(ChatMessage::text).collect();
        assert_eq!(
            texts,
            [
                "count",
                "```js\nreturn 1\n```",
                &code_result_message("ok; returned 1")
            ]
        );
    }
}
