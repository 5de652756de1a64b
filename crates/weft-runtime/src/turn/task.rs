//! A started turn on its own task: `turn_started`, then the history read from the record, the
//! turn's start held for its first write, the mode run (its events published as they come,
//! its record written round by round, streaming text flushed every second), and one awaited
//! write of its end before `message` and `chunk {done: true}`.

use std::borrow::Cow;
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use weft_core::telemetry;
use weft_core::{
    ChatMessage, EventSink, ExecutionMode, TokenCounter, TurnEnd, TurnOutcome, TurnSpec,
};
use weft_protocol::{ErrorCode, PermissionMode, ServerEvent, ToolCallStatus};
use weft_store::{new_id, now_ms, Done, NewMessage, StoreError, ThreadRow, WriteOp};

use super::assemble::{Launch, Resumed, TurnParts};
use super::request::TurnRequest;
use crate::limits::TurnSlot;
use crate::metrics::{DirectionLabel, EndLabel};
use crate::runtime::Runtime;
use crate::starts::StartEnds;
use crate::threads::{resumed_seq_floor, turn_seq_floor, ThreadRuntime};
use weft_cluster::leases::TurnLease;
use weft_frames::Refusal;
use weft_record::history::provider_history;
use weft_record::persist::{end_error, end_status, finish_turn, running_message_with, TurnRecord};
use weft_record::{TurnLog, FLUSH_EVERY, LEASE_LOST};

/// How the turn's task begins (boxed into the task: a future keeps room for its arguments
/// for its whole life, moved out or not).
#[allow(clippy::large_enum_variant)]
enum Begin {
    New(NewStart),
    /// Go on from the record.
    Resumed(Resumed),
}

/// How a turn's start went.
enum Opened<'a> {
    /// It runs from this history, written down by this record.
    Begun(Vec<ChatMessage>, TurnRecord<'a>),
    /// Its answer was on record already: it is finished.
    Answered,
    /// Its start could not be written.
    Failed(StoreError),
}

/// Why a turn's start was not saved.
#[derive(Debug, Clone, Copy)]
enum StartRefused {
    /// Another turn of the thread runs (started through another replica meanwhile).
    Busy,
    /// The thread it would create was created meanwhile, through another replica.
    Taken,
    /// The database failed.
    Failed,
}

/// A new turn's start: written (the thread when new, the user message, the running
/// message, the lease), then announced.
struct NewStart {
    new_thread: Option<ThreadRow>,
    user_message: NewMessage,
    lease_row: WriteOp,
    /// The place of the answer it replaces (see [`Launch::replaces`]).
    replaces: Option<i64>,
    /// In flight until the start's write is acknowledged.
    ends: StartEnds,
}

struct TurnTask {
    runtime: Arc<Runtime>,
    thread: Arc<ThreadRuntime>,
    user_id: String,
    message_id: String,
    permission_mode: PermissionMode,
    provider_name: String,
    /// The model it runs on (kept with its record, so a resumed turn runs on it too).
    model_name: String,
    log: Arc<TurnLog>,
    /// The turn's lease (its row goes with the start).
    lease: Arc<TurnLease>,
    /// Stops the turn (its start could not be saved).
    cancel: CancellationToken,
    /// Why the turn's start was not saved, once its write failed: it then ends with this
    /// error and writes nothing.
    refused: Arc<OnceLock<StartRefused>>,
    /// The turn creates its thread (a failed start leaves nothing to remember of it).
    creates_thread: bool,
    /// What it was started with beyond the defaults, kept with its running message.
    started_with: Option<serde_json::Value>,
    mode_change: Option<PermissionMode>,
    agent_change: Option<String>,
    agent_name: String,
    mode_name: String,
    /// The turn's place in its user's count of running turns.
    _slot: TurnSlot,
}

