//! The bus between replicas (NATS core request/reply and pub/sub). Each replica answers
//! [`Command`]s on its own subject (`weft.replica.<id>`); a command for a thread whose turn
//! runs elsewhere goes to the replica holding the turn's lease. A client following such a
//! turn gets its frames on an inbox of its own replica: the owner subscribes a [`BusSink`] to
//! the thread, which publishes the replay, then each live frame, as encoded once for sockets.
//! A turn's start is announced once on its thread's subject (`weft.turns.<hex thread id>`),
//! so a replica whose clients watch that thread follows the turn for them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use weft_protocol::{ApprovalDecision, ErrorCode, PermissionMode};

use crate::metrics::ClusterMetrics;
use weft_frames::frame::{FrameSink, Outgoing, SharedFrame, SubscriberId};
use weft_frames::Refusal;

/// How long a command waits for the owner's answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A command for the replica that runs a thread's turn, on behalf of `user`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    Stop {
        user: String,
        thread_id: String,
        /// Answer once the turn has ended and its last write landed (before a delete).
        wait: bool,
    },
    SetMode {
        user: String,
        thread_id: String,
        mode: PermissionMode,
    },
    Approval {
        user: String,
        tool_call_id: String,
        decision: ApprovalDecision,
        reason: Option<String>,
    },
    /// Send what the client missed after `last_seq`, then the turn live, to `inbox`.
    Follow {
        user: String,
        thread_id: String,
        last_seq: u64,
        inbox: String,
    },
    /// The follower behind `inbox` left: stop sending to it.
    Unfollow { inbox: String },
    /// Answer once what the thread's running turn has shown its clients is committed.
    Settle { user: String, thread_id: String },
}

/// Carries out commands other replicas send (the runtime).
#[async_trait::async_trait]
pub trait CommandHandler: Send + Sync {
    async fn handle(self: Arc<Self>, bus: &Arc<Bus>, command: Command) -> Result<(), Refusal>;
    /// Replica `owner` started a turn on `thread_id` (a quick look; any work goes on a task
    /// of its own).
    fn turn_started_elsewhere(self: Arc<Self>, bus: &Arc<Bus>, thread_id: &str, owner: &str);
    /// Another replica deleted `thread_id`: forget what this one remembers of it.
    fn thread_deleted_elsewhere(self: Arc<Self>, thread_id: &str);
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Answer {
    error: Option<(ErrorCode, String)>,
}

/// This replica's connection to the others.
pub struct Bus {
    client: async_nats::Client,
    replica_id: String,
    metrics: Arc<ClusterMetrics>,
    /// This replica's followers on other replicas: their inbox → their subscriber id here.
    followers: Arc<Mutex<HashMap<String, SubscriberId>>>,
    /// Counts the connections to NATS made after the first (a restart of the server, a
    /// network blip): what was published to this replica meanwhile is lost.
    reconnects: tokio::sync::watch::Sender<u64>,
}

fn subject(replica: &str) -> String {
    format!("weft.replica.{replica}")
}

/// Where a thread's turns are announced: its id in hex (client-chosen ids may hold
/// characters a subject cannot).
fn turns_subject(thread_id: &str) -> String {
    format!("{TURNS}.{}", hex::encode(thread_id))
}

const TURNS: &str = "weft.turns";

/// Where a deleted thread's id is announced (as the payload), to every replica.
const DELETED: &str = "weft.threads.deleted";

impl Bus {
    pub async fn connect(
        url: &str,
        replica_id: &str,
        metrics: Arc<ClusterMetrics>,
    ) -> Result<Arc<Bus>, String> {
        let (reconnects, _) = tokio::sync::watch::channel(0u64);
        let counted = reconnects.clone();
        let lost = Arc::new(AtomicBool::new(false));
        let client = async_nats::ConnectOptions::new()
            .name(format!("weft {replica_id}"))
            .event_callback(move |event| {
                let (counted, lost) = (counted.clone(), lost.clone());
                async move {
                    match event {
                        async_nats::Event::Disconnected => lost.store(true, Ordering::Relaxed),
                        async_nats::Event::Connected if lost.swap(false, Ordering::Relaxed) => {
                            tracing::info!("reconnected to NATS");
                            counted.send_modify(|n| *n += 1);
                        }
                        _ => {}
                    }
                }
            })
            .connect(url)
            .await
            .map_err(|e| format!("cannot connect to NATS at {url}: {e}"))?;
        Ok(Arc::new(Bus {
            client,
            replica_id: replica_id.to_owned(),
            metrics,
            followers: Arc::default(),
            reconnects,
        }))
    }

