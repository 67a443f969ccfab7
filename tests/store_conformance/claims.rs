//! Claims (`DeliveryStore`): what falls due, limits, leases, paused
//! targets, the next due time, and two claimers at once.

use crate::support::*;

checks!(
    claim_due_hands_out_only_due_scheduled_messages_oldest_due_first,
    claim_due_honours_its_limit,
    a_claimed_message_is_not_claimed_again_until_its_lease_expires,
    a_disabled_targets_messages_are_not_claimed_until_it_is_enabled,
    next_due_is_the_earliest_claimable_time_and_ignores_paused_messages,
    two_concurrent_claimers_hand_out_all_200_messages_exactly_once,
    a_claim_says_when_its_message_was_last_scheduled,
    a_shared_claim_goes_round_robin_and_takes_no_more_than_each_targets_share,
    the_next_due_time_can_leave_out_full_targets,
    a_shared_claim_goes_round_robin_over_accounts_first_and_takes_no_more_than_each_accounts_share,
    a_backlog_due_at_one_instant_does_not_hide_a_later_target_from_a_shared_claim,
    beside_a_backlog_due_at_one_instant_another_targets_stream_goes_oldest_first,
    a_released_claim_is_due_again_at_once_and_a_stale_token_releases_nothing,
);

async fn claim_due_hands_out_only_due_scheduled_messages_oldest_due_first(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    // Not claimable: delivered, dead letter, cancelled (all due long ago).
    let delivered = schedule(&*store, &t, now - secs(60)).await;
    deliver(&*store, &delivered, now - secs(50)).await;
    let dead = schedule(&*store, &t, now - secs(60)).await;
    dead_letter(&*store, &dead, now - secs(50)).await;
    let cancelled = schedule(&*store, &t, now - secs(60)).await;
    done(
        store
            .cancel(&ACME, &cancelled.id, now - secs(55))
            .await
            .unwrap(),
    );
    let future = schedule(&*store, &t, now + hours(1)).await;
    // Due, in an order unlike their creation order.
    let d_mid = schedule(&*store, &t, now - secs(2)).await;
    let d_new = schedule(&*store, &t, now - secs(1)).await;
    let d_old = schedule(&*store, &t, now - secs(3)).await;

    // A lease longer than the wait for `future` below keeps these out of it.
    let long = Duration::from_secs(3 * 3600);
    let mut order = Vec::new();
    for _ in 0..3 {
        let claimed = store.claim_due(now, 1, long).await.unwrap();
        assert_eq!(claimed.len(), 1, "one due message per claim of one");
        order.push(claimed[0].id);
    }
    assert_eq!(
        order,
        vec![d_old.id, d_mid.id, d_new.id],
        "the oldest due is handed out first"
    );
    assert!(store.claim_due(now, 10, LEASE).await.unwrap().is_empty());

    // What a claim carries.
    let claimed = store
        .claim_due(now + hours(1) + ms(1), 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed_ids(&claimed), vec![future.id]);
    let c = &claimed[0];
    assert_eq!(c.target_id, t.id);
    assert_eq!(*c.target, t.config);
    assert_eq!(c.payload, future.payload.as_str());
    assert_eq!(c.delivery_time, now + hours(1));
    assert_eq!(c.attempt_count, 0);
    assert_eq!(c.ladder_attempts, 0);
    assert!(!c.lease_token.is_nil());

    // Claiming changes no visible state.
    let m = get(&*store, &future).await;
    assert_eq!(m.state, State::Scheduled);
    assert_eq!(m.attempt_count, 0);
}

async fn claim_due_honours_its_limit(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(schedule(&*store, &t, now - secs(10 - i)).await.id);
    }
    let mut seen = Vec::new();
    for expected in [2, 2, 1, 0] {
        let claimed = store.claim_due(now, 2, LEASE).await.unwrap();
        assert_eq!(claimed.len(), expected, "a claim of 2 hands out at most 2");
        seen.extend(claimed_ids(&claimed));
    }
    assert_eq!(seen.len(), 5);
    assert_eq!(set(seen), set(ids));
}

