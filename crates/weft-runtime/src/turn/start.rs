//! [`Runtime::start_turn`], the one way a turn starts, whoever asks: the request's mode,
//! admission (content, the user's limits), the thread (the caller's own; a live one is
//! authoritative), the agent and model, the thread's one-turn slot, the permission mode, the
//! caller's subscription, the toolbelt and prompt; then the turn runs on its own task. Only
//! reads happen before `turn_started` goes out.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use weft_core::ExecutionMode;
use weft_protocol::{AgentConfig, ErrorCode};
use weft_store::{new_id, now_ms, ThreadRow};

use super::assemble::{Claim, TurnParts};
use super::request::{Route, TurnRequest};
use crate::limits::TurnSlot;
use crate::runtime::Runtime;
use weft_frames::frame::FrameSink;
use weft_frames::Refusal;

/// A turn that started: where its frames go and which message it answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnStarted {
    pub thread_id: String,
    pub message_id: String,
}

/// Makes a turn's mode once its thread and assistant message ids are known.
pub(super) type MakeMode = Box<dyn FnOnce(&str, &str) -> Arc<dyn ExecutionMode> + Send>;

/// The execution mode a turn runs: a registered one, or one made for this turn (a workflow
/// run, a media generation).
pub(super) enum ModeChoice {
    Registered(Arc<dyn ExecutionMode>),
    Made { name: &'static str, make: MakeMode },
}

impl ModeChoice {
    fn name(&self) -> String {
        match self {
            ModeChoice::Registered(mode) => mode.name().to_owned(),
            ModeChoice::Made { name, .. } => (*name).to_owned(),
        }
    }

    pub(super) fn into_mode(self, thread_id: &str, message_id: &str) -> Arc<dyn ExecutionMode> {
        match self {
            ModeChoice::Registered(mode) => mode,
            ModeChoice::Made { make, .. } => make(thread_id, message_id),
        }
    }
}

impl Runtime {
    /// Start a turn for `user`; `sink` watches the thread from now on. Refused with a clear
    /// error (unknown mode, empty content, a limit, another user's thread, a turn already
    /// running) before anything is written.
    pub async fn start_turn(
        self: &Arc<Self>,
        user: &str,
        mut request: TurnRequest,
        sink: Arc<dyn FrameSink>,
    ) -> Result<TurnStarted, Refusal> {
        let mode = self.mode_for(user, &mut request).await?;
        if request.content.is_empty() {
            return Err(Refusal::invalid("content is empty"));
        }
        let slot = self.admit(user)?;
        let existing = self
            .existing_thread(user, request.thread_id.as_deref())
            .await?;
        if let Some(row) = &existing {
            if self.remote_turn(&row.id).await?.is_some() {
                return Err(Refusal::turn_in_progress(&row.id));
            }
        }
        let replaces = self
            .replaced_answer(existing.as_ref(), request.replaces.as_deref())
            .await?;
        let setup = self.setup(user, &request, existing.as_ref()).await?;
        code_mode_can_run(&mode, &setup.agent)?;
        let agent_change = request.agent.clone().filter(|name| {
            existing
                .as_ref()
                .is_some_and(|row| row.agent.as_deref() != Some(name))
        });
        let claim = self.claim(user, &request, existing)?;
        let mode_name = mode.name();
        let mode = mode.into_mode(&claim.runtime.id, &claim.message_id);
        let mode_change = request
            .permission_mode
            .filter(|_| claim.new_thread.is_none());
        if let Some(permission_mode) = request.permission_mode {
            claim.runtime.gate.set_mode(permission_mode);
        }
        claim.runtime.subscribe(sink);
        let started = TurnStarted {
            thread_id: claim.runtime.id.to_string(),
            message_id: claim.message_id.clone(),
        };
        self.assemble(TurnParts {
            user: user.to_owned(),
            request,
            setup,
            claim,
            mode,
            mode_name,
            mode_change,
            agent_change,
            slot,
            replaces,
            resumed: None,
        })
        .await;
        Ok(started)
    }

