//! `limits.scheduled_messages` (docs/api.md#account-limits): before a
//! request adds messages in state Scheduled, the account's count is read
//! (the store's triggers keep it) and a request that would pass the limit is
//! refused whole, before any change.
//!
//! Reading the count for every `POST /messages` would add a query to the
//! busiest path for accounts nowhere near their limit. A count read within
//! the last second answers instead while it, with what this instance added
//! since, stays within half the limit; past that every request reads it. A
//! request that races another for the last places may pass the limit by what
//! the two add together: the limit bounds what an account fills, it is not a
//! lock.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use super::{Service, ServiceError, ServiceResult};
use crate::domain::{
    ids::AccountId,
    limits::{check, Limit},
};

/// How long a count read answers for an account far from its limit.
const FRESH: Duration = Duration::from_secs(1);
/// Accounts whose counts are kept before the stale ones are dropped.
const KEPT: usize = 10_000;

/// Counts read lately, with what this instance added since.
#[derive(Default)]
pub struct ScheduledCounts {
    known: Mutex<HashMap<AccountId, (Instant, u64)>>,
}

impl ScheduledCounts {
    /// Whether a fresh count answers for adding `adding` under `max`; if so
    /// it counts them (`count`).
    fn far_below(&self, account: &AccountId, adding: u64, max: u64, count: bool) -> bool {
        let mut known = self.known.lock().expect("not poisoned");
        match known.get_mut(account) {
            Some((at, n)) if at.elapsed() < FRESH && n.saturating_add(adding) <= max / 2 => {
                if count {
                    *n += adding;
                }
                true
            }
            _ => false,
        }
    }

    /// Counts what this instance added without asking first.
    fn added(&self, account: &AccountId, n: u64) {
        if let Some((_, known)) = self.known.lock().expect("not poisoned").get_mut(account) {
            *known += n;
        }
    }

    fn read(&self, account: &AccountId, n: u64) {
        let mut known = self.known.lock().expect("not poisoned");
        if known.len() >= KEPT {
            known.retain(|_, (at, _)| at.elapsed() < FRESH);
        }
        known.insert(account.clone(), (Instant::now(), n));
    }
}

impl Service {
    /// Refuses (409, naming `limits.scheduled_messages`) a request that
    /// would give `account` more than its limit of scheduled messages by
    /// adding `adding`.
    pub(crate) async fn room_for_scheduled(
        &self,
        account: &AccountId,
        adding: u64,
    ) -> ServiceResult<()> {
        let limit = Limit::ScheduledMessages;
        let max = self.config.limits.of(limit);
        // Adding none still reads a stale count: the next request of the
        // account may then answer from it.
        if self.scheduled.far_below(account, adding, max, true) {
            return Ok(());
        }
        let has = self.store.scheduled_messages(account).await?;
        check(limit, max, has, adding).map_err(ServiceError::Quota)?;
        self.scheduled.read(account, has + adding);
        Ok(())
    }

    /// Whether adding up to `bound` would leave `account` far below its
    /// limit of scheduled messages, by a fresh count (nothing is counted:
    /// what is added is told with `scheduled_added`).
    pub(crate) fn scheduled_far_below(&self, account: &AccountId, bound: u64) -> bool {
        let max = self.config.limits.of(Limit::ScheduledMessages);
        self.scheduled.far_below(account, bound, max, false)
    }

    /// `n` scheduled messages added without `room_for_scheduled`.
    pub(crate) fn scheduled_added(&self, account: &AccountId, n: u64) {
        self.scheduled.added(account, n);
    }
}
