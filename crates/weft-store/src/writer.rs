//! The one writer (group commit): every hot-path write is a [`WriteOp`] handed to a task
//! that takes everything queued, writes it in one transaction with multi-row statements,
//! commits once, and hands the batch's acknowledgements to a second task, which tells each
//! submitter in commit order while the next batch is written. A turn's start, and a write
//! someone waits for, go ahead of what is queued (the progress of turns under way, which
//! nobody waits for); a queued write can still be moved ahead when someone starts waiting
//! for it ([`Queued::hurry`]). A failed batch is retried op by op, so one bad op fails only
//! its own submitter.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::any::AnyArguments;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyConnection, AnyPool};
use tokio::sync::{mpsc, oneshot, OwnedRwLockWriteGuard, RwLock};

use crate::leases::{fence_sql, LeaseRow};
use crate::rows::{ApprovalRow, ItemRow, ModelCallRow, NewMessage, ThreadRow};
use crate::statements::{
    insert_text, kept, numbered, padded, placeholders_after, InsertSql, LIST_MAX,
};
use crate::{now_ms, Backend, Result, StoreError};

/// One unit of work for the writer.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Several ops written together, in order.
    Many(Vec<WriteOp>),
    /// A turn starts: its thread (when new), then its messages (the user message and the
    /// assistant message with status `running`).
    BeginTurn {
        thread: Option<ThreadRow>,
        messages: Vec<NewMessage>,
    },
    /// A thread's messages from `position` on are dropped (with their record items and
    /// leases; the model-call and tool-call audit rows stay): a message that replaces an
    /// earlier exchange, written with that message's start. Running messages are never
    /// dropped.
    DropMessages {
        thread_id: String,
        position: i64,
    },
    /// Record items, inserted, or replacing the kind and body of the row at their id (a
    /// streaming draft becomes the final item, or the pair of items that starts with it).
    Items(Vec<ItemRow>),
    /// [`WriteOp::Items`] as a writer takes them: each body packed on its way in, by the
    /// submitting thread ([`PackedItem`]), so a row waiting for the writer holds its
    /// compressed body and the writer's thread does not compress (on PostgreSQL, it unpacks
    /// the text as it binds it).
    PackedItems(Vec<PackedItem>),
    /// A turn ends: its assistant message (inserted or replaced).
    FinishTurn {
        message: NewMessage,
    },
    /// Provider calls of a turn, each once (written again after a lost connection, kept once).
    ModelCalls(Vec<ModelCallRow>),
    InsertApproval(ApprovalRow),
    /// A turn's lease, written with its start.
    Lease(LeaseRow),
    /// The batch commits only if `owner` holds `message_id`'s unexpired lease (checked after
    /// the batch's new leases are in, before its turn ends remove them); otherwise this op
    /// fails with the lease lost and the batch's other ops commit without it.
    Fence {
        message_id: String,
        owner: String,
    },
    DecideApproval {
        thread_id: String,
        id: String,
        status: String,
    },
    SetThreadMode {
        id: String,
        mode: String,
    },
    SetThreadAgent {
        id: String,
        agent: Option<String>,
    },
    /// The tools the thread's user allowed for the chat (the whole set).
    SetAllowedTools {
        id: String,
        tools: Vec<String>,
    },
}

impl WriteOp {
    fn rows(&self) -> usize {
        match self {
            WriteOp::Many(ops) => ops.iter().map(WriteOp::rows).sum(),
            WriteOp::BeginTurn { thread, messages } => {
                messages.len() + usize::from(thread.is_some())
            }
            WriteOp::Items(items) => items.len(),
            WriteOp::PackedItems(items) => items.len(),
            WriteOp::DropMessages { .. } | WriteOp::FinishTurn { .. } => 1,
            WriteOp::ModelCalls(models) => models.len(),
            WriteOp::Fence { .. } => 0,
            WriteOp::InsertApproval(_)
            | WriteOp::Lease(_)
            | WriteOp::DecideApproval { .. }
            | WriteOp::SetThreadMode { .. }
            | WriteOp::SetThreadAgent { .. }
            | WriteOp::SetAllowedTools { .. } => 1,
        }
    }

    /// The op as a writer takes it: items' bodies packed.
    fn packed(self) -> WriteOp {
        match self {
            WriteOp::Items(rows) => {
                WriteOp::PackedItems(rows.into_iter().map(PackedItem::new).collect())
            }
            WriteOp::Many(ops) => WriteOp::Many(ops.into_iter().map(WriteOp::packed).collect()),
            op => op,
        }
    }

    /// Whether the op goes ahead of the queue: a turn's start, and the thread settings a start
    /// may carry too (so that those keep the order they were asked in). Whatever else a turn
    /// writes comes after its start, so moving starts forward never reorders a turn.
    fn goes_first(&self) -> bool {
        match self {
            WriteOp::Many(ops) => {
                ops.iter().any(|op| matches!(op, WriteOp::BeginTurn { .. }))
                    || (!ops.is_empty() && ops.iter().all(WriteOp::goes_first))
            }
            WriteOp::BeginTurn { .. }
            | WriteOp::SetThreadMode { .. }
            | WriteOp::SetThreadAgent { .. }
            | WriteOp::SetAllowedTools { .. } => true,
            _ => false,
        }
    }
}

/// Why a write was not committed; shared by every submitter of a failed batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the write was not committed: {0}")]
pub struct WriteError(pub String);

/// What a write that started a turn on a thread that already runs one fails with.
const THREAD_BUSY: &str = "the thread already has a turn running";

/// What a write that creates a thread whose id is taken fails with.
const THREAD_TAKEN: &str = "a thread of that id exists";

/// What a write whose fence failed starts with ([`StoreError::LeaseLost`]'s text).
const LEASE_LOST: &str = "this replica no longer holds the lease of turn ";

impl WriteError {
    fn from_store(error: &StoreError) -> WriteError {
        if is_second_running_turn(error) {
            return WriteError(THREAD_BUSY.to_owned());
        }
        if is_existing_thread(error) {
            return WriteError(THREAD_TAKEN.to_owned());
        }
        WriteError(error.to_string())
    }

    /// The write started a turn on a thread where another turn (started through another
    /// replica meanwhile, or left by a dead one) is still running.
    pub fn is_thread_busy(&self) -> bool {
        self.0 == THREAD_BUSY
    }

    /// The write created a thread whose id another write (through another replica) took
    /// meanwhile.
    pub fn is_thread_taken(&self) -> bool {
        self.0 == THREAD_TAKEN
    }

    /// The write's fence failed: its turn's lease is no longer this replica's (another
    /// replica took it over, or its thread was deleted).
    pub fn is_lease_lost(&self) -> bool {
        self.0.starts_with(LEASE_LOST)
    }
}

/// Log a write that failed: at `error`, unless its fence failed, which is how a replica
/// learns (and the turn's own warning says) that its turn's lease went elsewhere or its
/// thread was deleted.
fn log_failure(error: &StoreError) {
    if error.is_lease_lost() {
        tracing::warn!(error = %error, "a write was fenced off");
    } else {
        tracing::error!(error = %error, "a write failed");
    }
}

