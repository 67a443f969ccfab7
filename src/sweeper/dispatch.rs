//! Where claimed deliveries go: started at once where their target has a
//! free slot and the instance a permit, else waiting for one (`shares`).
//! An attempt that ends starts the next waiting for its target in its
//! place; what waits too long for its lease is given back to the store.

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::{mpsc, OwnedSemaphorePermit, Semaphore},
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::warn;

use super::{
    record::Done,
    shares::{InFlight, Share, Waiting},
    Sweeper,
};
use crate::{delivery::Outgoing, domain::ids::TargetId, store::Claimed};

pub(super) struct Dispatch {
    sweeper: Sweeper,
    /// Attempts in flight on this instance (`sweeper.concurrency`).
    pub permits: Arc<Semaphore>,
    /// Attempts in flight or ended whose results are not written yet
    /// (`unrecorded_places`): a crash sends those again, so sends wait while
    /// the writes are this far behind.
    unrecorded: Arc<Semaphore>,
    pub targets: Arc<InFlight>,
    results: mpsc::UnboundedSender<Done>,
    tasks: TaskTracker,
}

impl Dispatch {
    pub fn new(sweeper: Sweeper, results: mpsc::UnboundedSender<Done>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(sweeper.config.concurrency as usize)),
            unrecorded: Arc::new(Semaphore::new(unrecorded_places(
                sweeper.config.concurrency,
            ))),
            targets: Arc::new(InFlight::new(
                sweeper.config.target_concurrency,
                sweeper.config.concurrency,
            )),
            sweeper,
            results,
            tasks: TaskTracker::new(),
        }
    }

    fn permit(&self, n: u32) -> Option<Places> {
        let record = self.unrecorded.clone().try_acquire_many_owned(n).ok()?;
        let attempt = self.permits.clone().try_acquire_many_owned(n).ok()?;
        Some(Places { attempt, record })
    }

    /// A claimed delivery: it starts now, or waits for its target's slot.
    /// A gated target's starts at once (its claim took only free slots).
    pub fn take(self: &Arc<Self>, group: Vec<Claimed>, claimed_at: Instant) {
        self.take_as(group, claimed_at, false);
    }

    /// A delivery claimed ahead that falls due now; `leased_from` is when
    /// its lease began (its due time).
    pub fn take_ahead(self: &Arc<Self>, group: Vec<Claimed>, leased_from: Instant) {
        self.take_as(group, leased_from, true);
    }

    fn take_as(self: &Arc<Self>, group: Vec<Claimed>, claimed_at: Instant, ahead: bool) {
        let force = group[0].gated;
        let waiting = Waiting {
            group,
            claimed_at,
            ahead,
        };
        if !self.sweeper.noted.may_attempt() {
            self.give_back(vec![waiting]);
            return;
        }
        if let Some((waiting, share, permit)) = self
            .targets
            .start_or_wait(waiting, force, |n| self.permit(n))
        {
            self.launch(waiting, share, permit);
        }
    }

    fn launch(self: &Arc<Self>, waiting: Waiting, share: Share, places: Places) {
        if waiting.ahead {
            self.sweeper.held.done(&waiting.group);
        }
        let this = self.clone();
        // The attempt's future is large (a request in flight): boxed, the
        // task that is spawned (and moved into place) is small.
        self.tasks.spawn(async move {
            let target = share.target().clone();
            let gate = waiting.group[0].gated.then(|| target.clone());
            let began = Instant::now();
            let Places { attempt, record } = places;
            let results: Vec<_> = Box::pin(
                this.sweeper
                    .attempt_group(waiting.group, waiting.claimed_at),
            )
            .await
            .into_iter()
            .collect();
            // The group's places among the unrecorded go with its last
            // result, written in the same batch as the others or after.
            let mut record = Some(record);
            let last = results.len();
            for (i, recorded) in results.into_iter().enumerate() {
                let _ = this.results.send(Done {
                    recorded,
                    gate: gate.clone(),
                    place: if i + 1 == last { record.take() } else { None },
                });
            }
            this.targets.paced(&target, began.elapsed());
            drop(attempt);
            drop(share);
            this.start_waiting_for(&target);
        });
    }

    /// Starts what waits for `target` while it has free slots and the
    /// instance permits; gives back what waited too long for its lease.
    fn start_waiting_for(self: &Arc<Self>, target: &TargetId) {
        let mut stale = Vec::new();
        while let Some((waiting, share, permit)) = self.targets.next_for(target, |n| self.permit(n))
        {
            if self.has_time_left(&waiting) {
                self.launch(waiting, share, permit);
            } else {
                stale.push(waiting);
            }
        }
        self.give_back(stale);
    }

    /// Starts what waits, for every target, as far as slots and permits go.
    pub fn start_waiting(self: &Arc<Self>) {
        for target in self.targets.waiting_targets() {
            self.start_waiting_for(&target);
        }
    }

    /// Whether an attempt started now still ends well inside the claim's
    /// lease (it is cut off at the lease's end), and no other instance may
    /// take this one for dead (`instances::Noted::may_attempt`).
    fn has_time_left(&self, waiting: &Waiting) -> bool {
        if !self.sweeper.noted.may_attempt() {
            return false;
        }
        let needs = self
            .sweeper
            .deliverer
            .attempt_timeout(&Outgoing::from(&waiting.group[0]))
            .min(self.sweeper.config.lease / 2);
        Instant::now() + needs < self.sweeper.lease_deadline(waiting.claimed_at)
    }

    /// Releases the leases of claimed messages that were not attempted: due
    /// again at once, for any instance.
    fn give_back(&self, waiting: Vec<Waiting>) {
        if waiting.is_empty() {
            return;
        }
        for w in waiting.iter().filter(|w| w.ahead) {
            self.sweeper.held.done(&w.group);
        }
        let store = self.sweeper.store.clone();
        let wake = self.sweeper.wake.clone();
        self.tasks.spawn(async move {
            release(store.as_ref(), &waiting).await;
            wake.now();
        });
    }

    /// Everything claimed and not started: what waits for a slot, and what
    /// is held ahead of its time.
    fn take_unstarted(&self) -> Vec<Waiting> {
        let mut waiting = self.targets.take_waiting();
        for w in waiting.iter().filter(|w| w.ahead) {
            self.sweeper.held.done(&w.group);
        }
        // Taking them all leaves none of them counted as held.
        let held = self.sweeper.held.take_all();
        waiting.extend(held.into_iter().map(|c| Waiting {
            group: vec![c],
            claimed_at: Instant::now(),
            ahead: false,
        }));
        waiting
    }

    /// Stops: what waits is given back, the attempts in flight end.
    pub async fn stop(&self) {
        let waiting = self.take_unstarted();
        release(self.sweeper.store.as_ref(), &waiting).await;
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// When a note finds this instance taken for dead (a process stopped,
    /// not killed, or cut off from the database for seconds), the others
    /// gave back its leases and may be attempting those messages already.
    /// What it claimed and has not started goes back too (its stale tokens
    /// change only what nobody took since) before it attempts anything
    /// again (`instances::Noted::may_attempt`).
    pub async fn give_back_when_forgotten(self: Arc<Self>, shutdown: CancellationToken) {
        let noted = self.sweeper.noted.clone();
        loop {
            tokio::select! {
                _ = noted.taken_for_dead.notified() => {}
                _ = shutdown.cancelled() => return,
            }
            let unstarted = self.take_unstarted();
            release(self.sweeper.store.as_ref(), &unstarted).await;
            noted.given_back();
            self.sweeper.held.freed.notify_one();
            self.sweeper.wake.now();
        }
    }
}

