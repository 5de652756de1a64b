//! Turns another replica runs (only with a bus): finding the replica that holds a thread's
//! turn, following that turn for a client of this replica (one who resumed it, or who watches
//! the thread when another replica announces a turn on it), settling it before its record is
//! read, and carrying out the commands other replicas send for the turns this one runs.

use std::sync::Arc;

use weft_store::now_ms;

use crate::runtime::Runtime;
use crate::threads::ThreadRuntime;
use weft_cluster::bus::{Bus, BusFrames, Command, CommandHandler};
use weft_frames::frame::{FrameSink, Outgoing};
use weft_frames::Refusal;

/// The replica running a thread's turn, when it is another one.
#[derive(Clone)]
pub(crate) struct RemoteTurn {
    pub bus: Arc<Bus>,
    pub replica: String,
}

impl RemoteTurn {
    pub async fn send(&self, command: Command) -> Result<(), Refusal> {
        self.bus.request(&self.replica, &command).await
    }
}

impl Runtime {
    /// The replica that runs `thread_id`'s turn, when a bus is configured, no turn of the
    /// thread runs here, and another replica holds a live lease on one.
    pub(crate) async fn remote_turn(&self, thread_id: &str) -> Result<Option<RemoteTurn>, Refusal> {
        let Some(bus) = &self.bus else {
            return Ok(None);
        };
        if self.hub.get(thread_id).is_some_and(|t| t.is_active()) {
            return Ok(None);
        }
        let owner = self
            .store
            .turn_owner(thread_id, now_ms())
            .await
            .map_err(Refusal::internal)?;
        Ok(owner
            .filter(|owner| owner != self.leases.replica_id())
            .map(|replica| RemoteTurn {
                bus: bus.clone(),
                replica,
            }))
    }

    /// Follow a turn `remote` runs for `sink`: what it missed after `last_seq` and then the
    /// turn live, relayed from the owner until the turn's final chunk. Should the owner go
    /// quiet and lose the turn (it died), the stored answer ends it instead.
    pub(crate) async fn follow(
        self: &Arc<Self>,
        remote: RemoteTurn,
        user: &str,
        thread: Arc<ThreadRuntime>,
        last_seq: u64,
        sink: Arc<dyn FrameSink>,
    ) -> Result<(), Refusal> {
        if !thread.start_following(sink.id()) {
            // Already relayed to this client: it misses nothing.
            return Ok(());
        }
        let (inbox, frames) = match remote.bus.inbox().await {
            Ok(pair) => pair,
            Err(refusal) => {
                thread.stop_following(sink.id());
                return Err(refusal);
            }
        };
        let asked = remote
            .send(Command::Follow {
                user: user.to_owned(),
                thread_id: thread.id.to_string(),
                last_seq,
                inbox: inbox.clone(),
            })
            .await;
        if let Err(refusal) = asked {
            // An owner that does not answer (it died, its lease not yet expired) or that died
            // is followed until another replica takes its turn up, or it is found ended.
            let unanswered = refusal.message == weft_cluster::bus::UNANSWERED;
            if !unanswered && self.turn_taken_over(&thread.id, &remote.replica).await != Owner::Dead
            {
                thread.stop_following(sink.id());
                frames.close().await;
                return Err(refusal);
            }
        }
        // Turns that start here later reach this follower as any subscriber's would.
        thread.subscribe(sink.clone());
        let runtime = self.clone();
        tokio::spawn(async move {
            let relay = Relay {
                remote,
                inbox,
                thread,
                sink,
            };
            relay.run(&runtime, frames, last_seq).await;
        });
        Ok(())
    }

    /// A turn started on `thread_id` through replica `owner`: the clients here watching that
    /// thread follow it. A turn of the thread still running here cannot be saved (the
    /// database runs one per thread): it ends first, so its clients hear that before.
    fn follow_for_watchers(self: &Arc<Self>, bus: &Arc<Bus>, thread_id: &str, owner: &str) {
        let Some(thread) = self.hub.get(thread_id) else {
            return;
        };
        let runtime = self.clone();
        let remote = RemoteTurn {
            bus: bus.clone(),
            replica: owner.to_owned(),
        };
        tokio::spawn(async move {
            if tokio::time::timeout(runtime.leases.lease(), thread.idle())
                .await
                .is_err()
            {
                return;
            }
            for sink in thread.subscribers() {
                let user = thread.owner.clone();
                let followed = runtime.follow(remote.clone(), &user, thread.clone(), 0, sink);
                if let Err(e) = followed.await {
                    tracing::warn!(error = %e.message, "cannot follow a turn another replica started");
                }
            }
        });
    }

    /// Wait until what the thread's running turn has shown its clients is committed, on the
    /// replica that runs it (a reader of the record then sees what they saw). Should that
    /// replica not answer, the record is read as it is.
    pub async fn settle(&self, user: &str, thread_id: &str) -> Result<(), Refusal> {
        if self.settle_here(thread_id).await {
            return Ok(());
        }
        if let Some(remote) = self.remote_turn(thread_id).await? {
            let command = Command::Settle {
                user: user.to_owned(),
                thread_id: thread_id.to_owned(),
            };
            if let Err(e) = remote.send(command).await {
                tracing::debug!(error = %e.message, "cannot settle a turn another replica runs");
            }
        }
        Ok(())
    }

