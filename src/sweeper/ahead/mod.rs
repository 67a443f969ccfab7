//! Messages claimed ahead of their due time (`sweeper.claim_ahead`), held in
//! memory until their instant: when a burst falls due, the claims are
//! already done and only the sends remain.
//!
//! A held message is leased from its due time. A cancel or reschedule on
//! this instance takes it back first (`withdraw`) and wins; on another
//! instance it meets the lease and answers 409, as for an attempt under way.
//! What is held is bounded in count (`sweeper.claim_ahead_max`) and bytes
//! (`HELD_BYTES`), from the claim until the attempt starts.
//!
//! A change that must not meet its messages held ahead (a bulk cancel, a
//! target's new address or state) fences them off while it runs
//! (`fence`): what is held of them goes back to the store, no claim ahead
//! takes them, and a claim ahead that read them before the fence was set
//! gives them back rather than hold them (`hold_since`). Only the fenced
//! account's or target's messages wait; every other account's are held as
//! ever.

mod fence;

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use fence::{Fence, Fenced};

use super::{dispatch::Dispatch, Sweeper};

use crate::{
    domain::{ids::MessageId, payload::MAX_PAYLOAD_CHARS},
    store::Claimed,
};

/// At most this many payload bytes are held ahead, from claim to attempt.
pub const HELD_BYTES: usize = 64 << 20;
/// The most a payload may take (its characters of up to 4 bytes each): an
/// ahead claim takes no more rows than the bytes left could hold of these.
pub const MAX_PAYLOAD_BYTES: usize = MAX_PAYLOAD_CHARS * 4;

#[derive(Default)]
pub struct Held {
    inner: Mutex<Inner>,
    /// Something was held that falls due before everything held already.
    pub(crate) earlier: Notify,
    /// Room for more was made (an attempt started or a message went back).
    pub(crate) freed: Notify,
    /// A claim ahead holds it shared from reading the fences until what it
    /// claimed is held or given back; a new fence waits for those under way
    /// (`fence`), never for another change.
    pub(crate) claiming: tokio::sync::RwLock<()>,
}

#[derive(Default)]
struct Inner {
    by_due: BTreeMap<(DateTime<Utc>, Uuid), Claimed>,
    due_of: HashMap<Uuid, DateTime<Utc>>,
    /// Messages and payload bytes claimed ahead whose attempt has not
    /// started: held here, or fired and waiting for a slot of their target.
    outstanding: usize,
    outstanding_bytes: usize,
    /// Counts the fences ever set.
    epoch: u64,
    /// The fences up now, by the epoch that set each.
    fences: Vec<(u64, Fence)>,
    /// The last `FENCES_KEPT` fences set, lifted or not.
    set: VecDeque<(u64, Fence)>,
}

impl Held {
    /// Holds messages claimed ahead (each with its `due_at`).
    pub fn hold(&self, claimed: Vec<Claimed>) {
        if claimed.is_empty() {
            return;
        }
        let earlier = {
            let mut g = self.inner.lock().expect("not poisoned");
            let first = g.by_due.keys().next().map(|k| k.0);
            let mut earlier = false;
            for c in claimed {
                let due = c.due_at.unwrap_or(c.delivery_time);
                earlier |= first.is_none_or(|f| due < f);
                g.outstanding += 1;
                g.outstanding_bytes += c.payload.len();
                g.due_of.insert(c.id.0, due);
                g.by_due.insert((due, c.id.0), c);
            }
            earlier
        };
        if earlier {
            self.earlier.notify_one();
        }
    }

    /// Takes a held message back before its attempt: its lease token, for
    /// the cancel or reschedule that then wins. None when this instance
    /// does not hold it (its attempt may have started).
    pub fn withdraw(&self, id: &MessageId) -> Option<Uuid> {
        let token = {
            let mut g = self.inner.lock().expect("not poisoned");
            let due = g.due_of.remove(&id.0)?;
            let c = g.by_due.remove(&(due, id.0))?;
            g.outstanding -= 1;
            g.outstanding_bytes -= c.payload.len();
            c.lease_token
        };
        self.freed.notify_one();
        Some(token)
    }

