//! `TurnBudget`: one set of hard limits shared by every depth of a turn.
//!
//! Counters are atomics so parallel subtasks charge the same budget without a lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weft_protocol::{AgentConfig, BudgetReason};

use crate::provider::Usage;
use crate::resume::Spent;

/// A limit that was hit: which one, its value, and what was observed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetTrip {
    pub reason: BudgetReason,
    pub limit: f64,
    pub observed: f64,
}

impl std::fmt::Display for BudgetTrip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "budget exceeded: {} (limit {}, observed {})",
            self.reason.as_str(),
            self.limit,
            self.observed
        )
    }
}

/// Totals for the turn's cost summary.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UsageTotals {
    pub llm_calls: u64,
    pub tool_calls: u64,
    pub subtasks: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub result_bytes: u64,
    pub cost_usd: f64,
}

const NANOS_PER_USD: f64 = 1e9;

#[derive(Debug)]
pub struct TurnBudget {
    started: Instant,
    /// Time spent waiting for a person (approvals): the wall clock does not count it.
    waiting: parking_lot::Mutex<Waiting>,
    max_wall_clock: Duration,
    max_llm_calls: u64,
    max_tool_calls: u64,
    max_subtasks: u64,
    max_result_bytes: u64,
    max_turn_tokens: Option<u64>,
    max_output_bytes: u64,
    max_cost_usd: Option<f64>,
    llm_calls: AtomicU64,
    tool_calls: AtomicU64,
    subtasks: AtomicU64,
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    result_bytes: AtomicU64,
    output_bytes: AtomicU64,
    cost_nano_usd: AtomicU64,
}

/// Waits for a person: how many are open now, since when, and how long closed ones took.
#[derive(Debug, Default)]
struct Waiting {
    open: usize,
    since: Option<Instant>,
    total: Duration,
}

/// Held while the turn waits for a person; the wait ends when it is dropped.
pub struct PersonWait<'a>(&'a TurnBudget);

impl Drop for PersonWait<'_> {
    fn drop(&mut self) {
        let mut waiting = self.0.waiting.lock();
        waiting.open = waiting.open.saturating_sub(1);
        if waiting.open == 0 {
            if let Some(since) = waiting.since.take() {
                waiting.total += since.elapsed();
            }
        }
    }
}

fn trip(reason: BudgetReason, limit: impl Into<f64>, observed: impl Into<f64>) -> BudgetTrip {
    BudgetTrip {
        reason,
        limit: limit.into(),
        observed: observed.into(),
    }
}

fn lossy(n: u64) -> f64 {
    n as f64
}

impl TurnBudget {
    pub fn new(config: &AgentConfig) -> Self {
        TurnBudget {
            started: Instant::now(),
            waiting: parking_lot::Mutex::default(),
            max_wall_clock: Duration::from_millis(config.max_wall_clock_ms),
            max_llm_calls: config.max_total_llm_calls,
            max_tool_calls: config.max_total_tool_calls,
            max_subtasks: config.max_total_subtasks,
            max_result_bytes: config.max_total_result_bytes,
            max_turn_tokens: config.max_turn_tokens,
            max_output_bytes: config.max_output_bytes,
            max_cost_usd: config.max_cost_usd,
            llm_calls: AtomicU64::new(0),
            tool_calls: AtomicU64::new(0),
            subtasks: AtomicU64::new(0),
            input_tokens: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            result_bytes: AtomicU64::new(0),
            output_bytes: AtomicU64::new(0),
            cost_nano_usd: AtomicU64::new(0),
        }
    }

    /// Charge what a turn had spent before its process died: the counters start there and
    /// the wall clock has already run `spent.elapsed`.
    pub fn restore(&mut self, spent: &Spent) {
        self.started = Instant::now()
            .checked_sub(spent.elapsed)
            .unwrap_or_else(Instant::now);
        for (counter, value) in [
            (&self.llm_calls, spent.llm_calls),
            (&self.tool_calls, spent.tool_calls),
            (&self.subtasks, spent.subtasks),
            (&self.input_tokens, spent.input_tokens),
            (&self.output_tokens, spent.output_tokens),
            (&self.result_bytes, spent.result_bytes),
            (&self.output_bytes, spent.output_bytes),
        ] {
            counter.store(value, Ordering::Relaxed);
        }
        let nanos = (spent.cost_usd.max(0.0) * NANOS_PER_USD).round() as u64;
        self.cost_nano_usd.store(nanos, Ordering::Relaxed);
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    /// When the wall clock runs out, as things stand (waits for a person push it back).
    pub fn deadline(&self) -> Instant {
        self.started + self.max_wall_clock + self.waited()
    }

    /// The turn waits for a person from now until the returned guard is dropped; several
    /// waits at once count once.
    pub fn wait_for_person(&self) -> PersonWait<'_> {
        let mut waiting = self.waiting.lock();
        waiting.open += 1;
        if waiting.open == 1 {
            waiting.since = Some(Instant::now());
        }
        PersonWait(self)
    }

