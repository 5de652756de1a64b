//! What callers do to threads and turns besides starting one: stop a turn, change a
//! thread's permission mode, resume (replay then follow), answer an approval or a client-run
//! call, leave (a turn nobody watches stops after a grace period), delete a thread; and at
//! the server's level, the janitor's sweep and waiting for turns at shutdown.

use std::sync::Arc;
use std::time::Duration;

use weft_protocol::{echo, ApprovalDecision, ErrorCode, PermissionMode, ServerEvent};
use weft_store::{MessageRow, WriteOp};

use crate::runtime::Runtime;
use crate::threads::{turn_seq_floor, ThreadRuntime};
use weft_cluster::bus::Command;
use weft_frames::frame::{FrameSink, SubscriberId};
use weft_frames::Refusal;
use weft_record::persist::to_wire;
use weft_record::views::{root_text, stored_message, tree_from_items};

/// The most of a reason for a decision the model is shown.
const MAX_REASON_BYTES: usize = 1_000;

/// How long shutdown waits for turns it handed over to end and settle, and for their
/// leases' release.
const STOPPED_TURNS_WAIT: Duration = Duration::from_secs(5);

/// How long shutdown waits for the bus to take what was published.
const BUS_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// How long deleting a thread waits for its running turn to stop and persist.
const DELETE_WAIT: Duration = Duration::from_secs(10);

impl Runtime {
    /// The live runtime of a thread `user` owns, as its row has it (see [`Runtime::owner_of`]).
    pub async fn owned_thread(
        &self,
        user: &str,
        thread_id: &str,
    ) -> Result<Arc<ThreadRuntime>, Refusal> {
        match self.owner_of(user, thread_id).await? {
            Owned::Live(thread) => Ok(thread),
            Owned::Stored(row) => {
                let thread = self.live_thread(&row);
                if thread.owner != row.owner {
                    // Another user's start of this id runs here and is bound to fail.
                    return Err(Refusal::turn_in_progress(thread_id));
                }
                Ok(thread)
            }
        }
    }

    /// The live runtime of the thread `row` is, as the row has it: with replicas, one that
    /// runs no turn here takes up the mode and the tools allowed for the chat another
    /// replica may have changed since.
    pub(crate) fn live_thread(&self, row: &weft_store::ThreadRow) -> Arc<ThreadRuntime> {
        let thread = self.hub.from_row(row);
        if self.bus.is_some() && !thread.is_active() && thread.owner == row.owner {
            thread.refresh(row);
        }
        thread
    }

    /// Whether `user` may read thread `thread_id`, without making it live.
    pub async fn check_owner(&self, user: &str, thread_id: &str) -> Result<(), Refusal> {
        self.owner_of(user, thread_id).await.map(|_| ())
    }

    /// The thread when `user` owns it. Its row says who owns it: another replica may have
    /// deleted it, or won the race to create it, whatever this replica remembers. Only a
    /// thread whose first turn runs here and whose row is not committed yet is answered from
    /// memory.
    async fn owner_of(&self, user: &str, thread_id: &str) -> Result<Owned, Refusal> {
        if !weft_protocol::is_identifier(thread_id) {
            return Err(no_thread(thread_id));
        }
        let row = self
            .store
            .thread(thread_id)
            .await
            .map_err(Refusal::internal)?;
        let live = self.hub.get(thread_id);
        match row {
            Some(row) if row.owner != user => Err(Refusal::forbidden_thread()),
            Some(row) => Ok(Owned::Stored(row)),
            None => match live {
                Some(thread) if thread.is_active() && thread.owner == user => {
                    Ok(Owned::Live(thread))
                }
                Some(thread) if thread.is_active() => Err(Refusal::forbidden_thread()),
                Some(thread) => {
                    // Deleted, or never created (its start failed): nothing to remember.
                    self.hub.forget(&thread);
                    Err(no_thread(thread_id))
                }
                None => Err(no_thread(thread_id)),
            },
        }
    }

    /// Stop the thread's running turn, wherever it runs (nothing when none runs).
    pub async fn stop(&self, user: &str, thread_id: &str) -> Result<(), Refusal> {
        self.check_owner(user, thread_id).await?;
        match self.remote_turn(thread_id).await? {
            Some(remote) => {
                remote
                    .send(Command::Stop {
                        user: user.to_owned(),
                        thread_id: thread_id.to_owned(),
                        wait: false,
                    })
                    .await
            }
            // Its turn's replica died and no replica runs the turn yet (or this one is
            // taking it up): nothing here to stop until one does.
            None if self.bus.is_some() && self.awaits_takeover(thread_id).await? => Err(
                Refusal::new(ErrorCode::Internal, weft_cluster::bus::UNANSWERED),
            ),
            None => self.stop_here(user, thread_id, false).await,
        }
    }