async fn a_claimed_message_is_not_claimed_again_until_its_lease_expires(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let first = claim_only(&*store, &m, now, LEASE).await;

    for later in [now, now + secs(1), now + secs(29)] {
        assert!(
            store.claim_due(later, 10, LEASE).await.unwrap().is_empty(),
            "the lease holds at {later}"
        );
    }
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(now + secs(30)),
        "a leased message falls due again when its lease ends"
    );

    let second = claim_only(&*store, &m, now + secs(30) + ms(1), LEASE).await;
    assert_ne!(
        second.lease_token, first.lease_token,
        "a new claim has a new lease token"
    );
    assert_eq!(second.attempt_count, 0);
    assert_eq!(second.ladder_attempts, 0);
    assert!(store
        .claim_due(now + secs(31), 10, LEASE)
        .await
        .unwrap()
        .is_empty());

    // A short lease (a few ms) also expires.
    let short = schedule(&*store, &t, now - secs(1)).await;
    let a = claim_only(&*store, &short, now + secs(40), Duration::from_millis(5)).await;
    let b = claim_only(&*store, &short, now + secs(40) + ms(6), LEASE).await;
    assert_ne!(a.lease_token, b.lease_token);
}

async fn a_disabled_targets_messages_are_not_claimed_until_it_is_enabled(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let before = schedule(&*store, &t, now - secs(3)).await;
    store
        .set_target_enabled(&ACME, &t.id, false, now)
        .await
        .unwrap()
        .unwrap();
    assert!(store.claim_due(now, 100, LEASE).await.unwrap().is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);

    // Scheduled, batch-inserted or rescheduled while disabled: held too.
    let during = schedule(&*store, &t, now - secs(2)).await;
    let batched = message_value(&t, now - secs(1), now);
    store
        .insert_messages(&ACME, std::slice::from_ref(&batched))
        .await
        .unwrap();
    let moved = schedule(&*store, &t, now + hours(5)).await;
    done(
        store
            .reschedule(&ACME, &moved.id, now - secs(4), now)
            .await
            .unwrap(),
    );
    // A target created disabled holds its messages from the start.
    let mut off = target_value(&ACME, "off", now);
    off.enabled = false;
    insert_target(&*store, &off).await;
    let held = schedule(&*store, &off, now - secs(10)).await;

    assert!(store
        .claim_due(now + hours(1), 100, LEASE)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);
    for m in [&before, &during, &moved, &held] {
        assert_eq!(get(&*store, m).await.state, State::Scheduled);
    }

    store
        .set_target_enabled(&ACME, &t.id, true, now + secs(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(now - secs(4)),
        "the earliest of the released messages"
    );
    // Delivered oldest first once enabled.
    let first = store.claim_due(now + secs(2), 1, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&first), vec![moved.id]);
    let rest = store.claim_due(now + secs(2), 100, LEASE).await.unwrap();
    assert_eq!(
        set(claimed_ids(&rest)),
        set([before.id, during.id, batched.id]),
        "the disabled target's messages stay held"
    );
    let rest_ids = claimed_ids(&rest);
    assert_eq!(rest_ids.len(), 3);

    store
        .set_target_enabled(&ACME, &off.id, true, now + secs(3))
        .await
        .unwrap()
        .unwrap();
    let claimed = store.claim_due(now + secs(3), 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&claimed), vec![held.id]);
}

async fn next_due_is_the_earliest_claimable_time_and_ignores_paused_messages(
    store: Arc<dyn Store>,
) {
    assert_eq!(store.next_due().await.unwrap(), None, "nothing scheduled");
    let on = add_target(&*store, &ACME).await;
    let now = time::now();
    // Finished messages do not count.
    let delivered = schedule(&*store, &on, now - secs(100)).await;
    deliver(&*store, &delivered, now - secs(90)).await;
    let dead = schedule(&*store, &on, now - secs(100)).await;
    dead_letter(&*store, &dead, now - secs(90)).await;
    let cancelled = schedule(&*store, &on, now + secs(1)).await;
    done(store.cancel(&ACME, &cancelled.id, now).await.unwrap());
    assert_eq!(store.next_due().await.unwrap(), None);

    schedule(&*store, &on, now + secs(10)).await;
    schedule(&*store, &on, now + secs(5)).await;
    let off = add_target(&*store, &ACME).await;
    schedule(&*store, &off, now + secs(1)).await;
    store
        .set_target_enabled(&ACME, &off.id, false, now)
        .await
        .unwrap()
        .unwrap();
    schedule(&*store, &off, now + secs(2)).await;

    assert_eq!(store.next_due().await.unwrap(), Some(now + secs(5)));
    store
        .set_target_enabled(&ACME, &off.id, true, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.next_due().await.unwrap(), Some(now + secs(1)));
}

