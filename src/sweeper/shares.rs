//! Attempts in flight per target on this instance, so that no target holds
//! more than `sweeper.target_concurrency` of them: a slow or hanging target
//! cannot take the delivery slots every other account's messages need.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::Notify;

use crate::{domain::ids::TargetId, store::ClaimShares};

pub struct InFlight {
    per_target: u32,
    /// A full target takes more only once this many of its attempts have
    /// ended: claims come in batches, not one per ended attempt.
    refill: u32,
    counts: Mutex<HashMap<TargetId, u32>>,
    /// Signalled when attempts end: a full target may take more again.
    pub freed: Notify,
}

impl InFlight {
    pub fn new(per_target: u32) -> Self {
        let per_target = per_target.max(1);
        Self {
            per_target,
            refill: per_target.div_ceil(2),
            counts: Mutex::default(),
            freed: Notify::new(),
        }
    }

    /// How many more attempts a target with `n` in flight may start now:
    /// none until `refill` of its share is free.
    fn room(&self, n: u32) -> u32 {
        let free = self.per_target.saturating_sub(n);
        if free >= self.refill {
            free
        } else {
            0
        }
    }

    /// What the next claim may take from each target.
    pub fn shares(&self) -> ClaimShares {
        let counts = self.counts.lock().expect("not poisoned");
        ClaimShares {
            per_target: self.per_target,
            room: counts
                .iter()
                .map(|(t, n)| (t.clone(), self.room(*n)))
                .collect(),
        }
    }

    /// The targets that may take no more now.
    pub fn full(&self) -> Vec<TargetId> {
        let counts = self.counts.lock().expect("not poisoned");
        counts
            .iter()
            .filter(|(_, n)| self.room(**n) == 0)
            .map(|(t, _)| t.clone())
            .collect()
    }

    pub fn started(&self, target: &TargetId, n: u32) {
        let mut counts = self.counts.lock().expect("not poisoned");
        *counts.entry(target.clone()).or_default() += n;
    }

    /// `n` attempts to `target` start; they end when the returned share is
    /// dropped, also if the task that holds it panics.
    pub fn start(self: &Arc<Self>, target: TargetId, n: u32) -> Share {
        self.started(&target, n);
        Share {
            of: self.clone(),
            target,
            n,
        }
    }

    pub fn ended(&self, target: &TargetId, n: u32) {
        let refilled = {
            let mut counts = self.counts.lock().expect("not poisoned");
            let Some(c) = counts.get_mut(target) else {
                return;
            };
            let was_full = self.room(*c) == 0;
            *c = c.saturating_sub(n);
            let refilled = was_full && self.room(*c) > 0;
            if *c == 0 {
                counts.remove(target);
            }
            refilled
        };
        if refilled {
            // A stored permit if nobody waits: the sweeper sees it next time.
            self.freed.notify_one();
        }
    }
}

/// Attempts in flight to one target, counted until dropped.
pub struct Share {
    of: Arc<InFlight>,
    target: TargetId,
    n: u32,
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
}
