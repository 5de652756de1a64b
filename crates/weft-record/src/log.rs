//! `TurnLog`: a turn's conversation record on its way to the database, not awaited (the
//! loop goes on while commits are in flight) except before a person is asked to approve,
//! before a call that may change something runs, and before that call's result is shown. A
//! response is held until its round's results come, so a round is one write; a turn has at
//! most one write in flight, and rounds that complete meanwhile go out together when it lands
//! (a round per commit when the database keeps up, bigger writes when it does not). Anything
//! held, and root-level text still streaming, goes out at least every second, and at once
//! when the turn asks the user for an approval (the request waits for that commit). A write
//! someone waits for goes ahead of the writer's queue (the progress of other turns), and the
//! write in flight before it is moved ahead too. A write that fails stops the turn.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use weft_core::{ApprovalRequest, Call, ModelCallRecord, Place, RecordedResult, Recorder, Stored};
use weft_protocol::{ApprovalOutcome, RecordEntry};
use weft_store::{
    now_ms, ApprovalRow, Done, ItemRow, ModelCallRow, Queued, Store, StoreError, WriteOp,
};

use crate::lease::WriteLease;
use crate::{entry_row, response_row, round_row, ItemPlace};

/// Why a turn that lost its lease was not saved by this replica.
pub const LEASE_LOST: &str = "this server lost the turn's lease (it was stopped or cut off \
    for longer than cluster.lease_ms, or the thread was deleted meanwhile) and no longer \
    writes the turn; the replica that took it over, if any, closed it";

/// Streamed text and held items reach the database at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

pub struct TurnLog {
    /// This log, for the write callback to flush what was held meanwhile.
    me: Weak<TurnLog>,
    store: Store,
    /// Shared with every row the log writes.
    thread_id: Arc<str>,
    message_id: Arc<str>,
    user_id: Arc<str>,
    cancel: CancellationToken,
    /// The turn's lease: nothing is written once it is lost.
    lease: Arc<dyn WriteLease>,
    failure: Arc<Mutex<Option<String>>>,
    state: Mutex<LogState>,
    /// Told each time a write of this turn lands.
    landed: tokio::sync::Notify,
}

#[derive(Default)]
struct LogState {
    next_position: i64,
    /// The root-level response being streamed.
    draft: Option<Draft>,
    /// Writes held for the next flush, in order.
    held: Vec<WriteOp>,
    /// Items held for the next flush (after `held`).
    items: Vec<ItemRow>,
    /// Provider calls held for the next flush (after the items), written as one op.
    models: Vec<ModelCallRow>,
    /// A write of this turn is on its way; the next flush waits for it.
    in_flight: bool,
    /// The write in flight, until it lands: moved ahead by [`TurnLog::hurry`] while the writer
    /// has not taken it yet.
    queued: Option<Queued>,
    /// Someone waits for what is held: the next write goes ahead of the writer's queue.
    waited: bool,
    /// Provider calls recorded so far (their rows are numbered by it).
    model_calls: u32,
    /// Calls whose results went on record ahead of their round's (their round leaves them
    /// out).
    kept_early: HashSet<String>,
    /// Each level's reasoning (by the call it runs under), until its response is recorded.
    reasoning: HashMap<Option<String>, String>,
}

struct Draft {
    position: i64,
    text: String,
    dirty: bool,
    flushed_at: Instant,
}

impl TurnLog {
    pub fn new(
        store: Store,
        thread_id: &str,
        message_id: &str,
        user_id: &str,
        cancel: CancellationToken,
        lease: Arc<dyn WriteLease>,
    ) -> Arc<TurnLog> {
        Arc::new_cyclic(|me| TurnLog {
            me: me.clone(),
            store,
            thread_id: thread_id.into(),
            message_id: message_id.into(),
            user_id: user_id.into(),
            cancel,
            lease,
            failure: Arc::default(),
            state: Mutex::default(),
            landed: tokio::sync::Notify::new(),
        })
    }

