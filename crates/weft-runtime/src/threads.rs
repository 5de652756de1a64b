//! Live per-thread state: the permission gate, the one active turn, the per-thread `seq`,
//! the replay buffer for `resume_chat`, and the connections subscribed to its frames.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;
use weft_core::{PermissionGate, CHUNK_MAX_BYTES};
use weft_protocol::{PermissionMode, ServerEvent, ServerFrame};

use weft_frames::frame::{FrameSink, Outgoing, SharedFrame, SubscriberId};
use weft_frames::replay::{Missed, Replay};
use weft_record::TurnLog;

/// Where the `seq` of the turn answering with the message at `position` starts at the
/// latest: 2^26 per position in the thread. Turns of a thread run one at a time, each at a
/// later position than the last, so a thread's `seq` only increases whichever replica (or
/// process life) ran its turns before, with no shared counter; 2^26 frames per turn and 2^27
/// messages per thread stay within what a JSON number holds exactly (2^53).
pub fn turn_seq_floor(position: i64) -> u64 {
    u64::try_from(position.max(0)).unwrap_or(0) << 26
}

/// Where the `seq` of a turn taken up again for the `takeovers`th time starts: above every
/// frame its earlier lives could have sent (2^20 frames each, 63 takeovers at most).
pub fn resumed_seq_floor(position: i64, takeovers: u32) -> u64 {
    turn_seq_floor(position) + (u64::from(takeovers.min(63)) << 20)
}

pub struct ThreadRuntime {
    /// Shared by every frame of the thread.
    pub id: Arc<str>,
    pub owner: String,
    pub gate: PermissionGate,
    state: Mutex<ThreadState>,
    /// The hub's index of who subscribed where, told of each subscription.
    subscriptions: Arc<Subscriptions>,
    /// Told when a turn ends.
    ended: tokio::sync::Notify,
}

struct ThreadState {
    next_seq: u64,
    /// The current (or last) turn's frames, for `resume_chat`.
    replay: Replay,
    subscribers: HashMap<SubscriberId, Arc<dyn FrameSink>>,
    active: Option<CancellationToken>,
    /// The running turn's assistant message.
    active_message: Option<String>,
    /// The running turn's record on its way to the store.
    active_log: Option<Arc<TurnLog>>,
    detach_generation: u64,
    /// A client left while the turn ran (it may come back for the frames it missed).
    someone_left: bool,
    /// When the last turn ended, or the runtime was made (for the janitor).
    ended_at: Option<std::time::Instant>,
    /// Frames of a turn whose start is not committed yet, in order (they go out after
    /// `turn_started`).
    held: Option<Vec<ServerEvent>>,
    /// Subscribers a turn another replica runs is relayed to now.
    following: HashSet<SubscriberId>,
    /// How many turns began here (taken up ones included).
    turns_begun: u64,
}

impl ThreadRuntime {
    fn new(
        id: &str,
        owner: &str,
        mode: PermissionMode,
        replay_limit: usize,
        subscriptions: Arc<Subscriptions>,
    ) -> Self {
        ThreadRuntime {
            subscriptions,
            id: Arc::from(id),
            owner: owner.to_owned(),
            gate: PermissionGate::new(mode),
            state: Mutex::new(ThreadState {
                next_seq: 1,
                replay: Replay::new(replay_limit),
                subscribers: HashMap::new(),
                active: None,
                active_message: None,
                active_log: None,
                detach_generation: 0,
                someone_left: false,
                // Idle from the start: a runtime made only to be read goes with the sweep.
                ended_at: Some(std::time::Instant::now()),
                held: None,
                following: HashSet::new(),
                turns_begun: 0,
            }),
            ended: tokio::sync::Notify::new(),
        }
    }

    /// Resolves once no turn runs (at once when none does).
    pub async fn idle(&self) {
        loop {
            let ended = self.ended.notified();
            if !self.is_active() {
                return;
            }
            ended.await;
        }
    }

