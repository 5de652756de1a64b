//! A turn taken up again after its process died: what it had streamed and spent, and the
//! calls of the round it was cut in. The loop settles that round before its next model call,
//! so a side effect runs at most once: a call that may have run (not a read, not declared
//! idempotent) gets a result that says so instead of running again; a read, an idempotent
//! call and a call still waiting for its approval run (or are asked for) again.

use std::time::Duration;

use crate::record::Call;

/// Where a resumed turn starts from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resume {
    /// The text the turn had streamed at its root in the rounds it completed.
    pub text: String,
    /// What it had spent, charged again to its budget.
    pub spent: Spent,
    /// The calls of the round it was cut in (its response is the last message of the
    /// history), in the order they were emitted; empty when it was cut between rounds.
    pub cut: Vec<CutCall>,
}

/// A turn's spending so far, as its record keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    pub llm_calls: u64,
    pub tool_calls: u64,
    pub subtasks: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    pub result_bytes: u64,
    pub output_bytes: u64,
    /// Wall clock the turn had run, waits for a person left out.
    pub elapsed: Duration,
}

/// One call of the cut round.
#[derive(Debug, Clone, PartialEq)]
pub struct CutCall {
    pub call: Call,
    /// When the user was asked to approve it (Unix ms), if it was still waiting: it is
    /// asked again, its timeout counted from then.
    pub asked_at_ms: Option<i64>,
    /// Its work left a record of its own (a subtask's rounds, calls made from its code):
    /// it is not run again from the start, whatever its tool.
    pub started: bool,
}

impl CutCall {
    /// Whether this call runs (or is asked for) again: it waited for its approval (so it
    /// never ran), or its tool only reads or says a repeat does no harm and it had not
    /// started work of its own.
    pub(crate) fn runs_again(&self, read_or_idempotent: bool) -> bool {
        self.asked_at_ms.is_some() || (read_or_idempotent && !self.started)
    }
}