    /// Stop the thread's turn if it runs on this replica; with `wait`, until it has ended
    /// and its last write landed.
    pub(crate) async fn stop_here(
        &self,
        user: &str,
        thread_id: &str,
        wait: bool,
    ) -> Result<(), Refusal> {
        let thread = self.owned_thread(user, thread_id).await?;
        thread.stop();
        if wait
            && tokio::time::timeout(DELETE_WAIT, thread.idle())
                .await
                .is_err()
        {
            tracing::warn!(thread = %thread_id, "a stopped turn did not end in time");
        }
        Ok(())
    }

    /// Change the thread's permission mode now (a running turn's next call sees it, on
    /// whichever replica it runs).
    pub async fn set_permission_mode(
        &self,
        user: &str,
        thread_id: &str,
        mode: PermissionMode,
    ) -> Result<(), Refusal> {
        self.check_owner(user, thread_id).await?;
        match self.remote_turn(thread_id).await? {
            Some(remote) => {
                let thread = self.owned_thread(user, thread_id).await?;
                thread.gate.set_mode(mode);
                remote
                    .send(Command::SetMode {
                        user: user.to_owned(),
                        thread_id: thread_id.to_owned(),
                        mode,
                    })
                    .await
            }
            None => self.set_mode_here(user, thread_id, mode).await,
        }
    }

    /// Change the thread's permission mode on this replica and in the store.
    pub(crate) async fn set_mode_here(
        &self,
        user: &str,
        thread_id: &str,
        mode: PermissionMode,
    ) -> Result<(), Refusal> {
        let thread = self.owned_thread(user, thread_id).await?;
        thread.gate.set_mode(mode);
        // Queued behind the thread's own creation, which may still be in flight.
        self.store
            .write(WriteOp::SetThreadMode {
                id: thread.id.to_string(),
                mode: mode.as_str().to_owned(),
            })
            .await
            .map_err(Refusal::internal)
    }

    /// Answer a pending approval of one of `user`'s threads, wherever its turn runs; a
    /// denial's `reason` reaches the model with the call's result (and so the record).
    pub async fn answer_approval(
        &self,
        user: &str,
        tool_call_id: &str,
        decision: ApprovalDecision,
        reason: Option<String>,
    ) -> Result<(), Refusal> {
        if self.bus.is_none() || self.hub.approval_thread(tool_call_id).is_some() {
            return self.answer_approval_here(user, tool_call_id, decision, reason);
        }
        let stored = self
            .store
            .pending_approval_thread(tool_call_id)
            .await
            .map_err(Refusal::internal)?;
        let remote = match &stored {
            Some(thread_id) => {
                if let Err(refusal) = self.check_owner(user, thread_id).await {
                    return Err(match refusal.code {
                        ErrorCode::Forbidden => approval_of_another_user(),
                        _ => refusal,
                    });
                }
                self.remote_turn(thread_id).await?
            }
            None => None,
        };
        match (remote, stored) {
            (Some(remote), _) => {
                remote
                    .send(Command::Approval {
                        user: user.to_owned(),
                        tool_call_id: tool_call_id.to_owned(),
                        decision,
                        reason,
                    })
                    .await
            }
            // Its turn's replica died and no replica runs the turn yet (or this one is
            // taking it up): the answer waits on record for the one that does.
            (None, Some(thread_id)) if self.awaits_takeover(&thread_id).await? => {
                self.queue_answer(&thread_id, tool_call_id, decision, reason)
                    .await
            }
            (None, _) => self.answer_approval_here(user, tool_call_id, decision, reason),
        }
    }

