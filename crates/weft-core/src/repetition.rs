//! Repetition guard: the same tool with identical arguments too many times in a row.

/// Tracks consecutive identical calls within one loop level. The last call's name and
/// arguments (as compact JSON) are kept in buffers reused call after call.
#[derive(Debug)]
pub(crate) struct RepetitionGuard {
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
}