    /// Up to `limit` held messages due at `now` or before, oldest first.
    pub fn take_due(&self, now: DateTime<Utc>, limit: usize) -> Vec<Claimed> {
        let mut g = self.inner.lock().expect("not poisoned");
        let mut due = Vec::new();
        while due.len() < limit {
            let Some(entry) = g.by_due.first_entry() else {
                break;
            };
            if entry.key().0 > now {
                break;
            }
            let ((_, id), c) = entry.remove_entry();
            g.due_of.remove(&id);
            due.push(c);
        }
        due
    }

    /// Every held message (at shutdown: they are given back).
    pub fn take_all(&self) -> Vec<Claimed> {
        let mut g = self.inner.lock().expect("not poisoned");
        g.due_of.clear();
        let all: Vec<Claimed> = std::mem::take(&mut g.by_due).into_values().collect();
        g.outstanding -= all.len();
        g.outstanding_bytes -= all.iter().map(|c| c.payload.len()).sum::<usize>();
        all
    }

    /// Messages claimed ahead whose attempts started, or that went back to
    /// the store: room for more.
    pub fn done(&self, group: &[Claimed]) {
        {
            let mut g = self.inner.lock().expect("not poisoned");
            g.outstanding = g.outstanding.saturating_sub(group.len());
            g.outstanding_bytes = g
                .outstanding_bytes
                .saturating_sub(group.iter().map(|c| c.payload.len()).sum());
        }
        self.freed.notify_one();
    }

    /// When the earliest held message falls due.
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        let g = self.inner.lock().expect("not poisoned");
        g.by_due.keys().next().map(|k| k.0)
    }

    /// How many more may be claimed ahead now, of at most `max` messages.
    pub fn room(&self, max: u32) -> u32 {
        let g = self.inner.lock().expect("not poisoned");
        let by_count = (max as usize).saturating_sub(g.outstanding);
        let by_bytes = HELD_BYTES.saturating_sub(g.outstanding_bytes) / MAX_PAYLOAD_BYTES;
        by_count.min(by_bytes) as u32
    }

    /// Whether nothing waits for its due time here (fired ones aside).
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.inner.lock().expect("not poisoned").by_due.is_empty()
    }
}

impl Inner {
    /// Takes these held messages out.
    fn take_keys(&mut self, keys: Vec<(DateTime<Utc>, Uuid)>) -> Vec<Claimed> {
        let mut taken = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(c) = self.by_due.remove(&key) {
                self.due_of.remove(&key.1);
                self.outstanding -= 1;
                self.outstanding_bytes -= c.payload.len();
                taken.push(c);
            }
        }
        taken
    }
}

/// Longest the timer of held messages sleeps while it holds some, so a
/// clock that is moved on by hand (in tests) is seen.
const HELD_POLL: Duration = Duration::from_millis(100);
/// Held messages handed out to their attempts at once, before the timer's
/// task lets the attempts it started run (20,000 due together took 25 ms
/// to hand out, and the first was sent only after the last).
const FIRE_CHUNK: usize = 128;

