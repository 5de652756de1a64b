//! Turn leases: which replica runs each live turn, until when. The owner renews its leases
//! in one statement per heartbeat; a turn whose lease expired (or that has none) belongs to
//! nobody, and the replica that takes its lease closes it. The writer's [`WriteOp::Fence`]
//! makes a turn's writes commit only while its lease is held.
//!
//! [`WriteOp::Fence`]: crate::WriteOp::Fence

use std::sync::Arc;

use sqlx::any::AnyConnectOptions;
use sqlx::AnyConnection;
use sqlx::Connection;

use crate::rows::MessageRow;
use crate::statements::{kept, numbered, LIST_MAX};
use crate::{Backend, Result, Store};

/// Renews an owner's leases. On PostgreSQL it passes over a lease whose row is locked for
/// more than a fence (being removed by a batch that ends its turn, or being taken over), so
/// a renewal never waits for a batch: a batch and a renewal each waiting for rows the other
/// locked would deadlock (and PostgreSQL fails one of them after a second). A lease passed
/// over is not reported held, which it no longer is once that batch or takeover commits.
fn renew_sql(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => {
            "UPDATE turn_leases SET expires_at = $1 WHERE message_id IN \
             (SELECT message_id FROM turn_leases WHERE owner = $2 FOR NO KEY UPDATE SKIP LOCKED) \
             RETURNING message_id"
        }
        Backend::Sqlite => {
            "UPDATE turn_leases SET expires_at = $1 WHERE owner = $2 RETURNING message_id"
        }
    }
}

/// Takes a lease that expired (or was `former`'s). On PostgreSQL it locks the row as a
/// change of owner must, waiting for a batch whose fence holds it, then looks again.
fn take_sql(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => {
            "UPDATE turn_leases SET owner = $1, expires_at = $2, takeovers = takeovers + 1 \
             WHERE message_id = (SELECT message_id FROM turn_leases WHERE message_id = $3 \
             AND (expires_at < $4 OR owner = $5) FOR UPDATE) RETURNING takeovers"
        }
        Backend::Sqlite => {
            "UPDATE turn_leases SET owner = $1, expires_at = $2, takeovers = takeovers + 1 \
             WHERE message_id = $3 AND (expires_at < $4 OR owner = $5) RETURNING takeovers"
        }
    }
}

/// Renews one replica's leases on a connection of its own (opened on first use, and again
/// after a failure): a renewal never waits for a pooled connection, nor for the runtime the
/// pool's connections belong to, so it can run on a thread of its own while the server's
/// runtime is saturated.
pub struct LeaseRenewer {
    options: Arc<AnyConnectOptions>,
    backend: Backend,
    conn: Option<AnyConnection>,
}

impl LeaseRenewer {
    /// Extend every lease `owner` holds to `expires_at`; returns the turns still held (a
    /// turn another replica took, or that ended, is not among them).
    pub async fn renew(&mut self, owner: &str, expires_at: i64) -> Result<Vec<String>> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => self
                .conn
                .insert(AnyConnection::connect_with(&self.options).await?),
        };
        let renewed = sqlx::query_scalar(renew_sql(self.backend))
            .bind(expires_at)
            .bind(owner)
            .fetch_all(&mut *conn)
            .await;
        if renewed.is_err() {
            if let Some(conn) = self.conn.take() {
                let _ = conn.close().await;
            }
        }
        Ok(renewed?)
    }
}

/// A lease as written when a turn starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub message_id: String,
    pub owner: String,
    /// How long it lasts from its write, in milliseconds (a turn's start may wait in the
    /// writer's queue longer than a lease lasts).
    pub lasts_ms: i64,
}

/// A lease as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    /// Unix milliseconds.
    pub expires_at: i64,
}

impl Store {
    /// A [`LeaseRenewer`] for this database.
    pub fn lease_renewer(&self) -> LeaseRenewer {
        LeaseRenewer {
            options: self.pool.connect_options(),
            backend: self.backend,
            conn: None,
        }
    }

    /// Assistant messages still `running` that nobody runs: no lease, a lease expired before
    /// `now` (Unix ms), or one held by `former` (this replica's previous life, at start-up).
    pub async fn orphaned_turns(&self, now: i64, former: Option<&str>) -> Result<Vec<MessageRow>> {
        let columns: Vec<String> = MessageRow::COLUMNS
            .split(',')
            .map(|c| format!("m.{}", c.trim()))
            .collect();
        let rows = sqlx::query(&format!(
            "SELECT {} FROM messages m LEFT JOIN turn_leases l ON l.message_id = m.id \
             WHERE m.status = 'running' \
             AND (l.message_id IS NULL OR l.expires_at < $1 OR l.owner = $2) \
             ORDER BY m.created_at",
            columns.join(", ")
        ))
        .bind(now)
        .bind(former.unwrap_or(""))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(MessageRow::from_row).collect()
    }

