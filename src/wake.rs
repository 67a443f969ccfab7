//! Waking this instance's sweeper when something falls due earlier than it
//! planned to look.
//!
//! The sweeper publishes when it will next look; a message scheduled for
//! later than that is left for that look and wakes nothing. Without this, a
//! stream of schedule requests for the future kept the sweeper running a
//! claim and a next-due query for each of them.
//!
//! While the sweeper looks, what is announced is remembered, not acted on:
//! when it has read the next due time and goes to sleep, the earliest
//! announcement wakes it only if it falls due before the look it plans.
//! (Before, any announcement during a look made it look once more, so a
//! steady stream of requests for messages due in an hour kept it looking
//! back to back, four statements each time.)

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

/// The sweeper is working, not sleeping.
const AWAKE: i64 = i64::MAX;
/// Nothing announced during the look.
const NOTHING: i64 = i64::MAX;
/// No consumer of a pull target waits on this instance.
const NOT_WATCHING: i64 = i64::MIN;

pub struct Wake {
    notify: Notify,
    /// A schedule was created or changed: its materialiser looks again.
    schedules: Notify,
    /// When the sleeping sweeper will look again, in milliseconds since the epoch.
    sleeps_until_ms: AtomicI64,
    /// The earliest due time announced while the sweeper looks, in
    /// milliseconds since the epoch.
    announced_ms: AtomicI64,
    /// The watch of consumers waiting on pull targets (`service::pull`)
    /// looks again at `pull_plan_ms` (`NOT_WATCHING` while none wait); an
    /// announcement due before then wakes it, and the earliest is kept in
    /// `pull_announced_ms` until it looks.
    pull: Notify,
    pull_plan_ms: AtomicI64,
    pull_announced_ms: AtomicI64,
}

impl Default for Wake {
    fn default() -> Self {
        Self {
            notify: Notify::new(),
            schedules: Notify::new(),
            sleeps_until_ms: AtomicI64::new(AWAKE),
            announced_ms: AtomicI64::new(NOTHING),
            pull: Notify::new(),
            pull_plan_ms: AtomicI64::new(NOT_WATCHING),
            pull_announced_ms: AtomicI64::new(NOTHING),
        }
    }
}

impl Wake {
    /// Something (committed) falls due at `at`: wake the sweeper if it would
    /// sleep past that.
    pub fn due(&self, at: DateTime<Utc>) {
        let at = at.timestamp_millis();
        self.pull_due(at);
        let mut until = self.sleeps_until_ms.load(Ordering::SeqCst);
        if until == AWAKE {
            // Looking: its end compares this with the next look. If it went
            // to sleep meanwhile, it may have compared before this was
            // written: compare here too (at worst it looks once more).
            self.announced_ms.fetch_min(at, Ordering::SeqCst);
            until = self.sleeps_until_ms.load(Ordering::SeqCst);
            if until == AWAKE {
                return;
            }
        }
        if at <= until {
            self.notify.notify_one();
        }
    }

    /// Something may be due now (a target was enabled, another instance
    /// said so): look at once.
    pub fn now(&self) {
        self.pull_due(i64::MIN + 1);
        self.notify.notify_one();
    }

    /// Something of a pull target may be receivable now (an ack or a dead
    /// letter handed a key on): wakes the pull watch, if consumers wait,
    /// and not the sweeper, which never takes a pull target's message.
    pub fn receivable_now(&self) {
        self.pull_due(i64::MIN + 1);
    }

    /// Something of a pull target may be receivable at `at` (a nack's delay
    /// or a changed visibility ends): for the pull watch alone.
    pub fn receivable_at(&self, at: DateTime<Utc>) {
        self.pull_due(at.timestamp_millis());
    }

    /// Something of some target may be receivable at `at` (milliseconds).
    fn pull_due(&self, at: i64) {
        let plan = self.pull_plan_ms.load(Ordering::SeqCst);
        if plan == NOT_WATCHING {
            return;
        }
        self.pull_announced_ms.fetch_min(at, Ordering::SeqCst);
        if at <= plan {
            self.pull.notify_one();
        }
    }

    /// The pull watch looks next at `plan`, or watches nothing (`None`).
    /// While it looks (`Some(MAX)`), every announcement is kept for after.
    pub(crate) fn pull_plan(&self, plan: Option<DateTime<Utc>>) {
        let ms = plan.map_or(NOT_WATCHING, |p| p.timestamp_millis());
        self.pull_plan_ms.store(ms, Ordering::SeqCst);
        if plan.is_none() {
            self.pull_announced_ms.store(NOTHING, Ordering::SeqCst);
        }
    }

