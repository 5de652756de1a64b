//! How `weft chat` draws a turn: streamed text, nested tool calls as an indented tree naming
//! each call, approvals, budget notices and cost — in colour when the terminal has it
//! (`anstream` drops the colour for pipes, `NO_COLOR` and dumb terminals).

use std::collections::HashMap;
use std::io::Write;

use anstyle::{AnsiColor, Style};
use serde_json::Value;

const TOOL: Style = AnsiColor::Cyan.on_default();
const OK: Style = AnsiColor::Green.on_default();
const FAILED: Style = AnsiColor::Red.on_default();
const ASK: Style = AnsiColor::Yellow.on_default().bold();
const DIM: Style = Style::new().dimmed();

/// What a frame means for the session driving the turn.
pub enum Shown {
    Nothing,
    /// The turn's final chunk, or a refusal outside any thread: the turn is over.
    Ended,
    /// A call waits for the user's decision (its id).
    Approval(String),
}

/// The drawing state of one turn: whether the cursor is mid-line, and each call's label.
#[derive(Default)]
pub struct Printer {
    mid_line: bool,
    labels: HashMap<String, String>,
}

impl Printer {
    /// Print a whole line (ending any streamed text first).
    pub fn line(&mut self, text: impl std::fmt::Display) {
        if self.mid_line {
            anstream::println!();
        }
        anstream::println!("{text}");
        self.mid_line = false;
    }

    /// A question on the current line, left open for the answer.
    pub fn prompt(&mut self, text: &str) {
        if self.mid_line {
            anstream::println!();
        }
        anstream::print!("{ASK}{text}{ASK:#}");
        let _ = anstream::stdout().flush();
        // The answer's newline (typed, or the next line printed) ends it.
        self.mid_line = true;
    }

    /// A note about the connection, on stderr (ending any streamed text first).
    pub fn warn(&mut self, text: impl std::fmt::Display) {
        if self.mid_line {
            anstream::println!();
            self.mid_line = false;
        }
        anstream::eprintln!("{DIM}{text}{DIM:#}");
    }

    /// A dimmed note from the client itself.
    pub fn note(&mut self, text: impl std::fmt::Display) {
        self.line(format!("{DIM}{text}{DIM:#}"));
    }

    pub fn frame(&mut self, f: &Value) -> Shown {
        let depth = f["depth"].as_u64().unwrap_or(0) as usize;
        let pad = "  ".repeat(depth + 1);
        match f["type"].as_str().unwrap_or_default() {
            "chunk" if f["done"] == true && depth == 0 => {
                if self.mid_line {
                    anstream::println!();
                    self.mid_line = false;
                }
                return Shown::Ended;
            }
            "chunk" if depth == 0 => {
                anstream::print!("{}", f["content"].as_str().unwrap_or_default());
                let _ = anstream::stdout().flush();
                self.mid_line = true;
            }
            "tool_call_update" if f["status"] == "start" => {
                let label = label(f);
                self.line(format!("{pad}├─ {TOOL}{label}{TOOL:#} …"));
                self.labels.insert(id(f), label);
            }
            "tool_call_update" => {
                let label = self.labels.get(&id(f)).cloned().unwrap_or_else(|| label(f));
                self.line(call_ended(f, &pad, &label));
            }
            "tool_approval_request" => {
                self.line(format!(
                    "{pad}{ASK}? {} wants to run{ASK:#} with {} ({})",
                    f["name"].as_str().unwrap_or("?"),
                    f["args"],
                    f["category"].as_str().unwrap_or("")
                ));
                return Shown::Approval(id(f));
            }
            "budget_exceeded" if f["ends_turn"] != false => self.line(format!(
                "{FAILED}! budget reached: {} (limit {}, used {}){FAILED:#}",
                f["reason"].as_str().unwrap_or("?"),
                f["limit"],
                f["observed"]
            )),
            "cost_summary" => self.note(format!(
                "({} model calls, {} tool calls, {} in / {} out tokens, ${:.4})",
                f["llm_calls"],
                f["tool_calls"],
                f["input_tokens"],
                f["output_tokens"],
                f["cost_usd"].as_f64().unwrap_or(0.0)
            )),
            "turn_resumed" => self.note(
                "(the server running this turn stopped; the turn was taken up again and goes on)",
            ),
            "error" => {
                self.line(format!(
                    "{FAILED}error [{}]: {}{FAILED:#}",
                    f["code"].as_str().unwrap_or("?"),
                    f["message"].as_str().unwrap_or("")
                ));
                if f["thread_id"].is_null() {
                    return Shown::Ended;
                }
            }
            _ => {}
        }
        Shown::Nothing
    }
}

fn id(f: &Value) -> String {
    f["tool_call_id"].as_str().unwrap_or_default().to_owned()
}

/// A call's name, with its title when it has one (a subtask's): `run_subtask “Draft”`.
fn label(f: &Value) -> String {
    let name = f["name"].as_str().unwrap_or("?");
    match f["args"]["title"].as_str() {
        Some(title) => format!("{name} “{title}”"),
        None => name.to_owned(),
    }
}

/// A call's card closing: which call, whether it succeeded, the start of its result.
fn call_ended(f: &Value, pad: &str, label: &str) -> String {
    let result: String = f["result"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .take(100)
        .collect();
    let mark = if f["is_error"] == true {
        format!("{FAILED}✗{FAILED:#}")
    } else {
        format!("{OK}✓{OK:#}")
    };
    format!(
        "{pad}└─ {TOOL}{label}{TOOL:#} {mark} {}",
        result.replace('\n', " ")
    )
}