/// `messages_one_running_turn` refused a second running turn in a thread.
fn is_second_running_turn(error: &StoreError) -> bool {
    let StoreError::Database(sqlx::Error::Database(db)) = error else {
        return false;
    };
    db.kind() == sqlx::error::ErrorKind::UniqueViolation
        && (db.constraint() == Some("messages_one_running_turn")
            // SQLite names the columns, not the index; it is the only unique one on them.
            || db.message().contains("messages.thread_id"))
}

fn is_existing_thread(error: &StoreError) -> bool {
    let StoreError::Database(sqlx::Error::Database(db)) = error else {
        return false;
    };
    db.kind() == sqlx::error::ErrorKind::UniqueViolation
        && (db.constraint() == Some("threads_pkey") || db.message().contains("threads.id"))
}

/// Called once the op is committed (or is known not to be).
pub type Done = Box<dyn FnOnce(std::result::Result<(), WriteError>) + Send>;

/// Told about every commit, for metrics.
pub trait WriteObserver: Send + Sync {
    fn committed(&self, ops: usize, rows: usize, elapsed: Duration, ok: bool);
}

enum Job {
    Write {
        op: Box<WriteOp>,
        done: Option<Done>,
    },
    /// A write that can still be moved ahead of the queue; empty once it was.
    Movable(Arc<Slot>),
    Close(oneshot::Sender<()>),
}

impl Job {
    fn write(op: WriteOp, done: Option<Done>) -> Job {
        Job::Write {
            op: Box::new(op),
            done,
        }
    }
}

/// A movable write, until the writer or [`Queued::hurry`] takes it out.
type Slot = std::sync::Mutex<Option<(WriteOp, Option<Done>)>>;

/// The write in `slot`, taken out (none once the writer or a hurry took it).
fn take(slot: &Slot) -> Option<(WriteOp, Option<Done>)> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

/// A write for the writer's queue, which whoever holds it may move ahead of the queue once
/// someone waits for it. Made by `Store::movable` and handed over by [`Queued::queue`]
/// (behind what is queued) or [`Queued::hurry`] (ahead), so that a submitter can keep it
/// where others find it before it is in any queue.
#[derive(Clone)]
pub struct Queued {
    slot: Arc<Slot>,
    first: mpsc::UnboundedSender<Job>,
    rest: mpsc::UnboundedSender<Job>,
}

impl Queued {
    /// Hand the write to the writer behind what is queued (a no-op once it was moved ahead).
    pub fn queue(&self) {
        if let Err(mpsc::error::SendError(job)) = self.rest.send(Job::Movable(self.slot.clone())) {
            closed(job);
        }
    }

    /// Move the write ahead of the queue, unless the writer has taken it already (then it is
    /// in the batch being written, or committed): either way it commits before anything
    /// submitted after this call.
    pub fn hurry(&self) {
        let Some((op, done)) = take(&self.slot) else {
            return;
        };
        // Counted in `queued` when it was first submitted.
        if let Err(mpsc::error::SendError(job)) = self.first.send(Job::write(op, done)) {
            closed(job);
        }
    }
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").finish_non_exhaustive()
    }
}

/// A job the writer will never take: its submitter is told the store is closed.
fn closed(job: Job) {
    let done = match job {
        Job::Write { done, .. } => done,
        Job::Movable(slot) => take(&slot).and_then(|(_, done)| done),
        Job::Close(_) => None,
    };
    if let Some(done) = done {
        done(Err(WriteError("the store is closed".into())));
    }
}

/// The submitting side of the writer. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Writer {
    tx: mpsc::UnboundedSender<Job>,
    /// Ops that go ahead of the queue ([`WriteOp::goes_first`]).
    first: mpsc::UnboundedSender<Job>,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    observer: OnceLock<Arc<dyn WriteObserver>>,
    /// Ops submitted and not yet committed (or failed).
    queued: AtomicUsize,
    /// Held (write side) to keep the writer from committing; the writer takes the read side
    /// around each commit.
    hold: Arc<RwLock<()>>,
    /// When the batch being acknowledged started: before any of its rows (and any time a
    /// row computes, such as a lease's expiry) was written. Set by the acknowledger.
    batch_started: std::sync::Mutex<Option<Instant>>,
}

/// One committed batch's acknowledgements, or the writer closing.
enum Acks {
    Batch {
        started: Instant,
        dones: Vec<(Done, std::result::Result<(), WriteError>)>,
    },
    Close(oneshot::Sender<()>),
}

/// While this lives the writer commits nothing; ops queue up (for tests and maintenance).
pub struct WriteHold(#[allow(dead_code)] OwnedRwLockWriteGuard<()>);

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

/// Most ops taken into one transaction on SQLite, where every commit costs a WAL write and a
/// wake-up of the connection's thread for each statement: under 10,000 streaming turns a cap
/// of 256 raised the commits from 2,300–4,600 to 8,100–9,000 and lengthened the overrun
/// (BENCHMARKS).
const MAX_BATCH: usize = 1024;

/// Most ops taken into one transaction on PostgreSQL. A commit's acknowledgements (a burst's
/// first frames among them) wait for its last row, and a big batch grows the next one: with
/// 1,024, a burst of 1,000 W1 turns got its first chunk at p99 ~180 ms, with 256 at ~110 ms,
/// at the same or better throughput and memory within the runs' spread (BENCHMARKS).
const MAX_BATCH_POSTGRES: usize = 256;

/// Most ops taken into one transaction on `backend`.
fn max_batch(backend: Backend) -> usize {
    match backend {
        Backend::Postgres => MAX_BATCH_POSTGRES,
        Backend::Sqlite => MAX_BATCH,
    }
}

impl Writer {
    /// When the batch being acknowledged (or last acknowledged) started; read in a [`Done`]
    /// callback, an instant before anything of that callback's batch was written (now,
    /// before any batch).
    pub fn batch_started(&self) -> Instant {
        let started = *self
            .shared
            .batch_started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        started.unwrap_or_else(Instant::now)
    }

    /// Start the writer over its own connection to `url` (one writer per database), made by
    /// `options`. It runs on a thread and runtime of its own: a server under load has
    /// thousands of tasks ready to run, and a writer among them would wait behind them at
    /// every round trip of every commit. Its acknowledgements run on the caller's runtime.
    pub async fn start(options: AnyPoolOptions, url: &str, backend: Backend) -> Result<Writer> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (first, first_rx) = mpsc::unbounded_channel();
        let shared: Arc<Shared> = Arc::default();
        let queues = Queues {
            first: first_rx,
            rest: rx,
        };
        let (acks, acks_rx) = mpsc::unbounded_channel();
        tokio::spawn(acknowledge(acks_rx, shared.clone()));
        let (ready, connected) = oneshot::channel();
        let url = url.to_owned();
        let writing = shared.clone();
        std::thread::Builder::new()
            .name("weft-writer".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => return drop(ready.send(Err(StoreError::Io(e)))),
                };
                runtime.block_on(async move {
                    match options.connect(&url).await {
                        Ok(pool) => {
                            let _ = ready.send(Ok(()));
                            run(pool, backend, queues, writing, acks).await;
                        }
                        Err(e) => drop(ready.send(Err(e.into()))),
                    }
                });
            })?;
        connected
            .await
            .unwrap_or_else(|_| Err(StoreError::Write("the writer did not start".into())))?;
        Ok(Writer { tx, first, shared })
    }

    /// Queue `op`; a start (and the settings it may carry) goes ahead of the queue.
    pub fn submit(&self, op: WriteOp, done: Option<Done>) {
        let op = op.packed();
        self.send(op.goes_first(), Job::write(op, done));
    }

    /// Queue `op` ahead of what is queued (someone waits for it). Only for an op that need
    /// not follow anything queued and not yet committed.
    pub fn submit_ahead(&self, op: WriteOp, done: Option<Done>) {
        self.send(true, Job::write(op.packed(), done));
    }

    /// Queue `op` (not ahead) so that it can still be moved ahead.
    pub fn submit_movable(&self, op: WriteOp, done: Option<Done>) -> Queued {
        let queued = self.movable(op, done);
        queued.queue();
        queued
    }

    /// `op`, counted as submitted, to hand over with [`Queued::queue`] or [`Queued::hurry`]
    /// (exactly one of them first; the other may follow and does nothing).
    pub fn movable(&self, op: WriteOp, done: Option<Done>) -> Queued {
        self.shared.queued.fetch_add(1, Ordering::Relaxed);
        Queued {
            slot: Arc::new(std::sync::Mutex::new(Some((op.packed(), done)))),
            first: self.first.clone(),
            rest: self.tx.clone(),
        }
    }

    fn send(&self, ahead: bool, job: Job) {
        self.shared.queued.fetch_add(1, Ordering::Relaxed);
        let queue = if ahead { &self.first } else { &self.tx };
        if let Err(mpsc::error::SendError(job)) = queue.send(job) {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            closed(job);
        }
    }

    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::Relaxed)
    }

    pub async fn hold(&self) -> WriteHold {
        WriteHold(self.shared.hold.clone().write_owned().await)
    }

    /// Queue `op` (ahead of the queue when `ahead`) and wait for its commit.
    pub async fn write(&self, op: WriteOp, ahead: bool) -> std::result::Result<(), WriteError> {
        let (tx, rx) = oneshot::channel();
        let done: Done = Box::new(move |result| {
            let _ = tx.send(result);
        });
        if ahead {
            self.submit_ahead(op, Some(done));
        } else {
            self.submit(op, Some(done));
        }
        rx.await
            .unwrap_or_else(|_| Err(WriteError("the writer stopped".into())))
    }

    pub fn observe(&self, observer: Arc<dyn WriteObserver>) {
        let _ = self.shared.observer.set(observer);
    }

    /// Write everything queued before this call, then stop.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Job::Close(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// The writer's two queues: ops that go first, and the rest (and `close`).
