//! Fences (see the module above): what a change keeps out of the claims
//! ahead while it runs, and how a claim ahead that began before a fence
//! gives back what the fence covers.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Held;
use crate::{
    domain::ids::{AccountId, TargetId},
    store::Claimed,
};

/// Messages a change keeps out of the claims ahead while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// Every message of an account (a bulk cancel).
    Account(AccountId),
    /// Every message of a target (its address, secret, limits or state).
    Target(TargetId),
}

impl Fence {
    fn covers(&self, c: &Claimed) -> bool {
        match self {
            Fence::Account(a) => &c.account == a,
            Fence::Target(t) => &c.target_id == t,
        }
    }
}

/// The fences set most recently, with the epoch each set: a claim ahead
/// that began before one of them checks what it claimed against it. A claim
/// that began before all of these gives back everything it claimed.
const FENCES_KEPT: usize = 1024;

/// A fence, lifted when dropped.
pub struct Fenced<'a> {
    held: &'a Held,
    epoch: u64,
}

impl Drop for Fenced<'_> {
    fn drop(&mut self) {
        let mut g = self.held.inner.lock().expect("not poisoned");
        g.fences.retain(|(e, _)| *e != self.epoch);
    }
}

impl Held {
    /// Fences off messages from the claims ahead until the answer is
    /// dropped; answers, beside it, what was held of them (to go back to
    /// the store). Waits for the claims ahead under way, which give back
    /// what they took of them.
    pub async fn fence(&self, fence: Fence) -> (Fenced<'_>, Vec<Claimed>) {
        let fenced = {
            let mut g = self.inner.lock().expect("not poisoned");
            g.epoch += 1;
            let epoch = g.epoch;
            g.fences.push((epoch, fence.clone()));
            g.set.push_back((epoch, fence.clone()));
            if g.set.len() > FENCES_KEPT {
                g.set.pop_front();
            }
            Fenced { held: self, epoch }
        };
        drop(self.claiming.write().await);
        let mut g = self.inner.lock().expect("not poisoned");
        let keys: Vec<(DateTime<Utc>, Uuid)> = g
            .by_due
            .iter()
            .filter(|(_, c)| fence.covers(c))
            .map(|(k, _)| *k)
            .collect();
        let taken = g.take_keys(keys);
        drop(g);
        (fenced, taken)
    }

    /// Where the fences stand: a claim ahead reads it before it claims and
    /// gives it to `hold_since`.
    pub fn epoch(&self) -> u64 {
        self.inner.lock().expect("not poisoned").epoch
    }

    /// The accounts and targets fenced off now, which a claim ahead leaves
    /// out.
    pub fn fenced(&self) -> (Vec<AccountId>, Vec<TargetId>) {
        let g = self.inner.lock().expect("not poisoned");
        let (mut accounts, mut targets) = (Vec::new(), Vec::new());
        for (_, f) in &g.fences {
            match f {
                Fence::Account(a) => accounts.push(a.clone()),
                Fence::Target(t) => targets.push(t.clone()),
            }
        }
        (accounts, targets)
    }