impl Runtime {
    /// Announce the turn and run it on its own task.
    pub(super) fn launch(self: &Arc<Self>, launch: Launch) {
        let Launch {
            parts:
                TurnParts {
                    user,
                    request,
                    setup,
                    claim,
                    mode,
                    mode_name,
                    mode_change,
                    agent_change,
                    slot,
                    replaces,
                    resumed,
                },
            permission_mode,
            toolbelt,
            system_prompt,
        } = launch;
        let thread = claim.runtime;
        let started_with = request.started_with();
        let (lease, lease_row) = match &resumed {
            Some(_) => (
                self.leases.adopt(&claim.message_id, claim.cancel.clone()),
                None,
            ),
            None => {
                let (lease, row) = self.leases.take(&claim.message_id, claim.cancel.clone());
                (lease, Some(row))
            }
        };
        let log = TurnLog::new(
            self.store.clone(),
            &thread.id,
            &claim.message_id,
            &user,
            claim.cancel.clone(),
            lease.clone(),
        );
        thread.set_log(log.clone());
        let events = {
            let (runtime, thread) = (self.clone(), thread.clone());
            EventSink::callback(Box::new(move |event| forward(&runtime, &thread, event)))
        };
        if let Some(resumed) = &resumed {
            log.continue_from(resumed.point.next_position, resumed.point.model_calls);
            // The calls of its earlier lives stay in the turn's tree.
            events.seed(&resumed.point.earlier_calls);
        }
        // A new turn's start is in flight until it commits; one taken up has none.
        let (pace, start) = match &resumed {
            Some(_) => (self.starts.started(), None),
            None => {
                let (pace, start) = self.starts.begin();
                (pace, Some(start))
            }
        };
        let spec = TurnSpec::new(setup.provider, setup.model, setup.agent.clone())
            .system_prompt(system_prompt)
            .toolbelt(toolbelt)
            .gate(thread.gate.clone())
            .rate_card(self.rate_card.clone())
            .events(events)
            .cancel(claim.cancel.clone())
            .user(&user, self.workspace_of(&user))
            .recorder(log.clone())
            .planner(setup.planner)
            .context_window(setup.context_window)
            .artifacts(Some(self.assets.clone()))
            .pace(Some(pace))
            .chunk_interval(std::time::Duration::from_millis(
                self.config.server.chunk_interval_ms,
            ))
            .resume(resumed.as_ref().map(|r| r.point.resume.clone()));
        let user_message = user_message(&thread.id, &request, permission_mode);
        let task = TurnTask {
            runtime: self.clone(),
            thread,
            user_id: user,
            message_id: claim.message_id,
            permission_mode,
            provider_name: setup.provider_name,
            model_name: spec.model.clone(),
            log,
            lease,
            cancel: claim.cancel,
            refused: Arc::default(),
            creates_thread: claim.new_thread.is_some(),
            started_with,
            mode_change,
            agent_change,
            agent_name: setup.agent.name.clone(),
            mode_name,
            _slot: slot,
        };
        let begin = match (resumed, lease_row, start) {
            (Some(resumed), _, _) => Begin::Resumed(resumed),
            (None, Some(lease_row), Some(ends)) => Begin::New(NewStart {
                new_thread: claim.new_thread,
                user_message,
                lease_row,
                replaces,
                ends,
            }),
            (None, _, _) => unreachable!("a new turn always takes a lease row and a start"),
        };
        self.turns
            .spawn(task.run(Box::new(begin), Box::new(spec), mode));
    }
}

/// The message a new turn starts with (its place is set when the thread is read).
fn user_message(thread_id: &str, request: &TurnRequest, mode: PermissionMode) -> NewMessage {
    NewMessage {
        id: new_id(),
        thread_id: thread_id.to_owned(),
        role: "user".to_owned(),
        content: serde_json::to_value(&request.content).unwrap_or_else(|_| json!("")),
        execution_tree: None,
        permission_mode: Some(mode.as_str().to_owned()),
        status: "completed".to_owned(),
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        created_at: now_ms(),
        position: 0,
        metadata: None,
    }
}