struct Queues {
    first: mpsc::UnboundedReceiver<Job>,
    rest: mpsc::UnboundedReceiver<Job>,
}

impl Queues {
    /// Wait for work: the job that came, and whether it goes first; `None` once both queues
    /// are closed and empty.
    async fn next(&mut self) -> Option<(Job, bool)> {
        tokio::select! {
            biased;
            Some(job) = self.first.recv() => Some((job, true)),
            Some(job) = self.rest.recv() => Some((job, false)),
            else => None,
        }
    }

    /// See [`drain`].
    fn drain(&mut self, came: (Job, bool), jobs: &mut Vec<Job>, max: usize) {
        drain(&mut self.first, &mut self.rest, came, jobs, max);
    }
}

/// Where the writer takes waiting jobs from: one of its queues (or a test's stand-in).
trait Source {
    /// The next job waiting, if any.
    fn next_waiting(&mut self) -> Option<Job>;
}

impl Source for mpsc::UnboundedReceiver<Job> {
    fn next_waiting(&mut self) -> Option<Job> {
        self.try_recv().ok()
    }
}

/// Take every job waiting to go first, then the rest in order, up to `max`; `came` (the
/// job that woke the writer) heads its own queue's. Once any of the rest is taken, whatever
/// went first meanwhile is taken too, whatever the bound, and put ahead of it: a turn's start
/// queued while the rest was being taken (the writer's thread can be paused there for
/// milliseconds) would otherwise commit in the next batch, after the turn's own round, taken
/// from the rest, whose fence then finds no lease.
fn drain(
    first: &mut impl Source,
    rest: &mut impl Source,
    (job, came_first): (Job, bool),
    jobs: &mut Vec<Job>,
    max: usize,
) {
    let mut came = Some(job);
    if came_first {
        jobs.extend(came.take());
    }
    take_while_room(first, jobs, max);
    let firsts = jobs.len();
    jobs.extend(came.take());
    take_while_room(rest, jobs, max);
    if jobs.len() > firsts {
        let meanwhile: Vec<Job> = std::iter::from_fn(|| first.next_waiting()).collect();
        jobs.splice(firsts..firsts, meanwhile);
    }
}

/// Take jobs from `source` until none waits or the batch holds `max`.
fn take_while_room(source: &mut impl Source, jobs: &mut Vec<Job>, max: usize) {
    while jobs.len() < max {
        match source.next_waiting() {
            Some(job) => jobs.push(job),
            None => break,
        }
    }
}

/// The writer's loop. Acknowledging a batch (a turn's start releases its held frames) is
/// `acks`' task's: it overlaps writing the next batch instead of delaying it.
async fn run(
    pool: AnyPool,
    backend: Backend,
    mut queues: Queues,
    shared: Arc<Shared>,
    acks: mpsc::UnboundedSender<Acks>,
) {
    let mut jobs = Vec::with_capacity(64);
    while let Some(came) = queues.next().await {
        // While held (tests, maintenance) the writer waits here; what comes meanwhile joins
        // this batch in its place.
        let held = shared.hold.read().await;
        queues.drain(came, &mut jobs, max_batch(backend));
        let closing = write_jobs(&pool, backend, &mut jobs, &shared, &acks).await;
        drop(held);
        if let Some(ack) = closing {
            // A write moved ahead while this batch was being taken is written too; one moved
            // after this is told the store is closed.
            queues.first.close();
            while let Ok(job) = queues.first.try_recv() {
                jobs.push(job);
            }
            write_jobs(&pool, backend, &mut jobs, &shared, &acks).await;
            pool.close().await;
            // Acknowledged once every batch before it is.
            let _ = acks.send(Acks::Close(ack));
            break;
        }
    }
}

/// Write `jobs` (taken out) in one batch and hand its acknowledgements on; the `close` among
/// them, if any.
async fn write_jobs(
    pool: &AnyPool,
    backend: Backend,
    jobs: &mut Vec<Job>,
    shared: &Shared,
    acks: &mpsc::UnboundedSender<Acks>,
) -> Option<oneshot::Sender<()>> {
    let mut batch = Vec::with_capacity(jobs.len());
    let mut closing = None;
    for job in jobs.drain(..) {
        match job {
            Job::Write { op, done } => batch.push((*op, done)),
            Job::Movable(slot) => {
                // Empty when it was moved ahead: it comes again from there.
                batch.extend(take(&slot));
            }
            Job::Close(ack) => closing = Some(ack),
        }
    }
    if !batch.is_empty() {
        let ops = batch.len();
        let started = Instant::now();
        let dones = commit_batch(pool, backend, batch, shared.observer.get()).await;
        shared.queued.fetch_sub(ops, Ordering::Relaxed);
        let _ = acks.send(Acks::Batch { started, dones });
    }
    closing
}

