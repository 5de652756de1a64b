//! Taking up a turn whose process died (this replica took its lease): its thread, agent,
//! model, permission mode and execution mode as they were, its history rebuilt from the
//! record, then the turn's task goes on from its last completed round. `classic` and `code`
//! turns go on (a code turn redoes the run it was cut in), a workflow run goes on from its
//! completed nodes, and a media generation is closed instead.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use weft_core::{ChatMessage, TokenCounter};
use weft_protocol::{ClientTool, MessageContent, PermissionMode};
use weft_store::{MessageRow, StoreError, ThreadRow};

use super::assemble::{Claim, Resumed, TurnParts};
use super::request::{Route, TurnRequest};
use super::resolve::Setup;
use crate::runtime::Runtime;
use crate::threads::ThreadRuntime;
use weft_cluster::recovery::Resumer;
use weft_record::history::provider_history;
use weft_record::resume_point::{resume_point, ResumePoint};
use weft_tools::client::ClientToolset;

/// What the turn was started with beyond the defaults, as its running message keeps it
/// (`persist::started_with`): the chat context, long-term memory, the client's `ui_*` tools
/// (answered by any of the user's connections that has the call).
fn started_with(request: &mut TurnRequest, with: &serde_json::Value) {
    if let Ok(context) = serde_json::from_value(with["chat_context"].clone()) {
        request.context = context;
    }
    request.memory = with["memory_enabled"] == true;
    let tools: Vec<ClientTool> =
        serde_json::from_value(with["client_tools"].clone()).unwrap_or_default();
    if !tools.is_empty() {
        let toolset = ClientToolset::default();
        match toolset.set(tools) {
            Ok(()) => request.client_tools = Some(Arc::new(toolset)),
            Err(e) => tracing::warn!(error = %e, "a taken-up turn's client tools are left out"),
        }
    }
}

/// The route a taken-up turn goes on in: its chat mode, or the workflow it ran, as it was
/// started.
fn route_of(mode_name: &str, with: &serde_json::Value) -> Route {
    if mode_name != "workflow" {
        return Route::Chat {
            mode: Some(mode_name.to_owned()),
        };
    }
    let workflow = &with["workflow"];
    Route::Workflow {
        workflow_id: workflow["id"].as_str().map(str::to_owned),
        params: workflow["params"].as_object().cloned(),
    }
}

/// The execution modes whose turns go on after a restart.
const RESUMABLE_MODES: [&str; 3] = ["classic", weft_codemode::CODE, "workflow"];