    /// Stamp the event with this thread and the next `seq`, encode it once, keep it for
    /// replay, and queue it for every subscriber (one whose queue overflowed is dropped).
    /// A lent event is encoded from the loan; one held back (see [`ThreadRuntime::hold_frames`])
    /// is kept, a lent one copied.
    pub fn publish(&self, event: Cow<'_, ServerEvent>) {
        let mut state = self.state.lock();
        match &mut state.held {
            Some(held) => hold(held, event),
            None => self.publish_locked(&mut state, &event),
        }
    }

    /// Keep this thread's frames back until [`ThreadRuntime::release_frames`].
    pub fn hold_frames(&self) {
        self.state.lock().held = Some(Vec::new());
    }

    /// Publish `first`, then every frame held back, in order; later frames go out at once.
    /// `first` is `None` to drop what was held (the turn could not start). The turn's frames
    /// number from at least `seq_floor` (see [`turn_seq_floor`]).
    pub fn release_frames(&self, first: Option<ServerEvent>, seq_floor: u64) {
        let mut state = self.state.lock();
        let held = state.held.take().unwrap_or_default();
        if let Some(first) = first {
            state.next_seq = state.next_seq.max(seq_floor);
            self.publish_locked(&mut state, &first);
            for event in &held {
                self.publish_locked(&mut state, event);
            }
        }
    }

    fn publish_locked(&self, state: &mut ThreadState, event: &ServerEvent) {
        let seq = state.next_seq;
        state.next_seq += 1;
        let shared = SharedFrame::encode_lent(Some(&self.id), Some(seq), event);
        state.replay.push(event, seq, &shared);
        let out = Outgoing {
            frame: &shared,
            event: Some(event),
        };
        state.subscribers.retain(|_, sink| sink.send(out));
    }

    /// Frames up to `seq` of this thread went out from another replica (a turn it ran,
    /// relayed here): the next frame sent from here comes after them.
    pub fn seen_elsewhere(&self, seq: u64) {
        let mut state = self.state.lock();
        state.next_seq = state.next_seq.max(seq + 1);
    }

    /// Send `events` to one subscriber only (not kept for replay), stamped with this thread
    /// and seqs after both the thread's and the client's last one.
    pub fn send_to(&self, sink: &dyn FrameSink, after_seq: u64, events: Vec<ServerEvent>) {
        let mut state = self.state.lock();
        state.next_seq = state.next_seq.max(after_seq + 1);
        for event in events {
            let seq = state.next_seq;
            state.next_seq += 1;
            self.send_one(sink, seq, event);
        }
    }

    /// `event` stamped with this thread and `seq`, to `sink` alone.
    fn send_one(&self, sink: &dyn FrameSink, seq: u64, event: ServerEvent) {
        let frame = ServerFrame {
            thread_id: Some(self.id.clone()),
            seq: Some(seq),
            event,
        };
        sink.send(Outgoing {
            frame: &SharedFrame::encode(&frame),
            event: Some(&frame.event),
        });
    }

    pub fn subscribe(&self, sink: Arc<dyn FrameSink>) {
        self.add_subscriber(self.state.lock(), sink);
    }

    /// Add `sink` under the state lock held, then tell the hub's index (after the lock).
    fn add_subscriber(&self, mut state: MutexGuard<'_, ThreadState>, sink: Arc<dyn FrameSink>) {
        let subscriber = sink.id();
        state.detach_generation += 1;
        state.subscribers.insert(subscriber, sink);
        drop(state);
        self.subscriptions.note(subscriber, &self.id);
    }

    /// What a client that saw up to `last_seq` missed, and whether a turn is still running.
    pub fn missed(&self, last_seq: u64) -> (Missed, bool) {
        let state = self.state.lock();
        (
            state.replay.after(last_seq, &self.id),
            state.active.is_some(),
        )
    }

