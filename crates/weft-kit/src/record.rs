//! The conversation record as the loop produces it: every response (text and tool calls) and
//! every round of tool results, at every depth, handed to a [`Recorder`] as it completes, and
//! the server-unique ids that calls carry on the wire.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use serde_json::{Map, Value};
use weft_protocol::{ApprovalOutcome, ToolResultMetadata};

use crate::message::ToolCallRequest;

/// Where in the turn a round happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<'a> {
    /// The `run_subtask` call this level runs under; `None` at the root.
    pub parent_id: Option<&'a str>,
    pub depth: u32,
}

/// One tool result as the model saw it, lent to the recorder (which writes it out; it keeps
/// nothing of it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordedResult<'a> {
    /// The call's wire id.
    pub id: &'a str,
    /// The call's id as replayed to the model.
    pub call_id: &'a str,
    pub name: &'a str,
    pub content: &'a str,
    pub is_error: bool,
    pub metadata: &'a ToolResultMetadata,
}

/// One provider call, for accounting, whichever model made it (the planner's included).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCallRecord {
    pub provider: String,
    pub model: String,
    pub depth: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Tool calls the response asked for.
    pub tool_calls: u32,
    pub cost_usd: f64,
    pub duration_ms: f64,
    pub error: Option<String>,
}

