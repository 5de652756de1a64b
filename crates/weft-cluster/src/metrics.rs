//! The cluster's own Prometheus metrics — leases held, taken and lost, frames published for
//! other replicas, commands' round trips — registered in the server's one registry.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub struct ClusterMetrics {
    /// Turn leases this replica holds now.
    pub leases_held: Gauge,
    /// Leases of turns a dead replica left, taken to close them.
    pub leases_taken: Counter,
    /// Leases this replica lost while its turn ran (it stopped the turn).
    pub leases_lost: Counter,
    /// Frames this replica published for followers on other replicas.
    pub bus_published: Counter,
    /// Commands sent to other replicas, and how long their answers took.
    pub bus_request_seconds: Histogram,
}

impl Default for ClusterMetrics {
    /// Registered nowhere (for tests and tools).
    fn default() -> Self {
        ClusterMetrics::registered(&mut Registry::default())
    }
}

impl ClusterMetrics {
    /// The cluster's metrics, registered in `registry`.
    pub fn registered(registry: &mut Registry) -> ClusterMetrics {
        let metrics = ClusterMetrics {
            leases_held: Gauge::default(),
            leases_taken: Counter::default(),
            leases_lost: Counter::default(),
            bus_published: Counter::default(),
            bus_request_seconds: Histogram::new([
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0,
            ]),
        };
        let r = registry;
        r.register(
            "leases_held",
            "Turn leases this replica holds",
            metrics.leases_held.clone(),
        );
        r.register(
            "leases_taken",
            "Leases of turns a dead replica left, taken to close them",
            metrics.leases_taken.clone(),
        );
        r.register(
            "leases_lost",
            "Leases lost while their turn ran (the turn stopped)",
            metrics.leases_lost.clone(),
        );
        r.register(
            "bus_published",
            "Frames published on the bus for followers on other replicas",
            metrics.bus_published.clone(),
        );
        r.register(
            "bus_request_seconds",
            "Round trips of commands sent to other replicas",
            metrics.bus_request_seconds.clone(),
        );
        metrics
    }
}