/// Starts each message claimed ahead at its instant (`Held`).
pub(super) async fn fire_held(
    dispatch: Arc<Dispatch>,
    sweeper: Sweeper,
    shutdown: CancellationToken,
) {
    let held = &sweeper.held;
    loop {
        // A burst is started a chunk at a time: the first chunk's attempts
        // run while the rest is handed out, rather than after all of it.
        loop {
            let now = sweeper.clock.now();
            let due = held.take_due(now, FIRE_CHUNK);
            let more = due.len() == FIRE_CHUNK;
            if !due.is_empty() {
                let at = Instant::now();
                for group in sweeper.group(due) {
                    // Its lease began at its due time.
                    let since = group[0]
                        .due_at
                        .and_then(|d| (now - d).to_std().ok())
                        .unwrap_or_default();
                    dispatch.take_ahead(group, at.checked_sub(since).unwrap_or(at));
                }
            }
            if !more {
                break;
            }
            tokio::task::yield_now().await;
        }
        let wait = match held.next_due() {
            Some(next) => (next - sweeper.clock.now())
                .to_std()
                .unwrap_or_default()
                .min(HELD_POLL),
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = held.earlier.notified() => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::target::TargetConfig;
    use chrono::TimeDelta;

    pub(super) fn claimed(due: DateTime<Utc>, payload: &str) -> Claimed {
        Claimed {
            id: MessageId(Uuid::new_v4()),
            account: crate::domain::ids::AccountId::from_trusted("acme"),
            target_id: crate::domain::ids::TargetId::from_trusted("DI-T-aaaaaaaaaa".into()),
            target: Arc::new(
                TargetConfig::from_stored_json(
                    "webhook",
                    serde_json::json!({
                        "url": "https://example.com/hook",
                        "signingSecret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
                    }),
                )
                .expect("a config"),
            ),
            payload: payload.into(),
            delivery_time: due,
            scheduled_at: due,
            attempt_count: 0,
            ladder_attempts: 0,
            lease_token: Uuid::new_v4(),
            gated: false,
            ordering_key: None,
            event_id: None,
            event_type: None,
            due_at: Some(due),
        }
    }

    #[test]
    fn held_messages_come_out_at_their_time_in_order_and_a_withdrawn_one_never() {
        let held = Held::default();
        let t = Utc::now();
        let (a, b, c) = (
            claimed(t + TimeDelta::milliseconds(20), "a"),
            claimed(t + TimeDelta::milliseconds(10), "bb"),
            claimed(t + TimeDelta::milliseconds(30), "ccc"),
        );
        let (b_id, c_id, c_token) = (b.id, c.id, c.lease_token);
        held.hold(vec![a, b, c]);
        assert_eq!(held.next_due(), Some(t + TimeDelta::milliseconds(10)));
        assert!(held.take_due(t + TimeDelta::milliseconds(9), 10).is_empty());
        let first = held.take_due(t + TimeDelta::milliseconds(20), 10);
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].id, b_id, "oldest due first");
        assert_eq!(held.withdraw(&b_id), None, "fired: no longer held");
        assert_eq!(held.withdraw(&c_id), Some(c_token));
        assert!(held.take_due(t + TimeDelta::seconds(1), 10).is_empty());
        assert!(held.is_empty());
    }

    #[test]
    fn a_burst_comes_out_a_chunk_at_a_time_oldest_first() {
        let held = Held::default();
        let t = Utc::now();
        let all: Vec<Claimed> = (0..5)
            .map(|i| claimed(t - TimeDelta::milliseconds(i), "x"))
            .collect();
        let oldest = all[4].id;
        held.hold(all);
        let first = held.take_due(t, 2);
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].id, oldest);
        assert_eq!(held.take_due(t, 2).len(), 2);
        assert_eq!(held.take_due(t, 2).len(), 1);
        assert!(held.is_empty());
    }

    #[test]
    fn room_counts_what_is_claimed_ahead_until_its_attempt_starts() {
        let held = Held::default();
        let t = Utc::now();
        held.hold((0..3).map(|_| claimed(t, "x")).collect());
        assert_eq!(held.room(5), 2);
        let fired = held.take_due(t, 10);
        assert_eq!(held.room(5), 2, "fired but not started still counts");
        held.done(&fired[..2]);
        assert_eq!(held.room(5), 4);
        // Bytes bound an ahead claim as if every payload were the largest.
        assert_eq!(
            held.room(u32::MAX) as usize,
            HELD_BYTES.saturating_sub(1) / MAX_PAYLOAD_BYTES
        );
    }
}
