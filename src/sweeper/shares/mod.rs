//! Attempts in flight per account and per target on this instance, so that
//! no account holds more than its fair part of the instance's slots and no
//! target more than `sweeper.target_concurrency`: an account whose targets
//! are slow or hang cannot take the delivery slots every other account's
//! messages need.
//!
//! An account's part is the instance's `concurrency` less what is kept for
//! accounts that have nothing in flight yet (`NEWCOMERS`: a quarter, or one
//! target's share if that is less), shared evenly by the accounts with
//! attempts in flight or waiting. An account over its part
//! (others arrived after it filled it) starts nothing more until it is under
//! it again; nothing in flight is cut short.
//!
//! A target that answers quickly may also have claimed messages waiting
//! here for one of its slots (at most `PREFETCH_FACTOR` shares' worth, and
//! only as many as its recent pace clears within `QUEUE_BUDGET_MS`): an
//! attempt that ends starts the next at once, without a round trip to the
//! database, and the next claim for the target runs while these are sent.
//! A target of unknown pace (nothing in flight a moment ago), or a slow one,
//! has no such queue: its messages stay in the database, where a cancel
//! wins and another instance may take them.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use accounts::Account;

use crate::{
    domain::ids::{AccountId, TargetId},
    store::{ClaimShares, Claimed},
};

/// One part in this many of an instance's slots, at most one target's share,
/// is kept for accounts with nothing in flight: a newcomer starts at once
/// beside accounts that fill their parts.
const NEWCOMERS: u32 = 4;

/// At most this many shares' worth of a target's claimed messages wait for its slots.
const PREFETCH_FACTOR: u32 = 8;
/// A target's waiting messages are what its recent pace sends in this long.
const QUEUE_BUDGET_MS: f64 = 100.0;
/// How much the newest attempt's duration moves a target's pace.
const PACE_WEIGHT: f64 = 0.2;
/// How long a target's pace is kept once nothing of it is in flight.
const PACE_KEPT: Duration = Duration::from_secs(10);

/// Claimed messages (one delivery: a single message, or an SQS batch)
/// waiting for a slot of their target.
pub struct Waiting {
    pub group: Vec<Claimed>,
    pub claimed_at: Instant,
    /// Claimed ahead of its time (`ahead`): it counts against what may be
    /// held ahead, not against the instance's queue of due claims, so a
    /// burst held for one target does not stop the claims for others.
    pub ahead: bool,
}

#[derive(Default)]
struct Target {
    /// Whose target it is (from its first claimed message).
    account: Option<AccountId>,
    in_flight: u32,
    waiting: VecDeque<Waiting>,
    /// Messages in `waiting`.
    queued: u32,
    /// How long one of its deliveries took lately (ms); None until one ended.
    pace_ms: Option<f64>,
    /// When its last delivery ended.
    last_ended: Option<Instant>,
    /// It held a whole share since half its share was last free: it takes
    /// more only once half is free again (claims come in batches, not one
    /// per ended attempt). A target that got less than its share (another
    /// instance held some of the rows) tops up at once.
    filled: bool,
}

impl Target {
    fn idle(&self) -> bool {
        self.in_flight == 0 && self.waiting.is_empty()
    }
}

pub struct InFlight {
    per_target: u32,
    /// The instance's slots (`sweeper.concurrency`).
    slots: u32,
    counts: Mutex<Counts>,
    /// Signalled when attempts end and a full target may take more again.
    pub freed: Notify,
    /// Signalled when attempts end while messages wait for an
    /// instance-wide permit (not for a slot of their own target).
    pub starved: Notify,
}

#[derive(Default)]
struct Counts {
    targets: HashMap<TargetId, Target>,
    accounts: HashMap<AccountId, Account>,
    /// Messages waiting, over all targets, but those claimed ahead.
    queued: u32,
    /// Whether a delivery found a slot but no instance-wide permit.
    starved: bool,
}

impl InFlight {
    pub fn new(per_target: u32, slots: u32) -> Self {
        Self {
            per_target: per_target.max(1),
            slots: slots.max(1),
            counts: Mutex::default(),
            freed: Notify::new(),
            starved: Notify::new(),
        }
    }

    /// How many of a target's messages this instance may hold, in flight
    /// and waiting.
    fn allowance(&self, t: &Target) -> u32 {
        self.per_target + self.prefetch(t)
    }

    /// How many of a target's claimed messages may wait for its slots: what
    /// its recent pace clears within the budget; none at an unknown pace.
    fn prefetch(&self, t: &Target) -> u32 {
        t.pace_ms.map_or(0, |pace| {
            let clears = f64::from(self.per_target) * QUEUE_BUDGET_MS / pace.max(0.01);
            (clears as u32).min(self.per_target * PREFETCH_FACTOR)
        })
    }

