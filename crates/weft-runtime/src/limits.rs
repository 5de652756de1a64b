//! Per-user limits: how many turns a user may run at once, and how many chat messages they
//! may send per minute (a token bucket, `governor`). Past either, the message is refused with
//! `rate_limited`.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;

use governor::{DefaultKeyedRateLimiter, Quota};
use parking_lot::Mutex;

pub use weft_config::LimitsConfig;

pub struct UserLimits {
    turns_per_user: usize,
    messages_per_minute: u32,
    running: Arc<Mutex<HashMap<String, usize>>>,
    messages: Option<DefaultKeyedRateLimiter<String>>,
}

/// A running turn's place in its user's count; dropping it frees the place.
pub struct TurnSlot {
    user: String,
    running: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        let mut running = self.running.lock();
        if let Some(n) = running.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                running.remove(&self.user);
            }
        }
    }
}

impl UserLimits {
    pub fn new(config: &LimitsConfig) -> Self {
        UserLimits {
            turns_per_user: config.turns_per_user,
            messages_per_minute: config.messages_per_minute,
            running: Arc::default(),
            messages: NonZeroU32::new(config.messages_per_minute)
                .map(|n| DefaultKeyedRateLimiter::dashmap(Quota::per_minute(n))),
        }
    }

    /// Charge one chat message to `user`; the refusal says why.
    pub fn message(&self, user: &str) -> Result<(), String> {
        match &self.messages {
            Some(limiter) if limiter.check_key(&user.to_owned()).is_err() => Err(format!(
                "too many messages: at most {} a minute; try again shortly",
                self.messages_per_minute
            )),
            _ => Ok(()),
        }
    }

    /// A place for one more running turn of `user`, if they have one left.
    pub fn start_turn(&self, user: &str) -> Result<TurnSlot, String> {
        let mut running = self.running.lock();
        let n = running.entry(user.to_owned()).or_insert(0);
        if self.turns_per_user > 0 && *n >= self.turns_per_user {
            return Err(format!(
                "too many turns running: at most {} at once; wait for one to finish",
                self.turns_per_user
            ));
        }
        *n += 1;
        Ok(TurnSlot {
            user: user.to_owned(),
            running: self.running.clone(),
        })
    }

    /// A place for a turn `user` already started, taken up after its process died: counted,
    /// never refused (the turn was admitted once).
    pub fn resume_turn(&self, user: &str) -> TurnSlot {
        *self.running.lock().entry(user.to_owned()).or_insert(0) += 1;
        TurnSlot {
            user: user.to_owned(),
            running: self.running.clone(),
        }
    }

    /// Forget users whose message budget is full again (bounded memory).
    pub fn sweep(&self) {
        if let Some(limiter) = &self.messages {
            limiter.retain_recent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_counted_per_user_and_freed_on_drop() {
        let limits = UserLimits::new(&LimitsConfig {
            turns_per_user: 2,
            messages_per_minute: 0,
        });
        let a = limits.start_turn("alice").unwrap();
        let _b = limits.start_turn("alice").unwrap();
        assert!(limits.start_turn("alice").is_err());
        assert!(
            limits.start_turn("bob").is_ok(),
            "other users are not affected"
        );
        drop(a);
        assert!(limits.start_turn("alice").is_ok());
    }

    #[test]
    fn messages_are_limited_per_user_per_minute() {
        let limits = UserLimits::new(&LimitsConfig {
            turns_per_user: 0,
            messages_per_minute: 3,
        });
        for _ in 0..3 {
            assert!(limits.message("alice").is_ok());
        }
        assert!(limits.message("alice").is_err());
        assert!(limits.message("bob").is_ok());
    }
}
