//! How a code run's result reads (to the model, in the record), and reading it back: what
//! a turn cut by a crash had shown the user, and whether it had ended.

use weft_core::{ChatMessage, Role};

use crate::prompt::CODE_EXECUTE;
use crate::sandbox::Report;

const SHOWN: &str = "shown to the user:\n";
const LOGS: &str = "\nlogs:\n";
const DONE: &str = "done() was called: the turn ends here";

/// A run that never reported (its thread died).
pub(crate) fn lost() -> Report {
    Report {
        outcome: Err("the sandbox stopped without a result".to_owned()),
        done: None,
        logs: Vec::new(),
        cpu: std::time::Duration::ZERO,
    }
}

/// What the model reads back about a run.
pub(crate) fn result_text(report: &Report, shown: &str) -> (String, bool) {
    let mut parts = Vec::new();
    match &report.outcome {
        Ok(None) => parts.push("ok".to_owned()),
        Ok(Some(value)) => parts.push(format!("ok; returned {value}")),
        Err(error) => parts.push(format!("error: {error}")),
    }
    if report.done.is_some() {
        parts.push(DONE.to_owned());
    }
    if !shown.is_empty() {
        parts.push(format!("{SHOWN}{shown}"));
    }
    if !report.logs.is_empty() {
        parts.push(format!("logs:\n{}", report.logs.join("\n")));
    }
    (parts.join("\n"), report.outcome.is_err())
}

/// What a code turn had shown the user in the rounds it completed (`tail`: its responses
/// and their runs' results, as the record gives them): each run's output, and a final text
/// answer.
pub fn said_in(tail: &[ChatMessage]) -> String {
    let mut said = String::new();
    for message in tail {
        match message.role {
            Role::Tool if is_run_result(tail, message) => {
                let text = message.text();
                if let Some(at) = text.find(SHOWN) {
                    let shown = &text[at + SHOWN.len()..];
                    said.push_str(shown.split(LOGS).next().unwrap_or_default());
                }
            }
            Role::Assistant if message.tool_calls.is_empty() => {
                said.push_str(message.text().trim())
            }
            _ => {}
        }
    }
    said
}

/// Whether the last run of `tail` ended the turn (`done()`): then it only ends.
pub fn ended_in(tail: &[ChatMessage]) -> bool {
    tail.last().is_some_and(|m| {
        m.role == Role::Tool && is_run_result(tail, m) && m.text().lines().any(|l| l == DONE)
    })
}

fn is_run_result(tail: &[ChatMessage], result: &ChatMessage) -> bool {
    tail.iter()
        .flat_map(|m| &m.tool_calls)
        .any(|c| Some(c.id.as_str()) == result.tool_call_id.as_deref() && c.name == CODE_EXECUTE)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use weft_core::ToolCallRequest;

    use super::*;

    fn run(id: &str) -> ChatMessage {
        ChatMessage::assistant(
            "```js\noutput('hi')\n```",
            vec![ToolCallRequest {
                id: id.into(),
                name: CODE_EXECUTE.into(),
                arguments: "{}".into(),
            }],
        )
    }

    #[test]
    fn what_runs_showed_is_read_back_from_their_results() {
        let report = |done| Report {
            outcome: Ok(None),
            done,
            logs: vec!["a note".to_owned()],
            cpu: Duration::ZERO,
        };
        let (first, _) = result_text(&report(None), "one\n");
        let (second, _) = result_text(&report(Some(None)), "two");
        let tail = vec![
            run("a"),
            ChatMessage::tool_result("a", first, false),
            run("b"),
            ChatMessage::tool_result("b", second, false),
        ];
        assert_eq!(said_in(&tail), "one\ntwo");
        assert!(ended_in(&tail));
        assert!(!ended_in(&tail[..2]));
        let answered = [
            tail[..2].to_vec(),
            vec![ChatMessage::assistant(" bye ", vec![])],
        ]
        .concat();
        assert_eq!(said_in(&answered), "one\nbye");
    }
}