    /// Changes each time this replica's connection to NATS comes back.
    pub fn reconnects(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reconnects.subscribe()
    }

    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Answer the commands other replicas send this one, and hear the turns they start,
    /// until the handler goes.
    pub async fn serve(self: &Arc<Self>, handler: Weak<dyn CommandHandler>) -> Result<(), String> {
        let commands = self
            .client
            .subscribe(subject(&self.replica_id))
            .await
            .map_err(|e| format!("cannot subscribe to this replica's commands: {e}"))?;
        let turns = self
            .client
            .subscribe(format!("{TURNS}.*"))
            .await
            .map_err(|e| format!("cannot subscribe to the turns other replicas start: {e}"))?;
        let deleted = self
            .client
            .subscribe(DELETED)
            .await
            .map_err(|e| format!("cannot subscribe to deleted threads: {e}"))?;
        // Subscribed before start-up goes on: no command sent after it is missed.
        self.client.flush().await.map_err(|e| e.to_string())?;
        self.answer_commands(commands, handler.clone());
        self.hear_turns(turns, handler.clone());
        self.hear_deletes(deleted, handler);
        Ok(())
    }

    /// Announce that this replica started a turn on `thread_id` (one small publish per
    /// turn; nobody hears it unless a replica's clients watch the thread).
    pub fn announce_turn(self: &Arc<Self>, thread_id: &str) {
        let bus = self.clone();
        let subject = turns_subject(thread_id);
        tokio::spawn(async move {
            let body = Bytes::from(bus.replica_id.clone().into_bytes());
            if let Err(e) = bus.client.publish(subject, body).await {
                tracing::warn!(error = %e, "cannot announce a turn");
            }
        });
    }

    /// Tell every replica (this one too) that `thread_id` was deleted, and wait until the
    /// bus has it (bounded: a bus that is down delays no delete; the database is the
    /// truth, and a replica that missed this still reads the thread's row).
    pub async fn announce_deleted(&self, thread_id: &str) {
        let published = async {
            self.client
                .publish(DELETED, Bytes::from(thread_id.to_owned()))
                .await
                .map_err(|e| e.to_string())?;
            self.client.flush().await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, published).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot announce a deleted thread"),
            Err(_) => tracing::warn!("announcing a deleted thread timed out"),
        }
    }

    fn hear_deletes(
        self: &Arc<Self>,
        mut deleted: async_nats::Subscriber,
        handler: Weak<dyn CommandHandler>,
    ) {
        tokio::spawn(async move {
            while let Some(message) = deleted.next().await {
                let Some(handler) = handler.upgrade() else {
                    return;
                };
                if let Ok(thread_id) = std::str::from_utf8(&message.payload) {
                    handler.thread_deleted_elsewhere(thread_id);
                }
            }
        });
    }

    fn hear_turns(
        self: &Arc<Self>,
        mut turns: async_nats::Subscriber,
        handler: Weak<dyn CommandHandler>,
    ) {
        let bus = self.clone();
        tokio::spawn(async move {
            while let Some(message) = turns.next().await {
                let Some(handler) = handler.upgrade() else {
                    return;
                };
                let owner = String::from_utf8_lossy(&message.payload).into_owned();
                let thread = message
                    .subject
                    .strip_prefix(TURNS)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .and_then(|hex_id| hex::decode(hex_id).ok())
                    .and_then(|bytes| String::from_utf8(bytes).ok());
                let Some(thread_id) = thread.filter(|_| owner != bus.replica_id) else {
                    continue;
                };
                handler.turn_started_elsewhere(&bus, &thread_id, &owner);
            }
        });
    }

    fn answer_commands(
        self: &Arc<Self>,
        mut commands: async_nats::Subscriber,
        handler: Weak<dyn CommandHandler>,
    ) {
        let bus = self.clone();
        tokio::spawn(async move {
            while let Some(message) = commands.next().await {
                let Some(handler) = handler.upgrade() else {
                    return;
                };
                let Some(reply) = message.reply else {
                    continue;
                };
                let bus = bus.clone();
                tokio::spawn(async move {
                    let done = match serde_json::from_slice::<Command>(&message.payload) {
                        Ok(command) => handler.handle(&bus, command).await,
                        Err(e) => Err(Refusal::invalid(format!("a bad bus command: {e}"))),
                    };
                    let answer = Answer {
                        error: done.err().map(|r| (r.code, r.message)),
                    };
                    let body = serde_json::to_vec(&answer).unwrap_or_default();
                    if let Err(e) = bus.client.publish(reply, body.into()).await {
                        tracing::warn!(error = %e, "cannot answer a bus command");
                    }
                });
            }
        });
    }

    /// Push out what was published (at shutdown, after the last turn's final frames).
    pub async fn flush(&self) {
        tokio::task::yield_now().await;
        if let Err(e) = self.client.flush().await {
            tracing::warn!(error = %e, "cannot flush the bus");
        }
    }

