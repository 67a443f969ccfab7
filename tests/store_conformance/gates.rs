//! Gated targets (`GateStore`, docs/api.md#flow-control-and-fairness): a target with `flowControl` or a
//! circuit breaker has its messages claimed only through its gate: as many
//! as its parallelism (counting leases of every claimer) and its rate over a
//! sliding period admit; none while its breaker is open, then one probe.

use dispatch::domain::target::gate::{BreakerState, CircuitBreaker, FlowControl, Limits};

use crate::support::*;

checks!(
    a_gated_targets_messages_are_claimed_only_through_its_gate_up_to_its_parallelism,
    a_rate_admits_so_many_starts_per_sliding_period,
    an_open_breaker_admits_nothing_until_its_cooldown_then_one_probe,
    changing_the_limits_moves_waiting_messages_between_the_claims,
);

fn shares() -> ClaimShares {
    ClaimShares::open(32)
}

fn limited(limits: Limits) -> impl FnOnce(&mut Target) {
    move |t| {
        if let TargetConfig::Webhook(w) = &mut t.config {
            w.limits = limits;
        }
    }
}

async fn gated_target(store: &dyn Store, change: impl FnOnce(&mut Target)) -> Target {
    let mut t = target_value(&ACME, "limited", time::now());
    change(&mut t);
    insert_target(store, &t).await;
    t
}

fn flow(parallelism: Option<u32>, rate: Option<u32>, period_ms: u64) -> Limits {
    Limits {
        flow: Some(FlowControl {
            parallelism,
            rate,
            period_ms,
        }),
        breaker: None,
    }
}

/// `n` messages of `t`, due a second apart before `now`, oldest first.
async fn backlog(store: &dyn Store, t: &Target, n: i64, now: DateTime<Utc>) -> Vec<Message> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(schedule(store, t, now - secs(n - i)).await);
    }
    out
}

async fn a_gated_targets_messages_are_claimed_only_through_its_gate_up_to_its_parallelism(
    store: Arc<dyn Store>,
) {
    let t = gated_target(&*store, limited(flow(Some(2), None, 1000))).await;
    let now = time::now();
    let m = backlog(&*store, &t, 5, now).await;
    // The other claims never see them.
    assert!(store.claim_due(now, 100, LEASE).await.unwrap().is_empty());
    assert!(store
        .claim_due_shared(now, 100, LEASE, &shares())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);

    let first = store.claim_gated(now, 100, LEASE, &shares()).await.unwrap();
    assert_eq!(
        claimed_ids(&first.claimed),
        vec![m[0].id, m[1].id],
        "the two oldest"
    );
    assert!(first.claimed.iter().all(|c| c.gated));
    // Two in flight: nothing more, until an attempt ends.
    let full = store.claim_gated(now, 100, LEASE, &shares()).await.unwrap();
    assert!(full.claimed.is_empty());
    assert!(full.waits_for_attempts);
    let done = recorded(
        &first.claimed[0],
        attempts_after(&first.claimed[0], &[AttemptOutcome::Success], now),
        Next::Delivered,
    );
    store.record(&[done], now).await.unwrap();
    let next = store.claim_gated(now, 100, LEASE, &shares()).await.unwrap();
    assert_eq!(claimed_ids(&next.claimed), vec![m[2].id]);
    // A lease that expired holds nothing: both slots are free again.
    let later = now + chrono::TimeDelta::from_std(LEASE).unwrap() + secs(1);
    let after = store
        .claim_gated(later, 100, LEASE, &shares())
        .await
        .unwrap();
    assert_eq!(after.claimed.len(), 2);
    // The instance's own share caps it too.
    let t2 = gated_target(&*store, limited(flow(Some(10), None, 1000))).await;
    backlog(&*store, &t2, 3, now).await;
    let room = ClaimShares {
        room: vec![(t2.id.clone(), 1)],
        ..ClaimShares::open(32)
    };
    let one = store.claim_gated(now, 100, LEASE, &room).await.unwrap();
    assert_eq!(one.claimed.len(), 1);
    assert!(
        !one.waits_for_attempts,
        "held by this instance, not the gate"
    );
}

async fn a_rate_admits_so_many_starts_per_sliding_period(store: Arc<dyn Store>) {
    let t = gated_target(&*store, limited(flow(None, Some(2), 1000))).await;
    let now = time::now();
    let m = backlog(&*store, &t, 5, now).await;
    let first = store.claim_gated(now, 100, LEASE, &shares()).await.unwrap();
    assert_eq!(claimed_ids(&first.claimed), vec![m[0].id, m[1].id]);
    let done: Vec<_> = first
        .claimed
        .iter()
        .map(|c| {
            recorded(
                c,
                attempts_after(c, &[AttemptOutcome::Success], now),
                Next::Delivered,
            )
        })
        .collect();
    store.record(&done, now).await.unwrap();
    // Nothing in flight, but two started within the period.
    let held = store
        .claim_gated(now + ms(500), 100, LEASE, &shares())
        .await
        .unwrap();
    assert!(held.claimed.is_empty());
    assert_eq!(
        held.next,
        Some(now + secs(1)),
        "when the first start leaves the window"
    );
    assert!(!held.waits_for_attempts);
    let again = store
        .claim_gated(now + secs(1), 100, LEASE, &shares())
        .await
        .unwrap();
    assert_eq!(claimed_ids(&again.claimed), vec![m[2].id, m[3].id]);
    assert_eq!(
        get(&*store, &m[4]).await.attempt_count,
        0,
        "held back, unattempted"
    );
}