    /// Queue `first` (a snapshot, when the client needs one) and every buffered frame after
    /// `last_seq`, then subscribe, with no gap between. Returns how many turns had begun
    /// here then: every turn that begins later reaches `sink` whole (see
    /// [`ThreadRuntime::turns_begun`]).
    pub fn resume(
        &self,
        sink: Arc<dyn FrameSink>,
        last_seq: u64,
        first: Option<ServerEvent>,
    ) -> u64 {
        let state = self.state.lock();
        let missed = state.replay.after(last_seq, &self.id);
        if let Some(event) = first {
            let seq = missed
                .frames
                .first()
                .and_then(|f| f.seq)
                .unwrap_or(state.next_seq)
                .saturating_sub(1);
            self.send_one(sink.as_ref(), seq, event);
        }
        for frame in &missed.frames {
            sink.send(Outgoing { frame, event: None });
        }
        let begun = state.turns_begun;
        self.add_subscriber(state, sink);
        begun
    }

    /// How many turns began here (taken up ones included).
    pub fn turns_begun(&self) -> u64 {
        self.state.lock().turns_begun
    }

    /// Stop sending to followers on other replicas: this replica lost the turn, and the
    /// replica that took it over sends them the rest.
    pub fn drop_remote_followers(&self) {
        self.state
            .lock()
            .subscribers
            .retain(|_, sink| !sink.is_remote());
    }

    /// The subscribers now.
    pub fn subscribers(&self) -> Vec<Arc<dyn FrameSink>> {
        self.state.lock().subscribers.values().cloned().collect()
    }

    /// Mark `subscriber` as getting a turn relayed from another replica; false when it
    /// already does (one relay per subscriber).
    pub fn start_following(&self, subscriber: SubscriberId) -> bool {
        self.state.lock().following.insert(subscriber)
    }

    pub fn stop_following(&self, subscriber: SubscriberId) {
        self.state.lock().following.remove(&subscriber);
    }

    /// Drop a subscriber; the detach generation when that leaves a running turn with nobody
    /// listening.
    fn unsubscribe(&self, subscriber: SubscriberId) -> Option<u64> {
        let mut state = self.state.lock();
        state.subscribers.remove(&subscriber)?;
        if state.active.is_some() {
            state.someone_left = true;
        }
        if state.subscribers.is_empty() && state.active.is_some() {
            state.detach_generation += 1;
            return Some(state.detach_generation);
        }
        None
    }

    /// Whether the turn is orphaned since `generation` (nobody resumed meanwhile).
    pub fn still_detached(&self, generation: u64) -> bool {
        let state = self.state.lock();
        state.detach_generation == generation
            && state.subscribers.is_empty()
            && state.active.is_some()
    }

    /// Whether the running turn waits for a person to answer an approval.
    pub fn waits_for_approval(&self) -> bool {
        !self.gate.pending().is_empty()
    }

    /// Stop the turn if it is still orphaned since `generation` (nobody resumed meanwhile).
    pub fn stop_if_still_detached(&self, generation: u64) -> bool {
        let state = self.state.lock();
        if state.detach_generation == generation && state.subscribers.is_empty() {
            if let Some(cancel) = &state.active {
                cancel.cancel();
                return true;
            }
        }
        false
    }

    /// Begin a turn unless one is running; the replay buffer restarts with it.
    pub fn try_begin(&self, cancel: CancellationToken, message_id: &str) -> bool {
        let mut state = self.state.lock();
        if state.active.is_some() {
            return false;
        }
        state.active = Some(cancel);
        state.turns_begun += 1;
        state.active_message = Some(message_id.to_owned());
        state.replay.clear();
        state.ended_at = None;
        state.someone_left = false;
        true
    }

    /// Remember the running turn's record (readers wait on it to see what was shown).
    pub fn set_log(&self, log: Arc<TurnLog>) {
        self.state.lock().active_log = Some(log);
    }

    /// The running turn's record, if a turn runs.
    pub fn active_log(&self) -> Option<Arc<TurnLog>> {
        self.state.lock().active_log.clone()
    }

    /// The assistant message of the running turn.
    pub fn active_message(&self) -> Option<String> {
        let state = self.state.lock();
        state.active.as_ref().and(state.active_message.clone())
    }

    /// Take up what another replica may have changed since this one last ran the thread:
    /// its mode and the tools allowed for the chat, as `row` has them.
    pub fn refresh(&self, row: &weft_store::ThreadRow) {
        self.gate
            .set_mode(PermissionMode::parse(&row.permission_mode).unwrap_or_default());
        for tool in &row.allowed_tools {
            self.gate.allow_for_chat(tool);
        }
    }

