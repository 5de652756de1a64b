//! Prometheus metrics: turns, tool calls, model calls, tokens, errors, open sockets, the
//! writer's commits, start waits, and the cluster's own ([`weft_cluster::ClusterMetrics`]).

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndLabel {
    pub end: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabel {
    pub direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

pub struct Metrics {
    registry: Registry,
    pub turns: Family<EndLabel, Counter>,
    pub tool_calls: Counter,
    pub model_calls: Counter,
    pub tokens: Family<DirectionLabel, Counter>,
    pub errors: Family<CodeLabel, Counter>,
    pub open_sockets: Gauge,
    pub active_turns: Gauge,
    /// Connections dropped for not reading (queue full or write stalled).
    pub slow_clients: Counter,
    /// Database commits by the writer, by outcome.
    pub commits: Family<OutcomeLabel, Counter>,
    /// Ops (a turn's start, a round of its record, its end, an approval…) per commit.
    pub batch_ops: Histogram,
    /// Rows per commit.
    pub batch_rows: Histogram,
    pub commit_seconds: Histogram,
    /// Leases and the bus.
    pub cluster: std::sync::Arc<weft_cluster::ClusterMetrics>,
    /// Rounds held back for turns that began starting before them, and for how long.
    pub start_waits_seconds: Histogram,
}

impl weft_store::WriteObserver for Metrics {
    fn committed(&self, ops: usize, rows: usize, elapsed: std::time::Duration, ok: bool) {
        self.commits
            .get_or_create(&OutcomeLabel {
                outcome: if ok { "ok" } else { "failed" }.into(),
            })
            .inc();
        self.batch_ops.observe(ops as f64);
        self.batch_rows.observe(rows as f64);
        self.commit_seconds.observe(elapsed.as_secs_f64());
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("weft");
        let r = &mut registry;
        let sizes = || {
            Histogram::new([
                1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
            ])
        };
        // Waits and commits: half a millisecond to a second.
        let seconds = || {
            Histogram::new([
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
            ])
        };
        let starts = "Rounds of running turns held back for turns starting before them \
                      (server.start_priority_ms)";
        Metrics {
            turns: registered(
                r,
                "turns",
                "Finished turns, by how they ended",
                Family::default(),
            ),
            tool_calls: registered(r, "tool_calls", "Tool calls dispatched", Counter::default()),
            model_calls: registered(r, "model_calls", "Provider calls made", Counter::default()),
            tokens: registered(r, "tokens", "Tokens used, by direction", Family::default()),
            errors: registered(r, "errors", "Error frames sent, by code", Family::default()),
            open_sockets: registered(
                r,
                "open_sockets",
                "Open websocket connections",
                Gauge::default(),
            ),
            active_turns: registered(r, "active_turns", "Turns running now", Gauge::default()),
            slow_clients: registered(
                r,
                "slow_clients",
                "Connections closed because the client stopped reading",
                Counter::default(),
            ),
            commits: registered(
                r,
                "store_commits",
                "Database commits by the writer",
                Family::default(),
            ),
            batch_ops: registered(
                r,
                "store_batch_ops",
                "Writes grouped into one commit",
                sizes(),
            ),
            batch_rows: registered(r, "store_batch_rows", "Rows written by one commit", sizes()),
            commit_seconds: registered(
                r,
                "store_commit_seconds",
                "Time to write and commit one batch",
                seconds(),
            ),
            cluster: std::sync::Arc::new(weft_cluster::ClusterMetrics::registered(r)),
            start_waits_seconds: registered(r, "start_waits_seconds", starts, seconds()),
            registry,
        }
    }
}

/// `metric`, registered under `name` with `help`.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    pub fn error(&self, code: weft_protocol::ErrorCode) {
        let code = serde_json::to_value(code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        self.errors.get_or_create(&CodeLabel { code }).inc();
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_registered_and_counts_in_the_output() {
        let metrics = Metrics::default();
        metrics.tool_calls.inc();
        metrics.cluster.leases_held.set(3);
        metrics.start_waits_seconds.observe(0.003);
        let out = metrics.render();
        for name in [
            "turns",
            "tool_calls",
            "model_calls",
            "tokens",
            "errors",
            "open_sockets",
            "active_turns",
            "slow_clients",
            "store_commits",
            "store_batch_ops",
            "store_batch_rows",
            "store_commit_seconds",
            "leases_held",
            "leases_taken",
            "leases_lost",
            "bus_published",
            "bus_request_seconds",
            "start_waits_seconds",
        ] {
            assert!(
                out.contains(&format!("# HELP weft_{name} ")),
                "{name} missing:\n{out}"
            );
        }
        assert!(out.contains("weft_tool_calls_total 1"), "{out}");
        assert!(out.contains("weft_leases_held 3"), "{out}");
        assert!(out.contains("weft_start_waits_seconds_count 1"), "{out}");
    }
}
