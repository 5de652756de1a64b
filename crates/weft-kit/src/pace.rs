//! What a turn waits for before a level's first round and between one round and the next. A
//! host may hold the turn back there (the server lets the turns that arrived before that
//! moment start first); between rounds, with no pace or nothing to wait for, the turn only
//! yields, so a provider and tools that never wait cannot run a whole turn in one poll and
//! starve every other task on the worker.

use futures::future::BoxFuture;

pub trait Pace: Send + Sync {
    /// `None`: go on now (after a yield); `Some`: go on once it resolves.
    fn between_rounds(&self) -> Option<BoxFuture<'static, ()>>;

    /// `None`: the level's first round goes now; `Some`: once it resolves.
    fn before_first_round(&self) -> Option<BoxFuture<'static, ()>> {
        None
    }
}

/// Wait as `pace` says between two rounds, or only yield.
pub async fn between_rounds(pace: Option<&dyn Pace>) {
    match pace.and_then(Pace::between_rounds) {
        Some(wait) => wait.await,
        None => tokio::task::yield_now().await,
    }
}

/// Wait as `pace` says before a level's first round.
pub async fn before_first_round(pace: Option<&dyn Pace>) {
    if let Some(wait) = pace.and_then(Pace::before_first_round) {
        wait.await;
    }
}