    /// How long the turn has waited for a person so far.
    fn waited(&self) -> Duration {
        let waiting = self.waiting.lock();
        waiting.total + waiting.since.map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// Time the turn has run, waits for a person left out.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.waited())
    }

    /// Resolves once the wall clock has run out (not while the turn waits for a person).
    pub async fn wall_clock_out(&self) {
        loop {
            tokio::time::sleep_until(tokio::time::Instant::from_std(self.deadline())).await;
            if self.check_wall_clock().is_err() {
                return;
            }
        }
    }

    fn take(counter: &AtomicU64, limit: u64, reason: BudgetReason) -> Result<(), BudgetTrip> {
        let observed = counter.fetch_add(1, Ordering::Relaxed) + 1;
        if observed > limit {
            return Err(trip(reason, lossy(limit), lossy(observed)));
        }
        Ok(())
    }

    /// Charge one provider call, first checking the clock and the spend so far.
    pub fn take_llm_call(&self) -> Result<(), BudgetTrip> {
        self.check_wall_clock()?;
        self.check_spend()?;
        Self::take(&self.llm_calls, self.max_llm_calls, BudgetReason::LlmCalls)
    }

    pub fn take_tool_call(&self) -> Result<(), BudgetTrip> {
        Self::take(
            &self.tool_calls,
            self.max_tool_calls,
            BudgetReason::ToolCalls,
        )
    }

    pub fn take_subtask(&self) -> Result<(), BudgetTrip> {
        Self::take(&self.subtasks, self.max_subtasks, BudgetReason::Subtasks)
    }

    pub fn check_wall_clock(&self) -> Result<(), BudgetTrip> {
        let elapsed = self.elapsed();
        if elapsed >= self.max_wall_clock {
            return Err(trip(
                BudgetReason::WallClock,
                lossy(self.max_wall_clock.as_millis() as u64),
                lossy(elapsed.as_millis() as u64),
            ));
        }
        Ok(())
    }

    /// Tokens and cost spent so far against their (optional) caps.
    pub fn check_spend(&self) -> Result<(), BudgetTrip> {
        let totals = self.totals();
        if let Some(max) = self.max_turn_tokens {
            let used = totals.input_tokens + totals.output_tokens;
            if used > max {
                return Err(trip(BudgetReason::Tokens, lossy(max), lossy(used)));
            }
        }
        if let Some(max) = self.max_cost_usd {
            if totals.cost_usd > max {
                return Err(trip(BudgetReason::Cost, max, totals.cost_usd));
            }
        }
        Ok(())
    }

    /// Record a provider call's usage and cost; trips when a cap is now passed.
    pub fn record_usage(&self, usage: Usage, cost_usd: f64) -> Result<(), BudgetTrip> {
        self.input_tokens
            .fetch_add(usage.input_tokens, Ordering::Relaxed);
        self.output_tokens
            .fetch_add(usage.output_tokens, Ordering::Relaxed);
        let nanos = (cost_usd.max(0.0) * NANOS_PER_USD).round() as u64;
        self.cost_nano_usd.fetch_add(nanos, Ordering::Relaxed);
        self.check_spend()
    }

    /// Record bytes of a tool result fed back to the model.
    pub fn record_result_bytes(&self, bytes: usize) -> Result<(), BudgetTrip> {
        let observed = self.result_bytes.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        if observed > self.max_result_bytes {
            return Err(trip(
                BudgetReason::Bytes,
                lossy(self.max_result_bytes),
                lossy(observed),
            ));
        }
        Ok(())
    }

    /// Charge `bytes` the model streamed; `Err` carries how many of them still fit (the
    /// stream stops there) and the trip.
    pub fn take_output_bytes(&self, bytes: usize) -> Result<(), (usize, BudgetTrip)> {
        let bytes = bytes as u64;
        let before = self.output_bytes.fetch_add(bytes, Ordering::Relaxed);
        let after = before + bytes;
        if after <= self.max_output_bytes {
            return Ok(());
        }
        let fits = self.max_output_bytes.saturating_sub(before) as usize;
        Err((
            fits,
            trip(
                BudgetReason::Bytes,
                lossy(self.max_output_bytes),
                lossy(after),
            ),
        ))
    }

    pub fn totals(&self) -> UsageTotals {
        UsageTotals {
            llm_calls: self
                .llm_calls
                .load(Ordering::Relaxed)
                .min(self.max_llm_calls),
            tool_calls: self
                .tool_calls
                .load(Ordering::Relaxed)
                .min(self.max_tool_calls),
            subtasks: self.subtasks.load(Ordering::Relaxed).min(self.max_subtasks),
            input_tokens: self.input_tokens.load(Ordering::Relaxed),
            output_tokens: self.output_tokens.load(Ordering::Relaxed),
            result_bytes: self.result_bytes.load(Ordering::Relaxed),
            cost_usd: self.cost_nano_usd.load(Ordering::Relaxed) as f64 / NANOS_PER_USD,
        }
    }
}
