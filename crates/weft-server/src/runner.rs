//! The chat-agent runner: set up a turn (thread, permission mode, user message, history,
//! toolbelt, system prompt), run it through its execution mode, stream every event with
//! `seq`, and persist what it produced however it ended.

use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use weft_core::{
    prompts, AgentMemory, ChatMessage, EventSink, ExecutionMode, TurnEnd, TurnOutcome, TurnSpec,
};
use weft_protocol::{
    ChatMessageData, ErrorCode, MessageContent, PermissionMode, ServerEvent, ToolCallStatus,
};
use weft_store::{new_id, now_ms, ApprovalRow, NewMessage, StoreError, ThreadRow};

use crate::commands::{internal, Connection, Refusal};
use crate::history::provider_history;
use crate::metrics::{DirectionLabel, EndLabel};
use crate::persist::{persist_turn, to_wire, TurnRecord};
use crate::state::AppState;
use crate::threads::ThreadRuntime;

/// Validate and start a chat turn; it then runs on its own task. Only reads happen before
/// `turn_started` goes out; the thread (when new) and the user message are written by the
/// turn's task, in one transaction, before the loop starts.
pub async fn start_turn(conn: &Connection, data: ChatMessageData) -> Result<(), Refusal> {
    let state = &conn.state;
    let mode_name = data.mode.clone().unwrap_or_else(|| "classic".to_owned());
    let mode = state
        .modes
        .get(Some(&mode_name))
        .map_err(|e| (ErrorCode::UnknownMode, e.to_string()))?;
    let (provider_name, provider) = state
        .providers
        .get(data.provider.as_deref())
        .map_err(|e| (ErrorCode::InvalidField, e))?;
    let model = state
        .providers
        .model_for(&provider_name, data.model.as_deref());
    let text = data.content.text();
    if text.trim().is_empty() && matches!(data.content, MessageContent::Text(_)) {
        return Err((ErrorCode::InvalidField, "content is empty".into()));
    }

    // An absent or unknown thread id means a new thread owned by the caller.
    let existing = match &data.thread_id {
        Some(id) => state.store.thread(id).await.map_err(internal)?,
        None => None,
    };
    let new_thread = match &existing {
        Some(row) if row.owner != conn.user.id => {
            return Err((
                ErrorCode::Forbidden,
                "that thread belongs to another user".into(),
            ))
        }
        Some(_) => None,
        None => {
            let now = now_ms();
            Some(ThreadRow {
                id: data.thread_id.clone().unwrap_or_else(new_id),
                owner: conn.user.id.clone(),
                title: text.chars().take(80).collect(),
                permission_mode: data.permission_mode.unwrap_or_default().as_str().to_owned(),
                created_at: now,
                updated_at: now,
            })
        }
    };
    let row = existing
        .as_ref()
        .or(new_thread.as_ref())
        .ok_or_else(|| internal("no thread"))?;
    let stored_mode = PermissionMode::parse(&row.permission_mode).unwrap_or_default();
    let runtime = state.hub.get_or_insert(&row.id, &row.owner, stored_mode);
    if runtime.owner != conn.user.id {
        return Err((
            ErrorCode::Forbidden,
            "that thread belongs to another user".into(),
        ));
    }
    let cancel = CancellationToken::new();
    if !runtime.try_begin(cancel.clone()) {
        return Err((
            ErrorCode::TurnInProgress,
            format!(
                "thread `{}` already has a turn running; send stop first",
                row.id
            ),
        ));
    }

    if let Some(mode) = data.permission_mode {
        runtime.gate.set_mode(mode);
        if new_thread.is_none() {
            if let Err(e) = state
                .store
                .set_thread_mode(&runtime.id, mode.as_str())
                .await
            {
                runtime.end();
                return Err(internal(e));
            }
        }
    }
    let permission_mode = runtime.gate.mode();
    runtime.subscribe(conn.id, conn.tx.clone());

    let toolbelt = state.toolbelt_for(&data.chat_context());
    let can_delegate = state.agent.max_depth > 0 && toolbelt.contains(prompts::RUN_SUBTASK);
    let mut system_prompt =
        prompts::root_system_prompt(&toolbelt.names(), permission_mode, can_delegate);
    if let Some(hint) = mode.prompt_hint() {
        system_prompt.push_str("\n\n");
        system_prompt.push_str(hint);
    }

    let message_id = new_id();
    runtime.publish(ServerEvent::TurnStarted {
        message_id: message_id.clone(),
        permission_mode,
        mode: mode_name,
    });
    let spec = TurnSpec {
        provider,
        model,
        system_prompt,
        history: Vec::new(),
        toolbelt,
        config: state.agent.clone(),
        gate: runtime.gate.clone(),
        rate_card: state.rate_card.clone(),
        events: EventSink::detached(),
        cancel,
        memory: AgentMemory::new(),
        workspace_root: state.workspace_root.clone(),
    };
    let user_message = NewMessage {
        id: new_id(),
        thread_id: runtime.id.clone(),
        role: "user".to_owned(),
        content: serde_json::to_value(&data.content).unwrap_or_else(|_| json!("")),
        execution_tree: None,
        permission_mode: Some(permission_mode.as_str().to_owned()),
        status: "completed".to_owned(),
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        created_at: now_ms(),
    };
    let turn = TurnTask {
        state: state.clone(),
        runtime: runtime.clone(),
        user_id: conn.user.id.clone(),
        message_id,
        permission_mode,
        provider_name,
    };
    state
        .turns
        .spawn(turn.run(new_thread, user_message, spec, mode));
    Ok(())
}

struct TurnTask {
    state: Arc<AppState>,
    runtime: Arc<ThreadRuntime>,
    user_id: String,
    message_id: String,
    permission_mode: PermissionMode,
    provider_name: String,
}