    /// A resumed turn's log: its items go on from `next_position`, its provider calls from
    /// the `model_calls` already on record.
    pub fn continue_from(&self, next_position: i64, model_calls: u32) {
        let mut state = self.state.lock();
        state.next_position = next_position;
        state.model_calls = model_calls;
    }

    /// Everything held goes out now, ahead of the writer's queue; resolves once it is
    /// committed (the error says why it was not).
    fn kept(&self) -> Stored {
        self.hurry();
        self.flush();
        let me = self.me.clone();
        Box::pin(async move {
            let Some(log) = me.upgrade() else {
                return Err("the turn has ended".to_owned());
            };
            log.settled().await;
            log.failure().map_or(Ok(()), Err)
        })
    }

    /// Hold `op` until the next flush.
    fn hold(&self, op: WriteOp) {
        self.state.lock().held.push(op);
    }

    /// Write `op` now, after everything held.
    pub fn submit(&self, op: WriteOp) {
        self.hold(op);
        self.flush();
    }

    /// Hand everything held to the writer as one op, unless a write is in flight (then it
    /// goes when that one lands); if it fails, remember why and stop the turn. The write is
    /// kept in the log's state (where [`TurnLog::hurry`] finds it) in the same step that marks
    /// it in flight, before it is in any queue: a turn's end or a response someone waits for,
    /// submitted ahead on another thread meanwhile, can never overtake it.
    pub fn flush(&self) {
        let (queued, ahead) = {
            let mut state = self.state.lock();
            if state.in_flight {
                return;
            }
            let mut ops = self.take_from(&mut state);
            if ops.is_empty() {
                state.waited = false;
                return;
            }
            if !self.lease.check() {
                self.failure
                    .lock()
                    .get_or_insert_with(|| LEASE_LOST.to_owned());
                return;
            }
            if let Some(fence) = self.lease.fence() {
                ops.insert(0, fence);
            }
            state.in_flight = true;
            let queued = self.store.movable(WriteOp::Many(ops), Some(self.landing()));
            state.queued = Some(queued.clone());
            (queued, std::mem::take(&mut state.waited))
        };
        if ahead {
            queued.hurry();
        } else {
            queued.queue();
        }
    }

    /// What a write of this log does when it lands: the next flush, or the turn stopped.
    fn landing(&self) -> Done {
        let me = self.me.clone();
        Box::new(move |result| {
            let Some(log) = me.upgrade() else { return };
            {
                let mut state = log.state.lock();
                state.in_flight = false;
                state.queued = None;
            }
            match result {
                Ok(()) => log.flush(),
                Err(e) => {
                    if e.is_lease_lost() {
                        log.lease.lose();
                    }
                    log.failure.lock().get_or_insert(e.0);
                    log.cancel.cancel();
                }
            }
            log.landed.notify_waiters();
        })
    }

    /// Someone waits for what is held: the write in flight (if still queued) and the next go
    /// ahead of the writer's queue.
    fn hurry(&self) {
        let queued = {
            let mut state = self.state.lock();
            state.waited = true;
            state.queued.take()
        };
        if let Some(queued) = queued {
            queued.hurry();
        }
    }

    /// Resolves once everything recorded so far is committed (or a write failed): for
    /// readers of the store that must see what the clients were just shown.
    pub async fn settled(&self) {
        self.hurry();
        loop {
            let landed = self.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            self.flush();
            {
                let state = self.state.lock();
                let idle = !state.in_flight
                    && state.held.is_empty()
                    && state.items.is_empty()
                    && state.models.is_empty();
                if idle || self.failure.lock().is_some() {
                    return;
                }
            }
            landed.await;
        }
    }

    /// Write the turn's end after everything held (the streaming text as a partial item, if
    /// it changed), ahead of the writer's queue (its client waits for it): the write in
    /// flight is moved ahead first, so the turn's writes keep their order.
    pub async fn write_end(&self, end: WriteOp) -> weft_store::Result<()> {
        self.hurry();
        let mut ops: Vec<WriteOp> = self.lease.fence().into_iter().collect();
        ops.extend(self.take_from(&mut self.state.lock()));
        ops.push(end);
        let written = self.store.write_ahead(WriteOp::Many(ops)).await;
        if written.as_ref().is_err_and(StoreError::is_lease_lost) {
            self.lease.lose();
        }
        written
    }