    /// Holds what a claim ahead that read the fences at `since` claimed,
    /// but for what a fence up now or set since covers: that is answered,
    /// to go back to the store.
    pub fn hold_since(&self, claimed: Vec<Claimed>, since: u64) -> Vec<Claimed> {
        let (kept, refused): (Vec<Claimed>, Vec<Claimed>) = {
            let g = self.inner.lock().expect("not poisoned");
            // Every fence set since `since` is still listed, or none is kept.
            let all_listed =
                g.epoch == since || g.set.front().is_some_and(|(e, _)| *e <= since + 1);
            claimed.into_iter().partition(|c| {
                all_listed
                    && !g.fences.iter().any(|(_, f)| f.covers(c))
                    && !g.set.iter().any(|(e, f)| *e > since && f.covers(c))
            })
        };
        self.hold(kept);
        refused
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::TimeDelta;

    use super::*;
    use crate::domain::ids::MessageId;
    use crate::sweeper::ahead::tests::claimed;

    fn of(account: &str, target: &str, due: DateTime<Utc>) -> Claimed {
        Claimed {
            account: AccountId::from_trusted(account),
            target_id: TargetId::from_trusted(target.into()),
            ..claimed(due, "x")
        }
    }

    fn ids(claimed: &[Claimed]) -> Vec<MessageId> {
        let mut ids: Vec<MessageId> = claimed.iter().map(|c| c.id).collect();
        ids.sort_by_key(|id| id.0);
        ids
    }

    #[tokio::test]
    async fn a_fence_takes_what_is_held_of_its_target_and_a_claim_that_read_before_it_gives_it_back(
    ) {
        let held = Held::default();
        let t = Utc::now() + TimeDelta::seconds(1);
        let (mine, other) = (
            of("acme", "DI-T-aaaaaaaaaa", t),
            of("acme", "DI-T-bbbbbbbbbb", t),
        );
        let mine_id = mine.id;
        held.hold(vec![mine, other]);
        // A claim ahead reads the fences, then the change fences its target.
        let since = held.epoch();
        let (fence, taken) = held
            .fence(Fence::Target(TargetId::from_trusted(
                "DI-T-aaaaaaaaaa".into(),
            )))
            .await;
        assert_eq!(ids(&taken), vec![mine_id], "only the fenced target's");
        assert_eq!(held.fenced().1.len(), 1);
        drop(fence);
        assert!(held.fenced().1.is_empty(), "lifted when dropped");
        // What the claim read before the fence goes back, though it is
        // lifted now: its target may have changed under it.
        let (late, fine) = (
            of("acme", "DI-T-aaaaaaaaaa", t),
            of("acme", "DI-T-bbbbbbbbbb", t),
        );
        let (late_id, fine_id) = (late.id, fine.id);
        let refused = held.hold_since(vec![late, fine], since);
        assert_eq!(ids(&refused), vec![late_id]);
        assert!(
            held.withdraw(&fine_id).is_some(),
            "the other target's is held"
        );
        // A claim that read the fences after it holds the target's again.
        let again = of("acme", "DI-T-aaaaaaaaaa", t);
        assert!(held.hold_since(vec![again], held.epoch()).is_empty());
    }

    #[tokio::test]
    async fn an_account_fence_covers_every_target_of_the_account_and_no_other_account() {
        let held = Held::default();
        let t = Utc::now() + TimeDelta::seconds(1);
        let ours = vec![
            of("acme", "DI-T-aaaaaaaaaa", t),
            of("acme", "DI-T-bbbbbbbbbb", t),
        ];
        let ours_ids = ids(&ours);
        let theirs = of("globex", "DI-T-cccccccccc", t);
        let theirs_id = theirs.id;
        held.hold(ours);
        held.hold(vec![theirs]);
        let since = held.epoch();
        let (_fence, taken) = held
            .fence(Fence::Account(AccountId::from_trusted("acme")))
            .await;
        assert_eq!(ids(&taken), ours_ids);
        assert_eq!(held.fenced().0, vec![AccountId::from_trusted("acme")]);
        // While it stands, even a claim that read the fences after it holds
        // none of the account's.
        let refused = held.hold_since(vec![of("acme", "DI-T-dddddddddd", t)], held.epoch());
        assert_eq!(refused.len(), 1);
        assert!(held
            .hold_since(vec![of("globex", "DI-T-cccccccccc", t)], since)
            .is_empty());
        assert!(held.withdraw(&theirs_id).is_some());
    }

    #[tokio::test]
    async fn a_fence_waits_for_the_claim_ahead_under_way_and_then_takes_what_it_held() {
        let held = Arc::new(Held::default());
        let t = Utc::now() + TimeDelta::seconds(1);
        let claiming = held.claiming.try_read().expect("no change waits");
        let fencing = tokio::spawn({
            let held = held.clone();
            async move {
                let (_fence, taken) = held
                    .fence(Fence::Target(TargetId::from_trusted(
                        "DI-T-aaaaaaaaaa".into(),
                    )))
                    .await;
                ids(&taken)
            }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!fencing.is_finished(), "the claim under way is waited for");
        // A new claim ahead does not start while the change waits.
        assert!(held.claiming.try_read().is_err());
        // The claim under way holds what it claimed before its guard drops.
        let late = of("acme", "DI-T-aaaaaaaaaa", t);
        let late_id = late.id;
        held.hold(vec![late]);
        drop(claiming);
        assert_eq!(fencing.await.unwrap(), vec![late_id]);
    }

    #[tokio::test]
    async fn a_claim_older_than_every_fence_kept_gives_back_all_it_claimed() {
        let held = Held::default();
        let t = Utc::now() + TimeDelta::seconds(1);
        let since = held.epoch();
        for i in 0..=FENCES_KEPT {
            let target = TargetId::from_trusted(format!("DI-T-{i:010}"));
            drop(held.fence(Fence::Target(target)).await);
        }
        let refused = held.hold_since(vec![of("globex", "DI-T-zzzzzzzzzz", t)], since);
        assert_eq!(
            refused.len(),
            1,
            "it cannot know what the fences it missed covered"
        );
    }
}
