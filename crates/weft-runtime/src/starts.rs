//! Starts before rounds. A turn's first frames go out once its start commits; a running
//! turn about to begin another round first waits until the other turns that began starting
//! before that moment have started (their start committed and acknowledged). A burst of new
//! turns is then answered ahead of the rounds of the turns already running, instead of
//! behind them in the runtime's queues (Tokio has no priorities). A new turn's first round
//! waits the same way while the starts in flight fit in one of the writer's batches
//! ([`FIRST_ROUND_WAITS_UP_TO`]), so a burst's later messages are taken in before its first
//! turns' rounds run. Only a busy process
//! waits ([`BUSY`] turns or more): with fewer turns, a start waits behind a few milliseconds
//! of their rounds at most, and a round would only wait for another turn's commit. With no
//! other start in flight a round only yields, so a lone turn never waits here. No wait lasts
//! longer than `server.start_priority_ms`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::oneshot;
use weft_core::Pace;

/// Turns in the process from which rounds wait for starts.
pub const BUSY: usize = 64;

/// Starts in flight up to which a new turn's first round waits for them too: a burst the
/// writer commits in one batch on SQLite (1,024 ops; in four on PostgreSQL). Beyond that
/// (10,000 turns at once) most first rounds would wait out the whole bound for commits that
/// cannot come sooner, and the streams behind them start later (BENCHMARKS).
pub const FIRST_ROUND_WAITS_UP_TO: u64 = 1024;

/// This process's turn starts in flight, and the rounds waiting for them.
pub struct Starts {
    /// The longest a round waits. Every start ends (committed, failed or dropped) and wakes
    /// the rounds waiting for it, so the bound matters only under a burst (10,000 turns at
    /// once: a round would wait for the thousands that began before it), where a longer one
    /// holds running turns back for little gain to the first frames (BENCHMARKS).
    max_wait: Duration,
    /// Each wait's length.
    waited: Histogram,
    /// Turns in the process (each holds its [`TurnStart`]).
    turns: AtomicUsize,
    /// Starts begun so far.
    begun: AtomicU64,
    /// Starts ended so far.
    ended: AtomicU64,
    /// Rounds waiting (or about to), for the ended count they wait for.
    waiting: AtomicUsize,
    /// Each waiting round by (ended count it waits for, its number).
    waiters: Mutex<BTreeMap<(u64, u64), oneshot::Sender<()>>>,
    next_waiter: AtomicU64,
}

/// One turn's start as the pacing sees it: in flight until its start's write is
/// acknowledged (or given up). The turn's [`Pace`] between rounds.
pub struct TurnStart {
    starts: Arc<Starts>,
    in_flight: AtomicBool,
}

/// Ends its turn's start when dropped (it rides in the start's acknowledgement).
#[must_use = "the start ends when this is dropped"]
pub struct StartEnds(Arc<TurnStart>);

impl Drop for StartEnds {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl Starts {
    /// Rounds wait at most `max_wait` (zero: never); each wait's length goes to `waited`.
    pub fn new(max_wait: Duration, waited: Histogram) -> Starts {
        Starts {
            max_wait,
            waited,
            turns: AtomicUsize::new(0),
            begun: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            waiters: Mutex::new(BTreeMap::new()),
            next_waiter: AtomicU64::new(0),
        }
    }

    /// A new turn's start begins: in flight until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> (Arc<TurnStart>, StartEnds) {
        self.begun.fetch_add(1, Ordering::SeqCst);
        let start = self.turn(true);
        (start.clone(), StartEnds(start))
    }

    /// The pace of a turn that has no start of its own to wait for (one taken up again).
    pub fn started(self: &Arc<Self>) -> Arc<TurnStart> {
        self.turn(false)
    }

    fn turn(self: &Arc<Self>, in_flight: bool) -> Arc<TurnStart> {
        self.turns.fetch_add(1, Ordering::Relaxed);
        Arc::new(TurnStart {
            starts: self.clone(),
            in_flight: AtomicBool::new(in_flight),
        })
    }

    fn end_one(&self) {
        let ended = self.ended.fetch_add(1, Ordering::SeqCst) + 1;
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut waiters = self.waiters.lock();
        while let Some(entry) = waiters.first_entry() {
            if entry.key().0 > ended {
                break;
            }
            let _ = entry.remove().send(());
        }
    }

    /// Wait until `target` starts have ended, at most `max_wait`.
    async fn wait_for(self: Arc<Self>, target: u64) {
        // Counted before the check: a start ending meanwhile either sees this round waiting
        // (and wakes it once it is listed) or ended before the check (which then passes).
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let waiting = Waiting {
            starts: &self,
            key: (target, self.next_waiter.fetch_add(1, Ordering::Relaxed)),
        };
        let woken = {
            let mut waiters = self.waiters.lock();
            if self.ended.load(Ordering::SeqCst) >= target {
                None
            } else {
                let (tx, rx) = oneshot::channel();
                waiters.insert(waiting.key, tx);
                Some(rx)
            }
        };
        if let Some(woken) = woken {
            let began = tokio::time::Instant::now();
            let _ = tokio::time::timeout(self.max_wait, woken).await;
            self.waited.observe(began.elapsed().as_secs_f64());
        }
        drop(waiting);
    }
}