    /// Send `command` to `replica` and wait for its answer (its refusal, as its own).
    pub async fn request(&self, replica: &str, command: &Command) -> Result<(), Refusal> {
        let started = Instant::now();
        let body = serde_json::to_vec(command).map_err(Refusal::internal)?;
        let asked = self.client.request(subject(replica), body.into());
        let answered = tokio::time::timeout(REQUEST_TIMEOUT, asked).await;
        self.metrics
            .bus_request_seconds
            .observe(started.elapsed().as_secs_f64());
        let message = match answered {
            Ok(Ok(message)) => message,
            Ok(Err(e)) => {
                return Err(unavailable(format!(
                    "replica {replica} did not answer: {e}"
                )))
            }
            Err(_) => {
                return Err(unavailable(format!(
                    "replica {replica} did not answer in time"
                )))
            }
        };
        let answer: Answer = serde_json::from_slice(&message.payload).map_err(Refusal::internal)?;
        match answer.error {
            None => Ok(()),
            Some((code, message)) => Err(Refusal::new(code, message)),
        }
    }

    /// A fresh inbox to receive a followed turn's frames on, subscribed before it is named
    /// to the owner.
    pub async fn inbox(&self) -> Result<(String, BusFrames), Refusal> {
        let inbox = self.client.new_inbox();
        let frames = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(Refusal::internal)?;
        Ok((
            inbox,
            BusFrames {
                frames,
                parts: Vec::new(),
            },
        ))
    }

    /// The subscriber here that sends to the follower behind `inbox`, while it does.
    pub fn follower(&self, inbox: &str) -> Option<SubscriberId> {
        self.followers.lock().get(inbox).copied()
    }

    /// The sink that publishes a followed turn's frames to `inbox`; it lets at most `limit`
    /// bytes wait (a follower that falls further behind is dropped, as a slow socket is).
    pub fn sink(self: &Arc<Self>, id: SubscriberId, inbox: String, limit: usize) -> Arc<BusSink> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
        let queued = Arc::new(AtomicUsize::new(0));
        let taken = queued.clone();
        let bus = self.clone();
        self.followers.lock().insert(inbox.clone(), id);
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                taken.fetch_sub(frame.len(), Ordering::Relaxed);
                bus.metrics.bus_published.inc();
                if let Err(e) = bus.publish_frame(&inbox, frame).await {
                    tracing::warn!(error = %e, "cannot publish a followed turn's frame");
                    break;
                }
            }
            bus.followers.lock().remove(&inbox);
        });
        Arc::new(BusSink {
            id,
            tx,
            queued,
            limit,
            ended: AtomicBool::new(false),
        })
    }
}