    /// [`Runtime::settle`] for a turn this replica runs; false when it runs none.
    async fn settle_here(&self, thread_id: &str) -> bool {
        match self.hub.get(thread_id).and_then(|t| t.active_log()) {
            Some(log) => {
                log.settled().await;
                true
            }
            None => false,
        }
    }

    /// Follow for `sink` (subscribed here when `begun` turns had begun here) a turn stored as
    /// running that no replica runs yet: its replica died and none has taken it up, or this
    /// one is taking it up. Asked again every quiet spell until a turn begins here (it
    /// reaches `sink` as any subscriber's), another replica runs it (followed there), it is
    /// found ended (the stored answer ends it), or the client leaves.
    pub(crate) fn await_takeover(
        self: &Arc<Self>,
        user: &str,
        thread: Arc<ThreadRuntime>,
        last_seq: u64,
        sink: Arc<dyn FrameSink>,
        begun: u64,
    ) {
        let runtime = self.clone();
        let user = user.to_owned();
        tokio::spawn(async move {
            let quiet = runtime.leases.heartbeat() * 2;
            loop {
                tokio::time::sleep(quiet).await;
                if sink.is_gone() || thread.turns_begun() != begun {
                    return;
                }
                match runtime.turn_taken_over(&thread.id, "").await {
                    Owner::Same | Owner::Dead | Owner::Here => {}
                    Owner::Other(replica) => {
                        let Some(bus) = runtime.bus.clone() else {
                            continue;
                        };
                        let remote = RemoteTurn { bus, replica };
                        let followed =
                            runtime.follow(remote, &user, thread.clone(), last_seq, sink.clone());
                        match followed.await {
                            Ok(()) => return,
                            Err(e) => {
                                tracing::debug!(error = %e.message, "cannot follow a turn taken up elsewhere yet")
                            }
                        }
                    }
                    Owner::Ended => {
                        // A turn that began (and ended) here meanwhile reached `sink` itself.
                        if thread.turns_begun() == begun {
                            if let Err(e) = runtime
                                .answer_from_store(&thread, sink.as_ref(), last_seq)
                                .await
                            {
                                tracing::warn!(error = %e.message, "cannot end a followed turn");
                            }
                        }
                        return;
                    }
                }
            }
        });
    }

    /// Who runs the thread's turn now that `followed` went quiet.
    async fn turn_taken_over(&self, thread_id: &str, followed: &str) -> Owner {
        match self.store.turn_owner(thread_id, now_ms()).await {
            Ok(Some(owner)) if owner == followed => return Owner::Same,
            Ok(Some(owner)) if owner == self.leases.replica_id() => return Owner::Here,
            Ok(Some(owner)) => return Owner::Other(owner),
            Ok(None) => {}
            // Cannot tell: keep following.
            Err(_) => return Owner::Same,
        }
        // No live lease: a dead owner's turn is still `running` until a sweep takes it.
        match self.store.last_assistant_message(thread_id).await {
            Ok(Some(message)) if message.status != "running" => Owner::Ended,
            Ok(None) => Owner::Ended,
            _ => Owner::Dead,
        }
    }
}

/// Who runs a followed turn, asked when its owner went quiet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    /// The replica followed: it is only slow.
    Same,
    /// Nobody yet: its owner died and no replica has taken it up.
    Dead,
    /// This replica took it up: its frames reach the client as any subscriber's.
    Here,
    /// Another replica took it up.
    Other(String),
    /// It ended.
    Ended,
}

/// One client's relay of a turn another replica runs.
struct Relay {
    remote: RemoteTurn,
    inbox: String,
    thread: Arc<ThreadRuntime>,
    sink: Arc<dyn FrameSink>,
}