async fn two_concurrent_claimers_hand_out_all_200_messages_exactly_once(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let messages: Vec<Message> = (0..200)
        .map(|i| message_value(&t, now - ms(1_000 - i), now))
        .collect();
    let inserted = store.insert_messages(&ACME, &messages).await.unwrap();
    assert_eq!(inserted.len(), 200);

    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let claimer = |store: Arc<dyn Store>, barrier: Arc<tokio::sync::Barrier>| async move {
        barrier.wait().await;
        let mut got = Vec::new();
        loop {
            let claimed = store.claim_due(now, 7, LEASE).await.unwrap();
            if claimed.is_empty() {
                return got;
            }
            got.extend(claimed_ids(&claimed));
            tokio::task::yield_now().await;
        }
    };
    let a = tokio::spawn(claimer(store.clone(), barrier.clone()));
    let b = tokio::spawn(claimer(store.clone(), barrier));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());

    let mut seen = HashSet::new();
    for id in a.iter().chain(&b) {
        assert!(seen.insert(*id), "message {id} was handed out twice");
    }
    assert_eq!(
        seen,
        set(messages.iter().map(|m| m.id)),
        "every due message was handed out (a: {}, b: {})",
        a.len(),
        b.len()
    );
    assert!(store.claim_due(now, 1000, LEASE).await.unwrap().is_empty());
}

async fn a_claim_says_when_its_message_was_last_scheduled(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    // Scheduled now for a year ago; scheduled now and rescheduled a minute
    // later for two hours ago.
    let past = message_value(&t, now - hours(24 * 365), now);
    let moved = message_value(&t, now + hours(5), now);
    store
        .insert_messages(&ACME, &[past.clone(), moved.clone()])
        .await
        .unwrap();
    done(
        store
            .reschedule(&ACME, &moved.id, now - hours(2), now + secs(60))
            .await
            .unwrap(),
    );
    // Neither a pause of the target nor a lost lease moves it.
    for (enabled, at) in [(false, 61), (true, 62)] {
        store
            .set_target_enabled(&ACME, &t.id, enabled, now + secs(at))
            .await
            .unwrap()
            .unwrap();
    }
    let lost = store
        .claim_due(now + secs(70), 10, Duration::from_millis(1))
        .await
        .unwrap();
    assert_eq!(lost.len(), 2);
    let claimed = store.claim_due(now + secs(80), 10, LEASE).await.unwrap();
    let scheduled_at = |m: &Message| {
        claimed
            .iter()
            .find(|c| c.id == m.id)
            .map(|c| c.scheduled_at.timestamp_millis())
    };
    assert_eq!(scheduled_at(&past), Some(now.timestamp_millis()));
    assert_eq!(
        scheduled_at(&moved),
        Some((now + secs(60)).timestamp_millis())
    );
}

async fn a_shared_claim_goes_round_robin_and_takes_no_more_than_each_targets_share(
    store: Arc<dyn Store>,
) {
    let now = time::now();
    let (a, b, c) = (
        add_target(&*store, &ACME).await,
        add_target(&*store, &ACME).await,
        add_target(&*store, &GLOBEX).await,
    );
    // a: the five oldest; b: three; c: two, but it is full.
    let mut of_a = Vec::new();
    for i in 0..5 {
        of_a.push(schedule(&*store, &a, now - secs(60 - i)).await);
    }
    let mut of_b = Vec::new();
    for i in 0..3 {
        of_b.push(schedule(&*store, &b, now - secs(30 - i)).await);
    }
    for i in 0..2 {
        schedule(&*store, &c, now - secs(20 - i)).await;
    }
    let shares = ClaimShares {
        room: vec![(b.id.clone(), 1), (c.id.clone(), 0)],
        ..ClaimShares::open(2)
    };
    let claimed = store
        .claim_due_shared(now, 100, LEASE, &shares)
        .await
        .unwrap();
    let got: std::collections::BTreeSet<MessageId> = claimed.iter().map(|c| c.id).collect();
    let want: std::collections::BTreeSet<MessageId> =
        [of_a[0].id, of_a[1].id, of_b[0].id].into_iter().collect();
    assert_eq!(got, want, "a's two oldest, b's oldest, none of c's");

    // With room for one message in all, the oldest of the round's first
    // places goes: round robin, not the whole of the oldest target first.
    let shares = ClaimShares {
        room: vec![(c.id.clone(), 0)],
        ..ClaimShares::open(10)
    };
    let next = store
        .claim_due_shared(now, 2, LEASE, &shares)
        .await
        .unwrap();
    let got: std::collections::BTreeSet<MessageId> = next.iter().map(|c| c.id).collect();
    assert_eq!(got, [of_a[2].id, of_b[1].id].into_iter().collect());
}

