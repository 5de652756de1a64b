//! The permission gate: mode × category decides run / ask / block; asks wait on a oneshot
//! keyed by tool-call id, and a dropped sender reads as deny.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use weft_protocol::{ApprovalDecision, PermissionMode, ToolCategory};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateDecision {
    Run,
    Ask,
    Block,
}

/// The decision table, with `hitl_tools` asking in every mode but Plan,
/// where non-read tools never run.
pub fn decide(
    mode: PermissionMode,
    category: ToolCategory,
    allowed_for_chat: bool,
    hitl: bool,
) -> GateDecision {
    let read = category == ToolCategory::Read;
    match mode {
        PermissionMode::Plan if !read => GateDecision::Block,
        _ if hitl => GateDecision::Ask,
        _ if read => GateDecision::Run,
        PermissionMode::Auto => GateDecision::Run,
        PermissionMode::Default if allowed_for_chat => GateDecision::Run,
        PermissionMode::Default => GateDecision::Ask,
        PermissionMode::Plan => GateDecision::Block,
    }
}

/// One thread's gate: its mode, its "allow for this chat" set and its pending approvals.
/// Cheap to clone; every clone is the same gate.
#[derive(Clone, Default)]
pub struct PermissionGate {
    inner: Arc<GateInner>,
}

#[derive(Default)]
struct GateInner {
    mode: Mutex<PermissionMode>,
    allowed_for_chat: Mutex<HashSet<String>>,
    pending: Mutex<HashMap<String, Pending>>,
    /// Answers that came before their approval was asked (in this life of the turn).
    early: Mutex<HashMap<String, Answer>>,
}

struct Pending {
    tool_name: String,
    hitl: bool,
    reply: oneshot::Sender<Answer>,
}

/// The user's answer to an approval request (kept as JSON while no replica runs its turn).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Answer {
    pub decision: ApprovalDecision,
    /// Why, when they said (a denial's reason goes back to the model).
    pub reason: Option<String>,
}

/// A pending approval as listed for callers (e.g. to re-send after a reconnect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingApproval {
    pub tool_call_id: String,
    pub tool_name: String,
}

impl PermissionGate {
    pub fn new(mode: PermissionMode) -> Self {
        let gate = PermissionGate::default();
        *gate.inner.mode.lock() = mode;
        gate
    }

    pub fn mode(&self) -> PermissionMode {
        *self.inner.mode.lock()
    }

    /// Change the mode; it applies to the next gated call. Switching to Auto releases
    /// pending approvals (except `hitl_tools`) as allowed.
    pub fn set_mode(&self, mode: PermissionMode) {
        *self.inner.mode.lock() = mode;
        if mode == PermissionMode::Auto {
            let released: Vec<Pending> = {
                let mut pending = self.inner.pending.lock();
                let ids: Vec<String> = pending
                    .iter()
                    .filter(|(_, p)| !p.hitl)
                    .map(|(id, _)| id.clone())
                    .collect();
                ids.iter().filter_map(|id| pending.remove(id)).collect()
            };
            for p in released {
                let _ = p.reply.send(Answer {
                    decision: ApprovalDecision::Allow,
                    reason: None,
                });
            }
        }
    }

    pub fn is_allowed_for_chat(&self, tool_name: &str) -> bool {
        self.inner.allowed_for_chat.lock().contains(tool_name)
    }

    /// The tools allowed for this chat, by name.
    pub fn allowed_for_chat(&self) -> Vec<String> {
        let mut tools: Vec<String> = self.inner.allowed_for_chat.lock().iter().cloned().collect();
        tools.sort();
        tools
    }

    pub fn allow_for_chat(&self, tool_name: &str) {
        self.inner
            .allowed_for_chat
            .lock()
            .insert(tool_name.to_owned());
    }

    pub fn decide(&self, tool_name: &str, category: ToolCategory, hitl: bool) -> GateDecision {
        decide(
            self.mode(),
            category,
            self.is_allowed_for_chat(tool_name),
            hitl,
        )
    }

    /// Register a pending approval; the receiver resolves when the user answers (at once,
    /// when they answered before it was asked: see [`PermissionGate::answer_early`]).
    pub fn request(
        &self,
        tool_call_id: &str,
        tool_name: &str,
        hitl: bool,
    ) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        if let Some(answer) = self.inner.early.lock().remove(tool_call_id) {
            if answer.decision == ApprovalDecision::AllowForChat {
                self.allow_for_chat(tool_name);
            }
            let _ = tx.send(answer);
            return rx;
        }
        self.inner.pending.lock().insert(
            tool_call_id.to_owned(),
            Pending {
                tool_name: tool_name.to_owned(),
                hitl,
                reply: tx,
            },
        );
        rx
    }

    /// Answer a pending approval. Returns false when no approval with that id is pending.
    /// `allow_for_chat` also adds the tool to this thread's allow set.
    pub fn respond(&self, tool_call_id: &str, decision: ApprovalDecision) -> bool {
        self.answer(tool_call_id, decision, None)
    }

    /// [`PermissionGate::respond`], with the user's reason.
    pub fn answer(
        &self,
        tool_call_id: &str,
        decision: ApprovalDecision,
        reason: Option<String>,
    ) -> bool {
        let Some(pending) = self.inner.pending.lock().remove(tool_call_id) else {
            return false;
        };
        if decision == ApprovalDecision::AllowForChat {
            self.allow_for_chat(&pending.tool_name);
        }
        let _ = pending.reply.send(Answer { decision, reason });
        true
    }

    /// Answer an approval now if it is pending, else when it is asked: a turn taken up
    /// after its replica died asks again, and the person may have answered in between.
    pub fn answer_early(
        &self,
        tool_call_id: &str,
        decision: ApprovalDecision,
        reason: Option<String>,
    ) {
        if !self.answer(tool_call_id, decision, reason.clone()) {
            self.inner
                .early
                .lock()
                .insert(tool_call_id.to_owned(), Answer { decision, reason });
        }
    }

    /// Forget a pending approval (it timed out or its turn ended).
    pub fn withdraw(&self, tool_call_id: &str) {
        self.inner.pending.lock().remove(tool_call_id);
    }

    pub fn pending(&self) -> Vec<PendingApproval> {
        self.inner
            .pending
            .lock()
            .iter()
            .map(|(id, p)| PendingApproval {
                tool_call_id: id.clone(),
                tool_name: p.tool_name.clone(),
            })
            .collect()
    }

    /// Drop every pending approval; their waiters read it as deny.
    pub fn clear_pending(&self) {
        self.inner.pending.lock().clear();
    }
}

impl std::fmt::Debug for PermissionGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermissionGate")
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}
