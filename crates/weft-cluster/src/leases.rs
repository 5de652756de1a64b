//! This replica's turn leases: every turn it runs holds one in the database, renewed by a
//! heartbeat; a turn whose lease could not be renewed in time stops at its next step and
//! writes nothing more (the writer's fence refuses it too). The heartbeat itself is in
//! `recovery`, which also resumes (or closes) the turns dead replicas left.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use weft_store::{now_ms, LeaseRenewer, LeaseRow, Store, WriteOp};

use crate::metrics::ClusterMetrics;

/// `[cluster]`: how replicas sharing one database divide the turns.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ClusterConfig {
    /// The NATS server replicas talk through (empty: one process, nothing crosses).
    pub nats_url: String,
    /// This replica's name, unique among live replicas (empty: host name, process id and a
    /// random suffix). A replica restarted under the same name closes the turns its former
    /// life left at once instead of waiting for their leases to expire.
    pub replica_id: String,
    /// How long a turn's lease lasts without renewal; a dead replica's turns are closed this
    /// long after its last heartbeat.
    pub lease_ms: u64,
    /// How often leases are renewed (and dead replicas' turns looked for).
    pub heartbeat_ms: u64,
    /// What happens to a dead replica's turns (or this one's, after a restart): taken up
    /// again from their last completed round, or closed as `interrupted`.
    pub recovery: Recovery,
}

/// `[cluster] recovery`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Recovery {
    /// Go on from the last completed round, on whichever replica takes the lease.
    #[default]
    Resume,
    /// Close as `interrupted` (the text streamed so far kept, pending approvals expired).
    Interrupt,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nats_url: String::new(),
            replica_id: String::new(),
            lease_ms: 10_000,
            heartbeat_ms: 2_000,
            recovery: Recovery::default(),
        }
    }
}

impl ClusterConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.heartbeat_ms == 0 || self.lease_ms < 2 * self.heartbeat_ms {
            return Err(format!(
                "cluster.lease_ms ({}) must be at least twice cluster.heartbeat_ms ({}), which must not be 0",
                self.lease_ms, self.heartbeat_ms
            ));
        }
        if !self.replica_id.is_empty() && !weft_protocol::is_identifier(&self.replica_id) {
            return Err(format!(
                "cluster.replica_id {:?} must be 1 to 128 characters of A-Z a-z 0-9 . _ : -",
                weft_protocol::clip(&self.replica_id, 64)
            ));
        }
        Ok(())
    }

    /// The configured id, or one made of the host name, the process id and a random suffix.
    pub fn replica_id(&self) -> String {
        if !self.replica_id.is_empty() {
            return self.replica_id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| weft_protocol::is_identifier(h))
            .unwrap_or_else(|| "weft".to_owned());
        let id = weft_store::new_id();
        // An id's first characters are its time; its last are random.
        format!("{host}-{}-{}", std::process::id(), &id[id.len() - 8..])
    }
}

/// The lease of one turn this replica runs.
pub struct TurnLease {
    pub message_id: String,
    pub owner: Arc<str>,
    /// Past this instant the lease may have expired in the database: the turn must not go on.
    /// `None` until the turn's start (which writes the lease's row) commits: a lease with no
    /// row is nobody else's to take, however long the start waits in the writer's queue.
    valid_until: Mutex<Option<Instant>>,
    /// How long the lease lasts from its row's write.
    lasts: Duration,
    /// Whether its writes carry a fence (not on SQLite: one process per database file, so
    /// no other replica can take the lease).
    fenced: bool,
    /// Stops the turn when the lease is lost.
    cancel: CancellationToken,
    /// Set once the loss was noticed (and counted).
    lost: std::sync::atomic::AtomicBool,
    /// Set when this replica, shutting down, hands the turn over: it writes nothing more,
    /// tells its clients nothing, and another replica (or this process's next life) goes on
    /// with it from its record.
    handed_over: std::sync::atomic::AtomicBool,
    lost_count: prometheus_client::metrics::counter::Counter,
}

impl TurnLease {
    /// Whether this replica still surely holds the lease (by its own monotonic clock, which
    /// keeps running while the process is stopped). Where no other process shares the
    /// database (SQLite), nobody can take it: held until the turn ends, however late a
    /// starved process gets round to anything.
    pub fn held(&self) -> bool {
        if self.is_handed_over() {
            return false;
        }
        !self.fenced
            || (!self.lost.load(std::sync::atomic::Ordering::Relaxed)
                && self
                    .valid_until
                    .lock()
                    .is_none_or(|until| Instant::now() < until))
    }

    /// The turn's start, with the lease's row, committed in a batch the writer began at
    /// `batch_started` (before the row's expiry was computed): held from then.
    pub fn written(&self, batch_started: Instant) {
        self.extend(batch_started + self.lasts);
    }

    /// Held until `until` at least (a renewal, or the row's write).
    fn extend(&self, until: Instant) {
        let mut valid = self.valid_until.lock();
        *valid = Some(valid.map_or(until, |v| v.max(until)));
    }

    /// Whether the lease is still held; when it is not, the turn is stopped (once). Called
    /// before each step that writes or acts.
    pub fn check(&self) -> bool {
        if self.held() {
            return true;
        }
        if !self.is_handed_over() {
            self.lose();
        }
        false
    }

    /// Stop the turn where it is and write nothing more of it: it is left on record as a
    /// crash leaves it, for another replica to take up.
    pub fn hand_over(&self) {
        self.handed_over
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.cancel.cancel();
    }