    /// Keep an answer to a pending approval whose turn no replica runs now: the replica
    /// that takes the turn up applies it when it asks again (see `turn/resume.rs`). A tool
    /// allowed for the chat is kept with the thread at once.
    async fn queue_answer(
        &self,
        thread_id: &str,
        tool_call_id: &str,
        decision: ApprovalDecision,
        reason: Option<String>,
    ) -> Result<(), Refusal> {
        let reason = reason.map(|r| weft_protocol::clip(&r, MAX_REASON_BYTES));
        let answer = serde_json::to_string(&weft_core::Answer { decision, reason })
            .map_err(Refusal::internal)?;
        let tool = self
            .store
            .queue_approval_answer(thread_id, tool_call_id, &answer)
            .await
            .map_err(Refusal::internal)?
            .ok_or_else(|| {
                Refusal::invalid(format!("no approval `{}` is pending", echo(tool_call_id)))
            })?;
        if decision == ApprovalDecision::AllowForChat {
            let Some(row) = self
                .store
                .thread(thread_id)
                .await
                .map_err(Refusal::internal)?
            else {
                return Ok(());
            };
            let mut tools = row.allowed_tools;
            if !tools.contains(&tool) {
                tools.push(tool);
            }
            self.store
                .write(WriteOp::SetAllowedTools {
                    id: thread_id.to_owned(),
                    tools,
                })
                .await
                .map_err(Refusal::internal)?;
        }
        tracing::info!(thread = %thread_id, approval = %tool_call_id, "an approval answered while no replica runs its turn waits for the takeover");
        Ok(())
    }

    /// Whether the thread's turn is stored as running while no turn of it runs here.
    async fn awaits_takeover(&self, thread_id: &str) -> Result<bool, Refusal> {
        if self.hub.get(thread_id).is_some_and(|t| t.is_active()) {
            return Ok(false);
        }
        let last = self
            .store
            .last_assistant_message(thread_id)
            .await
            .map_err(Refusal::internal)?;
        Ok(last.is_some_and(|m| m.status == "running"))
    }

    /// Answer a pending approval of a turn this replica runs.
    pub(crate) fn answer_approval_here(
        &self,
        user: &str,
        tool_call_id: &str,
        decision: ApprovalDecision,
        reason: Option<String>,
    ) -> Result<(), Refusal> {
        let not_pending =
            || Refusal::invalid(format!("no approval `{}` is pending", echo(tool_call_id)));
        let thread_id = self
            .hub
            .approval_thread(tool_call_id)
            .ok_or_else(not_pending)?;
        let thread = self.hub.get(&thread_id).ok_or_else(not_pending)?;
        if thread.owner != user {
            return Err(approval_of_another_user());
        }
        let reason = reason.map(|r| weft_protocol::clip(&r, MAX_REASON_BYTES));
        if !thread.gate.answer(tool_call_id, decision, reason) {
            return Err(not_pending());
        }
        if decision == ApprovalDecision::AllowForChat {
            self.keep_allowed_tools(&thread);
        }
        Ok(())
    }

    /// Keep the thread's tools allowed for the chat with it, so the grant holds on every
    /// replica and after a restart (through the writer, so grants land in the order made).
    fn keep_allowed_tools(&self, thread: &ThreadRuntime) {
        self.store.submit(
            WriteOp::SetAllowedTools {
                id: thread.id.to_string(),
                tools: thread.gate.allowed_for_chat(),
            },
            None,
        );
    }

    /// A client's answer to one of its client-run (`ui_*`) calls.
    pub fn answer_client_call(
        &self,
        user: &str,
        tool_call_id: &str,
        answer: Result<serde_json::Value, String>,
    ) -> Result<(), Refusal> {
        if self.client_calls.answer(user, tool_call_id, answer) {
            Ok(())
        } else {
            Err(Refusal::invalid(format!(
                "no client-run tool call `{}` is pending",
                echo(tool_call_id)
            )))
        }
    }

    /// Replay what `sink` missed of the thread's turn, then follow it live — from the
    /// replica that runs it when that is another one.
    pub async fn resume(
        self: &Arc<Self>,
        user: &str,
        thread_id: &str,
        last_seq: u64,
        sink: Arc<dyn FrameSink>,
    ) -> Result<(), Refusal> {
        let thread = self.owned_thread(user, thread_id).await?;
        match self.remote_turn(thread_id).await? {
            Some(remote) => self.follow(remote, user, thread, last_seq, sink).await,
            None => self.resume_here(user, thread_id, last_seq, sink).await,
        }
    }

