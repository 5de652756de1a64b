//! The execution-mode registry: `classic` by default, unknown names refused, new modes plug in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use support::Harness;
use weft_core::{EventSink, ExecutionMode, ModeRegistry, TurnEnd, TurnOutcome, TurnSpec};

#[tokio::test]
async fn classic_is_registered_and_is_the_default() {
    let registry = ModeRegistry::new();
    assert_eq!(registry.names(), vec!["classic"]);
    let mode = registry.get(None).unwrap();
    assert_eq!(mode.name(), "classic");
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [{"text": "hi"}]}]}));
    let outcome = mode.run(h.spec(EventSink::detached())).await;
    assert_eq!(
        (outcome.end, outcome.text.as_str()),
        (TurnEnd::Completed, "hi")
    );
}

#[test]
fn an_unknown_mode_is_a_clear_error() {
    let err = ModeRegistry::new().get(Some("telepathy")).err().unwrap();
    assert_eq!(
        err.to_string(),
        "unknown execution mode `telepathy`; registered modes: classic"
    );
}

struct Shout;

#[async_trait]
impl ExecutionMode for Shout {
    fn name(&self) -> &str {
        "shout"
    }
    fn display_name(&self) -> &str {
        "Shout"
    }
    fn max_rounds(&self, _: &weft_protocol::AgentConfig) -> u32 {
        3
    }
    async fn run(&self, spec: TurnSpec) -> TurnOutcome {
        let mut outcome = weft_core::run_classic_turn(spec).await;
        outcome.text = outcome.text.to_uppercase();
        outcome
    }
}

#[tokio::test]
async fn a_new_mode_plugs_in_without_touching_the_loop() {
    let mut registry = ModeRegistry::new();
    registry.register(Arc::new(Shout));
    assert_eq!(registry.names(), vec!["classic", "shout"]);
    let h = Harness::new(json!({"conversations": [{"match": "*", "steps": [{"text": "hi"}]}]}));
    let outcome = registry
        .get(Some("shout"))
        .unwrap()
        .run(h.spec(EventSink::detached()))
        .await;
    assert_eq!(outcome.text, "HI");
}