    pub fn is_handed_over(&self) -> bool {
        self.handed_over.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The lease is gone: its time ran out by this replica's clock, or a write of the turn
    /// failed its fence first (another replica took it over early, or the turn's thread was
    /// deleted). Noted (and counted) once, and the turn is stopped; nothing more is written
    /// for it.
    pub fn lose(&self) {
        if !self.lost.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(message = %self.message_id, replica = %self.owner, "lost a turn's lease; stopping the turn");
            self.lost_count.inc();
            self.cancel.cancel();
        }
    }

    /// The op that makes a write commit only while the lease is held (none where no other
    /// process can take it).
    pub fn fence(&self) -> Option<WriteOp> {
        self.fenced.then(|| WriteOp::Fence {
            message_id: self.message_id.clone(),
            owner: self.owner.to_string(),
        })
    }
}

impl weft_record::WriteLease for TurnLease {
    fn check(&self) -> bool {
        TurnLease::check(self)
    }

    fn fence(&self) -> Option<WriteOp> {
        TurnLease::fence(self)
    }

    fn lose(&self) {
        TurnLease::lose(self);
    }
}

/// This replica's leases, and the heartbeat that keeps them.
pub struct Leases {
    owner: Arc<str>,
    fenced: bool,
    lease: Duration,
    heartbeat: Duration,
    live: Mutex<HashMap<String, Arc<TurnLease>>>,
    metrics: Arc<ClusterMetrics>,
}

impl Leases {
    /// `fenced`: whether other processes share the database (PostgreSQL), so every write of
    /// a turn must check its lease.
    pub fn new(config: &ClusterConfig, metrics: Arc<ClusterMetrics>, fenced: bool) -> Arc<Leases> {
        Arc::new(Leases {
            owner: config.replica_id().into(),
            fenced,
            lease: Duration::from_millis(config.lease_ms),
            heartbeat: Duration::from_millis(config.heartbeat_ms),
            live: Mutex::default(),
            metrics,
        })
    }

    /// How often the heartbeat runs.
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    /// How long a lease lasts without renewal.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    pub fn replica_id(&self) -> &str {
        &self.owner
    }

    /// How many turns this replica runs now.
    pub fn held(&self) -> usize {
        self.live.lock().len()
    }

    /// A lease for a turn about to start: its row goes into the turn's first write.
    pub fn take(&self, message_id: &str, cancel: CancellationToken) -> (Arc<TurnLease>, WriteOp) {
        let row = WriteOp::Lease(LeaseRow {
            message_id: message_id.to_owned(),
            owner: self.owner.to_string(),
            lasts_ms: self.lease_millis(),
        });
        (self.hold(message_id, cancel, None), row)
    }

    /// The lease of a turn this replica took over (its row is already this replica's),
    /// held from now like one it started.
    pub fn adopt(&self, message_id: &str, cancel: CancellationToken) -> Arc<TurnLease> {
        self.hold(message_id, cancel, Some(Instant::now() + self.lease))
    }

    /// A lease of this replica's, live from now, valid until `until` (`None`: its row is not
    /// written yet).
    fn hold(
        &self,
        message_id: &str,
        cancel: CancellationToken,
        until: Option<Instant>,
    ) -> Arc<TurnLease> {
        let lease = Arc::new(TurnLease {
            message_id: message_id.to_owned(),
            owner: self.owner.clone(),
            valid_until: Mutex::new(until),
            lasts: self.lease,
            fenced: self.fenced,
            cancel,
            lost: Default::default(),
            handed_over: Default::default(),
            lost_count: self.metrics.leases_lost.clone(),
        });
        self.live
            .lock()
            .insert(message_id.to_owned(), lease.clone());
        self.metrics.leases_held.inc();
        lease
    }

    /// The turn ended (its end write removed the row, or it lost the lease).
    pub fn release(&self, message_id: &str) {
        if self.live.lock().remove(message_id).is_some() {
            self.metrics.leases_held.dec();
        }
    }

    /// Hand every turn this replica runs over (see [`TurnLease::hand_over`]); their ids.
    pub fn hand_over_all(&self) -> Vec<String> {
        let live = self.live.lock();
        for lease in live.values() {
            lease.hand_over();
        }
        live.keys().cloned().collect()
    }

    fn lease_millis(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// Whether other processes share the database, so leases must be renewed and can be
    /// lost (PostgreSQL); with SQLite only a restart of this process takes its turns.
    pub fn shared(&self) -> bool {
        self.fenced
    }

    /// Renew every lease; a lease not renewed before its local deadline is lost.
    pub async fn renew(&self, renewer: &mut LeaseRenewer) {
        let started = Instant::now();
        match renewer
            .renew(&self.owner, now_ms() + self.lease_millis())
            .await
        {
            Ok(renewed) => {
                let live = self.live.lock();
                for id in renewed {
                    if let Some(lease) = live.get(&id) {
                        lease.extend(started + self.lease);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew this replica's turn leases"),
        }
        // A turn waiting (for a person, a slow model) stops now rather than at its next step.
        let live: Vec<Arc<TurnLease>> = self.live.lock().values().cloned().collect();
        for lease in live {
            lease.check();
        }
    }

    /// Whether this replica runs `message_id` now (the sweep leaves such turns to stop on
    /// their own).
    pub fn is_live(&self, message_id: &str) -> bool {
        self.live.lock().contains_key(message_id)
    }

    /// Take the lease of an orphaned turn to resume or close it: how many times it has now
    /// been taken over, or `None` if someone else took it.
    pub async fn take_orphan(
        &self,
        store: &Store,
        message_id: &str,
        now: i64,
        former: Option<&str>,
    ) -> weft_store::Result<Option<u32>> {
        let taken = store
            .take_lease(
                message_id,
                &self.owner,
                now_ms() + self.lease_millis(),
                now,
                former,
            )
            .await?;
        if taken.is_some() {
            self.metrics.leases_taken.inc();
        }
        Ok(taken)
    }
}