/// Receives the record of a turn as it happens. Calls come from the loop's own tasks, in
/// order per level; implementations must not block.
pub trait Recorder: Send + Sync {
    /// Text streamed so far by the response being received at `place`.
    fn text(&self, _place: Place<'_>, _delta: &str) {}
    /// The planner made the turn's plan (before the turn's first round).
    fn plan(&self, _plan: &str) {}
    /// A workflow node of the turn's run started (`outputs` none: kept before a node that
    /// may act runs) or completed with its outputs.
    fn node(&self, _node_id: &str, _outputs: Option<&serde_json::Map<String, serde_json::Value>>) {}
    /// The response about to be recorded at `place` (by [`Recorder::assistant`]) came after
    /// this reasoning.
    fn reasoning(&self, _place: Place<'_>, _reasoning: &str) {}
    /// A response is complete: its text and tool calls (before any call runs). Both are
    /// lent: a recorder writes them out rather than keeping copies.
    fn assistant(&self, place: Place<'_>, text: &str, calls: &[Call]);
    /// A round's tool results, in the order the calls were emitted.
    fn results(&self, place: Place<'_>, results: &[RecordedResult<'_>]);
    /// The history was compacted: `summary` replaced everything before the newest `kept`
    /// messages.
    fn summary(&self, _place: Place<'_>, _summary: &str, _kept: usize) {}
    /// The user is about to be asked to approve a call; the request goes out once the
    /// returned future resolves (the approval is on record by then, so it can be answered
    /// after a restart). An error means it could not be kept: the call is not asked for.
    fn approval_requested(&self, _request: &ApprovalRequest<'_>) -> Stored {
        Box::pin(std::future::ready(Ok(())))
    }
    /// A call that may change something (not a read, not idempotent) is about to run: the
    /// response that asked for it is on record once the returned future resolves, so a
    /// restart never runs it twice. An error means it could not be kept: the call does not
    /// run.
    fn before_effect(&self) -> Stored {
        Box::pin(std::future::ready(Ok(())))
    }
    /// A call that may have changed something ended: its result is on record once the
    /// returned future resolves, and only then is the client told, so a restart never
    /// reports a finished effect as one that may have run. The round's `results` leave it
    /// out. An error means it could not be kept (the record has failed; the turn stops).
    fn effect_result(&self, _place: Place<'_>, _result: &RecordedResult<'_>) -> Stored {
        Box::pin(std::future::ready(Ok(())))
    }
    /// An approval request ended.
    fn approval_resolved(&self, _id: &str, _outcome: ApprovalOutcome) {}
    /// A provider call ended (however it ended).
    fn model_call(&self, _call: &ModelCallRecord) {}
}

/// Resolves once what was recorded is durable; the error says why it is not.
pub type Stored = futures::future::BoxFuture<'static, Result<(), String>>;

/// A call waiting for the user's approval, as the record keeps it.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalRequest<'a> {
    /// The call's wire id (the approval's id).
    pub id: &'a str,
    pub tool: &'a str,
    pub args: &'a Value,
    /// Schema-only arguments split off the call, kept with the approval.
    pub injected: &'a Map<String, Value>,
}

/// A recorder that keeps nothing.
pub struct NoRecord;

impl Recorder for NoRecord {
    fn assistant(&self, _: Place<'_>, _: &str, _: &[Call]) {}
    fn results(&self, _: Place<'_>, _: &[RecordedResult<'_>]) {}
}

/// A call as the loop handles it: the server-unique wire id, and the request as the model
/// will see it in history.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub wire_id: String,
    pub request: ToolCallRequest,
}

/// Longest piece of a provider's id kept in a wire id.
const ID_HINT_CHARS: usize = 40;

/// A server-unique id for a tool call: a readable hint (the provider's id, cleaned and cut),
/// then a suffix unique to this process and call. Unique across restarts too (a random
/// per-process prefix), so stored approvals never collide.
pub fn new_call_id(hint: &str) -> String {
    static NONCE: OnceLock<String> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nonce = NONCE.get_or_init(|| {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ u64::from(std::process::id()).rotate_left(32);
        base36(seed % 36u64.pow(6))
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // Built in one string of the right size (a call's id is made for every call).
    let mut id = String::with_capacity(ID_HINT_CHARS + 1 + nonce.len() + 13);
    id.extend(
        hint.chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            .take(ID_HINT_CHARS),
    );
    if id.is_empty() {
        id.push_str("call");
    }
    id.push('~');
    id.push_str(nonce);
    push_base36(&mut id, n);
    id
}

fn base36(n: u64) -> String {
    let mut out = String::with_capacity(13);
    push_base36(&mut out, n);
    out
}

/// `n` in base 36 (lower-case), appended to `out`.
fn push_base36(out: &mut String, mut n: u64) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    // u64::MAX has 13 digits in base 36.
    let mut digits = [0u8; 13];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
}

/// Give each call of a response its wire id, and make the history ids unique within
/// `taken` (ids already in the level's history): a provider that repeats an id gets the
/// repeat renamed, so every result still answers exactly one call.
pub fn identify<'a>(
    requests: Vec<ToolCallRequest>,
    taken: impl Iterator<Item = &'a str> + Clone,
) -> Vec<Call> {
    let mut calls: Vec<Call> = Vec::with_capacity(requests.len());
    for mut request in requests {
        let wire_id = new_call_id(&request.id);
        let duplicate = request.id.is_empty()
            || taken.clone().any(|id| id == request.id)
            || calls.iter().any(|c| c.request.id == request.id);
        if duplicate {
            request.id = wire_id.clone();
        }
        calls.push(Call { wire_id, request });
    }
    calls
}

/// What marks a parallel job's place in the record.
const JOB_MARK: &str = "#job";

/// Where a parallel job's items go in the record: under its call, marked with its number
/// (its events still name the call as their parent).
pub fn job_parent(call_id: &str, job: usize) -> String {
    format!("{call_id}{JOB_MARK}{job}")
}

/// The call a record parent belongs to, and the job it is of that call, if it is one's.
pub fn parent_call(parent: &str) -> (&str, Option<usize>) {
    match parent.split_once(JOB_MARK) {
        Some((call, job)) => match job.parse() {
            Ok(job) => (call, Some(job)),
            Err(_) => (parent, None),
        },
        None => (parent, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn wire_ids_are_unique_and_readable() {
        let a = new_call_id("call_1");
        let b = new_call_id("call_1");
        assert_ne!(a, b);
        assert!(a.starts_with("call_1~"), "{a}");
        let long = new_call_id(&"x\u{1F600}<>".repeat(100));
        assert!(long.len() < 60, "{long}");
        assert!(new_call_id("").starts_with("call~"));
    }

    #[test]
    fn base36_writes_every_digit() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
        assert_eq!(base36(u64::MAX), "3w5e11264sgsf");
        let id = new_call_id("a.b-c_d e");
        let (hint, suffix) = id.split_once('~').unwrap();
        assert_eq!(hint, "a.b-c_de");
        assert!(!suffix.is_empty(), "{id}");
        assert!(suffix
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()));
    }

    #[test]
    fn repeated_provider_ids_are_renamed_in_history() {
        let calls = identify(vec![req("x"), req("x"), req("y")], ["y"].into_iter());
        assert_eq!(calls[0].request.id, "x");
        assert_eq!(calls[1].request.id, calls[1].wire_id);
        assert_eq!(calls[2].request.id, calls[2].wire_id);
        assert_ne!(calls[0].wire_id, calls[1].wire_id);
    }

    #[test]
    fn a_jobs_place_names_its_call_and_number() {
        let place = super::job_parent("run_parallel_subagents~k3", 2);
        assert_eq!(
            super::parent_call(&place),
            ("run_parallel_subagents~k3", Some(2))
        );
        assert_eq!(
            super::parent_call("run_subtask~k4"),
            ("run_subtask~k4", None)
        );
    }
}