/// A round counted as waiting: uncounted and unlisted when dropped, however its wait ends
/// (woken, out of time, or its turn stopped mid-wait).
struct Waiting<'a> {
    starts: &'a Starts,
    /// The count it waits for, and its number.
    key: (u64, u64),
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.starts.waiters.lock().remove(&self.key);
        self.starts.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for TurnStart {
    fn drop(&mut self) {
        self.end();
        self.starts.turns.fetch_sub(1, Ordering::Relaxed);
    }
}

impl TurnStart {
    fn end(&self) {
        if self.in_flight.swap(false, Ordering::SeqCst) {
            self.starts.end_one();
        }
    }
}

impl Pace for TurnStart {
    /// Wait for the starts begun by now, this turn's own left out.
    fn between_rounds(&self) -> Option<BoxFuture<'static, ()>> {
        self.wait_for_earlier_starts()
    }

    /// The same, while the starts in flight are few enough for one of the writer's batches.
    fn before_first_round(&self) -> Option<BoxFuture<'static, ()>> {
        let starts = &self.starts;
        let ended = starts.ended.load(Ordering::SeqCst);
        if starts.begun.load(Ordering::SeqCst).saturating_sub(ended) > FIRST_ROUND_WAITS_UP_TO {
            return None;
        }
        self.wait_for_earlier_starts()
    }
}

impl TurnStart {
    fn wait_for_earlier_starts(&self) -> Option<BoxFuture<'static, ()>> {
        let starts = &self.starts;
        if starts.max_wait.is_zero() || starts.turns.load(Ordering::Relaxed) < BUSY {
            return None;
        }
        let own = u64::from(self.in_flight.load(Ordering::SeqCst));
        let target = starts.begun.load(Ordering::SeqCst).saturating_sub(own);
        if starts.ended.load(Ordering::SeqCst) >= target {
            return None;
        }
        Some(Box::pin(starts.clone().wait_for(target)))
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    const MAX_WAIT: Duration = Duration::from_millis(100);

    /// A turn that has started and is running its rounds.
    fn running(starts: &Arc<Starts>) -> Arc<TurnStart> {
        let (pace, start) = starts.begin();
        drop(start);
        pace
    }

    /// Starts begun and not yet ended.
    fn in_flight(starts: &Starts) -> u64 {
        let ended = starts.ended.load(Ordering::SeqCst);
        starts.begun.load(Ordering::SeqCst).saturating_sub(ended)
    }

    /// A busy process: enough turns running that rounds wait for starts.
    fn busy(max_wait: Duration) -> (Arc<Starts>, Vec<Arc<TurnStart>>) {
        let starts = Arc::new(Starts::new(max_wait, Histogram::new([1.0])));
        let crowd = (0..BUSY).map(|_| running(&starts)).collect();
        (starts, crowd)
    }

    #[tokio::test]
    async fn a_turn_never_waits_for_its_own_start() {
        let (starts, _crowd) = busy(MAX_WAIT);
        let (pace, start) = starts.begin();
        assert!(pace.between_rounds().is_none(), "its own start is left out");
        drop(start);
        assert!(pace.between_rounds().is_none());
        assert_eq!(in_flight(&starts), 0);
    }

    #[tokio::test]
    async fn a_round_waits_until_the_starts_begun_before_it_end() {
        let (starts, _crowd) = busy(MAX_WAIT);
        let pace = running(&starts);
        let (_, first) = starts.begin();
        let (_, second) = starts.begin();
        let mut wait = pace.between_rounds().expect("two starts in flight");
        assert!((&mut wait).now_or_never().is_none());
        drop(first);
        assert!(
            (&mut wait).now_or_never().is_none(),
            "one start still in flight"
        );
        drop(second);
        assert!(
            (&mut wait).now_or_never().is_some(),
            "woken by the last start's end"
        );
        assert!(pace.between_rounds().is_none());
    }

    #[tokio::test]
    async fn starts_begun_after_the_round_are_not_waited_for() {
        let (starts, _crowd) = busy(MAX_WAIT);
        let pace = running(&starts);
        let (_, before) = starts.begin();
        let mut wait = pace.between_rounds().expect("a start in flight");
        let (_, after) = starts.begin();
        drop(before);
        assert!((&mut wait).now_or_never().is_some());
        assert_eq!(in_flight(&starts), 1);
        drop(after);
    }

