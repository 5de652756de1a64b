//! Replicas sharing one database: turn leases and their heartbeat ([`leases`]), the bus over
//! NATS that carries commands, frames and announcements between replicas ([`bus`]), taking
//! up or closing the turns a dead replica left ([`recovery`]), and the cluster's own
//! [`metrics`].

pub mod bus;
pub mod leases;
pub mod metrics;
pub mod recovery;

pub use metrics::ClusterMetrics;