    /// The earliest instant announced since the last call, if any.
    pub(crate) fn take_pull_announced(&self) -> Option<DateTime<Utc>> {
        match self.pull_announced_ms.swap(NOTHING, Ordering::SeqCst) {
            NOTHING => None,
            ms => {
                Some(DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC))
            }
        }
    }

    pub(crate) async fn pull_notified(&self) {
        self.pull.notified().await;
    }

    /// A schedule was created, changed or resumed: its first runs may be
    /// due before the materialiser's next pass.
    pub fn schedules(&self) {
        self.schedules.notify_one();
    }

    pub(crate) async fn schedules_changed(&self) {
        self.schedules.notified().await;
    }

    /// The sweeper is about to look: what is announced until it sleeps
    /// again is remembered for then. What was announced before is in the
    /// database it is about to read.
    pub(crate) fn awake(&self) {
        self.sleeps_until_ms.store(AWAKE, Ordering::SeqCst);
        self.announced_ms.store(NOTHING, Ordering::SeqCst);
    }

    /// The sweeper has read the next due time and sleeps until `until` (or
    /// until woken). Set after that read, so that a message committed after
    /// it is compared with this deadline or finds the sweeper awake.
    /// What was announced while it looked wakes it if it falls due by then.
    pub(crate) fn sleeping_until(&self, until: DateTime<Utc>) {
        let until = until.timestamp_millis();
        self.sleeps_until_ms.store(until, Ordering::SeqCst);
        if self.announced_ms.swap(NOTHING, Ordering::SeqCst) <= until {
            self.notify.notify_one();
        }
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
        let s = chrono::TimeDelta::seconds;

        // Looking (as at the start): remembered, not acted on, until the
        // look ends and says when the next one is.
        w.due(t + chrono::TimeDelta::days(1));
        assert!(!woken(&w).await, "a look under way is not repeated at once");
        w.sleeping_until(t + s(5));
        assert!(!woken(&w).await, "due after the next look: left for it");

        w.due(t + s(6));
        assert!(!woken(&w).await, "later than the next look: left for it");
        w.due(t + s(5));
        assert!(woken(&w).await, "due at the next look itself");
        w.due(t + s(1));
        assert!(woken(&w).await);
        w.now();
        assert!(woken(&w).await);

        // Announced during a look, due before the next one: the look
        // may have read the next due time before it was written.
        w.awake();
        w.due(t + s(1));
        assert!(!woken(&w).await);
        w.sleeping_until(t + s(5));
        assert!(woken(&w).await, "due before the next look");

        // Only the earliest announcement counts, and only once.
        w.awake();
        w.due(t + chrono::TimeDelta::days(365));
        w.due(t + s(5));
        w.due(t + s(60));
        w.sleeping_until(t + s(5));
        assert!(woken(&w).await);
        w.awake();
        w.sleeping_until(t + s(5));
        assert!(!woken(&w).await, "nothing announced during this look");

        // What was announced before a look began is in what it reads.
        w.awake();
        w.due(t + s(1));
        w.awake();
        w.sleeping_until(t + s(5));
        assert!(!woken(&w).await);
    }

    async fn pull_woken(w: &Wake) -> bool {
        tokio::time::timeout(Duration::from_millis(20), w.pull_notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn what_only_a_consumer_can_take_wakes_the_pull_watch_and_not_the_sweeper() {
        let w = Wake::default();
        let t = Utc::now();
        w.sleeping_until(t + chrono::TimeDelta::seconds(5));

        // No consumer waits: nothing is woken, nothing is kept.
        w.receivable_now();
        assert!(!woken(&w).await, "the sweeper never takes a pull message");
        assert!(!pull_woken(&w).await);
        assert_eq!(w.take_pull_announced(), None);

        // Consumers wait; the watch looks next in a second.
        w.pull_plan(Some(t + chrono::TimeDelta::seconds(1)));
        w.receivable_now();
        assert!(pull_woken(&w).await, "an ack handed a key on");
        assert!(!woken(&w).await, "an ack wakes no sweeper");
        assert!(w.take_pull_announced().is_some());

        w.receivable_at(t + chrono::TimeDelta::minutes(1));
        assert!(
            !pull_woken(&w).await,
            "after the watch's next look: left for it"
        );
        assert_eq!(
            w.take_pull_announced().map(|a| a.timestamp_millis()),
            Some((t + chrono::TimeDelta::minutes(1)).timestamp_millis())
        );
        w.receivable_at(t);
        assert!(
            pull_woken(&w).await,
            "a nack's delay ends before the next look"
        );
        assert!(!woken(&w).await);
    }
}