impl Bus {
    /// Publish one frame to `inbox`: in one message, or, when it is larger than the server
    /// takes in one (`max_payload`, 1 MiB by default: a long answer's final `message`), in
    /// parts marked `Weft-Part: i/n`, which the follower puts back together.
    async fn publish_frame(&self, inbox: &str, frame: Bytes) -> Result<(), String> {
        let largest = self
            .client
            .server_info()
            .max_payload
            .saturating_sub(PART_HEADER_ROOM)
            .max(MIN_PART);
        if frame.len() <= largest {
            return self
                .client
                .publish(inbox.to_owned(), frame)
                .await
                .map_err(|e| e.to_string());
        }
        let parts = frame.len().div_ceil(largest);
        for part in 0..parts {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(PART_HEADER, format!("{}/{parts}", part + 1).as_str());
            let end = ((part + 1) * largest).min(frame.len());
            let body = frame.slice(part * largest..end);
            self.client
                .publish_with_headers(inbox.to_owned(), headers, body)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// Marks one part of a frame split across bus messages: `i/n`.
const PART_HEADER: &str = "Weft-Part";

/// Room left in a message for the protocol's headers when a frame is split.
const PART_HEADER_ROOM: usize = 1024;

/// The smallest part a frame is split into (a server configured absurdly low).
const MIN_PART: usize = 4096;

/// The most of one frame a follower puts back together: past it, the parts are dropped.
const MAX_JOINED: usize = 64 << 20;

/// What a caller is told when the replica running a turn did not answer.
pub const UNANSWERED: &str = "the replica running this thread's turn did not answer; try again";

fn unavailable(message: String) -> Refusal {
    tracing::warn!("{message}");
    Refusal::new(ErrorCode::Internal, UNANSWERED)
}

/// A followed turn's frames as they arrive from its owner.
pub struct BusFrames {
    frames: async_nats::Subscriber,
    /// The parts of a split frame so far.
    parts: Vec<u8>,
}

/// One frame from the owner: encoded as it was there, and whether it ends the turn.
pub struct FollowedFrame {
    pub frame: Arc<SharedFrame>,
    pub ends_turn: bool,
}

impl BusFrames {
    /// The next frame, `None` when none came within `wait` (or the bus closed).
    pub async fn next(&mut self, wait: Duration) -> Option<FollowedFrame> {
        let payload = loop {
            let message = tokio::time::timeout(wait, self.frames.next())
                .await
                .ok()??;
            let part = message
                .headers
                .as_ref()
                .and_then(|h| h.get(PART_HEADER))
                .and_then(|v| parse_part(v.as_str()));
            match part {
                None => break message.payload,
                Some((index, count)) => {
                    if index == 1 {
                        self.parts.clear();
                    }
                    if self.parts.len() + message.payload.len() > MAX_JOINED {
                        self.parts = Vec::new();
                        continue;
                    }
                    self.parts.extend_from_slice(&message.payload);
                    if index == count {
                        break Bytes::from(std::mem::take(&mut self.parts));
                    }
                }
            }
        };
        let head: FrameHead = serde_json::from_slice(&payload).unwrap_or_default();
        Some(FollowedFrame {
            ends_turn: head.ends_turn(),
            frame: SharedFrame::from_json(head.seq, payload),
        })
    }

    pub async fn close(mut self) {
        let _ = self.frames.unsubscribe().await;
    }
}

/// `i/n` of a split frame's part.
fn parse_part(text: &str) -> Option<(usize, usize)> {
    let (index, count) = text.split_once('/')?;
    let (index, count) = (index.parse().ok()?, count.parse().ok()?);
    (index >= 1 && index <= count).then_some((index, count))
}

/// What a follower reads of each frame: its `seq`, and whether it ends the turn.
#[derive(Debug, Default, Deserialize)]
struct FrameHead {
    #[serde(rename = "type", default)]
    kind: String,
    seq: Option<u64>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    depth: u32,
}

impl FrameHead {
    fn ends_turn(&self) -> bool {
        self.kind == "chunk" && self.done && self.depth == 0
    }
}

/// A follower on another replica: frames go out on its inbox, in order.
pub struct BusSink {
    id: SubscriberId,
    tx: mpsc::UnboundedSender<Bytes>,
    queued: Arc<AtomicUsize>,
    limit: usize,
    /// Set after the turn's final chunk: the follower needs nothing more.
    ended: AtomicBool,
}

impl FrameSink for BusSink {
    fn id(&self) -> SubscriberId {
        self.id
    }

    fn is_gone(&self) -> bool {
        self.ended.load(Ordering::Relaxed) || self.tx.is_closed()
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn send(&self, out: Outgoing<'_>) -> bool {
        if self.ended.load(Ordering::Relaxed) {
            return false;
        }
        let bytes = out.frame.json_bytes();
        let before = self.queued.fetch_add(bytes.len(), Ordering::Relaxed);
        if before > 0 && before + bytes.len() > self.limit {
            return false;
        }
        let ends = match out.event {
            Some(event) => matches!(
                event,
                weft_protocol::ServerEvent::Chunk {
                    done: true,
                    depth: 0,
                    ..
                }
            ),
            None => serde_json::from_slice::<FrameHead>(&bytes)
                .unwrap_or_default()
                .ends_turn(),
        };
        if ends {
            self.ended.store(true, Ordering::Relaxed);
        }
        self.tx.send(bytes).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_cross_the_bus_unchanged() {
        let command = Command::Approval {
            user: "alice".into(),
            tool_call_id: "call_1".into(),
            decision: ApprovalDecision::Deny,
            reason: Some("not now".into()),
        };
        let text = serde_json::to_string(&command).unwrap_or_default();
        assert!(text.contains("\"op\":\"approval\""), "{text}");
        let back: Command = serde_json::from_str(&text).unwrap_or(Command::Stop {
            user: String::new(),
            thread_id: String::new(),
            wait: false,
        });
        assert_eq!(back, command);
    }

    #[test]
    fn only_the_top_level_final_chunk_ends_a_followed_turn() {
        let head = |json: &str| serde_json::from_str::<FrameHead>(json).unwrap_or_default();
        assert!(head(r#"{"type":"chunk","content":"","done":true,"depth":0,"seq":9}"#).ends_turn());
        assert!(
            !head(r#"{"type":"chunk","content":"","done":true,"depth":1,"seq":9}"#).ends_turn()
        );
        assert!(!head(r#"{"type":"chunk","content":"x","done":false,"seq":9}"#).ends_turn());
        assert!(!head(r#"{"type":"turn_started","seq":1}"#).ends_turn());
    }
}
