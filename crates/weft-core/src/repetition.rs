//! Repetition guard: the same tool with identical arguments too many times in a row.

use serde_json::Value;

use crate::validate::compact_into;

/// Tracks consecutive identical calls within one loop level. The last call's name and
/// arguments (as compact JSON) are kept in buffers reused call after call.
#[derive(Debug)]
pub(crate) struct RepetitionGuard {
    max_identical: u32,
    last_name: String,
    last_args: Vec<u8>,
    /// This call's arguments, written here to be compared with the last's.
    args: Vec<u8>,
    count: u32,
}

impl RepetitionGuard {
    pub fn new(max_identical: u32) -> Self {
        RepetitionGuard {
            max_identical,
            last_name: String::new(),
            last_args: Vec::new(),
            args: Vec::new(),
            count: 0,
        }
    }

    /// Record a call; true when it is the `max_identical`-th identical call in a row (or later).
    pub fn is_runaway(&mut self, name: &str, args: &Value) -> bool {
        self.args.clear();
        compact_into(&mut self.args, args);
        if self.count > 0 && self.last_name == name && self.last_args == self.args {
            self.count += 1;
        } else {
            self.last_name.clear();
            self.last_name.push_str(name);
            std::mem::swap(&mut self.last_args, &mut self.args);
            self.count = 1;
        }
        self.count >= self.max_identical
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn trips_on_the_nth_identical_call_and_resets_on_change() {
        let mut g = RepetitionGuard::new(3);
        assert!(!g.is_runaway("a", &json!({})));
        assert!(!g.is_runaway("a", &json!({})));
        assert!(g.is_runaway("a", &json!({})));
        assert!(!g.is_runaway("a", &json!({"x": 1})));
        assert!(!g.is_runaway("b", &json!({"x": 1})));
        assert!(!g.is_runaway("b", &json!({"x": 2})));
        assert!(!g.is_runaway("b", &json!({"x": 2})));
        assert!(g.is_runaway("b", &json!({"x": 2})));
    }
}