    /// The turn ended. Its frames are kept (for `replay_retention_ms`) only if a client
    /// left while it ran; everyone else has seen them, and a late resume is answered from
    /// the store.
    pub fn end(&self) {
        let mut state = self.state.lock();
        state.active = None;
        state.active_log = None;
        state.ended_at = Some(std::time::Instant::now());
        // Followers on other replicas that got the final chunk, connections that closed.
        state.subscribers.retain(|_, sink| !sink.is_gone());
        if !state.someone_left {
            state.replay.clear();
        }
        drop(state);
        self.ended.notify_waiters();
    }

    /// Drop the replay buffer of a turn that ended more than `retention` ago; true when the
    /// runtime is then idle (no turn, no subscribers, nothing pending) and can go: what was
    /// allowed for the chat is kept with the thread's row, and read back with it.
    fn sweep(&self, retention: std::time::Duration) -> bool {
        let mut state = self.state.lock();
        let stale =
            state.active.is_none() && state.ended_at.is_some_and(|t| t.elapsed() >= retention);
        if stale {
            state.replay.clear();
        }
        stale && state.subscribers.is_empty() && self.gate.pending().is_empty()
    }

    /// Cancel the running turn; false when none runs.
    pub fn stop(&self) -> bool {
        match &self.state.lock().active {
            Some(cancel) => {
                cancel.cancel();
                true
            }
            None => false,
        }
    }

    pub fn is_active(&self) -> bool {
        self.state.lock().active.is_some()
    }
}

/// Which threads each subscriber subscribed to, so a subscriber leaving visits only those.
#[derive(Default)]
struct Subscriptions(Mutex<HashMap<SubscriberId, Vec<Arc<str>>>>);

impl Subscriptions {
    fn note(&self, subscriber: SubscriberId, thread: &Arc<str>) {
        let mut index = self.0.lock();
        let threads = index.entry(subscriber).or_default();
        if !threads.contains(thread) {
            threads.push(thread.clone());
        }
    }

    fn take(&self, subscriber: SubscriberId) -> Vec<Arc<str>> {
        self.0.lock().remove(&subscriber).unwrap_or_default()
    }
}

#[derive(Default)]
pub struct ThreadHub {
    threads: Mutex<HashMap<String, Arc<ThreadRuntime>>>,
    subscriptions: Arc<Subscriptions>,
    /// Pending approval (server-unique tool-call id) → thread id.
    approvals: Mutex<HashMap<String, String>>,
    /// Bytes of frames each thread keeps for replay.
    replay_limit: usize,
}

impl ThreadHub {
    pub fn new(replay_limit: usize) -> Self {
        ThreadHub {
            replay_limit,
            ..ThreadHub::default()
        }
    }

    pub fn get(&self, id: &str) -> Option<Arc<ThreadRuntime>> {
        self.threads.lock().get(id).cloned()
    }

    /// The live runtime of a thread, created with `owner` and `mode` on first use.
    #[cfg(test)]
    pub fn get_or_insert(&self, id: &str, owner: &str, mode: PermissionMode) -> Arc<ThreadRuntime> {
        self.threads
            .lock()
            .entry(id.to_owned())
            .or_insert_with(|| {
                Arc::new(ThreadRuntime::new(
                    id,
                    owner,
                    mode,
                    self.replay_limit,
                    self.subscriptions.clone(),
                ))
            })
            .clone()
    }

