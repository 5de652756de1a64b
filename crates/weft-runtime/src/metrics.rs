//! Prometheus metrics: turns, tool calls, model calls, tokens, errors, open sockets.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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
        let turns = Family::<EndLabel, Counter>::default();
        let tool_calls = Counter::default();
        let model_calls = Counter::default();
        let tokens = Family::<DirectionLabel, Counter>::default();
        let errors = Family::<CodeLabel, Counter>::default();
        let open_sockets = Gauge::default();
        let active_turns = Gauge::default();
        let slow_clients = Counter::default();
        let commits = Family::<OutcomeLabel, Counter>::default();
        let sizes = || {
            Histogram::new([
                1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
            ])
        };
        let batch_ops = sizes();
        let batch_rows = sizes();
        let leases_held = Gauge::default();
        let leases_taken = Counter::default();
        let leases_lost = Counter::default();
        registry.register(
            "leases_held",
            "Turn leases this replica holds",
            leases_held.clone(),
        );
        registry.register(
            "leases_taken",
            "Leases of turns a dead replica left, taken to close them",
            leases_taken.clone(),
        );
        registry.register(
            "leases_lost",
            "Leases lost while their turn ran (the turn stopped)",
            leases_lost.clone(),
        );
        let bus_published = Counter::default();
        let bus_request_seconds = Histogram::new([
            0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0,
        ]);
        registry.register(
            "bus_published",
            "Frames published on the bus for followers on other replicas",
            bus_published.clone(),
        );
        registry.register(
            "bus_request_seconds",
            "Round trips of commands sent to other replicas",
            bus_request_seconds.clone(),
        );
        // Waits and commits: half a millisecond to a second.
        let seconds = || {
            Histogram::new([
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
            ])
        };
        let start_waits_seconds = seconds();
        registry.register(
            "start_waits_seconds",
            "Rounds of running turns held back for turns starting before them \
             (server.start_priority_ms)",
            start_waits_seconds.clone(),
        );
        let commit_seconds = seconds();
        registry.register("turns", "Finished turns, by how they ended", turns.clone());
        registry.register("tool_calls", "Tool calls dispatched", tool_calls.clone());
        registry.register("model_calls", "Provider calls made", model_calls.clone());
        registry.register("tokens", "Tokens used, by direction", tokens.clone());
        registry.register("errors", "Error frames sent, by code", errors.clone());
        registry.register(
            "open_sockets",
            "Open websocket connections",
            open_sockets.clone(),
        );
        registry.register("active_turns", "Turns running now", active_turns.clone());
        registry.register(
            "slow_clients",
            "Connections closed because the client stopped reading",
            slow_clients.clone(),
        );
        registry.register(
            "store_commits",
            "Database commits by the writer",
            commits.clone(),
        );
        registry.register(
            "store_batch_ops",
            "Writes grouped into one commit",
            batch_ops.clone(),
        );
        registry.register(
            "store_batch_rows",
            "Rows written by one commit",
            batch_rows.clone(),
        );
        registry.register(
            "store_commit_seconds",
            "Time to write and commit one batch",
            commit_seconds.clone(),
        );
        Metrics {
            registry,
            turns,
            tool_calls,
            model_calls,
            tokens,
            errors,
            open_sockets,
            active_turns,
            slow_clients,
            commits,
            batch_ops,
            batch_rows,
            commit_seconds,
            leases_held,
            leases_taken,
            leases_lost,
            bus_published,
            bus_request_seconds,
            start_waits_seconds,
        }
    }
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