impl Relay {
    /// Ask the owner for what the client missed after `seen`, then the turn live again, on
    /// a fresh inbox (frames still on their way to the old one are left behind, so nothing
    /// overtakes the replay); whether the owner answered, and the fresh inbox's frames.
    async fn refill(&mut self, seen: u64) -> (bool, Option<BusFrames>) {
        let (inbox, frames) = match self.remote.bus.inbox().await {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::debug!(error = %e.message, "cannot refill a followed turn yet");
                return (false, None);
            }
        };
        let old = std::mem::replace(&mut self.inbox, inbox.clone());
        let _ = self.remote.send(Command::Unfollow { inbox: old }).await;
        let follow = Command::Follow {
            user: self.thread.owner.clone(),
            thread_id: self.thread.id.to_string(),
            last_seq: seen,
            inbox,
        };
        match self.remote.send(follow).await {
            Ok(()) => (true, Some(frames)),
            Err(e) => {
                tracing::debug!(error = %e.message, "cannot refill a followed turn yet");
                (false, Some(frames))
            }
        }
    }

    /// Relay frames until the turn's final chunk. Should the client leave, the owner is told
    /// to stop sending; should the owner go quiet and lose the turn (it died), the stored
    /// answer ends it instead.
    async fn run(mut self, runtime: &Runtime, mut frames: BusFrames, last_seq: u64) {
        let quiet = runtime.leases.heartbeat() * 2;
        let mut seen = last_seq;
        let mut client_left = false;
        // When this replica's bus connection comes back, frames sent meanwhile are lost:
        // the owner is asked again from what the client saw (until it answers).
        let mut reconnects = self.remote.bus.reconnects();
        reconnects.borrow_and_update();
        let mut watching = true;
        let mut refill = false;
        loop {
            if refill {
                let (asked, fresh) = self.refill(seen).await;
                if let Some(fresh) = fresh {
                    std::mem::replace(&mut frames, fresh).close().await;
                }
                refill = !asked;
            }
            let next = tokio::select! {
                next = frames.next(quiet) => next,
                changed = reconnects.changed(), if watching => {
                    watching = changed.is_ok();
                    refill = watching;
                    continue;
                }
            };
            match next {
                // What the client saw already: a turn's earlier owner, fenced off after
                // another replica took the turn over, sends nothing more, but its frames
                // may still be on their way.
                Some(followed) if followed.frame.seq.is_some_and(|seq| seq <= seen) => {}
                Some(followed) => {
                    seen = followed.frame.seq.unwrap_or(seen).max(seen);
                    self.thread.seen_elsewhere(seen);
                    let out = Outgoing {
                        frame: &followed.frame,
                        event: None,
                    };
                    if !self.sink.send(out) {
                        client_left = true;
                        break;
                    }
                    if followed.ends_turn {
                        break;
                    }
                }
                None if self.sink.is_gone() => {
                    client_left = true;
                    break;
                }
                None => match runtime
                    .turn_taken_over(&self.thread.id, &self.remote.replica)
                    .await
                {
                    Owner::Same | Owner::Dead => {}
                    Owner::Here => break,
                    Owner::Other(replica) => {
                        // Taken up elsewhere: follow it there, from what this client saw
                        // (asked again after the next quiet spell if that fails).
                        let next = RemoteTurn {
                            bus: self.remote.bus.clone(),
                            replica,
                        };
                        let follow = Command::Follow {
                            user: self.thread.owner.clone(),
                            thread_id: self.thread.id.to_string(),
                            last_seq: seen,
                            inbox: self.inbox.clone(),
                        };
                        match next.send(follow).await {
                            Ok(()) => self.remote = next,
                            Err(e) => {
                                tracing::debug!(error = %e.message, "cannot follow a turn taken up elsewhere yet")
                            }
                        }
                    }
                    Owner::Ended => {
                        if let Err(e) = runtime
                            .answer_from_store(&self.thread, self.sink.as_ref(), seen)
                            .await
                        {
                            tracing::warn!(error = %e.message, "cannot end a followed turn");
                        }
                        break;
                    }
                },
            }
        }
        frames.close().await;
        self.thread.stop_following(self.sink.id());
        if client_left {
            let inbox = self.inbox;
            if let Err(e) = self.remote.send(Command::Unfollow { inbox }).await {
                tracing::debug!(error = %e.message, "cannot tell the owner a follower left");
            }
        }
    }
}

#[async_trait::async_trait]
impl CommandHandler for Runtime {
    async fn handle(self: Arc<Self>, bus: &Arc<Bus>, command: Command) -> Result<(), Refusal> {
        match command {
            Command::Stop {
                user,
                thread_id,
                wait,
            } => self.stop_here(&user, &thread_id, wait).await,
            Command::SetMode {
                user,
                thread_id,
                mode,
            } => self.set_mode_here(&user, &thread_id, mode).await,
            Command::Approval {
                user,
                tool_call_id,
                decision,
                reason,
            } => self.answer_approval_here(&user, &tool_call_id, decision, reason),
            Command::Follow {
                user,
                thread_id,
                last_seq,
                inbox,
            } => {
                let limit = self.config.server.max_outbound_bytes;
                let sink = bus.sink(self.next_subscriber_id(), inbox, limit);
                self.resume_here(&user, &thread_id, last_seq, sink).await
            }
            Command::Settle { user, thread_id } => {
                self.check_owner(&user, &thread_id).await?;
                self.settle_here(&thread_id).await;
                Ok(())
            }
            Command::Unfollow { inbox } => {
                if let Some(follower) = bus.follower(&inbox) {
                    self.detach(follower);
                }
                Ok(())
            }
        }
    }

    fn thread_deleted_elsewhere(self: Arc<Self>, thread_id: &str) {
        if let Some(thread) = self.hub.get(thread_id) {
            self.hub.forget(&thread);
        }
    }

    fn turn_started_elsewhere(self: Arc<Self>, bus: &Arc<Bus>, thread_id: &str, owner: &str) {
        self.follow_for_watchers(bus, thread_id, owner);
    }
}