#[async_trait::async_trait]
impl Resumer for Runtime {
    fn draining(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    async fn resume(
        self: Arc<Self>,
        message: &MessageRow,
        takeovers: u32,
    ) -> Result<bool, StoreError> {
        let store = &self.store;
        let Some(thread) = store.thread(&message.thread_id).await? else {
            return Ok(false);
        };
        let metadata: serde_json::Value = message
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        let Some(mode_name) = metadata["mode"]
            .as_str()
            .filter(|m| RESUMABLE_MODES.contains(m))
        else {
            return Ok(false);
        };
        let messages = store.messages(&thread.id).await?;
        let Some(asked) = messages
            .iter()
            .rev()
            .find(|m| m.position < message.position && m.role == "user")
        else {
            return Ok(false);
        };
        let content: MessageContent = serde_json::from_value(asked.content.clone())
            .unwrap_or_else(|_| MessageContent::Text(asked.content.to_string()));
        // The thread's mode as last set (a change during the turn included).
        let permission_mode = PermissionMode::parse(&thread.permission_mode)
            .or_else(|| {
                message
                    .permission_mode
                    .as_deref()
                    .and_then(PermissionMode::parse)
            })
            .unwrap_or_default();
        let mut request = TurnRequest::chat(content);
        request.thread_id = Some(thread.id.clone());
        request.route = route_of(mode_name, &metadata["started_with"]);
        request.permission_mode = Some(permission_mode);
        // On the provider and model it ran on (a message's own choice included).
        request.provider = metadata["provider"].as_str().map(str::to_owned);
        request.model = metadata["model"].as_str().map(str::to_owned);
        started_with(&mut request, &metadata["started_with"]);
        let user = thread.owner.clone();
        let mode = match self.mode_for(&user, &mut request).await {
            Ok(mode) => mode.into_mode(&thread.id, &message.id),
            Err(refusal) => {
                tracing::warn!(message = %message.id, error = %refusal.message, "cannot take up a turn");
                return Ok(false);
            }
        };
        let setup = match self.setup(&user, &request, Some(&thread)).await {
            Ok(setup) => setup,
            Err(refusal) => {
                tracing::warn!(message = %message.id, error = %refusal.message, "cannot take up a turn");
                return Ok(false);
            }
        };

        let (point, history) = self
            .read_point(&thread, message, messages, mode_name, &setup)
            .await?;

        let runtime = self.hub.from_row(&thread);
        runtime.refresh(&thread);
        runtime.gate.set_mode(permission_mode);
        self.answer_early(&runtime, &thread.id).await?;
        let cancel = CancellationToken::new();
        if !runtime.try_begin(cancel.clone(), &message.id) {
            return Ok(false);
        }
        tracing::info!(thread = %thread.id, message = %message.id, takeovers, "taking up a turn its process left");
        let slot = self.limits.resume_turn(&user);
        self.assemble(TurnParts {
            user,
            request,
            setup,
            claim: Claim {
                runtime,
                new_thread: None,
                message_id: message.id.clone(),
                cancel,
            },
            mode,
            mode_name: mode_name.to_owned(),
            mode_change: None,
            agent_change: None,
            slot,
            replaces: None,
            resumed: Some(Resumed {
                point,
                history,
                position: message.position,
                started_at: message.created_at,
                takeovers,
            }),
        })
        .await;
        Ok(true)
    }
}

impl Runtime {
    /// Approvals answered while no replica ran the turn, applied when they are asked again.
    async fn answer_early(
        &self,
        thread: &ThreadRuntime,
        thread_id: &str,
    ) -> Result<(), StoreError> {
        for (id, answer) in self.store.queued_approval_answers(thread_id).await? {
            match serde_json::from_str::<weft_core::Answer>(&answer) {
                Ok(queued) => thread
                    .gate
                    .answer_early(&id, queued.decision, queued.reason),
                Err(e) => tracing::warn!(approval = %id, error = %e, "an unreadable queued answer"),
            }
        }
        Ok(())
    }

    /// Where the cut turn `message` goes on from, and its history: the thread's earlier
    /// turns (pruned as for any turn), then its own completed rounds.
    async fn read_point(
        &self,
        thread: &ThreadRow,
        message: &MessageRow,
        messages: Vec<MessageRow>,
        mode_name: &str,
        setup: &Setup,
    ) -> Result<(ResumePoint, Vec<ChatMessage>), StoreError> {
        let store = &self.store;
        let items = store.turn_items(&thread.id, &message.id).await?;
        let approvals = store.approvals(&thread.id).await?;
        let mut model_calls = store.model_calls(&thread.id).await?;
        model_calls.retain(|m| *m.message_id == *message.id);
        let mut point = resume_point(&items, &approvals, &model_calls, message.created_at);
        if mode_name == weft_codemode::CODE {
            // What a code turn said is its runs' output, not its responses (its code).
            point.resume.text = weft_codemode::said_in(&point.tail);
            point.answered |= weft_codemode::ended_in(&point.tail);
        }
        let earlier: Vec<MessageRow> = messages
            .into_iter()
            .filter(|m| m.position < message.position)
            .collect();
        let mut root_items = store.root_items(&thread.id).await?;
        root_items.retain(|i| *i.message_id != *message.id);
        let mut history = provider_history(
            &earlier,
            &root_items,
            setup.agent.max_history_tokens,
            TokenCounter::for_model(&setup.model),
        );
        history.extend(point.tail.iter().cloned());
        Ok((point, history))
    }
}