    /// The live runtime of a stored thread, created from its row on first use (its owner,
    /// its mode, the tools allowed for the chat). One remembered for another owner is stale
    /// (its thread was deleted and created again, or another replica won the race to create
    /// it) and is replaced, unless a turn (whose start is bound to fail) still runs in it.
    pub fn from_row(&self, row: &weft_store::ThreadRow) -> Arc<ThreadRuntime> {
        let mut threads = self.threads.lock();
        if threads
            .get(&row.id)
            .is_some_and(|thread| thread.owner != row.owner && !thread.is_active())
        {
            threads.remove(&row.id);
        }
        let thread = threads.entry(row.id.clone()).or_insert_with(|| {
            let mode = PermissionMode::parse(&row.permission_mode).unwrap_or_default();
            let thread = ThreadRuntime::new(
                &row.id,
                &row.owner,
                mode,
                self.replay_limit,
                self.subscriptions.clone(),
            );
            for tool in &row.allowed_tools {
                thread.gate.allow_for_chat(tool);
            }
            Arc::new(thread)
        });
        thread.clone()
    }

    pub fn remove(&self, id: &str) -> Option<Arc<ThreadRuntime>> {
        self.threads.lock().remove(id)
    }

    /// Forget `thread` if it is still the runtime remembered for its id and runs no turn
    /// (a start that failed, a thread deleted elsewhere); its subscribers are dropped.
    pub fn forget(&self, thread: &Arc<ThreadRuntime>) {
        let mut threads = self.threads.lock();
        let same = threads
            .get(&*thread.id)
            .is_some_and(|known| Arc::ptr_eq(known, thread));
        if same && !thread.is_active() {
            threads.remove(&*thread.id);
        }
    }

    /// Unsubscribe a subscriber everywhere; returns the turns it left orphaned, each with the
    /// detach generation to check when the grace period ends.
    pub fn detach(&self, subscriber: SubscriberId) -> Vec<(Arc<ThreadRuntime>, u64)> {
        let subscribed = self.subscriptions.take(subscriber);
        let threads: Vec<_> = {
            let threads = self.threads.lock();
            subscribed
                .iter()
                .filter_map(|id| threads.get(&**id).cloned())
                .collect()
        };
        threads
            .into_iter()
            .filter_map(|t| t.unsubscribe(subscriber).map(|generation| (t, generation)))
            .collect()
    }

    /// Bound memory: forget replay buffers of long-finished turns and idle runtimes.
    pub fn sweep(&self, retention: std::time::Duration) -> usize {
        let mut threads = self.threads.lock();
        let before = threads.len();
        threads.retain(|_, t| !t.sweep(retention));
        before - threads.len()
    }

    pub fn len(&self) -> usize {
        self.threads.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.lock().is_empty()
    }

    pub fn active(&self) -> Vec<Arc<ThreadRuntime>> {
        self.threads
            .lock()
            .values()
            .filter(|t| t.is_active())
            .cloned()
            .collect()
    }

    pub fn note_approval(&self, tool_call_id: &str, thread_id: &str) {
        self.approvals
            .lock()
            .insert(tool_call_id.to_owned(), thread_id.to_owned());
    }

    pub fn approval_thread(&self, tool_call_id: &str) -> Option<String> {
        self.approvals.lock().get(tool_call_id).cloned()
    }

    pub fn forget_approval(&self, tool_call_id: &str) {
        self.approvals.lock().remove(tool_call_id);
    }
}