/// Tell each batch's submitters, batch after batch in commit order.
async fn acknowledge(mut acks: mpsc::UnboundedReceiver<Acks>, shared: Arc<Shared>) {
    while let Some(job) = acks.recv().await {
        match job {
            Acks::Batch { started, dones } => {
                *shared
                    .batch_started
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(started);
                for (done, result) in dones {
                    done(result);
                }
            }
            Acks::Close(ack) => {
                let _ = ack.send(());
            }
        }
    }
}

/// Write `batch`; what each submitter is to be told.
async fn commit_batch(
    pool: &AnyPool,
    backend: Backend,
    batch: Vec<(WriteOp, Option<Done>)>,
    observer: Option<&Arc<dyn WriteObserver>>,
) -> Vec<(Done, std::result::Result<(), WriteError>)> {
    let started = Instant::now();
    let ops: Vec<&WriteOp> = batch.iter().map(|(op, _)| op).collect();
    let rows: usize = ops.iter().map(|op| op.rows()).sum();
    let mut result = write_in_one_transaction(pool, backend, &ops).await;
    // A connection that died (not the data) is no reason to lose the batch: again on a
    // fresh connection, a few times, backing off.
    for wait in RECONNECT_WAITS {
        match &result {
            Err(e) if is_connection_lost(e) => {
                tracing::warn!(error = %e, ops = ops.len(), "the database connection was lost; writing the batch again");
                tokio::time::sleep(wait).await;
                result = write_in_one_transaction(pool, backend, &ops).await;
            }
            _ => break,
        }
    }
    if let Some(observer) = observer {
        observer.committed(ops.len(), rows, started.elapsed(), result.is_ok());
    }
    match result {
        Err(e) if batch.len() > 1 => {
            // Find the culprit: each op on its own, so the others still commit.
            tracing::warn!(error = %e, ops = batch.len(), "a batch failed; writing its ops one by one");
            let mut dones = Vec::with_capacity(batch.len());
            for (op, done) in batch {
                let result = write_in_one_transaction(pool, backend, &[&op]).await;
                if let Some(observer) = observer {
                    observer.committed(1, op.rows(), started.elapsed(), result.is_ok());
                }
                if let Err(e) = &result {
                    log_failure(e);
                }
                if let Some(done) = done {
                    dones.push((done, result.map_err(|e| WriteError::from_store(&e))));
                }
            }
            dones
        }
        // Committed, or one op that failed: each submitter is told the same.
        result => {
            if let Err(e) = &result {
                log_failure(e);
            }
            let told = result.map_err(|e| WriteError::from_store(&e));
            batch
                .into_iter()
                .filter_map(|(_, done)| Some((done?, told.clone())))
                .collect()
        }
    }
}