async fn the_next_due_time_can_leave_out_full_targets(store: Arc<dyn Store>) {
    let now = time::now();
    let (a, b) = (
        add_target(&*store, &ACME).await,
        add_target(&*store, &GLOBEX).await,
    );
    schedule(&*store, &a, now - secs(60)).await;
    let later = schedule(&*store, &b, now + secs(5)).await;
    assert_eq!(store.next_due().await.unwrap(), Some(now - secs(60)));
    assert_eq!(
        store
            .next_due_except(std::slice::from_ref(&a.id), &[])
            .await
            .unwrap(),
        Some(later.delivery_time)
    );
    assert_eq!(
        store
            .next_due_except(&[a.id.clone(), b.id.clone()], &[])
            .await
            .unwrap(),
        None
    );
}

async fn a_shared_claim_goes_round_robin_over_accounts_first_and_takes_no_more_than_each_accounts_share(
    store: Arc<dyn Store>,
) {
    let now = time::now();
    let (a1, a2, g) = (
        add_target(&*store, &ACME).await,
        add_target(&*store, &ACME).await,
        add_target(&*store, &GLOBEX).await,
    );
    // acme's ten are all older than globex's three.
    let (mut of_a1, mut of_a2, mut of_g) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..5 {
        of_a1.push(schedule(&*store, &a1, now - secs(60 - i)).await.id);
        of_a2.push(schedule(&*store, &a2, now - secs(50 - i)).await.id);
    }
    for i in 0..3 {
        of_g.push(schedule(&*store, &g, now - secs(10 - i)).await.id);
    }
    // Four: two of each account, oldest first within each and round robin
    // over acme's targets, though acme's are all older than globex's.
    let open = ClaimShares::open(10);
    let first = store.claim_due_shared(now, 4, LEASE, &open).await.unwrap();
    let got: std::collections::BTreeSet<MessageId> = first.iter().map(|c| c.id).collect();
    assert_eq!(
        got,
        [of_a1[0], of_a2[0], of_g[0], of_g[1]].into_iter().collect()
    );
    // acme may take two more (one of each of its targets: round robin
    // within the account), any other account two (globex has one left).
    let shares = ClaimShares {
        accounts: vec![(ACME.clone(), 2)],
        per_account: 2,
        ..ClaimShares::open(10)
    };
    let claimed = store
        .claim_due_shared(now, 100, LEASE, &shares)
        .await
        .unwrap();
    let got: std::collections::BTreeSet<MessageId> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(got, [of_a1[1], of_a2[1], of_g[2]].into_iter().collect());
    // A full account is left out of the claim and of the next due time.
    let later = schedule(&*store, &g, now + secs(5)).await;
    let acme_full = ClaimShares {
        accounts: vec![(ACME.clone(), 0)],
        ..ClaimShares::open(10)
    };
    assert!(store
        .claim_due_shared(now, 100, LEASE, &acme_full)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .next_due_except(&[], std::slice::from_ref(&*ACME))
            .await
            .unwrap(),
        Some(later.delivery_time)
    );
    assert_eq!(
        store.next_due_except(&[], &[]).await.unwrap(),
        Some(now - secs(58))
    );
    assert_eq!(
        store.next_due_except(&[], &[]).await.unwrap(),
        store.next_due().await.unwrap()
    );
}

