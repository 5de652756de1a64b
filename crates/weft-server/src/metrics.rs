//! Prometheus metrics: turns, tool calls, model calls, tokens, errors, open sockets.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

pub struct Metrics {
    registry: Registry,
    pub turns: Family<EndLabel, Counter>,
    pub tool_calls: Counter,
    pub model_calls: Counter,
    pub tokens: Family<DirectionLabel, Counter>,
    pub errors: Family<CodeLabel, Counter>,
    pub open_sockets: Gauge,
    pub active_turns: Gauge,
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
        Metrics {
            registry,
            turns,
            tool_calls,
            model_calls,
            tokens,
            errors,
            open_sockets,
            active_turns,
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