/// What an attempt takes to start: a place among the attempts in flight,
/// given back when it ends, and one among the results not yet written,
/// given back when its result is.
pub(super) struct Places {
    attempt: OwnedSemaphorePermit,
    record: OwnedSemaphorePermit,
}

/// How many attempts may be in flight or ended without their results
/// written. A result waits for the write under way, then for its own: with
/// at most this many, both take a few tens of milliseconds, so that a crash
/// sends again only the attempts in flight and those answered in its last
/// 100 ms or so. When receivers answer faster than the database records,
/// sends slow down to the pace of the records rather than let the unwritten
/// grow. At least `concurrency`, so that it never bounds the attempts in
/// flight themselves.
fn unrecorded_places(concurrency: u32) -> usize {
    UNRECORDED.max(concurrency as usize)
}

/// Measured on two cores with the database beside the service, in a burst
/// of 20,000 killed midway: with 1,536, 1,024 or 2,048 the results not
/// written at the kill were mostly answered within the last 30 to 80 ms
/// (now and then 110 to 118 ms, with a second instance on the same cores);
/// with 8,192, 140 ms. 1,536 sent the burst as fast as 2,048.
pub const UNRECORDED: usize = 1536;

async fn release(store: &dyn crate::store::Store, waiting: &[Waiting]) {
    let leases: Vec<_> = waiting
        .iter()
        .flat_map(|w| w.group.iter().map(|c| (c.id, c.lease_token)))
        .collect();
    if leases.is_empty() {
        return;
    }
    for tries in 1..=3 {
        match store.release(&leases).await {
            Ok(n) => {
                metrics::counter!(crate::metrics::GIVEN_BACK).increment(n);
                return;
            }
            // The leases end on their own: the messages are late, not lost.
            Err(e) if tries == 3 => {
                warn!(error = %e, count = leases.len(), "giving back claimed messages failed")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