async fn a_backlog_due_at_one_instant_does_not_hide_a_later_target_from_a_shared_claim(
    store: Arc<dyn Store>,
) {
    // A redrive or a burst: far more of a's messages due at one instant
    // than the oldest window holds (limit x CLAIM_WINDOW), and b's one
    // message due after all of them. a has room for one more at a time, as
    // a quick receiver with little parallelism has: a claim that read only
    // the oldest due messages would find nothing but a's and hand b's out
    // only once a's backlog was gone.
    let now = time::now();
    let (a, b) = (
        add_target(&*store, &ACME).await,
        add_target(&*store, &GLOBEX).await,
    );
    let limit = 2;
    let backlog = limit * dispatch::store::CLAIM_WINDOW as usize * 3;
    for _ in 0..backlog {
        schedule(&*store, &a, now - secs(10)).await;
    }
    let late = schedule(&*store, &b, now - secs(1)).await;
    let shares = ClaimShares {
        room: vec![(a.id.clone(), 1)],
        ..ClaimShares::open(1)
    };
    let claimed = store
        .claim_due_shared(now, limit as u32, LEASE, &shares)
        .await
        .unwrap();
    let targets: Vec<&TargetId> = claimed.iter().map(|c| &c.target_id).collect();
    assert_eq!(claimed.len(), 2, "one of a's and b's: {targets:?}");
    assert!(
        claimed.iter().any(|c| c.id == late.id),
        "b's message goes beside a's backlog: {targets:?}"
    );
    assert!(claimed.iter().any(|c| c.target_id == a.id));
}

async fn beside_a_backlog_due_at_one_instant_another_targets_stream_goes_oldest_first(
    store: Arc<dyn Store>,
) {
    // As above, and b's messages keep falling due, one after another: each
    // claim must take b's oldest, not its newest. Taking the newest left
    // the ones just before it waiting for as long as newer ones kept coming
    // (a redrive of 100,000 beside a steady stream: p99 12-18 s).
    let now = time::now();
    let (a, b) = (
        add_target(&*store, &ACME).await,
        add_target(&*store, &GLOBEX).await,
    );
    let limit = 2;
    for _ in 0..limit * dispatch::store::CLAIM_WINDOW as usize * 3 {
        schedule(&*store, &a, now - secs(10)).await;
    }
    let mut stream = Vec::new();
    for i in 0..5 {
        stream.push(schedule(&*store, &b, now - secs(5) + ms(i)).await);
    }
    let shares = ClaimShares {
        room: vec![(a.id.clone(), 1)],
        ..ClaimShares::open(1)
    };
    let mut got = Vec::new();
    for i in 0..5 {
        // One more of b's falls due before each claim.
        schedule(&*store, &b, now - secs(1) + ms(i)).await;
        let claimed = store
            .claim_due_shared(now, limit as u32, LEASE, &shares)
            .await
            .unwrap();
        got.extend(
            claimed
                .into_iter()
                .filter(|c| c.target_id == b.id)
                .map(|c| c.id),
        );
    }
    let want: Vec<MessageId> = stream.iter().map(|m| m.id).collect();
    assert_eq!(got, want, "b's messages in the order they fell due");
}

async fn a_released_claim_is_due_again_at_once_and_a_stale_token_releases_nothing(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let due_at = now - secs(1);
    let m = schedule(&*store, &t, due_at).await;
    let first = claim_only(&*store, &m, now, LEASE).await;

    // A token the message's lease does not hold gives nothing back.
    let stale = Uuid::new_v4();
    assert_eq!(store.release(&[(m.id, stale)]).await.unwrap(), 0);
    assert!(store.claim_due(now, 10, LEASE).await.unwrap().is_empty());

    assert_eq!(
        store.release(&[(m.id, first.lease_token)]).await.unwrap(),
        1
    );
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(due_at),
        "given back as due as it was before the claim"
    );
    let again = claim_only(&*store, &m, now, LEASE).await;
    assert_ne!(again.lease_token, first.lease_token);
    assert_eq!(again.attempt_count, 0, "no attempt was made or counted");
    assert_eq!(
        store.release(&[(m.id, first.lease_token)]).await.unwrap(),
        0,
        "an earlier claim's token no longer holds it"
    );

    // A message whose result is recorded is not made due again.
    let r = recorded(
        &again,
        attempts_after(&again, &[AttemptOutcome::Success], now),
        Next::Delivered,
    );
    store.record(&[r], now).await.unwrap();
    assert_eq!(
        store.release(&[(m.id, again.lease_token)]).await.unwrap(),
        0
    );
    assert_eq!(get(&*store, &m).await.state, State::Delivered);
    assert_eq!(store.next_due().await.unwrap(), None);
}
