//! Rate limits kept in memory, per key (an email, a client id, an address):
//! `governor`'s keyed limiters, with the memory they take kept bounded.
//!
//! A key whose limit has fully recovered carries no information, so once a
//! map holds many keys the recovered ones are dropped: a flood of ever-new
//! keys (random client ids, emails) cannot grow it without bound as long as
//! each source is limited too (five times as many per address).
//!
//! `Limiter` counts every check (sign-ins, API requests). `FailureLimit`
//! counts failures only, and remembers which keys are held back, so that a
//! held-back key is refused before any work is done, even when it would
//! have succeeded.

pub mod api;
pub mod client;

pub use api::ApiLimits;

use std::{
    collections::HashMap,
    hash::Hash,
    num::NonZeroU32,
    sync::Mutex,
    time::{Duration, Instant},
};

use governor::{
    clock::{Clock, DefaultClock},
    middleware::StateInformationMiddleware,
    state::keyed::DefaultKeyedStateStore,
    DefaultKeyedRateLimiter, Quota, RateLimiter,
};

/// Above this many keys, keys that have fully recovered are forgotten.
const KEEP: usize = 10_000;

/// `attempts` per `window`, all of them usable at once.
pub fn per_window(attempts: u32, window: Duration) -> Quota {
    let attempts = NonZeroU32::new(attempts.max(1)).expect("at least one");
    let period = (window / attempts.get()).max(Duration::from_nanos(1));
    Quota::with_period(period)
        .expect("a positive period")
        .allow_burst(attempts)
}

/// `rate` a second, with bursts of `burst`.
pub fn per_second(rate: u32, burst: u32) -> Quota {
    let rate = NonZeroU32::new(rate.max(1)).expect("at least one");
    let burst = NonZeroU32::new(burst.max(1)).expect("at least one");
    Quota::per_second(rate).allow_burst(burst)
}

/// How long to tell a client to wait: whole seconds, at least one.
pub fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0 || wait.is_zero())
}

/// Counts every check of a key.
pub struct Limiter<K: Hash + Eq + Clone> {
    inner: DefaultKeyedRateLimiter<K>,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    pub fn new(quota: Quota) -> Self {
        Self {
            inner: RateLimiter::keyed(quota),
        }
    }

    /// Counts one use of `key`; refused with how long to wait.
    pub fn check(&self, key: &K) -> Result<(), Duration> {
        self.forget_idle_keys();
        self.inner
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(self.inner.clock().now()))
    }

    /// Counts one use of `key` as `cost` uses (at most the burst): the
    /// quota's part for one of `cost` instances that share it.
    pub fn check_as(&self, key: &K, cost: u32) -> Result<(), Duration> {
        self.forget_idle_keys();
        let mut cost = NonZeroU32::new(cost.max(1)).expect("at least one");
        loop {
            match self.inner.check_key_n(key, cost) {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(not_until)) => {
                    return Err(not_until.wait_time_from(self.inner.clock().now()))
                }
                // More than the burst: the whole burst.
                Err(governor::InsufficientCapacity(burst)) => {
                    cost = NonZeroU32::new(burst.max(1)).expect("at least one")
                }
            }
        }
    }

    fn forget_idle_keys(&self) {
        if self.inner.len() > KEEP {
            self.inner.retain_recent();
        }
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
}

type InformedLimiter<K> =
    RateLimiter<K, DefaultKeyedStateStore<K>, DefaultClock, StateInformationMiddleware>;

/// Counts failures of a key; once `attempts` failed within the window, the
/// key is held back until a failure's worth of the window has passed.
pub struct FailureLimit<K: Hash + Eq + Clone> {
    failures: InformedLimiter<K>,
    /// Keys with no failure left to spend, until when.
    held: Mutex<HashMap<K, Instant>>,
    /// How long one failure takes to be forgiven.
    period: Duration,
}

impl<K: Hash + Eq + Clone> FailureLimit<K> {
    pub fn new(attempts: u32, window: Duration) -> Self {
        let quota = per_window(attempts, window);
        Self {
            failures: RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>(),
            held: Mutex::new(HashMap::new()),
            period: quota.replenish_interval(),
        }
    }

    /// How long `key` is still held back, if it is.
    pub fn held_back(&self, key: &K) -> Option<Duration> {
        let held = self.held.lock().expect("limit lock");
        let until = *held.get(key)?;
        until.checked_duration_since(Instant::now())
    }

    /// Counts a failure of `key`. Once none is left, `key` is held back,
    /// and how long is answered.
    pub fn failed(&self, key: &K) -> Option<Duration> {
        if self.failures.len() > KEEP {
            self.failures.retain_recent();
        }
        let wait = match self.failures.check_key(key) {
            Ok(state) if state.remaining_burst_capacity() > 0 => return None,
            // The next failure is forgiven within one period.
            Ok(_) => self.period,
            Err(not_until) => not_until.wait_time_from(self.failures.clock().now()),
        };
        let now = Instant::now();
        let mut held = self.held.lock().expect("limit lock");
        if held.len() > KEEP {
            held.retain(|_, until| *until > now);
        }
        held.insert(key.clone(), now + wait);
        Some(wait)
    }

    /// How many keys are remembered (counted or held back).
    pub fn len(&self) -> usize {
        self.failures.len() + self.held.lock().expect("limit lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The portal's sign-in limits, per email and per source address.
pub struct SignInLimits {
    pub by_email: Limiter<String>,
    pub by_address: Limiter<std::net::IpAddr>,
}

impl SignInLimits {
    pub fn new(config: &crate::config::PortalConfig) -> Self {
        let quota = |attempts: u32| per_window(attempts, config.login_window);
        Self {
            by_email: Limiter::new(quota(config.login_attempts)),
            // Several people may share an address (an office, a proxy).
            by_address: Limiter::new(quota(config.login_attempts.saturating_mul(5))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limiter_refuses_beyond_its_burst_with_a_wait() {
        let limiter = Limiter::new(per_second(1, 2));
        assert!(limiter.check(&"a").is_ok());
        assert!(limiter.check(&"a").is_ok());
        let wait = limiter.check(&"a").unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(limiter.check(&"b").is_ok(), "another key is unaffected");
    }

    #[test]
    fn a_key_is_held_back_after_its_failures_and_others_are_not() {
        let limit = FailureLimit::new(3, Duration::from_secs(60));
        assert_eq!(limit.failed(&"a"), None);
        assert_eq!(limit.failed(&"a"), None);
        assert_eq!(limit.held_back(&"a"), None);
        let wait = limit
            .failed(&"a")
            .expect("the third failure spends the last");
        assert!(wait <= Duration::from_secs(20), "{wait:?}");
        let held = limit.held_back(&"a").expect("held back");
        assert!(held > Duration::from_secs(19), "{held:?}");
        assert_eq!(limit.held_back(&"b"), None);
        assert!(limit.failed(&"a").is_some(), "still none left");
    }

    #[test]
    fn a_held_back_key_is_let_go_when_its_failure_is_forgiven() {
        let limit = FailureLimit::new(2, Duration::from_millis(100));
        limit.failed(&"a");
        assert!(limit.failed(&"a").is_some());
        assert!(limit.held_back(&"a").is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(limit.held_back(&"a"), None);
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_at_least_one() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(6)), 6);
        assert_eq!(retry_after_secs(Duration::from_millis(6001)), 7);
    }
}
