//! Attempts in flight per target on this instance, so that no target holds
//! more than `sweeper.target_concurrency` of them: a slow or hanging target
//! cannot take the delivery slots every other account's messages need.
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

use crate::{
    domain::ids::TargetId,
    store::{ClaimShares, Claimed},
};

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
    /// Messages waiting, over all targets, but those claimed ahead.
    queued: u32,
    /// Whether a delivery found a slot but no instance-wide permit.
    starved: bool,
}

impl InFlight {
    pub fn new(per_target: u32) -> Self {
        Self {
            per_target: per_target.max(1),
            counts: Mutex::default(),
            freed: Notify::new(),
            starved: Notify::new(),
        }
    }

    /// How many of a target's messages this instance may hold, in flight
    /// and waiting.
    fn allowance(&self, t: &Target) -> u32 {
        let prefetch = t.pace_ms.map_or(0, |pace| {
            let clears = f64::from(self.per_target) * QUEUE_BUDGET_MS / pace.max(0.01);
            (clears as u32).min(self.per_target * PREFETCH_FACTOR)
        });
        self.per_target + prefetch
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

    /// What the next claim may take from each target.
    pub fn shares(&self) -> ClaimShares {
        self.shares_by(Self::room)
    }

    /// What the next gated claim may take from each target: only what
    /// starts at once (a gate counts starts; none of them may wait here).
    pub fn gated_shares(&self) -> ClaimShares {
        self.shares_by(Self::free_slots)
    }

    fn shares_by(&self, room: impl Fn(&Self, &Target) -> u32) -> ClaimShares {
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        counts
            .targets
            .retain(|_, t| !t.idle() || t.last_ended.is_some_and(|e| e.elapsed() < PACE_KEPT));
        ClaimShares {
            per_target: self.per_target,
            room: counts
                .targets
                .iter()
                .map(|(id, t)| (id.clone(), room(self, t)))
                .collect(),
        }
    }

    /// The targets that may take no more now.
    pub fn full(&self) -> Vec<TargetId> {
        let counts = self.counts.lock().expect("not poisoned");
        counts
            .targets
            .iter()
            .filter(|(_, t)| self.room(t) == 0)
            .map(|(id, _)| id.clone())
            .collect()
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
    fn started(&self, target: &TargetId, n: u32) {
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        let t = counts.targets.entry(target.clone()).or_default();
        t.in_flight += n;
        self.mark_filled(t);
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
    /// instance-wide permit when a slot is free; no permit, no start.
    pub fn start_or_wait<P>(
        self: &Arc<Self>,
        waiting: Waiting,
        force: bool,
        permit: impl FnOnce(u32) -> Option<P>,
    ) -> Option<(Waiting, Share, P)> {
        let n = waiting.group.len() as u32;
        let target = waiting.group[0].target_id.clone();
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        let t = counts.targets.entry(target.clone()).or_default();
        let slot = force || (t.waiting.is_empty() && t.in_flight + n <= self.per_target);
        if slot {
            if let Some(p) = permit(n) {
                t.in_flight += n;
                self.mark_filled(t);
                let share = Share {
                    of: self.clone(),
                    target,
                    n,
                };
                return Some((waiting, share, p));
            }
            counts.starved = true;
        }
        if !waiting.ahead {
            counts.queued += n;
        }
        t.waiting.push_back(waiting);
        t.queued += n;
        self.mark_filled(t);
        None
    }

    /// The next delivery waiting for `target`, if one of its slots and an
    /// instance-wide permit (`permit`) are free.
    pub fn next_for<P>(
        self: &Arc<Self>,
        target: &TargetId,
        permit: impl FnOnce(u32) -> Option<P>,
    ) -> Option<(Waiting, Share, P)> {
        let mut guard = self.counts.lock().expect("not poisoned");
        let counts = &mut *guard;
        let t = counts.targets.get_mut(target)?;
        let n = t.waiting.front()?.group.len() as u32;
        if t.in_flight + n > self.per_target {
            return None;
        }
        let Some(p) = permit(n) else {
            counts.starved = true;
            return None;
        };
        let waiting = t.waiting.pop_front().expect("a front");
        t.in_flight += n;
        t.queued -= n;
        if !waiting.ahead {
            counts.queued -= n;
        }
        Some((
            waiting,
            Share {
                of: self.clone(),
                target: target.clone(),
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

    fn ended(&self, target: &TargetId, n: u32) {
        let (refilled, starved) = {
            let mut guard = self.counts.lock().expect("not poisoned");
            let counts = &mut *guard;
            let starved = std::mem::take(&mut counts.starved);
            let Some(t) = counts.targets.get_mut(target) else {
                return;
            };
            let was_full = self.room(t) == 0;
            t.in_flight = t.in_flight.saturating_sub(n);
            if self.per_target.saturating_sub(t.in_flight + t.queued) >= self.per_target.div_ceil(2)
            {
                t.filled = false;
            }
            let refilled = was_full && self.room(t) > 0;
            // A target's pace is kept a while (`shares_by` forgets it).
            if t.idle() && t.pace_ms.is_none() {
                counts.targets.remove(target);
            }
            (refilled, starved)
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

/// Attempts in flight to one target, counted until dropped.
pub struct Share {
    of: Arc<InFlight>,
    target: TargetId,
    n: u32,
}

impl Share {
    pub fn target(&self) -> &TargetId {
        &self.target
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.of.ended(&self.target, self.n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_target_has_room_again_once_half_its_share_is_free() {
        let f = InFlight::new(4);
        let a = TargetId::from_trusted("DI-T-aaaaaaaaaa".into());
        let b = TargetId::from_trusted("DI-T-bbbbbbbbbb".into());
        assert!(f.shares().room.is_empty());
        f.started(&a, 4);
        f.started(&b, 1);
        assert_eq!(f.full(), vec![a.clone()]);
        let mut room = f.shares().room;
        room.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
        assert_eq!(room, vec![(a.clone(), 0), (b.clone(), 3)]);
        // One ended: a quarter free is not enough to claim again.
        f.ended(&a, 1);
        assert_eq!(f.full(), vec![a.clone()]);
        // Two ended: half is free; the sweeper is told once.
        f.ended(&a, 1);
        assert!(f.full().is_empty());
        f.ended(&a, 2);
        f.ended(&b, 1);
        assert!(f.shares().room.is_empty(), "ended targets are forgotten");
    }

    #[test]
    fn a_target_that_got_less_than_its_share_tops_up_at_once() {
        let f = InFlight::new(4);
        let a = TargetId::from_trusted("DI-T-aaaaaaaaaa".into());
        // Asked for 4; another instance held one of the rows.
        f.started(&a, 3);
        assert!(f.full().is_empty());
        assert_eq!(f.shares().room, vec![(a.clone(), 1)]);
        assert_eq!(f.gated_shares().room, vec![(a.clone(), 1)]);
        f.started(&a, 1);
        assert_eq!(f.full(), vec![a.clone()]);
        // Full once, it waits for half of its share again.
        f.ended(&a, 1);
        assert_eq!(f.full(), vec![a.clone()]);
    }

    #[test]
    fn a_pace_that_gives_a_full_target_room_wakes_the_sweeper() {
        use futures::FutureExt;
        let f = InFlight::new(4);
        let a = TargetId::from_trusted("DI-T-aaaaaaaaaa".into());
        f.started(&a, 4);
        assert!(f.freed.notified().now_or_never().is_none());
        // Its first delivery ended quickly: the target may take more now,
        // with all four of its slots still taken.
        f.paced(&a, Duration::from_millis(1));
        assert!(f.full().is_empty());
        assert!(
            f.freed.notified().now_or_never().is_some(),
            "the sweeper that waits for a full target is told"
        );
    }

    #[test]
    fn a_quick_target_may_claim_ahead_of_its_slots_and_a_slow_one_may_not() {
        let f = InFlight::new(4);
        let quick = TargetId::from_trusted("DI-T-aaaaaaaaaa".into());
        let slow = TargetId::from_trusted("DI-T-bbbbbbbbbb".into());
        f.started(&quick, 4);
        f.started(&slow, 4);
        // Unknown pace: no more than the slots.
        assert_eq!(f.full().len(), 2);
        f.paced(&quick, Duration::from_millis(1));
        f.paced(&slow, Duration::from_secs(5));
        let room: HashMap<_, _> = f.shares().room.into_iter().collect();
        // 4 per 1 ms clears far more than 8 shares in 100 ms: capped at 8 shares.
        assert_eq!(room[&quick], 4 * PREFETCH_FACTOR);
        assert_eq!(room[&slow], 0);
        // A gated claim takes only what starts at once.
        assert!(f.gated_shares().room.iter().all(|(_, n)| *n == 0));
    }
}