impl TurnTask {
    /// The turn, from its start (or where it was taken up) to its end. `begin` and `spec` come
    /// boxed: the task's future keeps room for its arguments as long as it runs. An `async`
    /// block, not an `async fn`: the latter keeps a second copy of `self` in its future.
    #[allow(clippy::manual_async_fn)] // an `async fn` would hold `self` twice
    fn run(
        self,
        begin: Box<Begin>,
        mut spec: Box<TurnSpec>,
        mode: Arc<dyn ExecutionMode>,
    ) -> impl Future<Output = ()> + Send {
        async move {
            self.runtime.metrics.active_turns.inc();
            // The start is its own boxed future, freed once it is done: what it holds (the
            // start's rows, a resumed turn's record) is not kept beside the running turn.
            let (history, record) = match Box::pin(self.open(begin, &spec)).await {
                Opened::Begun(history, record) => (history, record),
                Opened::Answered => return self.end_task(),
                Opened::Failed(e) => {
                    self.not_started(&e);
                    return self.end_task();
                }
            };
            spec.history = history;
            self.drive(spec, mode, record).await;
            self.end_task();
        }
    }

    /// A turn whose start could not be written: its frames go, then the error and `done`.
    fn not_started(&self, error: &StoreError) {
        self.thread.release_frames(None, 0);
        if error.is_thread_busy() {
            let busy = Refusal::turn_in_progress(&self.thread.id);
            self.publish_error(busy.code, busy.message);
        } else {
            tracing::error!(error = %error, thread = %self.thread.id, "cannot start a turn");
            self.publish_error(
                ErrorCode::Internal,
                "the turn could not be started; see the server log".into(),
            );
        }
        self.publish_done();
    }