/// Every op of the batch grouped into multi-row statements, in an order that respects
/// references (threads, then messages, then what points at them).
#[derive(Default)]
struct Plan<'a> {
    threads: Vec<&'a ThreadRow>,
    drops: Vec<(&'a str, i64)>,
    begin_messages: Vec<&'a NewMessage>,
    touched: Vec<&'a str>,
    /// Existing threads a turn starts on, each with its first message's place: nothing may
    /// be there yet (another replica's turn started meanwhile took it).
    continued: Vec<(&'a str, i64)>,
    modes: Vec<(&'a str, &'a str)>,
    agents: Vec<(&'a str, Option<&'a str>)>,
    allowed: Vec<(&'a str, &'a [String])>,
    items: Vec<ItemRef<'a>>,
    item_at: HashMap<(&'a str, i64), usize>,
    approvals: Vec<&'a ApprovalRow>,
    decisions: Vec<(&'a str, &'a str, &'a str)>,
    finished: Vec<&'a NewMessage>,
    models: Vec<&'a ModelCallRow>,
    leases: Vec<&'a LeaseRow>,
    fences: Vec<(&'a str, &'a str)>,
}

impl<'a> Plan<'a> {
    fn add(&mut self, op: &'a WriteOp) {
        match op {
            WriteOp::Many(ops) => ops.iter().for_each(|op| self.add(op)),
            WriteOp::BeginTurn { thread, messages } => {
                match thread {
                    Some(t) => self.threads.push(t),
                    None => {
                        if let Some(m) = messages.first() {
                            self.touched.push(&m.thread_id);
                            self.continued.push((&m.thread_id, m.position));
                        }
                    }
                }
                self.begin_messages.extend(messages);
            }
            WriteOp::DropMessages {
                thread_id,
                position,
            } => self.drops.push((thread_id, *position)),
            WriteOp::Items(rows) => rows
                .iter()
                .for_each(|row| self.add_item(ItemRef { row, packed: None })),
            WriteOp::PackedItems(items) => {
                items.iter().for_each(|item| self.add_item(item.as_ref()))
            }
            WriteOp::FinishTurn { message } => self.finished.push(message),
            WriteOp::ModelCalls(models) => self.models.extend(models),
            WriteOp::InsertApproval(row) => self.approvals.push(row),
            WriteOp::Lease(row) => self.leases.push(row),
            WriteOp::Fence { message_id, owner } => self.fences.push((owner, message_id)),
            WriteOp::DecideApproval {
                thread_id,
                id,
                status,
            } => self.decisions.push((thread_id, id, status)),
            WriteOp::SetThreadMode { id, mode } => self.modes.push((id, mode)),
            WriteOp::SetThreadAgent { id, agent } => self.agents.push((id, agent.as_deref())),
            WriteOp::SetAllowedTools { id, tools } => self.allowed.push((id, tools)),
        }
    }

    fn add_item(&mut self, item: ItemRef<'a>) {
        // The same item twice in one statement is an error: the later one wins.
        let key = (&*item.row.message_id, item.row.position);
        match self.item_at.get(&key) {
            Some(&i) => self.items[i] = item,
            None => {
                self.item_at.insert(key, self.items.len());
                self.items.push(item);
            }
        }
    }

    /// How many rows of each kind the plan writes, items and fences aside.
    fn rows_besides_items(&self) -> [usize; 12] {
        [
            self.threads.len(),
            self.drops.len(),
            self.begin_messages.len(),
            self.touched.len(),
            self.modes.len(),
            self.agents.len(),
            self.allowed.len(),
            self.approvals.len(),
            self.decisions.len(),
            self.finished.len(),
            self.models.len(),
            self.leases.len(),
        ]
    }

    /// Whether the whole plan is one statement, atomic on its own.
    fn is_one_statement(&self) -> bool {
        let rows = self.rows_besides_items();
        let busy: Vec<usize> = rows
            .into_iter()
            .chain([self.items.len()])
            .filter(|&n| n > 0)
            .collect();
        // A fence checks before what it guards, and a turn's end also removes its lease.
        let alone = self.fences.is_empty() && self.finished.is_empty();
        alone && busy.len() == 1 && CHUNKS.contains(&busy[0]) && self.items_fit_one_statement()
    }

    /// Whether the items (if any) go out in one statement.
    fn items_fit_one_statement(&self) -> bool {
        self.items.is_empty() || chunk_len(&self.items, item_bytes) == self.items.len()
    }

    /// Whether the plan is only rounds of turns one replica runs: their fences and items that
    /// fit one statement. On PostgreSQL that statement checks the leases itself, so the
    /// round needs no transaction around a separate check (one round trip instead of four).
    fn is_fenced_round(&self, b: Backend) -> bool {
        let others = self.rows_besides_items();
        b == Backend::Postgres
            && others.iter().all(|&n| n == 0)
            && !self.items.is_empty()
            && self.items_fit_one_statement()
            && (1..=LIST_MAX).contains(&self.fences.len())
            && self
                .fences
                .iter()
                .all(|(owner, _)| *owner == self.fences[0].0)
    }

    /// The items, inserted only if every fence's lease is held (and locked meanwhile); a
    /// statement that inserts nothing found a lease lost.
    async fn execute_fenced_round(&self, conn: &mut AnyConnection) -> Result<()> {
        let mut ids: Vec<&str> = self.fences.iter().map(|(_, id)| *id).collect();
        ids.sort_unstable();
        ids.dedup();
        // The list padded (its texts are few); the leases it must find, counted apart.
        let list = padded(&ids);
        let shape = (
            "fenced round",
            "",
            Backend::Postgres,
            list.len(),
            self.items.len(),
        );
        let text = kept(shape, || {
            let values = placeholders_after(
                Backend::Postgres,
                3 + list.len(),
                self.items.len(),
                ITEMS.columns,
            );
            format!(
                "WITH held AS (SELECT message_id FROM turn_leases WHERE owner = $1 AND expires_at > $2 \
                 AND message_id IN ({}) FOR SHARE) \
                 {} SELECT * FROM (VALUES {values}) AS v WHERE (SELECT count(*) FROM held) = $3{} RETURNING 1",
                numbered(4, list.len()),
                ITEMS.head,
                ITEMS.tail
            )
        });
        let mut query = sqlx::query(&text)
            .bind(self.fences[0].0)
            .bind(now_ms())
            .bind(ids.len() as i64);
        for id in list {
            query = query.bind(id);
        }
        let items = unpacked(&self.items)?;
        for item in &items {
            query = bind_item(query, item);
        }
        let written = query.fetch_all(&mut *conn).await?;
        if written.len() != self.items.len() {
            return Err(StoreError::LeaseLost(ids[0].to_owned()));
        }
        Ok(())
    }

    async fn execute(&self, conn: &mut AnyConnection, b: Backend) -> Result<()> {
        insert_many(conn, b, &THREADS, &self.threads, bind_thread, light).await?;
        // Each continued thread's row locked first: starts on one thread through two replicas
        // take turns here, and the second sees what the first wrote.
        touch_threads(conn, b, &self.touched).await?;
        check_places_free(conn, &self.continued).await?;
        for (thread_id, position) in &self.drops {
            drop_messages(conn, thread_id, *position).await?;
        }
        insert_many(
            conn,
            b,
            &MESSAGES,
            &self.begin_messages,
            bind_message,
            light,
        )
        .await?;
        insert_many(conn, b, &LEASES, &self.leases, bind_lease, light).await?;
        check_fences(conn, b, &self.fences, &self.finished).await?;
        for (id, mode) in &self.modes {
            sqlx::query("UPDATE threads SET permission_mode = $1 WHERE id = $2")
                .bind(*mode)
                .bind(*id)
                .execute(&mut *conn)
                .await?;
        }
        for (id, agent) in &self.agents {
            sqlx::query("UPDATE threads SET agent = $1 WHERE id = $2")
                .bind(*agent)
                .bind(*id)
                .execute(&mut *conn)
                .await?;
        }
        for (id, tools) in &self.allowed {
            let tools = serde_json::to_string(tools).unwrap_or_else(|_| "[]".to_owned());
            sqlx::query("UPDATE threads SET allowed_tools = $1 WHERE id = $2")
                .bind(tools)
                .bind(*id)
                .execute(&mut *conn)
                .await?;
        }
        match b {
            Backend::Postgres => {
                let items = unpacked(&self.items)?;
                insert_many(conn, b, &ITEMS, &items, bind_item, text_item_bytes).await?;
            }
            Backend::Sqlite => {
                insert_many(conn, b, &ITEMS, &self.items, bind_packed_item, item_bytes).await?
            }
        }
        insert_many(conn, b, &APPROVALS, &self.approvals, bind_approval, light).await?;
        for (thread_id, id, status) in &self.decisions {
            sqlx::query(
                "UPDATE approvals SET status = $1, decided_at = $2 WHERE thread_id = $3 AND id = $4 AND status = 'pending'",
            )
            .bind(*status)
            .bind(now_ms())
            .bind(*thread_id)
            .bind(*id)
            .execute(&mut *conn)
            .await?;
        }
        insert_many(
            conn,
            b,
            &FINISHED_MESSAGES,
            &self.finished,
            bind_message,
            light,
        )
        .await?;
        end_leases(conn, b, &self.finished, &self.fences).await?;
        insert_many(conn, b, &MODEL_CALLS, &self.models, bind_model_call, light).await?;
        Ok(())
    }
}

/// Fail unless every fence's owner holds its lease, unexpired (locked until the commit on
/// PostgreSQL). The lease of a turn the batch ends is checked by removing it: one statement
/// instead of a check and a removal.
async fn check_fences(
    conn: &mut AnyConnection,
    b: Backend,
    fences: &[(&str, &str)],
    finished: &[&NewMessage],
) -> Result<()> {
    let mut owners: Vec<&str> = fences.iter().map(|(owner, _)| *owner).collect();
    owners.sort_unstable();
    owners.dedup();
    let now = now_ms();
    // Sets, not scans: a batch of a thousand ends fences a thousand turns.
    let finished: HashSet<&str> = finished.iter().map(|m| m.id.as_str()).collect();
    for owner in owners {
        let mut ids: Vec<&str> = fences
            .iter()
            .filter(|(o, _)| *o == owner)
            .map(|(_, id)| *id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let (ending, going_on): (Vec<&str>, Vec<&str>) =
            ids.iter().partition(|id| finished.contains(**id));
        for (ids, ends) in [(ending, true), (going_on, false)] {
            for chunk in ids.chunks(LIST_MAX) {
                let list = padded(chunk);
                let text = fence_sql(b, list.len(), ends);
                let mut query = sqlx::query_scalar(&text).bind(owner).bind(now);
                for id in list {
                    query = query.bind(id);
                }
                let held: Vec<String> = query.fetch_all(&mut *conn).await?;
                if let Some(lost) = chunk.iter().find(|id| !held.iter().any(|h| h == *id)) {
                    return Err(StoreError::LeaseLost((*lost).to_owned()));
                }
            }
        }
    }
    Ok(())
}

/// A thread's finished messages from `position` on, with what hangs on them.
/// Fail with [`THREAD_BUSY`] when a message already holds the place a new turn's first
/// message takes: another turn of the thread started after this one read the thread.
async fn check_places_free(conn: &mut AnyConnection, continued: &[(&str, i64)]) -> Result<()> {
    for (thread_id, position) in continued {
        let taken =
            sqlx::query("SELECT 1 FROM messages WHERE thread_id = $1 AND position >= $2 LIMIT 1")
                .bind(*thread_id)
                .bind(*position)
                .fetch_optional(&mut *conn)
                .await?;
        if taken.is_some() {
            return Err(StoreError::Write(THREAD_BUSY.to_owned()));
        }
    }
    Ok(())
}

async fn drop_messages(conn: &mut AnyConnection, thread_id: &str, position: i64) -> Result<()> {
    const DROPPED: &str = "SELECT id FROM messages WHERE thread_id = $1 AND position >= $2 \
                           AND status <> 'running'";
    for text in [
        format!("DELETE FROM items WHERE message_id IN ({DROPPED})"),
        format!("DELETE FROM turn_leases WHERE message_id IN ({DROPPED})"),
        format!("DELETE FROM messages WHERE id IN ({DROPPED})"),
    ] {
        sqlx::query(&text)
            .bind(thread_id)
            .bind(position)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// A turn that ended needs no lease (a fenced one's went with its fence).
async fn end_leases(
    conn: &mut AnyConnection,
    b: Backend,
    finished: &[&NewMessage],
    fences: &[(&str, &str)],
) -> Result<()> {
    if finished.is_empty() {
        return Ok(());
    }
    let fenced: HashSet<&str> = fences.iter().map(|(_, id)| *id).collect();
    let unfenced: Vec<&str> = finished
        .iter()
        .map(|m| m.id.as_str())
        .filter(|id| !fenced.contains(id))
        .collect();
    for chunk in unfenced.chunks(LIST_MAX) {
        let list = padded(chunk);
        let text = kept(("end leases", "", b, list.len(), 0), || {
            let ids = numbered(1, list.len());
            format!("DELETE FROM turn_leases WHERE message_id IN ({ids})")
        });
        let mut query = sqlx::query(&text);
        for id in list {
            query = query.bind(id);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// How long the writer waits before writing a batch again after its connection was lost.
const RECONNECT_WAITS: [Duration; 5] = [
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(200),
    Duration::from_millis(500),
    Duration::from_secs(1),
];

/// Whether `error` says the connection (not the statement) failed: the server went away, the
/// session was terminated, the pool could not connect. Writing again on a fresh connection
/// may succeed.
pub(crate) fn is_connection_lost(error: &StoreError) -> bool {
    let StoreError::Database(error) = error else {
        return false;
    };
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_) => true,
        // SQLSTATE class 08 (connection exception); 57P01-57P03: the server shut the
        // session down or is restarting; 25P03: it ended a session whose transaction
        // stalled (this process was frozen mid-batch, `StoreSettings::stalled_transaction_ms`).
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03" | "25P03")
        }),
        _ => false,
    }
}

/// Every op of the batch in one transaction; a batch that is one statement needs no
/// BEGIN and COMMIT round trips. A connection that failed is closed, not pooled again.
async fn write_in_one_transaction(
    pool: &AnyPool,
    backend: Backend,
    ops: &[&WriteOp],
) -> Result<()> {
    let mut plan = Plan::default();
    for op in ops {
        plan.add(op);
    }
    let mut conn = pool.acquire().await?;
    let result = if plan.is_one_statement() {
        plan.execute(&mut conn, backend).await
    } else if plan.is_fenced_round(backend) {
        plan.execute_fenced_round(&mut conn).await
    } else {
        in_transaction(&mut conn, &plan, backend).await
    };
    if result.as_ref().is_err_and(is_connection_lost) {
        let _ = conn.close().await;
    }
    result
}

async fn in_transaction(conn: &mut AnyConnection, plan: &Plan<'_>, backend: Backend) -> Result<()> {
    let mut tx = sqlx::Connection::begin(conn).await?;
    plan.execute(&mut tx, backend).await?;
    tx.commit().await?;
    Ok(())
}

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, AnyArguments<'q>>;

// A thread or message that is already there is an error: thread ids can come from clients,
// and two new threads must never become one.
const THREADS: InsertSql = InsertSql {
    head: "INSERT INTO threads (id, owner, title, permission_mode, agent, created_at, updated_at)",
    columns: 7,
    tail: "",
};
pub(crate) const MESSAGES: InsertSql = InsertSql {
    head: "INSERT INTO messages (id, thread_id, role, content, execution_tree, permission_mode, status, \
           input_tokens, output_tokens, cost_usd, created_at, position, metadata)",
    columns: 13,
    tail: "",
};
const FINISHED_MESSAGES: InsertSql = InsertSql {
    head: MESSAGES.head,
    columns: 13,
    tail: " ON CONFLICT (id) DO UPDATE SET content = excluded.content, execution_tree = excluded.execution_tree, \
           status = excluded.status, input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens, \
           cost_usd = excluded.cost_usd, metadata = excluded.metadata",
};
pub(crate) const ITEMS: InsertSql = InsertSql {
    head: "INSERT INTO items (thread_id, message_id, position, kind, parent_id, depth, body, created_at)",
    columns: 8,
    // The kind too: a pair of items replaces the draft written at its first position.
    tail: " ON CONFLICT (message_id, position) DO UPDATE SET kind = excluded.kind, body = excluded.body",
};
const LEASES: InsertSql = InsertSql {
    head: "INSERT INTO turn_leases (message_id, owner, expires_at)",
    columns: 3,
    tail: "",
};
const APPROVALS: InsertSql = InsertSql {
    head: "INSERT INTO approvals (id, thread_id, tool, arguments, status, created_at, decided_at, injected_args)",
    columns: 8,
    tail: " ON CONFLICT DO NOTHING",
};
pub(crate) const MODEL_CALLS: InsertSql = InsertSql {
    head: "INSERT INTO model_calls (id, thread_id, message_id, user_id, provider, model, depth, input_tokens, \
           output_tokens, tool_calls, cost_usd, duration_ms, error, created_at)",
    columns: 14,
    tail: " ON CONFLICT (id) DO NOTHING",
};

/// Statement sizes: rows go out in power-of-two chunks, so each table needs only a handful
/// of distinct (prepared and cached) statements whatever the batch size.
const CHUNKS: [usize; 9] = [256, 128, 64, 32, 16, 8, 4, 2, 1];

/// Most bytes of values one statement carries. sqlx copies a statement's values twice on their
/// way out (into its arguments, then into the connection's write buffer, which keeps the size
/// of the largest statement it sent), so a burst's big items go out in smaller statements: at
/// the peak of a W1 burst on PostgreSQL, statements of up to 256 rounds held ~3 MB of copies.
const STATEMENT_BYTES: usize = 128 * 1024;

/// How many of `rows` the next statement takes: the largest chunk no longer than the rows
/// left and, where rows are weighed by `bytes`, no heavier than [`STATEMENT_BYTES`] (one row
/// at least).
fn chunk_len<T>(rows: &[T], bytes: fn(&T) -> usize) -> usize {
    let mut total = 0;
    let fit = rows
        .iter()
        .take(CHUNKS[0])
        .take_while(|row| {
            total += bytes(row);
            total <= STATEMENT_BYTES
        })
        .count()
        .max(1);
    CHUNKS.iter().copied().find(|&n| n <= fit).unwrap_or(1)
}

/// A row whose values are small: its table's statements are sized by row count alone.
fn light<T>(_: &T) -> usize {
    0
}

/// An item's values as SQLite binds them, roughly: its body (packed or not) and its keys.
fn item_bytes(item: &ItemRef<'_>) -> usize {
    row_bytes(
        item.row,
        item.packed.map_or(item.row.body.len(), <[u8]>::len),
    )
}

/// A row's values, roughly, with a body of `body` bytes.
fn row_bytes(row: &ItemRow, body: usize) -> usize {
    body + row.kind.len() + row.thread_id.len() + row.message_id.len()
}

pub(crate) async fn insert_many<T>(
    conn: &mut AnyConnection,
    backend: Backend,
    sql: &InsertSql,
    rows: &[T],
    bind: for<'q> fn(AnyQuery<'q>, &'q T) -> AnyQuery<'q>,
    bytes: fn(&T) -> usize,
) -> Result<()> {
    let mut rest = rows;
    while !rest.is_empty() {
        let size = chunk_len(rest, bytes);
        let (chunk, tail) = rest.split_at(size);
        rest = tail;
        let text = insert_text(backend, sql, size);
        let mut query = sqlx::query(&text);
        for row in chunk {
            query = bind(query, row);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

async fn touch_threads(conn: &mut AnyConnection, b: Backend, ids: &[&str]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let now = now_ms();
    for chunk in ids.chunks(LIST_MAX) {
        let list = padded(chunk);
        let text = kept(("touch threads", "", b, list.len(), 0), || {
            let ids = numbered(2, list.len());
            format!("UPDATE threads SET updated_at = $1 WHERE id IN ({ids})")
        });
        let mut query = sqlx::query(&text).bind(now);
        for id in list {
            query = query.bind(id);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

fn bind_thread<'q>(q: AnyQuery<'q>, t: &'q &ThreadRow) -> AnyQuery<'q> {
    q.bind(t.id.as_str())
        .bind(t.owner.as_str())
        .bind(t.title.as_str())
        .bind(t.permission_mode.as_str())
        .bind(t.agent.as_deref())
        .bind(t.created_at)
        .bind(t.updated_at)
}

pub(crate) fn bind_message<'q>(q: AnyQuery<'q>, m: &'q &NewMessage) -> AnyQuery<'q> {
    q.bind(m.id.as_str())
        .bind(m.thread_id.as_str())
        .bind(m.role.as_str())
        .bind(m.content.to_string())
        .bind(
            m.execution_tree
                .as_ref()
                .and_then(|t| serde_json::to_string(t).ok()),
        )
        .bind(m.permission_mode.as_deref())
        .bind(m.status.as_str())
        .bind(m.input_tokens)
        .bind(m.output_tokens)
        .bind(m.cost_usd)
        .bind(m.created_at)
        .bind(m.position)
        .bind(m.metadata.as_deref())
}

/// An item as PostgreSQL takes it: its row, and its body as text when it was packed on its
/// way in (PostgreSQL compresses a large value itself).
type TextItem<'a> = (&'a ItemRow, Option<String>);

/// The items of a plan with their packed bodies unpacked.
fn unpacked<'a>(items: &[ItemRef<'a>]) -> Result<Vec<TextItem<'a>>> {
    items
        .iter()
        .map(|i| Ok((i.row, i.packed.map(crate::packed::unpack).transpose()?)))
        .collect()
}

fn bind_item<'q>(q: AnyQuery<'q>, (row, text): &'q TextItem<'_>) -> AnyQuery<'q> {
    bind_item_keys(q, row)
        .bind(text.as_deref().unwrap_or(&row.body))
        .bind(row.created_at)
}

/// An item's values as PostgreSQL binds them, roughly: its body's text and its keys.
fn text_item_bytes((row, text): &TextItem<'_>) -> usize {
    row_bytes(row, text.as_ref().map_or(row.body.len(), String::len))
}

/// An item as SQLite takes it: its body as packed on its way in ([`PackedItem`]), or as
/// text (short, or no smaller packed).
fn bind_packed_item<'q>(q: AnyQuery<'q>, i: &'q ItemRef<'_>) -> AnyQuery<'q> {
    let q = bind_item_keys(q, i.row);
    match i.packed {
        Some(packed) => q.bind(packed),
        None => q.bind(i.row.body.as_str()),
    }
    .bind(i.row.created_at)
}

/// A record item submitted to a writer, its body packed by the submitting thread.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedItem {
    /// The item; its body is left empty when it was packed.
    row: ItemRow,
    /// The body compressed, when it was long enough and came out smaller.
    packed: Option<Box<[u8]>>,
}

impl PackedItem {
    fn new(mut row: ItemRow) -> PackedItem {
        let packed = crate::packed::pack(&row.body).map(Vec::into_boxed_slice);
        if packed.is_some() {
            row.body = String::new();
        }
        PackedItem { row, packed }
    }

    fn as_ref(&self) -> ItemRef<'_> {
        ItemRef {
            row: &self.row,
            packed: self.packed.as_deref(),
        }
    }
}

/// An item as a plan binds it. Every op reaches a plan through a submission, so every item
/// has been through [`PackedItem`].
#[derive(Clone, Copy)]
struct ItemRef<'a> {
    row: &'a ItemRow,
    /// The body packed on its way in (the row's own is then empty); `None`: the row's text.
    packed: Option<&'a [u8]>,
}

