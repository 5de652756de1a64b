//! The chat-agent runner: set up a turn (thread, permission mode, user message, history from
//! the record, toolbelt, system prompt), run it through its execution mode with its record
//! going to the writer round by round, stream every event with `seq`, and persist the end
//! of the turn however it ended.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use weft_core::{
    prompts, AgentMemory, ChatMessage, EventSink, ExecutionMode, PlannerSpec,
    RunParallelSubagentsTool, TurnEnd, TurnOutcome, TurnSpec,
};
use weft_protocol::{
    AgentConfig, ChatMessageData, ErrorCode, PermissionMode, ServerEvent,
    ToolCallStatus,
};
use weft_store::{new_id, now_ms, ApprovalRow, NewMessage, StoreError, ThreadRow, WriteOp};

use crate::agents;
use crate::commands::{internal, Connection, Refusal};
use crate::history::provider_history;
use crate::metrics::{DirectionLabel, EndLabel};
use crate::persist::{end_status, finish_turn, running_message, TurnRecord};
use crate::record::{TurnLog, FLUSH_EVERY};
use crate::state::AppState;
use crate::threads::ThreadRuntime;
use weft_core::TokenCounter;
use weft_tools::knowledge::KnowledgeBase;

/// Validate and start a chat turn; it then runs on its own task. Only reads happen before
/// `turn_started` goes out; the thread (when new) and the user message are written by the
/// turn's task, in one transaction, before the loop starts.
pub async fn start_turn(conn: &Connection, data: ChatMessageData) -> Result<(), Refusal> {
    start_turn_with(conn, data, None).await
}

/// Makes a turn's mode from its thread and assistant message ids.
pub type MakeMode = Box<dyn FnOnce(&str, &str) -> Arc<dyn ExecutionMode> + Send>;

/// A mode made for one turn (a workflow run).
pub struct CustomMode {
    /// How `turn_started` names it.
    pub name: String,
    pub make: MakeMode,
}