/// Keep a frame back until the turn's start commits. Text streamed meanwhile joins the held
/// chunk before it (no `seq` is given yet, so nobody can tell): a turn whose start waits in a
/// busy writer holds its text once, not as hundreds of frames.
fn hold(held: &mut Vec<ServerEvent>, event: Cow<'_, ServerEvent>) {
    if let (
        ServerEvent::Chunk {
            content,
            done: false,
            parent_id,
            depth,
        },
        Some(ServerEvent::Chunk {
            content: last,
            done: false,
            parent_id: last_parent,
            depth: last_depth,
        }),
    ) = (&*event, held.last_mut())
    {
        if parent_id == last_parent
            && depth == last_depth
            && last.len() + content.len() <= CHUNK_MAX_BYTES
        {
            last.push_str(content);
            return;
        }
    }
    held.push(event.into_owned());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_janitor_drops_finished_idle_threads_but_keeps_subscribers_and_running_turns() {
        let hub = ThreadHub::new(1 << 20);
        let idle = hub.get_or_insert("idle", "u", PermissionMode::Default);
        let granted = hub.get_or_insert("granted", "u", PermissionMode::Default);
        let watched = hub.get_or_insert("watched", "u", PermissionMode::Default);
        let running = hub.get_or_insert("running", "u", PermissionMode::Default);
        for t in [&idle, &granted, &watched] {
            assert!(t.try_begin(CancellationToken::new(), "m"));
            t.publish(Cow::Owned(ServerEvent::Pong));
            t.end();
        }
        granted.gate.allow_for_chat("write_file");
        let (sink, _frames) = weft_frames::frame::ChannelSink::new(1, 1 << 20);
        watched.subscribe(sink);
        assert!(running.try_begin(CancellationToken::new(), "m"));
        assert_eq!(hub.sweep(std::time::Duration::ZERO), 2);
        assert!(hub.get("idle").is_none());
        assert!(
            hub.get("granted").is_none(),
            "its grants are on the thread's row"
        );
        assert_eq!(hub.len(), 2);
        assert!(
            watched.state.lock().replay.is_empty(),
            "the replay buffer is dropped"
        );
        assert_eq!(watched.state.lock().replay.bytes(), 0);
    }

    #[test]
    fn text_held_before_the_start_commits_goes_out_as_one_chunk_per_level() {
        let hub = ThreadHub::new(1 << 20);
        let thread = hub.get_or_insert("t", "u", PermissionMode::Default);
        let (sink, mut frames) = weft_frames::frame::ChannelSink::new(1, 1 << 20);
        thread.subscribe(sink);
        let chunk = |text: &str, parent: Option<&str>| ServerEvent::Chunk {
            content: text.to_owned(),
            done: false,
            parent_id: parent.map(str::to_owned),
            depth: u32::from(parent.is_some()),
        };
        thread.hold_frames();
        for event in [
            chunk("a", None),
            chunk("b", None),
            chunk("x", Some("call")),
            chunk("y", Some("call")),
            ServerEvent::Pong,
            chunk("c", None),
            chunk("d", None),
        ] {
            thread.publish(Cow::Owned(event));
        }
        thread.release_frames(Some(ServerEvent::Pong), 10);
        let mut got = Vec::new();
        while let Some(Some(delivered)) = futures::FutureExt::now_or_never(frames.recv()) {
            let frame: serde_json::Value = serde_json::from_str(delivered.frame.json()).unwrap();
            got.push(format!("{} {}", frame["seq"], frame["content"]));
        }
        assert_eq!(
            got,
            vec!["10 null", "11 \"ab\"", "12 \"xy\"", "13 null", "14 \"cd\""]
        );
    }

    #[test]
    fn a_leaving_subscriber_leaves_the_threads_it_watched_and_orphans_their_turns() {
        let hub = ThreadHub::new(1 << 20);
        let threads: Vec<_> = (0..4)
            .map(|i| hub.get_or_insert(&format!("t{i}"), "u", PermissionMode::Default))
            .collect();
        for t in &threads[..3] {
            assert!(t.try_begin(CancellationToken::new(), "m"));
        }
        let (leaving, _frames) = weft_frames::frame::ChannelSink::new(1, 1 << 20);
        let (staying, _more) = weft_frames::frame::ChannelSink::new(2, 1 << 20);
        threads[0].subscribe(leaving.clone());
        threads[0].subscribe(leaving.clone());
        threads[1].subscribe(leaving.clone());
        threads[1].subscribe(staying.clone());
        threads[3].resume(leaving, 0, None);
        threads[2].subscribe(staying);

        let orphaned: Vec<String> = hub
            .detach(1)
            .into_iter()
            .map(|(t, _)| t.id.to_string())
            .collect();
        assert_eq!(orphaned, vec!["t0"], "t1 is still watched, t3 runs no turn");
        for t in &threads {
            assert!(!t.state.lock().subscribers.contains_key(&1));
        }
        assert_eq!(threads[1].subscribers().len(), 1);
        assert!(hub.detach(1).is_empty(), "nothing is left to leave");
        assert_eq!(
            hub.detach(2).len(),
            2,
            "t1 and t2 are orphaned when the other one goes"
        );
    }
}
