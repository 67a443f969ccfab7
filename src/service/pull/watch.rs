//! Consumers waiting on pull targets (long polling, docs/api.md#pull-targets),
//! and the ends of last receives.
//!
//! A waiting receive costs the database nothing while nothing changes. Each
//! instance keeps, per target that consumers wait on, the earliest instant
//! something of it is receivable (a due time, the end of a visibility), as
//! its last read said. One task per instance (`run`) reads that for every
//! watched target in one statement, and only when something may have
//! changed: an instant it knew of has come, a change was announced (a new
//! message, a nack, an enabled target, on this instance or, through
//! `NOTIFY`, another: the same announcements that wake the sweeper), or the
//! backstop (`sweeper.poll_interval`, the horizon within which other
//! instances announce what falls due) has passed. When something is
//! receivable it wakes one waiting consumer of that target, whose receive
//! takes it; a receive that took all it asked for wakes the next.
//!
//! A consumer that comes back to a target known to have nothing receivable
//! waits at once, without a receive of its own.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::{
    clock::Clock,
    domain::{
        ids::{AccountId, TargetId},
        target::pull::PullConfig,
    },
    metrics as m,
    store::Store,
    wake::Wake,
};

/// Reads of the watched targets are at least this far apart, however often
/// changes are announced.
const MIN_SPACING: TimeDelta = TimeDelta::milliseconds(10);

/// After waking a consumer, the targets are read again this soon: the woken
/// receive says what is left when it can (`Waiting::learned`), and this is
/// for when it cannot (its client went away).
const AFTER_WAKING: TimeDelta = TimeDelta::seconds(1);

/// How long an instance keeps a pull target's config without reading it.
const CONFIG_TTL: TimeDelta = TimeDelta::seconds(5);

/// Pull targets' configs as read, by account and target, and when.
type Configs = HashMap<(AccountId, TargetId), (PullConfig, DateTime<Utc>)>;

#[derive(Default)]
pub struct PullWatch {
    targets: Mutex<HashMap<TargetId, Entry>>,
    /// Pull targets' configs read lately (`CONFIG_TTL`).
    configs: Mutex<Configs>,
    /// A target gained its first waiter, or an instant was learned.
    changed: Notify,
    /// The ends of last receives (`janitor`): the earliest announced.
    last_ends: Notify,
    last_end_ms: std::sync::atomic::AtomicI64,
    /// Receives waiting, by account (`limits.waiting_receives`).
    by_account: Mutex<HashMap<AccountId, u64>>,
}

struct Entry {
    waiters: usize,
    notify: Arc<Notify>,
    /// Whether `next` says what the database says (read, or learned from a
    /// receive, since the last change announced).
    known: bool,
    /// The earliest instant something is receivable; `None`: nothing waits.
    next: Option<DateTime<Utc>>,
    /// When its last waiter left: it is still watched for a backstop's
    /// length, so that a consumer polling again finds it known.
    idle_since: Option<DateTime<Utc>>,
}

/// A consumer waiting on a target; leaving drops it.
pub struct Waiting<'a> {
    watch: &'a PullWatch,
    account: AccountId,
    target: TargetId,
    notify: Arc<Notify>,
    /// The target is known to have nothing receivable now.
    pub known_empty: bool,
}

impl Waiting<'_> {
    /// Something may be receivable: woken by the watch or another consumer.
    pub async fn notified(&self) {
        self.notify.notified().await;
    }

    /// Wakes another consumer waiting on the target (a receive took all it
    /// asked for: more may be left).
    pub fn wake_another(&self) {
        self.notify.notify_one();
    }

    /// A receive took what there was: the next instant something will be
    /// receivable. One already past (rows another receive held, which it
    /// skipped) is looked at again a moment later, not at once.
    pub fn learned(&self, next: Option<DateTime<Utc>>, now: DateTime<Utc>) {
        let mut targets = self.watch.targets.lock().expect("not poisoned");
        if let Some(e) = targets.get_mut(&self.target) {
            e.known = true;
            e.next = next.map(|n| n.max(now + MIN_SPACING));
        }
        drop(targets);
        self.watch.changed.notify_one();
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        {
            let mut accounts = self.watch.by_account.lock().expect("not poisoned");
            if let Some(n) = accounts.get_mut(&self.account) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    accounts.remove(&self.account);
                }
            }
        }
        let mut targets = self.watch.targets.lock().expect("not poisoned");
        if let Some(e) = targets.get_mut(&self.target) {
            e.waiters = e.waiters.saturating_sub(1);
            if e.waiters == 0 {
                e.idle_since = Some(Utc::now());
            }
        }
    }
}