    /// How many more a target may claim now: none until half its allowance
    /// is free (claims come in batches, not one per ended attempt).
    fn room(&self, t: &Target) -> u32 {
        Self::batched(t, self.allowance(t))
    }

    /// How many more a target may start now, as a gated claim takes them:
    /// its free slots, none until half of them are free.
    fn free_slots(&self, t: &Target) -> u32 {
        Self::batched(t, self.per_target)
    }

    /// What is free of `of` for a target, once it may take more: at once
    /// after a short claim, only from half free after a full one.
    fn batched(t: &Target, of: u32) -> u32 {
        let free = of.saturating_sub(t.in_flight + t.queued);
        if !t.filled || free >= of.div_ceil(2) {
            free
        } else {
            0
        }
    }

    /// What the next claim may take from each target and account.
    pub fn shares(&self) -> ClaimShares {
        self.shares_by(Self::room, false)
    }

    /// What the next gated claim may take from each target and account:
    /// only what starts at once (a gate counts starts; none of them may
    /// wait here).
    pub fn gated_shares(&self) -> ClaimShares {
        self.shares_by(Self::free_slots, true)
    }

    fn shares_by(&self, room: impl Fn(&Self, &Target) -> u32, gated: bool) -> ClaimShares {
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        counts
            .targets
            .retain(|_, t| !t.idle() || t.last_ended.is_some_and(|e| e.elapsed() < PACE_KEPT));
        let rooms = self.account_rooms(counts, gated);
        let active = counts.accounts.len();
        ClaimShares {
            per_target: self.per_target,
            room: counts
                .targets
                .iter()
                .map(|(id, t)| (id.clone(), room(self, t)))
                .collect(),
            // A newcomer's part.
            per_account: self.part(active + 1),
            accounts: rooms,
        }
    }

    /// The targets and accounts that may take no more now.
    pub fn full(&self) -> Full {
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        let targets = counts
            .targets
            .iter()
            .filter(|(_, t)| self.room(t) == 0)
            .map(|(id, _)| id.clone())
            .collect();
        let accounts = self
            .account_rooms(counts, false)
            .into_iter()
            .filter(|(_, room)| *room == 0)
            .map(|(a, _)| a)
            .collect();
        Full { targets, accounts }
    }

    /// Messages waiting for a slot, over all targets.
    pub fn queued(&self) -> u32 {
        self.counts.lock().expect("not poisoned").queued
    }

    /// The targets with messages waiting.
    pub fn waiting_targets(&self) -> Vec<TargetId> {
        let counts = self.counts.lock().expect("not poisoned");
        counts
            .targets
            .iter()
            .filter(|(_, t)| !t.waiting.is_empty())
            .map(|(id, _)| id.clone())
            .collect()
    }

    #[cfg(test)]
    fn started(&self, account: &AccountId, target: &TargetId, n: u32) {
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        let t = counts.targets.entry(target.clone()).or_default();
        t.account = Some(account.clone());
        t.in_flight += n;
        self.mark_filled(t);
        self.account_started(counts, account, n);
    }

    /// Notes a target that holds a whole share.
    fn mark_filled(&self, t: &mut Target) {
        if t.in_flight + t.queued >= self.per_target {
            t.filled = true;
        }
    }

    /// A claimed delivery of `n` messages to `target`: its share if it may
    /// start now (`force`: whatever the slots say), or it waits here, behind
    /// any of the target's that wait already. `permit` is asked for the
    /// instance-wide permit when a slot is free and the account within its
    /// part; no permit, no start.
    pub fn start_or_wait<P>(
        self: &Arc<Self>,
        waiting: Waiting,
        force: bool,
        permit: impl FnOnce(u32) -> Option<P>,
    ) -> Option<(Waiting, Share, P)> {
        let n = waiting.group.len() as u32;
        let target = waiting.group[0].target_id.clone();
        let account = waiting.group[0].account.clone();
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        let account_may = force || self.account_may_start(counts, Some(&account), n);
        let t = counts.targets.entry(target.clone()).or_default();
        t.account.get_or_insert_with(|| account.clone());
        let target_may = force || (t.waiting.is_empty() && t.in_flight + n <= self.per_target);
        if target_may && account_may {
            if let Some(p) = permit(n) {
                t.in_flight += n;
                self.mark_filled(t);
                self.account_started(counts, &account, n);
                let share = Share {
                    of: self.clone(),
                    target,
                    account,
                    n,
                };
                return Some((waiting, share, p));
            }
        }
        if target_may {
            // A slot of its own target is free: what ends elsewhere (a
            // permit, a slot of its account) starts it.
            counts.starved = true;
        }
        let ahead = waiting.ahead;
        t.waiting.push_back(waiting);
        t.queued += n;
        self.mark_filled(t);
        // What was claimed ahead counts against what may be held ahead,
        // not against its account (nor makes an account active).
        if !ahead {
            counts.queued += n;
            counts.accounts.entry(account).or_default().queued += n;
        }
        None
    }

