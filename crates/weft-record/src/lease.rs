//! What a turn's writes need from its lease, so the record does not know the cluster: whether
//! it is still held, the fence each write carries, and giving it up when a write finds it
//! lost.

use weft_store::WriteOp;

pub trait WriteLease: Send + Sync {
    /// Whether the turn may still write (a lease past its time is lost here).
    fn check(&self) -> bool;
    /// The op that makes a batch commit only while the lease is held (none when leases are
    /// not fenced, as with one replica).
    fn fence(&self) -> Option<WriteOp>;
    /// A write found the lease taken: the turn stops.
    fn lose(&self);
}
