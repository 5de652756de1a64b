//! Telling submitters their writes committed, batch after batch in commit order. The writer's
//! thread queues each committed batch here; whichever of the runtime's threads comes first
//! delivers it: a task woken for the purpose, or any caller of [`Acks::deliver`] (the
//! runtime calls it as turns publish their events). Under load a woken task waits behind
//! every task ready before it (a burst of turns is thousands), and each acknowledgement it
//! held back was a turn's `turn_started`, an approval's request or a finished effect's card.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Instant;

use tokio::sync::{oneshot, Notify};

use crate::writer::{Done, WriteError};

/// What a committed batch owes its submitters, or the writer closing.
pub(crate) enum Ack {
    Batch {
        started: Instant,
        dones: Vec<(Done, Result<(), WriteError>)>,
    },
    Close(oneshot::Sender<()>),
}

#[derive(Default)]
pub(crate) struct Acks {
    queue: Mutex<VecDeque<Ack>>,
    /// Something is queued (read without the lock, on every `deliver`).
    pending: AtomicBool,
    /// Held by the one thread delivering: batches go out in order, one after the other.
    delivering: Mutex<()>,
    /// Wakes the delivering task.
    wake: Notify,
    /// The writer has stopped: the task ends.
    stopped: AtomicBool,
    /// When the batch being delivered (or last delivered) started.
    batch_started: Mutex<Option<Instant>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Acks {
    /// Queue what a committed batch owes (from the writer's thread).
    pub(crate) fn push(&self, ack: Ack) {
        {
            let mut queue = lock(&self.queue);
            queue.push_back(ack);
            self.pending.store(true, Ordering::Release);
        }
        self.wake.notify_one();
    }

    /// The writer has stopped; the task delivers what is left and ends.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Deliver what is queued, unless another thread is delivering (it delivers this too: it
    /// looks again once it lets go). Costs one atomic load when nothing is queued.
    pub(crate) fn deliver(&self) {
        while self.pending.load(Ordering::Acquire) {
            // A callback that panicked leaves the lock poisoned; the rest are still owed.
            let _one = match self.delivering.try_lock() {
                Ok(one) => one,
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => return,
            };
            while let Some(ack) = self.pop() {
                self.run(ack);
            }
        }
    }

    /// The oldest queued ack; `pending` falls with the last one (under the queue's lock, so
    /// a push meanwhile raises it again).
    fn pop(&self) -> Option<Ack> {
        let mut queue = lock(&self.queue);
        let ack = queue.pop_front();
        if queue.is_empty() {
            self.pending.store(false, Ordering::Release);
        }
        ack
    }

    fn run(&self, ack: Ack) {
        match ack {
            Ack::Batch { started, dones } => {
                *lock(&self.batch_started) = Some(started);
                for (done, result) in dones {
                    done(result);
                }
            }
            Ack::Close(ack) => {
                let _ = ack.send(());
            }
        }
    }

    /// When the batch being delivered (or last delivered) started.
    pub(crate) fn batch_started(&self) -> Option<Instant> {
        *lock(&self.batch_started)
    }

    /// The task that delivers when no caller of `deliver` comes first.
    pub(crate) async fn serve(self: Arc<Self>) {
        loop {
            self.wake.notified().await;
            self.deliver();
            if self.stopped.load(Ordering::Acquire) {
                self.deliver();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(log: &Arc<Mutex<Vec<u32>>>, ids: &[u32]) -> Ack {
        let dones = ids
            .iter()
            .map(|&id| {
                let log = log.clone();
                let done: Done = Box::new(move |_| lock(&log).push(id));
                (done, Ok(()))
            })
            .collect();
        Ack::Batch {
            started: Instant::now(),
            dones,
        }
    }

    #[test]
    fn batches_are_delivered_once_in_commit_order() {
        let acks = Acks::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        acks.push(batch(&log, &[1, 2]));
        acks.push(batch(&log, &[3]));
        acks.deliver();
        acks.deliver();
        assert_eq!(*lock(&log), vec![1, 2, 3]);
        assert!(!acks.pending.load(Ordering::Acquire));
    }

    #[test]
    fn a_delivery_inside_a_delivery_leaves_it_to_the_outer_one() {
        let acks = Arc::new(Acks::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let inner = acks.clone();
        let first: Done = Box::new(move |_| inner.deliver());
        acks.push(Ack::Batch {
            started: Instant::now(),
            dones: vec![(first, Ok(()))],
        });
        acks.push(batch(&log, &[7]));
        acks.deliver();
        assert_eq!(*lock(&log), vec![7]);
    }

    #[test]
    fn a_callback_that_panics_does_not_stop_later_batches() {
        let acks = Arc::new(Acks::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let boom: Done = Box::new(|_| panic!("a callback failed"));
        acks.push(Ack::Batch {
            started: Instant::now(),
            dones: vec![(boom, Ok(()))],
        });
        let first = acks.clone();
        assert!(std::thread::spawn(move || first.deliver()).join().is_err());
        acks.push(batch(&log, &[1]));
        acks.deliver();
        assert_eq!(*lock(&log), vec![1]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_deliverers_lose_nothing_and_keep_the_order() {
        let acks = Arc::new(Acks::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let server = tokio::spawn(acks.clone().serve());
        let helpers: Vec<_> = (0..2)
            .map(|_| {
                let acks = acks.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        acks.deliver();
                    }
                })
            })
            .collect();
        for id in 0..2_000u32 {
            acks.push(batch(&log, &[id]));
        }
        for helper in helpers {
            helper.join().unwrap();
        }
        acks.stop();
        server.await.unwrap();
        assert_eq!(*lock(&log), (0..2_000).collect::<Vec<_>>());
    }
}