/// An item's columns before its body.
fn bind_item_keys<'q>(q: AnyQuery<'q>, i: &'q ItemRow) -> AnyQuery<'q> {
    q.bind(&*i.thread_id)
        .bind(&*i.message_id)
        .bind(i.position)
        .bind(i.kind.as_str())
        .bind(i.parent_id.as_deref())
        .bind(i.depth)
}

fn bind_lease<'q>(q: AnyQuery<'q>, l: &'q &LeaseRow) -> AnyQuery<'q> {
    // It lasts from its write, however long it waited in the queue.
    q.bind(l.message_id.as_str())
        .bind(l.owner.as_str())
        .bind(now_ms().saturating_add(l.lasts_ms))
}

fn bind_approval<'q>(q: AnyQuery<'q>, r: &'q &ApprovalRow) -> AnyQuery<'q> {
    q.bind(r.id.as_str())
        .bind(r.thread_id.as_str())
        .bind(r.tool.as_str())
        .bind(r.arguments.as_str())
        .bind(r.status.as_str())
        .bind(r.created_at)
        .bind(r.decided_at)
        .bind(r.injected_args.as_deref())
}

pub(crate) fn bind_model_call<'q>(q: AnyQuery<'q>, r: &'q &ModelCallRow) -> AnyQuery<'q> {
    q.bind(r.id.as_str())
        .bind(&*r.thread_id)
        .bind(&*r.message_id)
        .bind(&*r.user_id)
        .bind(r.provider.as_str())
        .bind(r.model.as_str())
        .bind(r.depth)
        .bind(r.input_tokens)
        .bind(r.output_tokens)
        .bind(r.tool_calls)
        .bind(r.cost_usd)
        .bind(r.duration_ms)
        .bind(r.error.as_deref())
        .bind(r.created_at)
}