    /// Replay what `sink` missed of a turn in memory (after the stored snapshot when it
    /// missed more than is kept), then follow it live. With no turn in memory, or a turn that
    /// ended after the client missed more of it than is kept, answer from the store: the
    /// thread's last assistant message (the whole answer) and `chunk {done: true}`. On a
    /// shared database, a turn stored as running that no replica runs yet (its own died, or
    /// this one is taking it up) is followed until one does, or it is closed.
    pub(crate) async fn resume_here(
        self: &Arc<Self>,
        user: &str,
        thread_id: &str,
        last_seq: u64,
        sink: Arc<dyn FrameSink>,
    ) -> Result<(), Refusal> {
        let thread = self.owned_thread(user, thread_id).await?;
        let (missed, active) = thread.missed(last_seq);
        if active || (!missed.frames.is_empty() && !missed.needs_snapshot) {
            let snapshot = match thread.active_message().filter(|_| missed.needs_snapshot) {
                Some(message_id) => self.snapshot(&thread.id, &message_id).await?,
                None => None,
            };
            thread.resume(sink, last_seq, snapshot);
            return Ok(());
        }
        let last = self
            .store
            .last_assistant_message(&thread.id)
            .await
            .map_err(Refusal::internal)?;
        // Only where a replica's sweep takes such a turn up (a shared database); with SQLite
        // only a restart does, and the client is answered with the turn as stored.
        let awaited = self.leases.shared() && last.as_ref().is_some_and(|m| m.status == "running");
        if awaited {
            let begun = thread.resume(sink.clone(), last_seq, None);
            self.await_takeover(user, thread, last_seq, sink, begun);
            return Ok(());
        }
        self.answer_with(&thread, sink.as_ref(), last_seq, last)
            .await?;
        thread.subscribe(sink);
        Ok(())
    }

    /// The thread's last assistant message as stored (the whole answer), then
    /// `chunk {done: true}`, to `sink` alone.
    pub(crate) async fn answer_from_store(
        &self,
        thread: &ThreadRuntime,
        sink: &dyn FrameSink,
        last_seq: u64,
    ) -> Result<(), Refusal> {
        let last = self
            .store
            .last_assistant_message(&thread.id)
            .await
            .map_err(Refusal::internal)?;
        self.answer_with(thread, sink, last_seq, last).await
    }

    /// `last` (the thread's last assistant message, if any), then `chunk {done: true}`, to
    /// `sink` alone.
    async fn answer_with(
        &self,
        thread: &ThreadRuntime,
        sink: &dyn FrameSink,
        last_seq: u64,
        last: Option<MessageRow>,
    ) -> Result<(), Refusal> {
        let mut events = Vec::new();
        let mut after = last_seq;
        if let Some(message) = last {
            // Its two frames numbered just below the next turn's floor: after every frame of
            // that turn and before the next turn's, whichever replica ran or runs them.
            after = after.max(turn_seq_floor(message.position + 1).saturating_sub(3));
            events.push(ServerEvent::Message {
                message: stored_message(&self.store, &message)
                    .await
                    .map_err(Refusal::internal)?,
            });
        }
        events.push(ServerEvent::Chunk {
            content: String::new(),
            done: true,
            parent_id: None,
            depth: 0,
        });
        thread.send_to(sink, after, events);
        Ok(())
    }

    /// A running turn as stored so far: its text and its tree rebuilt from the record.
    async fn snapshot(
        &self,
        thread_id: &str,
        message_id: &str,
    ) -> Result<Option<ServerEvent>, Refusal> {
        let store = &self.store;
        let Some(mut message) = store
            .message(thread_id, message_id)
            .await
            .map_err(Refusal::internal)?
        else {
            return Ok(None);
        };
        let items = store
            .turn_items(thread_id, message_id)
            .await
            .map_err(Refusal::internal)?;
        message.content = serde_json::json!(root_text(&items));
        message.execution_tree = Some(Arc::new(tree_from_items(&items)));
        Ok(Some(ServerEvent::Message {
            message: to_wire(&message),
        }))
    }