    /// The turn's start: a new one written and announced, a resumed one taken up from its
    /// record (and finished at once when its answer was on record already).
    async fn open(&self, begin: Box<Begin>, spec: &TurnSpec) -> Opened<'_> {
        // The turn's frames wait behind `turn_started`, which waits for the start's commit.
        self.thread.hold_frames();
        match unboxed(begin) {
            Begin::New(start) => {
                let max_history_tokens = spec.config.max_history_tokens;
                match self.begin(start, &spec.model, max_history_tokens).await {
                    Ok((history, record)) => Opened::Begun(history, record),
                    Err(e) => Opened::Failed(e),
                }
            }
            Begin::Resumed(resumed) if resumed.point.answered => {
                let (_, record) = self.take_up(resumed);
                Box::pin(self.finish(answered_outcome(spec), &record)).await;
                Opened::Answered
            }
            Begin::Resumed(resumed) => {
                let (history, record) = self.take_up(resumed);
                Opened::Begun(history, record)
            }
        }
    }

    fn end_task(&self) {
        self.runtime.leases.release(&self.message_id);
        self.thread.end();
        if self.creates_thread && self.refused.get().is_some() {
            // The thread was not created: this replica must not remember it as the caller's.
            self.runtime.hub.forget(&self.thread);
        }
        self.runtime.metrics.active_turns.dec();
    }

    /// Go on from the record: the drafts of a cut response emptied, then `turn_resumed` (the
    /// answer so far) out at once, numbered above the earlier lives' frames, and the turn
    /// announced to the other replicas.
    fn take_up(&self, resumed: Resumed) -> (Vec<ChatMessage>, TurnRecord<'_>) {
        let Resumed {
            point,
            history,
            position,
            started_at,
            takeovers,
        } = resumed;
        let record = TurnRecord {
            thread_id: &self.thread.id,
            message_id: &self.message_id,
            user_id: &self.user_id,
            permission_mode: self.permission_mode,
            position,
            started_at,
            agent: &self.agent_name,
            mode: &self.mode_name,
            provider: &self.provider_name,
            model: &self.model_name,
        };
        if !point.emptied.is_empty() {
            self.log.submit(WriteOp::Items(point.emptied));
        }
        let resumed = ServerEvent::TurnResumed {
            message_id: self.message_id.clone(),
            content: point.resume.text,
            permission_mode: self.permission_mode,
            mode: self.mode_name.clone(),
        };
        self.thread
            .release_frames(Some(resumed), resumed_seq_floor(position, takeovers));
        if let Some(bus) = &self.runtime.bus {
            bus.announce_turn(&self.thread.id);
        }
        (history, record)
    }

    /// Read the history (an existing thread's record, pruned to the agent's
    /// `max_history_tokens`, cut before the exchange it replaces), then write the thread
    /// (when new), the user message and the running assistant message (dropping the replaced
    /// messages in the same transaction); the model call need not wait for that commit
    /// (group commit shares it with other turns starting meanwhile), `turn_started` does.
    async fn begin(
        &self,
        start: NewStart,
        model: &str,
        max_history_tokens: u64,
    ) -> Result<(Vec<ChatMessage>, TurnRecord<'_>), StoreError> {
        let NewStart {
            new_thread,
            mut user_message,
            lease_row,
            replaces,
            ends,
        } = start;
        let store = &self.runtime.store;
        let mut messages = Vec::new();
        let mut items = Vec::new();
        if new_thread.is_none() {
            messages = store.messages(&self.thread.id).await?;
            items = store.root_items(&self.thread.id).await?;
        }
        // Past every message there was, replaced ones too: a thread's `seq` only rises.
        user_message.position = messages.last().map_or(0, |m| m.position + 1);
        if let Some(answer) = replaces {
            // Another turn replaced it (through another replica) since it was looked up.
            if !messages
                .iter()
                .any(|m| m.position == answer && m.role == "assistant")
            {
                return Err(StoreError::thread_busy());
            }
        }
        let cut = replaces.map(|answer| super::replace::cut_position(&messages, answer));
        if let Some(cut) = cut {
            messages.retain(|m| m.position < cut);
            let kept: HashSet<&str> = messages.iter().map(|m| m.id.as_str()).collect();
            items.retain(|item| kept.contains(&*item.message_id));
        }
        let record = TurnRecord {
            thread_id: &self.thread.id,
            message_id: &self.message_id,
            user_id: &self.user_id,
            permission_mode: self.permission_mode,
            position: user_message.position + 1,
            started_at: now_ms(),
            agent: &self.agent_name,
            mode: &self.mode_name,
            provider: &self.provider_name,
            model: &self.model_name,
        };
        let mut start = Vec::new();
        if let Some(position) = cut {
            start.push(WriteOp::DropMessages {
                thread_id: self.thread.id.to_string(),
                position,
            });
        }
        start.push(WriteOp::BeginTurn {
            thread: new_thread,
            messages: vec![
                user_message.clone(),
                running_message_with(&record, self.started_with.as_ref()),
            ],
        });
        start.push(lease_row);
        if let Some(mode) = self.mode_change {
            start.push(WriteOp::SetThreadMode {
                id: self.thread.id.to_string(),
                mode: mode.as_str().to_owned(),
            });
        }
        if let Some(agent) = &self.agent_change {
            start.push(WriteOp::SetThreadAgent {
                id: self.thread.id.to_string(),
                agent: Some(agent.clone()),
            });
        }
        store.submit(
            WriteOp::Many(start),
            Some(self.announce(turn_seq_floor(record.position), ends)),
        );
        messages.push(user_message);
        let history = provider_history(
            &messages,
            &items,
            max_history_tokens,
            TokenCounter::for_model(model),
        );
        Ok((history, record))
    }

    /// What happens when the start's write ends, right after the commit: the lease counts
    /// from its row's write, the turn is announced, then what it has sent meanwhile; or,
    /// when the start could not be saved, those frames are dropped and the turn stops (it
    /// ends with an error). Any later write of the turn commits after this one, so the
    /// turn's end always comes after.
    fn announce(&self, seq_floor: u64, start: StartEnds) -> Done {
        let thread = self.thread.clone();
        let cancel = self.cancel.clone();
        let refused = self.refused.clone();
        let bus = self.runtime.bus.clone();
        let (lease, store) = (self.lease.clone(), self.runtime.store.clone());
        let started = ServerEvent::TurnStarted {
            message_id: self.message_id.clone(),
            permission_mode: self.permission_mode,
            mode: self.mode_name.clone(),
        };
        Box::new(move |committed| {
            // The start has ended either way: rounds waiting for it may go on.
            drop(start);
            match committed {
                Ok(()) => {
                    lease.written(store.batch_started());
                    thread.release_frames(Some(started), seq_floor);
                    if let Some(bus) = bus {
                        bus.announce_turn(&thread.id);
                    }
                }
                Err(e) => {
                    let why = if e.is_thread_busy() {
                        StartRefused::Busy
                    } else if e.is_thread_taken() {
                        StartRefused::Taken
                    } else {
                        tracing::error!(error = %e, thread = %thread.id, "a turn's start was not saved");
                        StartRefused::Failed
                    };
                    let _ = refused.set(why);
                    thread.release_frames(None, 0);
                    cancel.cancel();
                }
            }
        })
    }

    /// Run the mode (its events reach the clients through `forward`, on the turn's own
    /// task), flushing streaming text at least every second.
    async fn drive(
        &self,
        spec: Box<TurnSpec>,
        mode: Arc<dyn ExecutionMode>,
        record: TurnRecord<'_>,
    ) {
        let span = telemetry::turn_span(
            &self.thread.id,
            &self.agent_name,
            &self.message_id,
            &self.mode_name,
        );
        let outcome = self
            .run_mode(mode.run(unboxed(spec)).instrument(span.clone()))
            .await;
        Box::pin(self.finish(ended(&span, outcome), &record)).await;
    }

    /// The mode's run, its record flushed every [`FLUSH_EVERY`] meanwhile. The run's future
    /// (boxed, so `Unpin`) is freed when this returns, before the end's commit is waited for.
    async fn run_mode(&self, mut run: impl Future<Output = TurnOutcome> + Unpin) -> TurnOutcome {
        let mut flush =
            tokio::time::interval_at(tokio::time::Instant::now() + FLUSH_EVERY, FLUSH_EVERY);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                outcome = &mut run => return outcome,
                _ = flush.tick() => self.log.flush(),
            }
        }
    }

    /// Persist (and wait for the commit), then tell the clients: the stored message, any
    /// error, the final chunk. A client that saw `done` finds the whole turn on reload;
    /// nothing is reported saved that was not.
    async fn finish(&self, mut outcome: TurnOutcome, record: &TurnRecord<'_>) {
        if self.ended_refused().await {
            return;
        }
        self.count(&outcome);
        // What is held (text of a response cut short included) goes with the turn's end.
        let (op, message) = finish_turn(record, &mut outcome);
        if !self.lease.check() {
            // Another replica closes the turn; this one must not write to it any more.
            return self.end_without_lease();
        }
        let saved = self.log.write_end(op).await;
        // A turn quicker than its start's commit learns only now that the start failed (the
        // end commits after the start, so its outcome is known by then).
        if self.ended_refused().await {
            return;
        }
        match self
            .log
            .failure()
            .or_else(|| saved.err().map(|e| e.to_string()))
        {
            None => {
                self.thread
                    .publish(Cow::Owned(ServerEvent::Message { message }));
            }
            // Its fence failed: the lease went before this replica's clock said so.
            Some(_) if !self.lease.check() => return self.end_without_lease(),
            Some(e) => {
                tracing::error!(error = %e, thread = %self.thread.id, "cannot persist a turn");
                self.publish_error(
                    ErrorCode::Internal,
                    "the turn could not be saved; see the server log".into(),
                );
            }
        };
        if let Some((code, message)) = end_error(&outcome.end, &self.provider_name) {
            self.publish_error(code, message);
        }
        self.publish_done();
    }

    /// End a turn whose start was not saved with why, and `done`; false when it was saved
    /// (or its outcome is not known yet).
    async fn ended_refused(&self) -> bool {
        let Some(why) = self.refused.get() else {
            return false;
        };
        let refusal = self.start_refusal(*why).await;
        self.publish_error(refusal.code, refusal.message);
        self.publish_done();
        true
    }

    /// What the client is told of a start that was not saved. A thread created meanwhile
    /// through another replica is another user's (`forbidden`) or the same user's other turn.
    async fn start_refusal(&self, why: StartRefused) -> Refusal {
        match why {
            StartRefused::Busy => Refusal::turn_in_progress(&self.thread.id),
            StartRefused::Taken => match self.runtime.store.thread(&self.thread.id).await {
                Ok(Some(row)) if row.owner != self.user_id => Refusal::forbidden_thread(),
                _ => Refusal::turn_in_progress(&self.thread.id),
            },
            StartRefused::Failed => Refusal::new(
                ErrorCode::Internal,
                "the turn could not be started; see the server log",
            ),
        }
    }

    /// Tell the clients this replica lost the turn's lease and wrote nothing of its end;
    /// nothing when it handed the turn over (its clients follow it to another replica).
    fn end_without_lease(&self) {
        if self.lease.is_handed_over() {
            return;
        }
        self.thread.drop_remote_followers();
        self.publish_error(ErrorCode::Internal, LEASE_LOST.to_owned());
        self.publish_done();
    }

    fn count(&self, outcome: &TurnOutcome) {
        let metrics = &self.runtime.metrics;
        metrics.model_calls.inc_by(u64::from(outcome.model_calls));
        for (direction, tokens) in [
            ("input", outcome.totals.input_tokens),
            ("output", outcome.totals.output_tokens),
        ] {
            metrics
                .tokens
                .get_or_create(&DirectionLabel {
                    direction: direction.into(),
                })
                .inc_by(tokens);
        }
        metrics
            .turns
            .get_or_create(&EndLabel {
                end: end_status(&outcome.end).into(),
            })
            .inc();
    }

    fn publish_done(&self) {
        self.thread.publish(Cow::Owned(ServerEvent::Chunk {
            content: String::new(),
            done: true,
            parent_id: None,
            depth: 0,
        }));
    }

    fn publish_error(&self, code: ErrorCode, message: String) {
        self.runtime.metrics.error(code);
        self.thread
            .publish(Cow::Owned(ServerEvent::error(code, message, None)));
    }
}

