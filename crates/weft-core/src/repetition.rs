//! Repetition guard: the same tool with identical arguments too many times in a row.

/// Tracks consecutive identical calls within one loop level.
#[derive(Debug)]
pub(crate) struct RepetitionGuard {
    max_identical: u32,
    last: Option<(String, String)>,
    count: u32,
}

impl RepetitionGuard {
    pub fn new(max_identical: u32) -> Self {
        RepetitionGuard {
            max_identical,
            last: None,
            count: 0,
        }
    }

    /// Record a call; true when it is the `max_identical`-th identical call in a row (or later).
    pub fn is_runaway(&mut self, name: &str, canonical_args: &str) -> bool {
        let same = self
            .last
            .as_ref()
            .is_some_and(|(n, a)| n == name && a == canonical_args);
        if same {
            self.count += 1;
        } else {
            self.last = Some((name.to_owned(), canonical_args.to_owned()));
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
        assert!(!g.is_runaway("a", "{\"x\":1}"));
        assert!(!g.is_runaway("b", "{\"x\":1}"));
    }
}
