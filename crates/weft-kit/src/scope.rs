//! `TurnScope`: what tools may hang on a turn — a stable id for per-turn state (a browser
//! context, a session) and closers that run when the turn's last handle is gone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

type Closer = Box<dyn FnOnce() + Send>;

/// One turn's scope; clones share it. Closers run once, when the last clone drops.
#[derive(Clone, Default)]
pub struct TurnScope(Arc<Inner>);

struct Inner {
    id: u64,
    closers: Mutex<Vec<Closer>>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Default for Inner {
    fn default() -> Self {
        Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            closers: Mutex::new(Vec::new()),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for close in self.closers.get_mut().drain(..) {
            close();
        }
    }
}

impl TurnScope {
    /// A fresh scope with an id no other scope of this process has.
    pub fn new() -> Self {
        TurnScope::default()
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Run `close` when the turn is over.
    pub fn on_end(&self, close: impl FnOnce() + Send + 'static) {
        self.0.closers.lock().push(Box::new(close));
    }
}

impl std::fmt::Debug for TurnScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TurnScope").field(&self.0.id).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::TurnScope;

    #[test]
    fn closers_run_once_when_the_last_handle_goes() {
        let ran = Arc::new(AtomicUsize::new(0));
        let scope = TurnScope::new();
        let other = TurnScope::new();
        assert_ne!(scope.id(), other.id());
        let clone = scope.clone();
        assert_eq!(clone.id(), scope.id());
        for _ in 0..2 {
            let ran = ran.clone();
            clone.on_end(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            });
        }
        drop(scope);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a handle is still alive");
        drop(clone);
        assert_eq!(ran.load(Ordering::SeqCst), 2);
    }
}
