//! Each account's part of the instance's slots: its attempts in flight and
//! messages waiting, the part it may hold beside the other active accounts,
//! and the room a claim may take for it.

use std::collections::HashMap;

use super::{Counts, InFlight, NEWCOMERS};
use crate::domain::ids::AccountId;

/// An account's attempts in flight and claimed messages waiting, over its
/// targets on this instance; forgotten once both are 0.
#[derive(Default)]
pub(super) struct Account {
    pub(super) in_flight: u32,
    /// Its messages waiting, but those claimed ahead (as `Counts::queued`:
    /// they count against what may be held ahead).
    pub(super) queued: u32,
    /// The last claim found it without room: the attempt that gives it
    /// room wakes the sweeper.
    pub(super) waits_for_room: bool,
}

impl InFlight {
    /// How many attempts an account may have in flight while `active`
    /// accounts (itself among them) have attempts in flight or waiting:
    /// an even part of the slots not kept for newcomers (a quarter, or one
    /// target's share if that is less).
    pub(super) fn part(&self, active: usize) -> u32 {
        let shared = self.slots - (self.slots / NEWCOMERS).min(self.per_target);
        (shared / u32::try_from(active.max(1)).unwrap_or(u32::MAX)).max(1)
    }

    /// An account's part now, counting it among the active accounts.
    pub(super) fn part_of(&self, counts: &Counts, account: &AccountId) -> u32 {
        let active = counts.accounts.len() + usize::from(!counts.accounts.contains_key(account));
        self.part(active)
    }

    /// Whether an account may start `n` more attempts now: within its part,
    /// and always its first (an SQS batch may be larger than a part).
    pub(super) fn account_may_start(
        &self,
        counts: &Counts,
        account: Option<&AccountId>,
        n: u32,
    ) -> bool {
        let Some(account) = account else {
            return true;
        };
        let in_flight = counts.accounts.get(account).map_or(0, |a| a.in_flight);
        in_flight == 0 || in_flight + n <= self.part_of(counts, account)
    }

    /// How many more of an account's messages a claim may take: what its
    /// part and its targets' waiting room (`prefetch`) leave. (Claims come
    /// in batches by its targets' shares, which free by halves.)
    pub(super) fn account_room(
        &self,
        counts: &Counts,
        account: &AccountId,
        prefetch: u32,
        gated: bool,
    ) -> u32 {
        let Some(a) = counts.accounts.get(account) else {
            return self.part_of(counts, account);
        };
        let part = self.part_of(counts, account);
        if gated {
            // What starts at once: a gate's claim never waits here.
            part.saturating_sub(a.in_flight + a.queued)
        } else {
            (part + prefetch).saturating_sub(a.in_flight + a.queued)
        }
    }

    /// Each active account's room for a claim; an account without room is
    /// marked, so that the attempt that gives it room again wakes the
    /// sweeper.
    pub(super) fn account_rooms(&self, counts: &mut Counts, gated: bool) -> Vec<(AccountId, u32)> {
        let mut prefetch: HashMap<&AccountId, u32> = HashMap::new();
        for t in counts.targets.values() {
            if let Some(a) = &t.account {
                *prefetch.entry(a).or_default() += self.prefetch(t);
            }
        }
        let rooms: Vec<(AccountId, u32)> = counts
            .accounts
            .keys()
            .map(|a| {
                let p = prefetch.get(a).copied().unwrap_or(0);
                (a.clone(), self.account_room(counts, a, p, gated))
            })
            .collect();
        for (a, room) in &rooms {
            if let Some(acct) = counts.accounts.get_mut(a) {
                acct.waits_for_room = *room == 0;
            }
        }
        rooms
    }

    /// Counts `n` attempts of an account started.
    pub(super) fn account_started(&self, counts: &mut Counts, account: &AccountId, n: u32) {
        counts
            .accounts
            .entry(account.clone())
            .or_default()
            .in_flight += n;
    }

    /// Forgets an account with nothing in flight or waiting; the others'
    /// parts grow, so a full one may take more (answered: the sweeper is
    /// then told).
    pub(super) fn forget_if_idle(counts: &mut Counts, account: &AccountId) -> bool {
        if counts
            .accounts
            .get(account)
            .is_some_and(|a| a.in_flight == 0 && a.queued == 0)
        {
            counts.accounts.remove(account);
            return counts.accounts.values().any(|a| a.waits_for_room);
        }
        false
    }

    /// Counts `n` attempts of an account ended; answers whether an account
    /// that a claim left out for want of room may take more now.
    pub(super) fn account_ended(&self, counts: &mut Counts, account: &AccountId, n: u32) -> bool {
        let part = self.part_of(counts, account);
        let Some(a) = counts.accounts.get_mut(account) else {
            return false;
        };
        a.in_flight = a.in_flight.saturating_sub(n);
        // Room again once under its part: the waiting room of its targets
        // is the claim's to reckon.
        let refilled = a.waits_for_room && a.in_flight + a.queued < part;
        if refilled {
            a.waits_for_room = false;
        }
        Self::forget_if_idle(counts, account) || refilled
    }
}