    #[tokio::test]
    async fn a_turn_taken_up_waits_for_the_starts_in_flight() {
        let (starts, _crowd) = busy(MAX_WAIT);
        let (_, start) = starts.begin();
        let mut wait = starts
            .started()
            .between_rounds()
            .expect("a start in flight");
        assert!((&mut wait).now_or_never().is_none());
        drop(start);
        assert!((&mut wait).now_or_never().is_some());
    }

    #[tokio::test]
    async fn a_first_round_waits_for_the_other_starts_in_flight() {
        let (starts, _crowd) = busy(MAX_WAIT);
        let (_, earlier) = starts.begin();
        let (pace, own) = starts.begin();
        let mut wait = pace.before_first_round().expect("another start in flight");
        assert!((&mut wait).now_or_never().is_none());
        drop(earlier);
        assert!((&mut wait).now_or_never().is_some());
        assert!(
            pace.before_first_round().is_none(),
            "only its own start is left"
        );
        drop(own);
    }

    #[tokio::test]
    async fn a_first_round_goes_at_once_when_more_starts_wait_than_one_batch_holds() {
        let (starts, _crowd) = busy(MAX_WAIT);
        let mut burst: Vec<_> = (0..FIRST_ROUND_WAITS_UP_TO)
            .map(|_| starts.begin())
            .collect();
        let (pace, _own) = starts.begin();
        assert!(
            pace.before_first_round().is_none(),
            "{} starts in flight",
            in_flight(&starts)
        );
        assert!(
            pace.between_rounds().is_some(),
            "a later round still waits for them"
        );
        burst.truncate(FIRST_ROUND_WAITS_UP_TO as usize - 1);
        assert!(pace.before_first_round().is_some(), "one batch's worth");
    }

    #[tokio::test]
    async fn a_quiet_process_never_holds_a_first_round() {
        let starts = Arc::new(Starts::new(MAX_WAIT, Histogram::new([1.0])));
        let (_, _earlier) = starts.begin();
        let (pace, _own) = starts.begin();
        assert!(pace.before_first_round().is_none(), "fewer than BUSY turns");
    }

    #[tokio::test(start_paused = true)]
    async fn no_round_waits_longer_than_the_bound() {
        let (starts, _crowd) = busy(MAX_WAIT);
        let pace = running(&starts);
        let (_, stuck) = starts.begin();
        let began = tokio::time::Instant::now();
        pace.between_rounds().expect("a start in flight").await;
        assert_eq!(began.elapsed(), MAX_WAIT);
        assert!(
            starts.waiters.lock().is_empty(),
            "a round that gave up is not listed"
        );
        drop(stuck);
    }

    #[tokio::test]
    async fn a_process_with_few_turns_never_waits() {
        let starts = Arc::new(Starts::new(MAX_WAIT, Histogram::new([1.0])));
        // With the turn starting, busy; one turn fewer, not.
        let mut crowd: Vec<_> = (0..BUSY - 2).map(|_| running(&starts)).collect();
        let pace = running(&starts);
        let (_, start) = starts.begin();
        assert_eq!(starts.turns.load(Ordering::Relaxed), BUSY);
        crowd.pop();
        assert!(pace.between_rounds().is_none());
        crowd.push(running(&starts));
        assert!(pace.between_rounds().is_some(), "busy again");
        drop(start);
        assert_eq!(in_flight(&starts), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn each_wait_is_counted_with_its_length() {
        let metrics = crate::metrics::Metrics::default();
        let starts = Arc::new(Starts::new(MAX_WAIT, metrics.start_waits_seconds.clone()));
        let _crowd: Vec<_> = (0..BUSY).map(|_| running(&starts)).collect();
        let pace = running(&starts);
        assert!(pace.between_rounds().is_none());
        let (_, stuck) = starts.begin();
        pace.between_rounds().expect("a start in flight").await;
        drop(stuck);
        let text = metrics.render();
        assert!(text.contains("weft_start_waits_seconds_count 1"), "{text}");
        assert!(text.contains("weft_start_waits_seconds_sum 0.1"), "{text}");
    }

    #[tokio::test]
    async fn a_round_dropped_mid_wait_is_uncounted_and_unlisted() {
        let (starts, _crowd) = busy(MAX_WAIT);
        let pace = running(&starts);
        let (_, start) = starts.begin();
        let mut wait = pace.between_rounds().expect("a start in flight");
        assert!((&mut wait).now_or_never().is_none());
        assert_eq!(starts.waiting.load(Ordering::SeqCst), 1);
        assert_eq!(starts.waiters.lock().len(), 1);
        drop(wait);
        assert_eq!(starts.waiting.load(Ordering::SeqCst), 0);
        assert!(starts.waiters.lock().is_empty());
        drop(start);
    }

    #[tokio::test]
    async fn with_no_bound_rounds_never_wait() {
        let (starts, _crowd) = busy(Duration::ZERO);
        let pace = running(&starts);
        let (_, start) = starts.begin();
        assert!(pace.between_rounds().is_none());
        drop(start);
    }
}