    /// The next delivery waiting for `target`, if one of its slots, a slot
    /// of its account and an instance-wide permit (`permit`) are free.
    pub fn next_for<P>(
        self: &Arc<Self>,
        target: &TargetId,
        permit: impl FnOnce(u32) -> Option<P>,
    ) -> Option<(Waiting, Share, P)> {
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        let t = counts.targets.get(target)?;
        let front = t.waiting.front()?;
        let n = front.group.len() as u32;
        let account = front.group[0].account.clone();
        if t.in_flight + n > self.per_target {
            return None;
        }
        if !self.account_may_start(counts, Some(&account), n) {
            counts.starved = true;
            return None;
        }
        let Some(p) = permit(n) else {
            counts.starved = true;
            return None;
        };
        let t = counts.targets.get_mut(target).expect("read above");
        let waiting = t.waiting.pop_front().expect("a front");
        t.in_flight += n;
        t.queued -= n;
        if !waiting.ahead {
            counts.queued -= n;
            if let Some(a) = counts.accounts.get_mut(&account) {
                a.queued = a.queued.saturating_sub(n);
            }
        }
        self.account_started(counts, &account, n);
        Some((
            waiting,
            Share {
                of: self.clone(),
                target: target.clone(),
                account,
                n,
            },
            p,
        ))
    }

    /// Takes every waiting delivery out (at shutdown: they are given back).
    pub fn take_waiting(&self) -> Vec<Waiting> {
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        counts.queued = 0;
        let mut all = Vec::new();
        for t in counts.targets.values_mut() {
            t.queued = 0;
            all.extend(t.waiting.drain(..));
        }
        counts.targets.retain(|_, t| t.in_flight > 0);
        for a in counts.accounts.values_mut() {
            a.queued = 0;
        }
        counts.accounts.retain(|_, a| a.in_flight > 0);
        all
    }

    /// A delivery to `target` took `took`: its pace moves toward it. A
    /// quicker pace may give a full target room (the sweeper is told, as
    /// when attempts end).
    pub fn paced(&self, target: &TargetId, took: Duration) {
        let refilled = {
            let mut guard = self.counts.lock().expect("not poisoned");
            let Some(t) = guard.targets.get_mut(target) else {
                return;
            };
            let was_full = self.room(t) == 0;
            let ms = took.as_secs_f64() * 1000.0;
            t.pace_ms = Some(t.pace_ms.map_or(ms, |p| p + PACE_WEIGHT * (ms - p)));
            t.last_ended = Some(Instant::now());
            was_full && self.room(t) > 0
        };
        if refilled {
            self.freed.notify_one();
        }
    }

    /// Results were written, and their places among the unrecorded given
    /// back: what waits for one may start.
    pub fn recorded(&self) {
        let starved = std::mem::take(&mut self.counts.lock().expect("not poisoned").starved);
        if starved {
            self.starved.notify_one();
        }
    }

    fn ended(&self, target: &TargetId, account: &AccountId, n: u32) {
        let (refilled, starved) = {
            let mut guard = self.counts.lock().expect("not poisoned");
            let counts = &mut *guard;
            let starved = std::mem::take(&mut counts.starved);
            let account_refilled = self.account_ended(counts, account, n);
            let target_refilled = counts.targets.get_mut(target).is_some_and(|t| {
                let was_full = self.room(t) == 0;
                t.in_flight = t.in_flight.saturating_sub(n);
                if self.per_target.saturating_sub(t.in_flight + t.queued)
                    >= self.per_target.div_ceil(2)
                {
                    t.filled = false;
                }
                was_full && self.room(t) > 0
            });
            // A target's pace is kept a while (`shares_by` forgets it).
            if counts
                .targets
                .get(target)
                .is_some_and(|t| t.idle() && t.pace_ms.is_none())
            {
                counts.targets.remove(target);
            }
            (target_refilled || account_refilled, starved)
        };
        // Stored permits if nobody waits: the sweeper sees them next time.
        if refilled {
            self.freed.notify_one();
        }
        if starved {
            self.starved.notify_one();
        }
    }
}

/// The targets and accounts that may take no more now: a claim leaves their
/// messages out, and the sweeper does not wake for them.
#[derive(Debug, Default)]
pub struct Full {
    pub targets: Vec<TargetId>,
    pub accounts: Vec<AccountId>,
}

impl Full {
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty() && self.accounts.is_empty()
    }
}

/// Attempts in flight to one target, counted until dropped.
pub struct Share {
    of: Arc<InFlight>,
    target: TargetId,
    account: AccountId,
    n: u32,
}

impl Share {
    pub fn target(&self) -> &TargetId {
        &self.target
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.of.ended(&self.target, &self.account, self.n);
    }
}

mod accounts;
#[cfg(test)]
mod tests;
