//! The one way a turn is put together, new or taken up after a crash: its thread claimed
//! ([`Claim`]), its permission mode as its thread's gate has it, its toolbelt and system
//! prompt composed, then its task launched ([`Launch`]). [`Runtime::start_turn`] and the
//! `Resumer` differ only in how they find the parts.
//!
//! [`Runtime::start_turn`]: crate::runtime::Runtime::start_turn

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use weft_core::{ChatMessage, ExecutionMode, Toolbelt};
use weft_protocol::PermissionMode;
use weft_record::resume_point::ResumePoint;
use weft_store::ThreadRow;

use super::request::TurnRequest;
use super::resolve::Setup;
use crate::limits::TurnSlot;
use crate::runtime::Runtime;
use crate::threads::ThreadRuntime;

/// The thread a turn runs in, claimed for it.
pub(super) struct Claim {
    pub runtime: Arc<ThreadRuntime>,
    /// The thread to create with the turn, when it is new.
    pub new_thread: Option<ThreadRow>,
    pub message_id: String,
    pub cancel: CancellationToken,
}

/// What a turn is put together from, new or taken up.
pub(super) struct TurnParts {
    pub user: String,
    pub request: TurnRequest,
    pub setup: Setup,
    pub claim: Claim,
    pub mode: Arc<dyn ExecutionMode>,
    pub mode_name: String,
    /// A permission mode the message set on an existing thread, to persist with the turn.
    pub mode_change: Option<PermissionMode>,
    /// An agent the message named for an existing thread, to persist with the turn.
    pub agent_change: Option<String>,
    pub slot: TurnSlot,
    /// The place of the answer whose exchange (and everything after) the turn replaces.
    pub replaces: Option<i64>,
    /// Where a turn taken up after its process died goes on from; `None`: a new turn.
    pub resumed: Option<Resumed>,
}

/// A turn taken up again: its record so far, its history, its place.
pub(super) struct Resumed {
    pub point: ResumePoint,
    /// The thread's history up to the turn's user message, then the turn's rounds.
    pub history: Vec<ChatMessage>,
    /// The assistant message's place in the thread, and when the turn started.
    pub position: i64,
    pub started_at: i64,
    /// How many times it has been taken over (its frames number above the earlier lives').
    pub takeovers: u32,
}

/// A turn ready for its task: its parts, its permission mode, toolbelt and system prompt.
pub(super) struct Launch {
    pub parts: TurnParts,
    pub permission_mode: PermissionMode,
    pub toolbelt: Toolbelt,
    pub system_prompt: String,
}

impl Runtime {
    /// Compose the turn's toolbelt and prompt under the permission mode its thread's gate
    /// has now, and launch its task.
    pub(super) async fn assemble(self: &Arc<Self>, parts: TurnParts) {
        let permission_mode = parts.claim.runtime.gate.mode();
        let (toolbelt, system_prompt) = self
            .compose(
                &parts.user,
                &parts.request,
                &parts.setup.agent,
                parts.mode.as_ref(),
                permission_mode,
                parts.setup.editor_prompt.as_deref(),
            )
            .await;
        self.launch(Launch {
            parts,
            permission_mode,
            toolbelt,
            system_prompt,
        });
    }
}
