//! Repetition guard: the same tool with identical arguments too many times in a row.

use serde_json::Value;

use crate::message::ToolCallRequest;
use crate::validate::{compact, parse_arguments};

/// Tracks consecutive identical calls within one loop level. The last call's name and
/// arguments (as compact JSON) are kept in buffers reused call after call.
#[derive(Debug)]
pub struct RepetitionGuard {
    max_identical: u32,
    last_name: String,
    last_args: String,
    count: u32,
}

impl RepetitionGuard {
    pub fn new(max_identical: u32) -> Self {
        RepetitionGuard {
            max_identical,
            last_name: String::new(),
            last_args: String::new(),
            count: 0,
        }
    }

    /// Record a call, its arguments as compact JSON (`validate::compact`); true when it is
    /// the `max_identical`-th identical call in a row (or later).
    pub fn is_runaway(&mut self, name: &str, args: &str) -> bool {
        if self.count > 0 && self.last_name == name && self.last_args == args {
            self.count += 1;
        } else {
            self.last_name.clear();
            self.last_name.push_str(name);
            self.last_args.clear();
            self.last_args.push_str(args);
            self.count = 1;
        }
        self.count >= self.max_identical
    }

    /// Count the calls a resumed level had made in the rounds its first life completed, so
    /// it goes on counting as that life would have (the cut round's calls are counted as
    /// they run again, not here as well).
    pub fn replay<'a>(&mut self, calls: impl Iterator<Item = &'a ToolCallRequest>) {
        for call in calls {
            let shown = match parse_arguments(&call.arguments) {
                Ok(map) => Value::Object(map),
                Err(_) => Value::String(call.arguments.to_string()),
            };
            self.is_runaway(&call.name, &compact(&shown));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_on_the_nth_identical_call_and_resets_on_change() {
        let mut g = RepetitionGuard::new(3);
        assert!(!g.is_runaway("a", "{}"));
        assert!(!g.is_runaway("a", "{}"));
        assert!(g.is_runaway("a", "{}"));
        assert!(!g.is_runaway("a", r#"{"x":1}"#));
        assert!(!g.is_runaway("b", r#"{"x":1}"#));
        assert!(!g.is_runaway("b", r#"{"x":2}"#));
        assert!(!g.is_runaway("b", r#"{"x":2}"#));
        assert!(g.is_runaway("b", r#"{"x":2}"#));
    }

    #[test]
    fn a_resumed_level_counts_on_from_the_calls_its_first_life_made() {
        let read = |args: &str| ToolCallRequest {
            id: "r".into(),
            name: "read_file".into(),
            arguments: args.into(),
        };
        // Two identical reads on record (spacing the model's own): the third is the limit.
        let mut g = RepetitionGuard::new(3);
        let done = [read(r#"{"path": "a"}"#), read(r#"{"path":"a"}"#)];
        g.replay(done.iter());
        assert!(g.is_runaway("read_file", r#"{"path":"a"}"#));
    }
}