    fn take_from(&self, state: &mut LogState) -> Vec<WriteOp> {
        let draft = match &mut state.draft {
            Some(draft) if draft.dirty => {
                draft.dirty = false;
                draft.flushed_at = Instant::now();
                let entry = RecordEntry::Assistant {
                    id: None,
                    text: draft.text.clone(),
                    tool_calls: Vec::new(),
                    partial: true,
                    reasoning: None,
                };
                Some(entry_row(self.place(draft.position, None, 0), &entry))
            }
            _ => None,
        };
        state.items.extend(draft);
        let mut ops = std::mem::take(&mut state.held);
        if !state.items.is_empty() {
            ops.push(WriteOp::Items(std::mem::take(&mut state.items)));
        }
        if !state.models.is_empty() {
            ops.push(WriteOp::ModelCalls(std::mem::take(&mut state.models)));
        }
        ops
    }

    /// Why a write of this turn failed, if one did.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// Where an item of this turn goes; its key is the turn's message id and its position,
    /// so a draft and the final item it becomes are one row.
    fn place<'a>(&'a self, position: i64, parent_id: Option<&'a str>, depth: u32) -> ItemPlace<'a> {
        ItemPlace {
            thread_id: &self.thread_id,
            message_id: &self.message_id,
            position,
            parent_id,
            depth,
        }
    }
}

impl Recorder for TurnLog {
    fn text(&self, place: Place<'_>, delta: &str) {
        if place.depth > 0 {
            return;
        }
        let due = {
            let mut state = self.state.lock();
            let position = state.next_position;
            let draft = state.draft.get_or_insert_with(|| Draft {
                position,
                text: String::new(),
                dirty: false,
                flushed_at: Instant::now(),
            });
            let fresh = draft.text.is_empty();
            draft.text.push_str(delta);
            draft.dirty = true;
            let due = draft.flushed_at.elapsed() >= FLUSH_EVERY;
            if fresh {
                state.next_position += 1;
            }
            due
        };
        if due {
            self.flush();
        }
    }

    /// Called before any of the response's calls runs: a turn whose lease is gone stops
    /// here, so its calls do not run.
    fn reasoning(&self, place: Place<'_>, reasoning: &str) {
        self.state
            .lock()
            .reasoning
            .insert(place.parent_id.map(str::to_owned), reasoning.to_owned());
    }

    fn assistant(&self, place: Place<'_>, text: &str, calls: &[Call]) {
        self.lease.check();
        let mut state = self.state.lock();
        let reasoning = if state.reasoning.is_empty() {
            None
        } else {
            state.reasoning.remove(&place.parent_id.map(str::to_owned))
        };
        let position = match state.draft.take().filter(|_| place.depth == 0) {
            Some(draft) => draft.position,
            None => {
                state.next_position += 1;
                state.next_position - 1
            }
        };
        let row = response_row(
            self.place(position, place.parent_id, place.depth),
            text,
            calls,
            reasoning.as_deref(),
        );
        state.items.push(row);
    }

    /// The turn's plan, at the start of its record.
    fn plan(&self, plan: &str) {
        let entry = RecordEntry::Plan {
            plan: plan.to_owned(),
        };
        let mut state = self.state.lock();
        state.next_position += 1;
        let position = state.next_position - 1;
        let row = entry_row(self.place(position, None, 0), &entry);
        state.items.push(row);
    }

    /// A workflow node's progress, at the root of the record.
    fn node(&self, node_id: &str, outputs: Option<&serde_json::Map<String, serde_json::Value>>) {
        let entry = RecordEntry::Node {
            node_id: node_id.to_owned(),
            status: match outputs {
                Some(_) => weft_protocol::NodeProgress::Completed,
                None => weft_protocol::NodeProgress::Started,
            },
            outputs: outputs.cloned(),
        };
        let mut state = self.state.lock();
        state.next_position += 1;
        let position = state.next_position - 1;
        let row = entry_row(self.place(position, None, 0), &entry);
        state.items.push(row);
        drop(state);
        self.flush();
    }