impl TurnTask {
    async fn run(
        self,
        new_thread: Option<ThreadRow>,
        user_message: NewMessage,
        mut spec: TurnSpec,
        mode: Arc<dyn ExecutionMode>,
    ) {
        self.state.metrics.active_turns.inc();
        match self.begin(new_thread.as_ref(), user_message).await {
            Ok(history) => {
                spec.history = history;
                self.drive(spec, mode).await;
            }
            Err(e) => {
                tracing::error!(error = %e, thread = %self.runtime.id, "cannot start a turn");
                self.publish_error(
                    ErrorCode::Internal,
                    "the message could not be saved; see the server log".into(),
                );
                self.runtime.publish(ServerEvent::Chunk {
                    content: String::new(),
                    done: true,
                    parent_id: None,
                    depth: 0,
                });
            }
        }
        self.runtime.end();
        self.state.metrics.active_turns.dec();
    }

    /// Save the thread (when new) and the user message, then the history for the model
    /// (a new thread's history is just that message).
    async fn begin(
        &self,
        new_thread: Option<&ThreadRow>,
        user_message: NewMessage,
    ) -> Result<Vec<ChatMessage>, StoreError> {
        self.state
            .store
            .begin_turn(new_thread, &user_message)
            .await?;
        let rows = match new_thread {
            Some(_) => vec![user_message],
            None => self.state.store.messages(&self.runtime.id).await?,
        };
        Ok(provider_history(&rows, self.state.agent.max_history_tokens))
    }

    async fn drive(&self, mut spec: TurnSpec, mode: Arc<dyn ExecutionMode>) {
        let (sink, mut events) = EventSink::channel();
        spec.events = sink;
        let run = mode.run(spec);
        tokio::pin!(run);
        let outcome = loop {
            tokio::select! {
                outcome = &mut run => break outcome,
                Some(event) = events.recv() => self.forward(event).await,
            }
        };
        while let Ok(event) = events.try_recv() {
            self.forward(event).await;
        }
        self.finish(outcome).await;
    }

    /// Side effects of an event (approval records, counters), then out to the clients.
    async fn forward(&self, event: ServerEvent) {
        let store = &self.state.store;
        match &event {
            ServerEvent::ToolApprovalRequest {
                tool_call_id,
                name,
                args,
                ..
            } => {
                self.state.hub.note_approval(tool_call_id, &self.runtime.id);
                let row = ApprovalRow {
                    id: tool_call_id.clone(),
                    thread_id: self.runtime.id.clone(),
                    tool: name.clone(),
                    arguments: args.to_string(),
                    status: "pending".to_owned(),
                    created_at: now_ms(),
                    decided_at: None,
                };
                if let Err(e) = store.insert_approval(&row).await {
                    tracing::error!(error = %e, "cannot record an approval request");
                }
            }
            ServerEvent::ToolApprovalResolved {
                tool_call_id,
                decision,
            } => {
                self.state.hub.forget_approval(tool_call_id);
                let status = match decision.as_str() {
                    "allow" | "allow_for_chat" => "approved",
                    "timed_out" => "timed_out",
                    _ => "rejected",
                };
                if let Err(e) = store.decide_approval(tool_call_id, status).await {
                    tracing::error!(error = %e, "cannot record an approval outcome");
                }
            }
            ServerEvent::ToolCallUpdate {
                status: ToolCallStatus::Start,
                ..
            } => {
                self.state.metrics.tool_calls.inc();
            }
            _ => {}
        }
        self.runtime.publish(event);
    }

    /// Persist, then tell the clients: the stored message, any error, the final chunk.
    async fn finish(&self, outcome: TurnOutcome) {
        let metrics = &self.state.metrics;
        metrics.model_calls.inc_by(outcome.model_calls.len() as u64);
        metrics
            .tokens
            .get_or_create(&DirectionLabel {
                direction: "input".into(),
            })
            .inc_by(outcome.totals.input_tokens);
        metrics
            .tokens
            .get_or_create(&DirectionLabel {
                direction: "output".into(),
            })
            .inc_by(outcome.totals.output_tokens);
        metrics
            .turns
            .get_or_create(&EndLabel {
                end: crate::persist::end_status(&outcome.end).into(),
            })
            .inc();

        let record = TurnRecord {
            thread_id: &self.runtime.id,
            message_id: &self.message_id,
            user_id: &self.user_id,
            permission_mode: self.permission_mode,
        };
        match persist_turn(&self.state.store, &record, &outcome).await {
            Ok(message) => {
                self.runtime.publish(ServerEvent::Message {
                    message: to_wire(&message),
                });
            }
            Err(e) => {
                tracing::error!(error = %e, thread = %self.runtime.id, "cannot persist a turn");
                self.publish_error(
                    ErrorCode::Internal,
                    "the turn could not be saved; see the server log".into(),
                );
            }
        }
        match &outcome.end {
            TurnEnd::ProviderError(message) => self.publish_error(
                ErrorCode::ProviderError,
                format!("{} failed: {message}", self.provider_name),
            ),
            TurnEnd::ToolAborted(message) | TurnEnd::Failed(message) => {
                self.publish_error(ErrorCode::Internal, message.clone())
            }
            TurnEnd::Completed | TurnEnd::BudgetExceeded(_) | TurnEnd::Cancelled => {}
        }
        self.runtime.publish(ServerEvent::Chunk {
            content: String::new(),
            done: true,
            parent_id: None,
            depth: 0,
        });
    }

    fn publish_error(&self, code: ErrorCode, message: String) {
        self.state.metrics.error(code);
        self.runtime
            .publish(ServerEvent::error(code, message, None));
    }
}