    /// Take the lease of a turn nobody runs (see [`Store::orphaned_turns`]) for `owner`
    /// until `expires_at`: how many times it has now been taken over, or `None` when another
    /// replica took it first or its owner renewed it meanwhile.
    pub async fn take_lease(
        &self,
        message_id: &str,
        owner: &str,
        expires_at: i64,
        now: i64,
        former: Option<&str>,
    ) -> Result<Option<u32>> {
        let taken: Option<i64> = sqlx::query_scalar(take_sql(self.backend))
            .bind(owner)
            .bind(expires_at)
            .bind(message_id)
            .bind(now)
            .bind(former.unwrap_or(""))
            .fetch_optional(&self.pool)
            .await?;
        if let Some(takeovers) = taken {
            return Ok(Some(u32::try_from(takeovers).unwrap_or(u32::MAX)));
        }
        // A turn from before leases, or whose lease row is gone: the first to insert one.
        let inserted = sqlx::query(
            "INSERT INTO turn_leases (message_id, owner, expires_at, takeovers) \
             SELECT id, $2, $3, 1 FROM messages WHERE id = $1 AND status = 'running' \
             ON CONFLICT (message_id) DO NOTHING",
        )
        .bind(message_id)
        .bind(owner)
        .bind(expires_at)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok((inserted == 1).then_some(1))
    }

    /// The replica running the thread's turn now (its lease unexpired at `now`), if any.
    pub async fn turn_owner(&self, thread_id: &str, now: i64) -> Result<Option<String>> {
        let owner: Option<String> = sqlx::query_scalar(
            "SELECT l.owner FROM messages m JOIN turn_leases l ON l.message_id = m.id \
             WHERE m.thread_id = $1 AND m.status = 'running' AND l.expires_at > $2 LIMIT 1",
        )
        .bind(thread_id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(owner)
    }

    /// Give up `owner`'s leases of `message_ids` (turns it handed over at shutdown): their
    /// turns are orphaned at once, for the next sweep of any replica to take up.
    pub async fn release_leases(&self, owner: &str, message_ids: &[String]) -> Result<u64> {
        let mut released = 0;
        for chunk in message_ids.chunks(LIST_MAX) {
            let text = format!(
                "DELETE FROM turn_leases WHERE owner = $1 AND message_id IN ({})",
                numbered(2, chunk.len())
            );
            let mut query = sqlx::query(&text).bind(owner);
            for id in chunk {
                query = query.bind(id.as_str());
            }
            released += query.execute(&self.pool).await?.rows_affected();
        }
        Ok(released)
    }

    /// The turns `owner` holds leases on (expired or not).
    pub async fn leases_of(&self, owner: &str) -> Result<Vec<String>> {
        let ids: Vec<String> =
            sqlx::query_scalar("SELECT message_id FROM turn_leases WHERE owner = $1")
                .bind(owner)
                .fetch_all(&self.pool)
                .await?;
        Ok(ids)
    }

    /// Who holds `message_id`'s lease and until when, if anyone.
    pub async fn lease(&self, message_id: &str) -> Result<Option<Lease>> {
        let row: Option<(String, i64)> =
            sqlx::query_as("SELECT owner, expires_at FROM turn_leases WHERE message_id = $1")
                .bind(message_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(owner, expires_at)| Lease { owner, expires_at }))
    }
}

/// The statement that checks a batch's fences: the leases `owner` holds, unexpired, among
/// `count` message ids (`$3…`). When the batch ends those turns (`ends`), it removes the leases
/// as it checks them (the row stays locked until the commit, and comes back if the batch
/// fails). Otherwise, on PostgreSQL it locks them until the commit, so no replica takes one
/// while the batch writes (the weakest lock that a takeover's waits for: the owner's own
/// renewal, which changes no key, does not, nor does the batch wait for it); on SQLite it is a write that changes nothing, so the batch's
/// transaction takes the database's write lock first (waiting its turn) instead of reading
/// first and failing to upgrade (`database is locked`) when another connection wrote
/// meanwhile.
pub(crate) fn fence_sql(backend: Backend, count: usize, ends: bool) -> Arc<str> {
    kept(("fence", "", backend, count, usize::from(ends)), || {
        let held = format!(
            "owner = $1 AND expires_at > $2 AND message_id IN ({})",
            numbered(3, count)
        );
        match (ends, backend) {
            (true, _) => format!("DELETE FROM turn_leases WHERE {held} RETURNING message_id"),
            (false, Backend::Postgres) => {
                format!("SELECT message_id FROM turn_leases WHERE {held} FOR KEY SHARE")
            }
            (false, Backend::Sqlite) => format!(
                "UPDATE turn_leases SET expires_at = expires_at WHERE {held} RETURNING message_id"
            ),
        }
    })
}
