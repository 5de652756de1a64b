//! Tools for engine tests: each records what happened so tests can assert on it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{json, Value};
use weft_core::{Claim, Tool, ToolContext, ToolError};
use weft_protocol::{PolicyClass, ToolCategory};

/// Counts concurrent calls and remembers the peak and call order.
#[derive(Default)]
pub struct Probe {
    pub running: AtomicUsize,
    pub peak: AtomicUsize,
    pub calls: Mutex<Vec<Value>>,
}

impl Probe {
    pub fn enter(&self, args: &Value) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.calls.lock().push(args.clone());
    }
    pub fn leave(&self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
    pub fn count(&self) -> usize {
        self.calls.lock().len()
    }
}

/// A configurable test tool.
pub struct TestTool {
    pub name: &'static str,
    pub category: ToolCategory,
    pub class: PolicyClass,
    pub parallel_safe: bool,
    pub claim: Option<Claim>,
    pub delay: Duration,
    pub behaviour: Behaviour,
    pub probe: Arc<Probe>,
    pub schema: Value,
}

#[derive(Clone)]
pub enum Behaviour {
    /// Echo the arguments back.
    Echo,
    /// Return this text.
    Text(String),
    Fail(&'static str),
    Fatal(&'static str),
    Panic,
    /// Report progress `1..=n` of `n` through the context, then answer `done`.
    Progress(u32),
}

impl TestTool {
    pub fn new(name: &'static str) -> Self {
        TestTool {
            name,
            category: ToolCategory::Read,
            class: PolicyClass::Safe,
            parallel_safe: true,
            claim: None,
            delay: Duration::ZERO,
            behaviour: Behaviour::Echo,
            probe: Arc::new(Probe::default()),
            schema: json!({"type": "object"}),
        }
    }
    pub fn category(mut self, c: ToolCategory) -> Self {
        self.category = c;
        self
    }
    pub fn serial(mut self) -> Self {
        self.parallel_safe = false;
        self
    }
    pub fn claim(mut self, claim: Claim) -> Self {
        self.claim = Some(claim);
        self
    }
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay = Duration::from_millis(ms);
        self
    }
    pub fn behaviour(mut self, b: Behaviour) -> Self {
        self.behaviour = b;
        self
    }
    pub fn schema(mut self, s: Value) -> Self {
        self.schema = s;
        self
    }
    pub fn probe(&self) -> Arc<Probe> {
        self.probe.clone()
    }
}

#[async_trait]
impl Tool for TestTool {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "a test tool"
    }
    fn parameters(&self) -> Value {
        self.schema.clone()
    }
    fn policy_class(&self) -> PolicyClass {
        self.class
    }
    fn category(&self) -> ToolCategory {
        self.category
    }
    fn parallel_safe(&self) -> bool {
        self.parallel_safe
    }
    fn claim(&self) -> Option<Claim> {
        self.claim
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        self.probe.enter(&args);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.probe.leave();
        match &self.behaviour {
            Behaviour::Echo => Ok(args.to_string()),
            Behaviour::Text(t) => Ok(t.clone()),
            Behaviour::Fail(m) => Err(ToolError::model(*m)),
            Behaviour::Fatal(m) => Err(ToolError::Fatal((*m).to_owned())),
            Behaviour::Panic => panic!("test tool panicked on purpose"),
            Behaviour::Progress(n) => {
                for i in 1..=*n {
                    ctx.progress(f64::from(i), Some(f64::from(*n)), Some(format!("step {i}")));
                }
                Ok("done".to_owned())
            }
        }
    }
}