/// [`start_turn`], with the turn run by `custom` instead of a registered mode.
pub async fn start_turn_with(
    conn: &Connection,
    data: ChatMessageData,
    custom: Option<CustomMode>,
) -> Result<(), Refusal> {
    let state = &conn.state;
    let (mode_name, named) = match &custom {
        Some(custom) => (custom.name.clone(), None),
        None => {
            let name = data.mode.clone().unwrap_or_else(|| "classic".to_owned());
            let mode = state
                .modes
                .get(Some(&name))
                .map_err(|e| (ErrorCode::UnknownMode, weft_protocol::echo(&e.to_string())))?;
            (name, Some(mode))
        }
    };
    let text = data.content.text();
    if data.content.is_empty() {
        return Err((ErrorCode::InvalidField, "content is empty".into()));
    }
    state
        .limits
        .message(&conn.user.id)
        .map_err(|m| (ErrorCode::RateLimited, m))?;
    let slot = state
        .limits
        .start_turn(&conn.user.id)
        .map_err(|m| (ErrorCode::RateLimited, m))?;

    // An absent or unknown thread id means a new thread owned by the caller.
    let existing = match &data.thread_id {
        Some(id) => state.store.thread(id).await.map_err(internal)?,
        None => None,
    };
    if existing
        .as_ref()
        .is_some_and(|row| row.owner != conn.user.id)
    {
        return Err((
            ErrorCode::Forbidden,
            "that thread belongs to another user".into(),
        ));
    }
    let thread_agent = existing.as_ref().and_then(|row| row.agent.as_deref());
    let agent = agents::resolve(state, &conn.user.id, data.agent.as_deref(), thread_agent).await?;
    let (provider_name, provider, model) = pick_model(state, &data, &agent)?;
    let planner = planner_of(state, &agent, &provider, &model)?;
    let context_window = state.context_windows.window(&model);
    let agent_change = data
        .agent
        .clone()
        .filter(|name| existing.is_some() && Some(name.as_str()) != thread_agent);
    let new_thread = match &existing {
        Some(_) => None,
        None => {
            let now = now_ms();
            Some(ThreadRow {
                id: data.thread_id.clone().unwrap_or_else(new_id),
                owner: conn.user.id.clone(),
                title: text.chars().take(80).collect(),
                permission_mode: data.permission_mode.unwrap_or_default().as_str().to_owned(),
                agent: data.agent.clone(),
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
    let message_id = new_id();
    if !runtime.try_begin(cancel.clone(), &message_id) {
        return Err((
            ErrorCode::TurnInProgress,
            format!(
                "thread `{}` already has a turn running; send stop first",
                row.id
            ),
        ));
    }

    let mode = match (named, custom) {
        (Some(mode), _) => mode,
        (None, Some(custom)) => (custom.make)(&row.id, &message_id),
        (None, None) => {
            runtime.end();
            return Err(internal("no execution mode"));
        }
    };

    let mode_change = data.permission_mode.filter(|_| new_thread.is_none());
    if let Some(mode) = data.permission_mode {
        runtime.gate.set_mode(mode);
    }
    let permission_mode = runtime.gate.mode();
    runtime.subscribe(conn.id, conn.outbox.clone());

    let context = data.chat_context();
    let mut toolbelt = agent_toolbelt(state.toolbelt_for(&context), &agent);
    if state.editor_available(&context) {
        // The client's own `ui_*` tools join editor turns (seed 000), after the agent's
        // allow-list: they are the page's, not the agent's.
        let timeout = std::time::Duration::from_millis(agent.client_tool_timeout_ms);
        let proxies = conn
            .client_tools
            .proxies(&conn.user.id, &state.client_calls, timeout);
        toolbelt = toolbelt.merged(&weft_core::Toolbelt::new(proxies));
    }
    // Long-term memory for this message: the tools, and what it recalls of the message.
    let memory = data.memory_enabled == Some(true);
    if memory {
        let knowledge: Arc<dyn KnowledgeBase> = state.knowledge.clone();
        let tools = weft_tools::knowledge::memory_tools(&knowledge);
        toolbelt = toolbelt.merged(&weft_core::Toolbelt::new(tools));
    }
    let can_delegate = agent.max_depth > 0 && toolbelt.contains(prompts::RUN_SUBTASK);
    let mut system_prompt = mode.system_prompt(&toolbelt, permission_mode, can_delegate);
    if !agent.instructions.trim().is_empty() {
        system_prompt.push_str("\n\n");
        system_prompt.push_str(agent.instructions.trim());
    }
    if memory {
        match state
            .knowledge
            .recall(&conn.user.id, &text, RECALLED_FACTS)
            .await
        {
            Ok(facts) if !facts.is_empty() => {
                system_prompt.push_str("\n\n");
                system_prompt.push_str(prompts::REMEMBERED);
                for fact in facts {
                    system_prompt.push_str("\n- ");
                    system_prompt.push_str(fact.chunk.trim());
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot recall memories for a turn"),
        }
    }

    runtime.publish(ServerEvent::TurnStarted {
        message_id: message_id.clone(),
        permission_mode,
        mode: mode_name.clone(),
    });
    let log = TurnLog::new(
        state.store.clone(),
        &runtime.id,
        &message_id,
        cancel.clone(),
    );
    runtime.set_log(log.clone());
    let events = {
        let (state, runtime, log) = (state.clone(), runtime.clone(), log.clone());
        EventSink::callback(Box::new(move |event| {
            forward(&state, &runtime, &log, event)
        }))
    };
    let spec = TurnSpec {
        provider,
        model,
        system_prompt,
        history: Vec::new(),
        toolbelt,
        config: agent.clone(),
        gate: runtime.gate.clone(),
        rate_card: state.rate_card.clone(),
        events,
        cancel,
        memory: AgentMemory::new(),
        user_id: Arc::from(conn.user.id.as_str()),
        workspace_root: state.workspace_of(&conn.user.id),
        recorder: log.clone(),
        planner,
        context_window,
        artifacts: Some(state.assets.clone()),
    };
    let user_message = NewMessage {
        id: new_id(),
        thread_id: runtime.id.to_string(),
        role: "user".to_owned(),
        content: serde_json::to_value(&data.content).unwrap_or_else(|_| json!("")),
        execution_tree: None,
        permission_mode: Some(permission_mode.as_str().to_owned()),
        status: "completed".to_owned(),
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        created_at: now_ms(),
        position: 0,
        metadata: None,
    };
    let turn = TurnTask {
        state: state.clone(),
        runtime: runtime.clone(),
        user_id: conn.user.id.clone(),
        message_id,
        permission_mode,
        provider_name,
        log,
        mode_change,
        agent_change,
        agent_name: agent.name.clone(),
        mode_name,
        _slot: slot,
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
    log: Arc<TurnLog>,
    /// A permission mode the message set on an existing thread, to persist with the turn.
    mode_change: Option<PermissionMode>,
    /// An agent the message named for an existing thread, to persist with the turn.
    agent_change: Option<String>,
    agent_name: String,
    mode_name: String,
    /// The turn's place in its user's count of running turns.
    _slot: crate::limits::TurnSlot,
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
        let model = spec.model.clone();
        match self.begin(new_thread, user_message, &model).await {
            Ok((history, record)) => {
                spec.history = history;
                self.drive(spec, mode, record).await;
            }
            Err(e) => {
                tracing::error!(error = %e, thread = %self.runtime.id, "cannot start a turn");
                self.publish_error(
                    ErrorCode::Internal,
                    "the conversation could not be read; see the server log".into(),
                );
                self.publish_done();
            }
        }
        self.runtime.end();
        self.state.metrics.active_turns.dec();
    }

    /// Read the history (an existing thread's record, pruned), then hand the thread (when
    /// new), the user message and the running assistant message to the writer. Nothing here
    /// waits for a commit: the model call goes ahead while it is in flight.
    async fn begin(
        &self,
        new_thread: Option<ThreadRow>,
        mut user_message: NewMessage,
        model: &str,
    ) -> Result<(Vec<ChatMessage>, TurnRecord<'_>), StoreError> {
        let store = &self.state.store;
        let mut messages = Vec::new();
        let mut items = Vec::new();
        if new_thread.is_none() {
            messages = store.messages(&self.runtime.id).await?;
            items = store.root_items(&self.runtime.id).await?;
        }
        user_message.position = messages.last().map_or(0, |m| m.position + 1);
        let record = TurnRecord {
            thread_id: &self.runtime.id,
            message_id: &self.message_id,
            user_id: &self.user_id,
            permission_mode: self.permission_mode,
            position: user_message.position + 1,
            started_at: now_ms(),
            agent: &self.agent_name,
            mode: &self.mode_name,
        };
        // Held, not written: they go out with the first round (or within a second).
        if let Some(mode) = self.mode_change {
            self.log.hold(WriteOp::SetThreadMode {
                id: self.runtime.id.to_string(),
                mode: mode.as_str().to_owned(),
            });
        }
        if let Some(agent) = &self.agent_change {
            self.log.hold(WriteOp::SetThreadAgent {
                id: self.runtime.id.to_string(),
                agent: Some(agent.clone()),
            });
        }
        messages.push(user_message.clone());
        self.log.hold(WriteOp::BeginTurn {
            thread: new_thread,
            messages: vec![user_message, running_message(&record)],
        });
        let history = provider_history(
            &messages,
            &items,
            self.state.agent.max_history_tokens,
            TokenCounter::for_model(model),
        );
        Ok((history, record))
    }

    /// Run the mode (its events reach the clients through `forward`, on the turn's own
    /// task), flushing streaming text at least every second.
    async fn drive(&self, spec: TurnSpec, mode: Arc<dyn ExecutionMode>, record: TurnRecord<'_>) {
        let run = mode.run(spec);
        tokio::pin!(run);
        let mut flush =
            tokio::time::interval_at(tokio::time::Instant::now() + FLUSH_EVERY, FLUSH_EVERY);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let outcome = loop {
            tokio::select! {
                outcome = &mut run => break outcome,
                _ = flush.tick() => self.log.flush(),
            }
        };
        self.finish(outcome, &record).await;
    }

    /// Persist (and wait for the commit), then tell the clients: the stored message, any
    /// error, the final chunk. A client that saw `done` finds the whole turn on reload;
    /// nothing is reported saved that was not.
    async fn finish(&self, mut outcome: TurnOutcome, record: &TurnRecord<'_>) {
        self.count(&outcome);
        // What is held (text of a response cut short included) goes with the turn's end.
        let (op, message) = finish_turn(record, &mut outcome);
        let mut ops = self.log.take_held();
        ops.push(op);
        let saved = self.state.store.write(WriteOp::Many(ops)).await;
        match self
            .log
            .failure()
            .or_else(|| saved.err().map(|e| e.to_string()))
        {
            None => {
                self.runtime.publish(ServerEvent::Message { message });
            }
            Some(e) => {
                tracing::error!(error = %e, thread = %self.runtime.id, "cannot persist a turn");
                self.publish_error(
                    ErrorCode::Internal,
                    "the turn could not be saved; see the server log".into(),
                );
            }
        };
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
        self.publish_done();
    }

    fn count(&self, outcome: &TurnOutcome) {
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
                end: end_status(&outcome.end).into(),
            })
            .inc();
    }

    fn publish_done(&self) {
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

/// Side effects of an event (approval records, counters), then out to the clients.
fn forward(state: &AppState, runtime: &ThreadRuntime, log: &TurnLog, event: ServerEvent) {
    match &event {
        ServerEvent::ToolApprovalRequest {
            tool_call_id,
            name,
            args,
            injected_args,
            ..
        } => {
            state.hub.note_approval(tool_call_id, &runtime.id);
            log.submit(WriteOp::InsertApproval(ApprovalRow {
                id: tool_call_id.clone(),
                thread_id: runtime.id.to_string(),
                tool: name.clone(),
                arguments: args.to_string(),
                status: "pending".to_owned(),
                created_at: now_ms(),
                decided_at: None,
                injected_args: (!injected_args.is_empty())
                    .then(|| Value::Object(injected_args.clone()).to_string()),
            }));
        }
        ServerEvent::ToolApprovalResolved {
            tool_call_id,
            decision,
        } => {
            state.hub.forget_approval(tool_call_id);
            let status = match decision.as_str() {
                "allow" | "allow_for_chat" => "approved",
                "timed_out" => "timed_out",
                _ => "rejected",
            };
            log.submit(WriteOp::DecideApproval {
                thread_id: runtime.id.to_string(),
                id: tool_call_id.clone(),
                status: status.to_owned(),
            });
        }
        ServerEvent::ToolCallUpdate {
            status: ToolCallStatus::Start,
            ..
        } => {
            state.metrics.tool_calls.inc();
        }
        _ => {}
    }
    runtime.publish(event);
}

/// The provider and model of a turn: the message's choice, else the agent's `provider:model`,
/// else the server's default.
fn pick_model(
    state: &AppState,
    data: &ChatMessageData,
    agent: &AgentConfig,
) -> Result<(String, Arc<dyn weft_core::Provider>, String), Refusal> {
    let agent_model = agent.model.as_deref().and_then(weft_protocol::parse_model);
    let wanted = data
        .provider
        .as_deref()
        .or(agent_model.map(|(provider, _)| provider));
    let (name, provider) = state
        .providers
        .get(wanted)
        .map_err(|e| (ErrorCode::InvalidField, e))?;
    let model = match (&data.model, agent_model) {
        (Some(model), _) => Some(model.as_str()),
        (None, Some((p, model))) if p == name => Some(model),
        _ => None,
    };
    let model = state.providers.model_for(&name, model);
    Ok((name, provider, model))
}

/// The planner pre-pass of an agent that plans: `planning_model` (else the executor's model)
/// and `planning_instructions`.
fn planner_of(
    state: &AppState,
    agent: &AgentConfig,
    provider: &Arc<dyn weft_core::Provider>,
    model: &str,
) -> Result<Option<PlannerSpec>, Refusal> {
    if !agent.planning_enabled {
        return Ok(None);
    }
    let (provider, model) = match agent
        .planning_model
        .as_deref()
        .and_then(weft_protocol::parse_model)
    {
        Some((name, model)) => {
            let (_, provider) = state
                .providers
                .get(Some(name))
                .map_err(|e| (ErrorCode::InvalidField, format!("planning_model: {e}")))?;
            (provider, model.to_owned())
        }
        None => (provider.clone(), model.to_owned()),
    };
    Ok(Some(PlannerSpec {
        provider,
        model,
        instructions: agent.planning_instructions.clone(),
    }))
}

/// Facts recalled into the system prompt of a turn with memory.
const RECALLED_FACTS: usize = 3;

/// The session's toolbelt narrowed to the agent's allow-list (names the context lacks, such
/// as editor-only tools outside the editor, are left out).
fn agent_toolbelt(toolbelt: weft_core::Toolbelt, agent: &AgentConfig) -> weft_core::Toolbelt {
    let toolbelt = match &agent.tools {
        None => toolbelt,
        Some(names) => {
            let present: Vec<String> = names
                .iter()
                .filter(|n| toolbelt.contains(n))
                .cloned()
                .collect();
            toolbelt.narrow(&present).unwrap_or(toolbelt)
        }
    };
    // Registered only for agents that allow it (seed 004).
    if agent.allow_parallel_subagents && agent.max_depth > 0 {
        toolbelt.with(Arc::new(RunParallelSubagentsTool))
    } else {
        toolbelt
    }
}