    /// The mode the request's route asks for.
    pub(super) async fn mode_for(
        self: &Arc<Self>,
        user: &str,
        request: &mut TurnRequest,
    ) -> Result<ModeChoice, Refusal> {
        match request.route.clone() {
            Route::Chat { mode } => {
                let name = mode.unwrap_or_else(|| "classic".to_owned());
                self.modes
                    .get(Some(&name))
                    .map(ModeChoice::Registered)
                    .map_err(|e| {
                        Refusal::new(ErrorCode::UnknownMode, weft_protocol::echo(&e.to_string()))
                    })
            }
            Route::Workflow {
                workflow_id,
                params,
            } => {
                self.workflow_mode(user, workflow_id, params, &request.content)
                    .await
            }
            Route::Media(media) => self.media_mode(user, &media, &mut request.content),
        }
    }

    /// Charge the message to the user's rate and take one of their running-turn places.
    fn admit(&self, user: &str) -> Result<TurnSlot, Refusal> {
        self.limits
            .message(user)
            .map_err(|m| Refusal::new(ErrorCode::RateLimited, m))?;
        self.limits
            .start_turn(user)
            .map_err(|m| Refusal::new(ErrorCode::RateLimited, m))
    }

    /// The stored thread `id` names, if there is one; another user's is refused. An absent
    /// or unknown id means a new thread owned by the caller.
    async fn existing_thread(
        &self,
        user: &str,
        id: Option<&str>,
    ) -> Result<Option<ThreadRow>, Refusal> {
        let Some(id) = id else {
            return Ok(None);
        };
        let row = self.store.thread(id).await.map_err(Refusal::internal)?;
        if row.as_ref().is_some_and(|row| row.owner != user) {
            return Err(Refusal::forbidden_thread());
        }
        Ok(row)
    }

    /// The thread's live runtime and its one-turn slot for this turn.
    fn claim(
        &self,
        user: &str,
        request: &TurnRequest,
        existing: Option<ThreadRow>,
    ) -> Result<Claim, Refusal> {
        let new_thread = match &existing {
            Some(_) => None,
            None => {
                let now = now_ms();
                Some(ThreadRow {
                    id: request.thread_id.clone().unwrap_or_else(new_id),
                    owner: user.to_owned(),
                    title: request.content.text().chars().take(80).collect(),
                    permission_mode: request
                        .permission_mode
                        .unwrap_or_default()
                        .as_str()
                        .to_owned(),
                    agent: request.agent.clone(),
                    created_at: now,
                    updated_at: now,
                    allowed_tools: Vec::new(),
                })
            }
        };
        let Some(row) = existing.as_ref().or(new_thread.as_ref()) else {
            return Err(Refusal::internal("no thread"));
        };
        let runtime = self.live_thread(row);
        if runtime.owner != user {
            return Err(Refusal::forbidden_thread());
        }
        let cancel = CancellationToken::new();
        let message_id = new_id();
        if !runtime.try_begin(cancel.clone(), &message_id) {
            return Err(Refusal::turn_in_progress(&row.id));
        }
        Ok(Claim {
            runtime,
            new_thread,
            message_id,
            cancel,
        })
    }
}

/// Code mode runs neither the planner nor budget awareness: an agent that asks for either is
/// refused there rather than run without them.
fn code_mode_can_run(mode: &ModeChoice, agent: &AgentConfig) -> Result<(), Refusal> {
    if !matches!(mode, ModeChoice::Registered(m) if m.name() == weft_codemode::CODE) {
        return Ok(());
    }
    let unsupported = if agent.planning_enabled {
        Some("planning_enabled")
    } else if agent.budget_awareness.is_some() {
        Some("budget_awareness")
    } else {
        None
    };
    match unsupported {
        Some(field) => Err(Refusal::invalid(format!(
            "agent `{}` sets {field}, which code mode does not do; use mode \"classic\" or \
             another agent",
            agent.name
        ))),
        None => Ok(()),
    }
}
