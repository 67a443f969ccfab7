//! Waking this instance's sweeper when something falls due earlier than it
//! planned to look.
//!
//! The sweeper publishes when it will next look; a message scheduled for
//! later than that is left for that look and wakes nothing. Without this, a
//! stream of schedule requests for the future kept the sweeper running a
//! claim and a next-due query for each of them.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::sweeper::ahead::Held;

/// The sweeper is working, not sleeping: every wake-up counts.
const AWAKE: i64 = i64::MAX;

pub struct Wake {
    notify: Notify,
    /// A schedule was created or changed: its materialiser looks again.
    schedules: Notify,
    /// When the sleeping sweeper will look again, in milliseconds since the epoch.
    sleeps_until_ms: AtomicI64,
    /// Messages the sweeper claimed ahead of their time and holds: a
    /// cancel or reschedule on this instance takes them back first.
    pub(crate) held: Held,
}

impl Default for Wake {
    fn default() -> Self {
        Self {
            notify: Notify::new(),
            schedules: Notify::new(),
            sleeps_until_ms: AtomicI64::new(AWAKE),
            held: Held::default(),
        }
    }
}

impl Wake {
    /// Something (committed) falls due at `at`: wake the sweeper if it would
    /// sleep past that.
    pub fn due(&self, at: DateTime<Utc>) {
        if at.timestamp_millis() <= self.sleeps_until_ms.load(Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }

    /// Something may be due now (a target was enabled, another instance
    /// said so): look at once.
    pub fn now(&self) {
        self.notify.notify_one();
    }

    /// A schedule was created, changed or resumed: its first runs may be
    /// due before the materialiser's next pass.
    pub fn schedules(&self) {
        self.schedules.notify_one();
    }

    pub(crate) async fn schedules_changed(&self) {
        self.schedules.notified().await;
    }

    /// The sweeper is about to look: every wake-up until it sleeps again
    /// makes it look once more.
    pub(crate) fn awake(&self) {
        self.sleeps_until_ms.store(AWAKE, Ordering::SeqCst);
    }

    /// The sweeper has read the next due time and sleeps until `until` (or
    /// until woken). Set after that read, so that a message committed after
    /// it is compared with this deadline or finds the sweeper awake.
    pub(crate) fn sleeping_until(&self, until: DateTime<Utc>) {
        self.sleeps_until_ms
            .store(until.timestamp_millis(), Ordering::SeqCst);
    }

    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn woken(w: &Wake) -> bool {
        tokio::time::timeout(Duration::from_millis(20), w.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn wakes_only_for_what_falls_due_before_the_next_look() {
        let w = Wake::default();
        let t = Utc::now();
        // Awake: everything counts.
        w.due(t + chrono::TimeDelta::days(1));
        assert!(woken(&w).await);

        w.sleeping_until(t + chrono::TimeDelta::seconds(5));
        w.due(t + chrono::TimeDelta::seconds(6));
        assert!(!woken(&w).await, "later than the next look: left for it");
        w.due(t + chrono::TimeDelta::seconds(5));
        assert!(woken(&w).await, "due at the next look itself");
        w.due(t + chrono::TimeDelta::seconds(1));
        assert!(woken(&w).await);
        w.now();
        assert!(woken(&w).await);

        w.awake();
        w.due(t + chrono::TimeDelta::days(365));
        assert!(woken(&w).await);
    }
}