    /// A subscriber left. Turns it leaves with nobody watching keep running for the grace
    /// period (0: stop now), then stop unless someone resumed them.
    pub fn detach(&self, subscriber: SubscriberId) {
        let grace = self.config.server.detach_grace_ms;
        for (thread, generation) in self.hub.detach(subscriber) {
            if grace == 0 {
                thread.stop_if_still_detached(generation);
                continue;
            }
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(grace)).await;
                    // An approval waits as long as it may (`approval_timeout_ms`), watched
                    // or not: the turn is looked at again a grace later.
                    if thread.waits_for_approval() && thread.still_detached(generation) {
                        continue;
                    }
                    if thread.stop_if_still_detached(generation) {
                        tracing::info!(thread = %thread.id, "stopped a turn nobody resumed");
                    }
                    break;
                }
            });
        }
    }

    /// Delete one of `user`'s threads with its files. A running turn is stopped first and
    /// waited for: its last writes must land before the delete, or they would bring the
    /// thread back.
    pub async fn delete_thread(&self, user: &str, thread_id: &str) -> Result<(), Refusal> {
        self.check_owner(user, thread_id).await?;
        if let Some(remote) = self.remote_turn(thread_id).await? {
            // Its owner's writes would fail once the thread is gone (the lease goes with
            // it), so a replica that does not answer does not hold the delete up.
            let stopped = remote
                .send(Command::Stop {
                    user: user.to_owned(),
                    thread_id: thread_id.to_owned(),
                    wait: true,
                })
                .await;
            if let Err(refusal) = stopped {
                tracing::warn!(thread = %thread_id, error = %refusal.message, "deleting a thread whose turn another replica runs");
            }
        }
        if let Some(thread) = self.hub.remove(thread_id) {
            thread.stop();
            if tokio::time::timeout(DELETE_WAIT, thread.idle())
                .await
                .is_err()
            {
                tracing::warn!(thread = %thread_id, "a stopped turn did not end in time; deleting anyway");
            }
        }
        // Its files first: they are found through the thread's record.
        self.assets
            .delete_for_thread(user, thread_id)
            .await
            .map_err(Refusal::internal)?;
        self.store
            .delete_thread(thread_id)
            .await
            .map_err(Refusal::internal)?;
        if let Some(bus) = &self.bus {
            bus.announce_deleted(thread_id).await;
        }
        Ok(())
    }

    /// Forget replay buffers of long-finished turns and idle thread runtimes, and stale
    /// per-user limits; until shutdown.
    pub async fn janitor(self: Arc<Self>) {
        let retention = Duration::from_millis(self.config.server.replay_retention_ms);
        let every = retention.clamp(Duration::from_secs(1), Duration::from_secs(60));
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                _ = tick.tick() => {
                    self.limits.sweep();
                    let dropped = self.hub.sweep(retention);
                    if dropped > 0 {
                        tracing::debug!(dropped, "forgot idle threads");
                    }
                }
            }
        }
    }

    /// Wait for running turns; past `server.shutdown_timeout_ms`, hand the rest over: each
    /// stops where it is and writes nothing more, what it wrote lands, and its lease is
    /// given up, so another replica's next sweep (or this process's next start) goes on with
    /// it from its record, as after a crash but without waiting for the lease to expire.
    pub async fn drain_turns(&self) {
        self.turns.close();
        let timeout = Duration::from_millis(self.config.server.shutdown_timeout_ms);
        if tokio::time::timeout(timeout, self.turns.wait())
            .await
            .is_err()
        {
            self.hand_over_turns().await;
        }
        // Followers on other replicas get the last frames before this process goes.
        if let Some(bus) = &self.bus {
            if tokio::time::timeout(BUS_FLUSH_WAIT, bus.flush())
                .await
                .is_err()
            {
                tracing::warn!("the bus did not take the last frames in time");
            }
        }
    }

    /// See [`Runtime::drain_turns`]. Every wait is bounded: a database that stopped
    /// answering leaves the turns as a crash would (their leases then expire).
    async fn hand_over_turns(&self) {
        let logs: Vec<_> = self
            .hub
            .active()
            .iter()
            .filter_map(|thread| thread.active_log())
            .collect();
        // What they have shown so far goes on record first (streaming text included), so
        // the replica that takes a turn up goes on from there.
        let shown = futures::future::join_all(logs.iter().map(|log| log.settled()));
        if tokio::time::timeout(STOPPED_TURNS_WAIT, shown)
            .await
            .is_err()
        {
            tracing::warn!("running turns' records did not settle in time");
        }
        let handed = self.leases.hand_over_all();
        tracing::warn!(
            count = handed.len(),
            "handing over the turns still running at shutdown"
        );
        let landed = async {
            self.turns.wait().await;
            for log in &logs {
                log.settled().await;
            }
        };
        if tokio::time::timeout(STOPPED_TURNS_WAIT, landed)
            .await
            .is_err()
        {
            tracing::warn!("handed-over turns did not settle in time; their leases expire instead");
            return;
        }
        let released = self.store.release_leases(self.leases.replica_id(), &handed);
        match tokio::time::timeout(STOPPED_TURNS_WAIT, released).await {
            Ok(Ok(count)) => tracing::info!(count, "handed over turns' leases released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot release handed-over turns' leases"),
            Err(_) => tracing::warn!("releasing handed-over turns' leases timed out"),
        }
    }
}

/// A thread its owner asked for.
enum Owned {
    Live(Arc<ThreadRuntime>),
    Stored(weft_store::ThreadRow),
}

fn approval_of_another_user() -> Refusal {
    Refusal::new(
        ErrorCode::Forbidden,
        "that approval belongs to another user's thread",
    )
}

fn no_thread(thread_id: &str) -> Refusal {
    Refusal::new(
        ErrorCode::ThreadNotFound,
        format!("no thread `{}`", echo(thread_id)),
    )
}