async fn an_open_breaker_admits_nothing_until_its_cooldown_then_one_probe(store: Arc<dyn Store>) {
    let breaker = Limits {
        flow: None,
        breaker: Some(CircuitBreaker {
            failures: 2,
            cooldown_ms: 1000,
        }),
    };
    let t = gated_target(&*store, limited(breaker)).await;
    let now = time::now();
    let m = backlog(&*store, &t, 3, now).await;
    let fail = [(t.id.clone(), Some(false)), (t.id.clone(), Some(false))];
    let changes = store.record_health(&fail, now).await.unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(
        (changes[0].1.from, changes[0].1.to),
        (BreakerState::Closed, BreakerState::Open)
    );
    let read = store.get_target(&ACME, &t.id).await.unwrap().unwrap();
    assert_eq!(read.health.state, BreakerState::Open);
    assert_eq!(read.health.consecutive_failures, 2);
    assert_eq!(read.health.open_until, Some(now + secs(1)));

    let waiting = store
        .claim_gated(now + ms(500), 100, LEASE, &shares())
        .await
        .unwrap();
    assert!(waiting.claimed.is_empty());
    assert_eq!(waiting.next, Some(now + secs(1)));
    let probe = store
        .claim_gated(now + secs(1), 100, LEASE, &shares())
        .await
        .unwrap();
    assert_eq!(
        claimed_ids(&probe.claimed),
        vec![m[0].id],
        "one probe, the oldest"
    );
    assert_eq!(probe.changes[0].1.to, BreakerState::HalfOpen);
    let one_at_a_time = store
        .claim_gated(now + secs(1), 100, LEASE, &shares())
        .await
        .unwrap();
    assert!(one_at_a_time.claimed.is_empty());
    let closed = store
        .record_health(&[(t.id.clone(), Some(true))], now + secs(2))
        .await
        .unwrap();
    assert_eq!(closed[0].1.to, BreakerState::Closed);
    let read = store.get_target(&ACME, &t.id).await.unwrap().unwrap();
    assert_eq!(
        (read.health.state, read.health.consecutive_failures),
        (BreakerState::Closed, 0)
    );

    // Reset by hand: only in the target's own account.
    store.record_health(&fail, now).await.unwrap();
    assert!(store
        .reset_health(&GLOBEX, &t.id, now)
        .await
        .unwrap()
        .is_none());
    let (reset, change) = store
        .reset_health(&ACME, &t.id, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reset.health.state, BreakerState::Closed);
    assert_eq!(change.map(|c| c.from), Some(BreakerState::Open));
    assert_eq!(reset.health.cooldown_ms, 1000, "the setting's cooldown");

    // A change that keeps a breaker keeps its state; one that takes it
    // away forgets it, so a breaker added again starts closed.
    store.record_health(&fail, now).await.unwrap();
    let with = |failures| {
        let mut changed = t.clone();
        limited(Limits {
            flow: None,
            breaker: Some(CircuitBreaker {
                failures,
                cooldown_ms: 1000,
            }),
        })(&mut changed);
        changed
    };
    let kept = store.update_target(&with(5)).await.unwrap().unwrap();
    assert_eq!(
        (kept.health.state, kept.health.consecutive_failures),
        (BreakerState::Open, 2)
    );
    let mut without = t.clone();
    limited(Limits::default())(&mut without);
    store.update_target(&without).await.unwrap().unwrap();
    let again = store.update_target(&with(5)).await.unwrap().unwrap();
    assert_eq!(
        (
            again.health.state,
            again.health.consecutive_failures,
            again.health.open_until
        ),
        (BreakerState::Closed, 0, None)
    );
}

async fn changing_the_limits_moves_waiting_messages_between_the_claims(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    backlog(&*store, &t, 3, now).await;
    let mut gated = t.clone();
    limited(flow(Some(1), None, 1000))(&mut gated);
    store.update_target(&gated).await.unwrap().unwrap();
    assert!(store.claim_due(now, 100, LEASE).await.unwrap().is_empty());
    let one = store.claim_gated(now, 100, LEASE, &shares()).await.unwrap();
    assert_eq!(one.claimed.len(), 1);
    // A message scheduled now is gated too.
    schedule(&*store, &t, now - secs(1)).await;
    assert!(store.claim_due(now, 100, LEASE).await.unwrap().is_empty());

    store.update_target(&t).await.unwrap().unwrap();
    assert_eq!(store.claim_due(now, 100, LEASE).await.unwrap().len(), 3);
    assert!(store
        .claim_gated(now, 100, LEASE, &shares())
        .await
        .unwrap()
        .claimed
        .is_empty());
}
