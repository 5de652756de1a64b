//! A turn taken up again after its process died: what it had streamed and spent, and the
//! calls of the round it was cut in. The loop settles that round before its next model call,
//! so a side effect runs at most once: a call that may have run (not a read, not declared
//! idempotent) gets a result that says so instead of running again; a read, an idempotent
//! call and a call still waiting for its approval run (or are asked for) again. A subtask
//! cut mid-way goes on from its own last round, its cut round settled the same way.

use std::time::Duration;

use serde_json::Value;

use crate::message::{ChatMessage, Role, ToolCallRequest};
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
    /// Its shared memory as its recorded calls had left it (`memory_write`s, subtask
    /// results), set again before it goes on.
    pub memory: Vec<(String, String)>,
    /// The plan its planner made, which it goes on acting on.
    pub plan: Option<String>,
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
    /// A subtask's call: the child goes on from its own last round.
    pub child: Option<Box<ChildResume>>,
    /// A parallel call's jobs that had started, by number: each goes on from its own last
    /// round (the others start).
    pub jobs: Vec<(usize, ChildResume)>,
}

/// A subtask (or a mode's own call, such as a code run) cut mid-way, as its record leaves
/// it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChildResume {
    /// Its rounds after its instructions, the cut round's response last.
    pub tail: Vec<ChatMessage>,
    /// The text it streamed in those rounds.
    pub text: String,
    /// The calls of its cut round, in the order they were emitted.
    pub cut: Vec<CutCall>,
    /// How it ended, when that is on record but its parent's result is not: it only ends.
    pub ended: Option<ChildEnded>,
    /// It left a record, so it was charged to the subtask budget before the crash.
    pub charged: bool,
}

/// How a subtask ended, read from its record.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildEnded {
    /// Its final response's text.
    Answer(String),
    /// The payload it gave `finish_subtask`.
    Structured(Value),
}

impl Resume {
    /// Every cut call, those of cut subtasks included.
    pub fn all_cut(&self) -> Vec<&CutCall> {
        fn walk<'a>(cut: &'a [CutCall], out: &mut Vec<&'a CutCall>) {
            for c in cut {
                out.push(c);
                if let Some(child) = &c.child {
                    walk(&child.cut, out);
                }
                for (_, job) in &c.jobs {
                    walk(&job.cut, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.cut, &mut out);
        out
    }
}

impl CutCall {
    /// Whether this call runs (or is asked for) again: it is a subtask or a parallel call
    /// (whose children go on from their own last rounds), it waited for its approval (so it never ran), or its tool only
    /// reads or says a repeat does no harm and it had not started work of its own.
    pub fn runs_again(&self, read_or_idempotent: bool) -> bool {
        self.child.is_some()
            || !self.jobs.is_empty()
            || self.asked_at_ms.is_some()
            || (read_or_idempotent && !self.started)
    }
}

/// A call a cut code run had made, as it is met again when the run is redone.
#[derive(Debug, Clone, PartialEq)]
pub enum MadeCall {
    /// Its result is on record: given back, not run again.
    Answered {
        request: ToolCallRequest,
        content: String,
        is_error: bool,
    },
    /// It had no result: settled as any call of a cut round.
    Cut(CutCall),
}

impl MadeCall {
    pub fn request(&self) -> &ToolCallRequest {
        match self {
            MadeCall::Answered { request, .. } => request,
            MadeCall::Cut(cut) => &cut.call.request,
        }
    }
}

impl ChildResume {
    /// The calls made under the cut call, in the order they were made (a code run makes
    /// one call per response).
    pub fn made_calls(&self) -> Vec<MadeCall> {
        let answered = |request: &ToolCallRequest| {
            self.tail
                .iter()
                .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(&request.id))
                .map(|m| MadeCall::Answered {
                    request: request.clone(),
                    content: m.text(),
                    is_error: m.is_error,
                })
        };
        let cut = |request: &ToolCallRequest| {
            self.cut
                .iter()
                .find(|c| c.call.request.id == request.id)
                .map(|c| MadeCall::Cut(c.clone()))
        };
        self.tail
            .iter()
            .flat_map(|m| &m.tool_calls)
            .filter_map(|request| answered(request).or_else(|| cut(request)))
            .collect()
    }
}