impl PullWatch {
    /// The account's pull target's config, if read within `CONFIG_TTL`.
    pub fn config(
        &self,
        account: &AccountId,
        target: &TargetId,
        now: DateTime<Utc>,
    ) -> Option<PullConfig> {
        let configs = self.configs.lock().expect("not poisoned");
        configs
            .get(&(account.clone(), target.clone()))
            .filter(|(_, at)| *at + CONFIG_TTL > now)
            .map(|(c, _)| c.clone())
    }

    pub fn remember_config(
        &self,
        account: &AccountId,
        target: &TargetId,
        config: &PullConfig,
        now: DateTime<Utc>,
    ) {
        let mut configs = self.configs.lock().expect("not poisoned");
        // Kept small: what is past its time goes when one is added.
        configs.retain(|_, (_, at)| *at + CONFIG_TTL > now);
        configs.insert((account.clone(), target.clone()), (config.clone(), now));
    }

    /// A consumer of `account` starts waiting on `target`, unless the
    /// account has `max` receives waiting on this instance already.
    pub fn enter(
        &self,
        account: &AccountId,
        target: &TargetId,
        now: DateTime<Utc>,
        max: u64,
    ) -> Result<Waiting<'_>, crate::domain::limits::OverLimit> {
        {
            let mut accounts = self.by_account.lock().expect("not poisoned");
            let n = accounts.entry(account.clone()).or_default();
            let limit = crate::domain::limits::Limit::WaitingReceives;
            crate::domain::limits::check(limit, max, *n, 1)?;
            *n += 1;
        }
        let mut targets = self.targets.lock().expect("not poisoned");
        let first = targets.is_empty();
        let e = targets.entry(target.clone()).or_insert_with(|| Entry {
            waiters: 0,
            notify: Arc::new(Notify::new()),
            known: false,
            next: None,
            idle_since: None,
        });
        e.waiters += 1;
        e.idle_since = None;
        let known_empty = e.known && e.next.is_none_or(|n| n > now);
        let notify = e.notify.clone();
        drop(targets);
        if first {
            self.changed.notify_one();
        }
        Ok(Waiting {
            watch: self,
            account: account.clone(),
            target: target.clone(),
            notify,
            known_empty,
        })
    }

    /// A last allowed receive's visibility ends at `at`: the janitor looks then.
    pub fn last_receive_ends(&self, at: DateTime<Utc>) {
        use std::sync::atomic::Ordering;
        self.last_end_ms
            .fetch_min(at.timestamp_millis(), Ordering::SeqCst);
        self.last_ends.notify_one();
    }

    fn watched(&self) -> Vec<TargetId> {
        self.targets
            .lock()
            .expect("not poisoned")
            .keys()
            .cloned()
            .collect()
    }

    /// What a read of `asked` said: each target's next instant; those
    /// receivable now wake a waiter. Idle targets watched long enough are
    /// dropped. Returns whether it woke any.
    fn apply(
        &self,
        asked: &[TargetId],
        read: Vec<(TargetId, DateTime<Utc>)>,
        now: DateTime<Utc>,
        keep_idle: TimeDelta,
    ) -> bool {
        let read: HashMap<TargetId, DateTime<Utc>> = read.into_iter().collect();
        let mut targets = self.targets.lock().expect("not poisoned");
        targets.retain(|_, e| e.waiters > 0 || e.idle_since.is_none_or(|t| t + keep_idle > now));
        let mut woke = false;
        // Only what was read: a target first waited on during the read is
        // not known by it.
        for t in asked {
            let Some(e) = targets.get_mut(t) else {
                continue;
            };
            e.known = true;
            e.next = read.get(t).copied();
            if e.next.is_some_and(|n| n <= now) {
                e.known = false;
                e.next = None;
                if e.waiters > 0 {
                    e.notify.notify_one();
                    woke = true;
                }
            }
        }
        woke
    }

    /// Wakes the waiters of targets whose instant has come; returns the
    /// earliest instant still to come, and whether it woke any.
    fn due(&self, now: DateTime<Utc>) -> (Option<DateTime<Utc>>, bool) {
        let mut targets = self.targets.lock().expect("not poisoned");
        let mut earliest: Option<DateTime<Utc>> = None;
        let mut woke = false;
        for e in targets.values_mut() {
            match e.next {
                Some(n) if n <= now => {
                    e.known = false;
                    e.next = None;
                    if e.waiters > 0 {
                        e.notify.notify_one();
                        woke = true;
                    }
                }
                Some(n) => earliest = Some(earliest.map_or(n, |x| x.min(n))),
                None => {}
            }
        }
        (earliest, woke)
    }

    /// A change was announced: what is known may be out of date.
    fn forget(&self) {
        for e in self.targets.lock().expect("not poisoned").values_mut() {
            e.known = false;
        }
    }

    /// Watches the targets consumers wait on, until shutdown.
    pub async fn run(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        wake: Arc<Wake>,
        clock: Arc<dyn Clock>,
        backstop: Duration,
        shutdown: CancellationToken,
    ) {
        let backstop = TimeDelta::from_std(backstop).unwrap_or(TimeDelta::seconds(5));
        let mut read_at = clock.now();
        let mut last_read = DateTime::<Utc>::MIN_UTC;
        loop {
            if self.targets.lock().expect("not poisoned").is_empty() {
                wake.pull_plan(None);
                tokio::select! {
                    _ = self.changed.notified() => {}
                    _ = shutdown.cancelled() => return,
                }
                read_at = clock.now();
                continue;
            }
            let now = clock.now();
            if read_at <= now {
                wake.pull_plan(Some(DateTime::<Utc>::MAX_UTC));
                wake.take_pull_announced();
                let targets = self.watched();
                match store.next_receivable(&targets).await {
                    Ok(read) => {
                        let woke = self.apply(&targets, read, clock.now(), backstop);
                        read_at = now + if woke { AFTER_WAKING } else { backstop };
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot read what waiting consumers may receive; again in a second");
                        read_at = now + TimeDelta::seconds(1);
                    }
                }
                last_read = now;
            }
            let now = clock.now();
            let (earliest, woke) = self.due(now);
            if woke {
                read_at = read_at.min(now + AFTER_WAKING);
            }
            let plan = earliest.map_or(read_at, |n| n.min(read_at));
            wake.pull_plan(Some(plan));
            if let Some(at) = wake.take_pull_announced() {
                self.forget();
                read_at = read_at.min(at.max(last_read + MIN_SPACING));
                continue;
            }
            let sleep = (plan - now).to_std().unwrap_or_default();
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = wake.pull_notified() => {}
                _ = self.changed.notified() => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Makes dead letters of messages whose last allowed receive's
    /// visibility ran out, as soon as it does on this instance (and within
    /// a backstop for what others received), until shutdown.
    pub async fn janitor(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        wake: Arc<Wake>,
        clock: Arc<dyn Clock>,
        backstop: Duration,
        shutdown: CancellationToken,
    ) {
        use std::sync::atomic::Ordering;
        const BATCH: u32 = 1000;
        let backstop = TimeDelta::from_std(backstop).unwrap_or(TimeDelta::seconds(5));
        loop {
            self.last_end_ms.store(i64::MAX, Ordering::SeqCst);
            let now = clock.now();
            let next = match store.dead_letter_unacked(now, BATCH).await {
                Ok(dead) => {
                    if !dead.is_empty() {
                        metrics::counter!(m::DEAD_LETTERED).increment(dead.len() as u64);
                        // The next message of a key may be receivable now.
                        wake.receivable_now();
                    }
                    if dead.len() as u32 == BATCH {
                        continue;
                    }
                    store.next_unacked_end().await.unwrap_or(None)
                }
                Err(e) => {
                    warn!(error = %e, "cannot end unacknowledged receives; again in a second");
                    Some(now + TimeDelta::seconds(1))
                }
            };
            let plan = next.map_or(now + backstop, |n| n.min(now + backstop));
            loop {
                let now = clock.now();
                let announced = self.last_end_ms.load(Ordering::SeqCst);
                let plan =
                    DateTime::<Utc>::from_timestamp_millis(announced).map_or(plan, |a| a.min(plan));
                if plan <= now {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep((plan - now).to_std().unwrap_or_default()) => {}
                    _ = self.last_ends.notified() => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}