    /// A compaction's summary, at the point of the record where it was made.
    fn summary(&self, place: Place<'_>, summary: &str, kept: usize) {
        let entry = RecordEntry::Summary {
            summary: summary.to_owned(),
            kept_messages: u32::try_from(kept).unwrap_or(u32::MAX),
        };
        {
            let mut state = self.state.lock();
            state.next_position += 1;
            let position = state.next_position - 1;
            let row = entry_row(self.place(position, place.parent_id, place.depth), &entry);
            state.items.push(row);
        }
        self.flush();
    }

    /// A round's results go in one item (a JSON array), in the order the calls were emitted,
    /// and out together with what was held: in one row with the response that asked for them
    /// when that response is still held (the usual round), so a round is one row.
    fn results(&self, place: Place<'_>, results: &[RecordedResult<'_>]) {
        {
            let mut state = self.state.lock();
            let entries: Vec<RecordedResult<'_>> = results
                .iter()
                .filter(|r| !state.kept_early.remove(r.id))
                .copied()
                .collect();
            if entries.is_empty() {
                return;
            }
            state.next_position += 1;
            let position = state.next_position - 1;
            let row = round_row(self.place(position, place.parent_id, place.depth), &entries);
            let paired = state
                .items
                .last_mut()
                .and_then(|response| ItemRow::paired(response, &row).map(|pair| *response = pair));
            if paired.is_none() {
                state.items.push(row);
            }
        }
        self.flush();
    }

    /// A result that may record a change goes out at once, in a row of its own; the client
    /// is told once it is committed.
    fn effect_result(&self, place: Place<'_>, result: &RecordedResult<'_>) -> Stored {
        {
            let mut state = self.state.lock();
            state.kept_early.insert(result.id.to_owned());
            state.next_position += 1;
            let position = state.next_position - 1;
            let row = round_row(
                self.place(position, place.parent_id, place.depth),
                std::slice::from_ref(result),
            );
            state.items.push(row);
        }
        self.kept()
    }

    /// The approval is written (pending) at once, with everything held before it; the user
    /// is asked once it is committed.
    fn approval_requested(&self, request: &ApprovalRequest<'_>) -> Stored {
        self.hold(WriteOp::InsertApproval(ApprovalRow {
            id: request.id.to_owned(),
            thread_id: self.thread_id.to_string(),
            tool: request.tool.to_owned(),
            arguments: request.args.to_string(),
            status: "pending".to_owned(),
            created_at: now_ms(),
            decided_at: None,
            injected_args: (!request.injected.is_empty())
                .then(|| Value::Object(request.injected.clone()).to_string()),
        }));
        self.kept()
    }

    /// The response asking for a call that may change something goes out first (with
    /// everything held), so a restart knows the call may have run.
    fn before_effect(&self) -> Stored {
        self.kept()
    }

    fn approval_resolved(&self, id: &str, outcome: ApprovalOutcome) {
        self.submit(WriteOp::DecideApproval {
            thread_id: self.thread_id.to_string(),
            id: id.to_owned(),
            status: outcome.status().to_owned(),
        });
    }

    /// A provider call goes out with the round it belongs to (a turn that dies later keeps
    /// the calls it made).
    fn model_call(&self, call: &ModelCallRecord) {
        let mut state = self.state.lock();
        let row = ModelCallRow {
            id: format!("{}.m{}", self.message_id, state.model_calls),
            thread_id: self.thread_id.clone(),
            message_id: self.message_id.clone(),
            user_id: self.user_id.clone(),
            provider: call.provider.clone(),
            model: call.model.clone(),
            depth: i64::from(call.depth),
            input_tokens: call.input_tokens as i64,
            output_tokens: call.output_tokens as i64,
            tool_calls: i64::from(call.tool_calls),
            cost_usd: call.cost_usd,
            duration_ms: call.duration_ms,
            error: call.error.clone(),
            created_at: now_ms(),
        };
        state.model_calls += 1;
        state.models.push(row);
    }
}
