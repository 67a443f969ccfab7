//! The instances serving on one database. Each notes itself every second
//! (`CountStore::instance_seen`); one not seen for three seconds is taken
//! for dead, and the leases it held on messages it had not attempted yet
//! (claimed ahead, or waiting for a slot) are given back at once, so that
//! another instance attempts them within seconds of a crash instead of when
//! the lease would have ended (`sweeper.lease`, 30 s). The count of
//! instances serving also gives each its part of `api.rate_limit`.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{
    clock::Clock,
    limits::ApiLimits,
    store::{InstancesSeen, Store, StoreResult},
    wake::Wake,
};

/// How often an instance notes itself.
pub const BEAT: Duration = Duration::from_secs(1);
/// An instance not noted for this long is dead: three beats missed.
pub const STALE: Duration = Duration::from_secs(3);

/// How long after another instance goes stale a note looks for it.
const STALE_MARGIN: Duration = Duration::from_millis(20);

/// An instance whose last note is older than this starts no attempt while
/// others serve beside it: they may take it for dead a beat later.
pub const FENCE: Duration = Duration::from_secs(2);

/// When this instance last noted itself, and how many instances served
/// then: the sweeper asks `may_attempt` before it starts an attempt.
#[derive(Debug)]
pub struct Noted {
    start: Instant,
    /// Milliseconds after `start` of the last note that succeeded.
    last_ms: AtomicU64,
    serving: AtomicU32,
    /// A note found this instance forgotten by the others (taken for dead,
    /// its leases given back): it attempts nothing until the sweeper has
    /// given back what it claimed and not started (`given_back`).
    forgotten: AtomicBool,
    /// Tells the sweeper so.
    pub(crate) taken_for_dead: Notify,
}

impl Default for Noted {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            serving: AtomicU32::new(1),
            forgotten: AtomicBool::new(false),
            taken_for_dead: Notify::new(),
        }
    }
}

impl Noted {
    fn mark(&self, serving: u32) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
        self.serving.store(serving, Ordering::Relaxed);
    }

    /// This instance was taken for dead: nothing it claimed before may be
    /// attempted until the sweeper gave it back.
    fn forgot(&self) {
        self.forgotten.store(true, Ordering::SeqCst);
        self.taken_for_dead.notify_one();
    }

    /// What was claimed before this instance was forgotten went back.
    pub fn given_back(&self) {
        self.forgotten.store(false, Ordering::SeqCst);
    }

    /// False when other instances serve and this one has not noted itself
    /// for `FENCE`: they may give back what it holds and send it too, so it
    /// gives its waiting messages back instead of attempting them. A lone
    /// instance always may: nobody takes its messages (a database outage
    /// then delays its records, not its attempts). False too from a note
    /// that found it forgotten until what it held went back, however the
    /// timers of a process that was stopped (not killed) run when it goes
    /// on.
    pub fn may_attempt(&self) -> bool {
        if self.forgotten.load(Ordering::SeqCst) {
            return false;
        }
        if self.serving.load(Ordering::Relaxed) <= 1 {
            return true;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last) < FENCE
    }
}

/// What a note needs: the store, and how far ahead of now a lease may run
/// (a due claim's lease, or one taken ahead of its message's time).
#[derive(Clone)]
pub struct Instances {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub leases_reach: Duration,
    pub noted: Arc<Noted>,
}

impl Instances {
    /// Notes this instance once; `first` also gives back what no instance
    /// serving holds (a predecessor killed before it was ever noted).
    pub async fn note(&self, first: bool) -> StoreResult<InstancesSeen> {
        let now = self.clock.now();
        let seen = self
            .store
            .instance_seen(now, STALE, self.leases_reach, first)
            .await?;
        if seen.was_forgotten {
            tracing::warn!(
                "this instance did not note itself for {STALE:?} and the others took it for dead: \
                 what it claimed and has not attempted goes back"
            );
            self.noted.forgot();
        }
        self.noted.mark(seen.serving);
        if seen.given_back > 0 {
            tracing::warn!(
                count = seen.given_back,
                "an instance stopped serving: the messages it held are claimable again"
            );
        }
        Ok(seen)
    }

    /// Notes this instance every `BEAT` until `shutdown`, telling `limits`
    /// how many serve and waking the sweeper when leases were given back.
    /// Looks sooner than a beat when another instance is about to be
    /// three seconds silent, so that a dead one is forgotten when it is
    /// stale, not up to a beat later.
    pub async fn run(self, limits: Arc<ApiLimits>, wake: Arc<Wake>, shutdown: CancellationToken) {
        let mut next = BEAT;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = shutdown.cancelled() => return,
            }
            next = BEAT;
            match self.note(false).await {
                Ok(seen) => {
                    limits.set_instances(seen.serving);
                    if seen.given_back > 0 {
                        wake.now();
                    }
                    if let Some(stale_in) = seen.next_stale_in {
                        next = (stale_in + STALE_MARGIN).min(BEAT);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "noting this instance as serving failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_beside_others_stops_attempting_when_its_note_is_old_and_a_lone_one_never() {
        let noted = Noted::default();
        noted.mark(2);
        assert!(noted.may_attempt());
        // As if the last note was FENCE ago.
        let noted = Noted {
            start: Instant::now() - FENCE - Duration::from_millis(10),
            ..Noted::default()
        };
        noted.serving.store(2, Ordering::Relaxed);
        assert!(!noted.may_attempt());
        noted.serving.store(1, Ordering::Relaxed);
        assert!(
            noted.may_attempt(),
            "nobody takes a lone instance's messages"
        );
        noted.mark(3);
        assert!(noted.may_attempt(), "noted again");
    }

    #[test]
    fn a_forgotten_instance_attempts_nothing_until_it_gave_back_what_it_held() {
        let noted = Noted::default();
        noted.forgot();
        noted.mark(1);
        assert!(!noted.may_attempt(), "even alone, and noted just now");
        noted.given_back();
        assert!(noted.may_attempt());
    }
}