/// The turn's end on its span, and `outcome` without what the end's commit does not need
/// (the turn's history and its calls' records: the record has them), freed before that commit
/// is waited for. Outside the task's future: a local borrowed there is kept in the future
/// across every later wait.
fn ended(span: &tracing::Span, mut outcome: TurnOutcome) -> TurnOutcome {
    telemetry::turn_ended(span, end_status(&outcome.end));
    drop(std::mem::take(&mut outcome.history));
    drop(std::mem::take(&mut outcome.tool_calls));
    outcome
}

/// What `boxed` holds, its box freed now (moving out of a box in an async function keeps the
/// box's memory until the function ends).
#[allow(clippy::boxed_local)] // taking the box is the point
fn unboxed<T>(boxed: Box<T>) -> T {
    *boxed
}

/// The outcome of a turn whose final answer was on record when its process died: that
/// answer, its spending, the tree of its calls.
fn answered_outcome(spec: &TurnSpec) -> TurnOutcome {
    let resume = spec.resume.clone().unwrap_or_default();
    let spent = resume.spent;
    let (tree, tool_calls) = spec.events.take_tree();
    TurnOutcome {
        text: resume.text,
        end: TurnEnd::Completed,
        tree,
        tool_calls,
        totals: weft_core::UsageTotals {
            llm_calls: spent.llm_calls,
            tool_calls: spent.tool_calls,
            subtasks: spent.subtasks,
            input_tokens: spent.input_tokens,
            output_tokens: spent.output_tokens,
            result_bytes: spent.result_bytes,
            cost_usd: spent.cost_usd,
        },
        provider: spec.provider.name().to_owned(),
        model: spec.model.clone(),
        model_calls: 0,
        history: Vec::new(),
        plan: None,
        attachments: Vec::new(),
    }
}

/// An event of the turn out to its subscribers. Approvals are indexed so an answer finds its
/// thread (the record itself keeps them through the turn's recorder).
fn forward(runtime: &Runtime, thread: &ThreadRuntime, event: Cow<'_, ServerEvent>) {
    match &*event {
        ServerEvent::ToolApprovalRequest { tool_call_id, .. } => {
            runtime.hub.note_approval(tool_call_id, &thread.id);
        }
        ServerEvent::ToolApprovalResolved { tool_call_id, .. } => {
            runtime.hub.forget_approval(tool_call_id);
        }
        ServerEvent::ToolCallUpdate {
            status: ToolCallStatus::Start,
            ..
        } => {
            runtime.metrics.tool_calls.inc();
        }
        _ => {}
    }
    thread.publish(event);
}