impl From<WriteError> for StoreError {
    fn from(e: WriteError) -> Self {
        StoreError::Write(e.0)
    }
}

impl StoreError {
    /// What a start that finds its thread changed by another turn meanwhile fails with.
    pub fn thread_busy() -> StoreError {
        StoreError::Write(THREAD_BUSY.to_owned())
    }

    /// See [`WriteError::is_thread_busy`].
    pub fn is_thread_busy(&self) -> bool {
        matches!(self, StoreError::Write(m) if m == THREAD_BUSY)
    }

    /// See [`WriteError::is_lease_lost`].
    pub fn is_lease_lost(&self) -> bool {
        match self {
            StoreError::LeaseLost(_) => true,
            StoreError::Write(m) => m.starts_with(LEASE_LOST),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A write named by the message id it fences.
    fn named(name: &str) -> Job {
        Job::write(
            WriteOp::Fence {
                message_id: name.to_owned(),
                owner: "a".to_owned(),
            },
            None,
        )
    }

    fn names(jobs: &[Job]) -> Vec<String> {
        jobs.iter()
            .map(|job| match job {
                Job::Write { op, .. } => match op.as_ref() {
                    WriteOp::Fence { message_id, .. } => message_id.clone(),
                    _ => "?".to_owned(),
                },
                _ => "?".to_owned(),
            })
            .collect()
    }

    /// The rest's queue, where a turn submits its start (ahead) and then its round while the
    /// writer is taking the rest: the start lands in the other queue after it was emptied.
    struct StartMeanwhile {
        rest: mpsc::UnboundedReceiver<Job>,
        first: mpsc::UnboundedSender<Job>,
        sent: bool,
    }

    impl Source for StartMeanwhile {
        fn next_waiting(&mut self) -> Option<Job> {
            if !self.sent {
                self.sent = true;
                self.first.send(named("start")).unwrap();
                return Some(named("round"));
            }
            self.rest.next_waiting()
        }
    }

    #[test]
    fn a_failed_fence_is_told_as_a_lost_lease() {
        let lost = WriteError::from_store(&StoreError::LeaseLost("m1".to_owned()));
        assert!(lost.is_lease_lost(), "{lost}");
        assert!(StoreError::from(lost).is_lease_lost());
        let other = WriteError::from_store(&StoreError::Write("disk full".to_owned()));
        assert!(!other.is_lease_lost());
    }

    #[test]
    fn a_start_queued_while_the_rest_is_taken_goes_ahead_of_its_round() {
        let (first_tx, mut first) = mpsc::unbounded_channel();
        let (rest_tx, rest) = mpsc::unbounded_channel();
        first_tx.send(named("earlier start")).unwrap();
        rest_tx.send(named("later")).unwrap();
        let mut rest = StartMeanwhile {
            rest,
            first: first_tx,
            sent: false,
        };
        let mut jobs = Vec::new();
        drain(
            &mut first,
            &mut rest,
            (named("came"), false),
            &mut jobs,
            MAX_BATCH,
        );
        assert_eq!(
            names(&jobs),
            ["earlier start", "start", "came", "round", "later"]
        );
    }

    #[test]
    fn statements_are_sized_by_rows_and_by_the_bytes_of_heavy_ones() {
        assert_eq!(chunk_len(&[(); 1000], light), 256);
        assert_eq!(chunk_len(&[(); 100], light), 64);
        assert_eq!(chunk_len(&[(); 1], light), 1);
        let rows = vec![2_400usize; 1000];
        let bytes: fn(&usize) -> usize = |n| *n;
        // 128 KiB holds 54 rounds of W1: the chunk below that is 32.
        assert_eq!(chunk_len(&rows, bytes), 32);
        assert_eq!(chunk_len(&rows[..20], bytes), 16);
        // A row over the bound goes alone.
        assert_eq!(chunk_len(&[STATEMENT_BYTES * 2, 1, 1], bytes), 1);
    }

    fn plan_of(ops: &[WriteOp]) -> Plan<'_> {
        let mut plan = Plan::default();
        ops.iter().for_each(|op| plan.add(op));
        plan
    }

    fn item(position: i64, body_bytes: usize) -> ItemRow {
        ItemRow {
            thread_id: "t".into(),
            message_id: "m".into(),
            position,
            kind: "assistant".into(),
            parent_id: None,
            depth: 0,
            body: "x".repeat(body_bytes),
            created_at: 0,
        }
    }

    #[test]
    fn a_plan_is_one_statement_only_when_its_rows_fit_one() {
        let decided = [WriteOp::DecideApproval {
            thread_id: "t".into(),
            id: "a".into(),
            status: "approved".into(),
        }];
        assert!(plan_of(&decided).is_one_statement());
        let light = [WriteOp::Items((0..32).map(|i| item(i, 100)).collect())];
        assert!(plan_of(&light).is_one_statement());
        // Thirty-two heavy items are two statements, so the plan needs its transaction.
        let heavy = [WriteOp::Items((0..32).map(|i| item(i, 8_000)).collect())];
        assert!(!plan_of(&heavy).is_one_statement());
        let odd = [WriteOp::Items((0..3).map(|i| item(i, 100)).collect())];
        assert!(!plan_of(&odd).is_one_statement());
    }

    #[test]
    fn items_are_packed_on_their_way_into_a_writer() {
        let items = || WriteOp::Many(vec![WriteOp::Items(vec![item(0, 4_000), item(1, 10)])]);
        let WriteOp::Many(ops) = items().packed() else {
            panic!("a batch stays a batch");
        };
        let [WriteOp::PackedItems(packed)] = ops.as_slice() else {
            panic!("items become packed items: {ops:?}");
        };
        // The long body is packed and no longer held as text; the short one stays text.
        let long = packed[0].packed.as_deref().expect("a long body packs");
        assert!(long.len() < 100 && packed[0].row.body.is_empty());
        assert!(packed[1].packed.is_none() && packed[1].row.body == "x".repeat(10));
        assert_eq!(crate::packed::unpack(long).unwrap(), "x".repeat(4_000));
        // A plan binds the packed body, and sizes its statements by it.
        let plan = plan_of(&ops);
        assert_eq!(plan.items[0].packed, Some(long));
        assert_eq!(plan.items[1].packed, None);
        assert!(item_bytes(&plan.items[0]) < 200);
        // PostgreSQL is given the text back, and sizes its statements by it.
        let text = unpacked(&plan.items).unwrap();
        assert_eq!(text[0].1.as_deref(), Some("x".repeat(4_000).as_str()));
        assert_eq!(text[1].1, None);
        assert!(text_item_bytes(&text[0]) > 4_000 && text_item_bytes(&text[1]) < 200);
    }

    #[test]
    fn the_rest_waits_while_a_full_batch_goes_first() {
        for (backend, max) in [(Backend::Sqlite, 1024), (Backend::Postgres, 256)] {
            let (first_tx, mut first) = mpsc::unbounded_channel();
            let (rest_tx, mut rest) = mpsc::unbounded_channel();
            for i in 0..max + 10 {
                first_tx.send(named(&format!("start {i}"))).unwrap();
            }
            rest_tx.send(named("round")).unwrap();
            let mut jobs = Vec::new();
            let came = (named("came"), true);
            drain(&mut first, &mut rest, came, &mut jobs, max_batch(backend));
            assert_eq!(jobs.len(), max, "{backend:?}");
            assert!(!names(&jobs).contains(&"round".to_owned()));
            // The starts left over head the next batch.
            jobs.clear();
            drain(
                &mut first,
                &mut rest,
                (named("next"), false),
                &mut jobs,
                max,
            );
            let left: Vec<String> = (max - 1..max + 10).map(|i| format!("start {i}")).collect();
            assert_eq!(names(&jobs)[..11], left[..]);
            assert_eq!(names(&jobs)[11..], ["next", "round"]);
        }
    }
}
