//! Claims ahead of the due time (`DeliveryStore::claim_ahead`): what they
//! take, the lease running from the due time, round robin over targets,
//! full targets left out, and what a cancel or reschedule does to a message
//! so claimed (409 for anyone but the holder of its lease).

use crate::support::*;

checks!(
    an_ahead_claim_takes_only_what_falls_due_in_its_window_leased_from_the_due_time,
    an_ahead_claim_goes_round_robin_over_targets_and_leaves_out_full_ones,
    an_ahead_claim_leaves_out_the_accounts_fenced_off_and_no_other,
    a_message_claimed_ahead_is_cancelled_or_rescheduled_only_by_the_holder_of_its_lease,
);

async fn an_ahead_claim_takes_only_what_falls_due_in_its_window_leased_from_the_due_time(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let due_now = schedule(&*store, &t, now).await;
    let past = schedule(&*store, &t, now - secs(5)).await;
    let soon_b = schedule(&*store, &t, now + ms(800)).await;
    let soon_a = schedule(&*store, &t, now + ms(300)).await;
    let edge = schedule(&*store, &t, now + secs(2)).await;
    let later = schedule(&*store, &t, now + secs(2) + ms(1)).await;
    // A message of an orderingKey waits for its time: one of its key
    // scheduled later for an earlier time must still go first.
    let mut keyed = message_value(&t, now + ms(500), now);
    keyed.ordering_key = Some(ordering_key("order-7"));
    let keyed = insert(&*store, &keyed).await;
    // What is due already is for the claim of due messages. Claimed with a
    // lease that ends inside the window, they are under way: not for an
    // ahead claim either.
    let due = store
        .claim_due(now, 10, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(set(claimed_ids(&due)), set([due_now.id, past.id]));
    assert!(due.iter().all(|c| c.due_at.is_none()));

    let ahead = store
        .claim_ahead(now, now + secs(2), 10, LEASE, &[], &[])
        .await
        .unwrap();
    assert_eq!(
        claimed_ids(&ahead),
        vec![soon_a.id, soon_b.id, edge.id],
        "after now, up to and including the window's end, oldest due first, none with a key"
    );
    let dues: Vec<_> = ahead.iter().map(|c| c.due_at).collect();
    assert_eq!(
        dues,
        vec![
            Some(now + ms(300)),
            Some(now + ms(800)),
            Some(now + secs(2))
        ],
        "each carries its due time"
    );
    assert!(ahead.iter().all(|c| c.payload == soon_a.payload.as_str()
        || c.payload == soon_b.payload.as_str()
        || c.payload == edge.payload.as_str()));

    // A wider window takes the rest.
    let rest = store
        .claim_ahead(now, now + secs(3), 10, LEASE, &[], &[])
        .await
        .unwrap();
    assert_eq!(claimed_ids(&rest), vec![later.id]);
    assert_eq!(store.next_due().await.unwrap(), Some(keyed.delivery_time));

    // Leased from the due time: at the due time plus a little less than
    // the lease, nobody else may claim them; at the due time plus the
    // lease, anyone may (the due ones' one-second leases ended long before, and the keyed
    // message is due by then).
    let lease = chrono::TimeDelta::from_std(LEASE).unwrap();
    let before = store
        .claim_due(now + ms(300) + lease - ms(1), 10, LEASE)
        .await
        .unwrap();
    assert_eq!(
        set(claimed_ids(&before)),
        set([due_now.id, past.id, keyed.id])
    );
    let again = store
        .claim_due(now + ms(300) + lease, 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed_ids(&again), vec![soon_a.id]);

    // A limit of 0, or a window that is over, claims nothing.
    assert!(store
        .claim_ahead(now, now + secs(3), 0, LEASE, &[], &[])
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .claim_ahead(now + secs(3), now, 10, LEASE, &[], &[])
        .await
        .unwrap()
        .is_empty());
}

async fn an_ahead_claim_goes_round_robin_over_targets_and_leaves_out_full_ones(
    store: Arc<dyn Store>,
) {
    let busy = add_target(&*store, &ACME).await;
    let quiet = add_target(&*store, &GLOBEX).await;
    let full = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let mut busy_ids = Vec::new();
    for i in 0..6 {
        busy_ids.push(schedule(&*store, &busy, now + ms(100 + i)).await.id);
    }
    let quiet_one = schedule(&*store, &quiet, now + ms(500)).await;
    let full_one = schedule(&*store, &full, now + ms(50)).await;

    let first = store
        .claim_ahead(
            now,
            now + secs(1),
            3,
            LEASE,
            std::slice::from_ref(&full.id),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        set(claimed_ids(&first)),
        set([busy_ids[0], busy_ids[1], quiet_one.id]),
        "one of each target before a second of any, oldest due first"
    );
    assert!(!claimed_ids(&first).contains(&full_one.id));
    let rest = store
        .claim_ahead(now, now + secs(1), 10, LEASE, &[], &[])
        .await
        .unwrap();
    assert_eq!(
        set(claimed_ids(&rest)),
        set(busy_ids[2..].iter().copied().chain([full_one.id])),
    );
}

async fn a_message_claimed_ahead_is_cancelled_or_rescheduled_only_by_the_holder_of_its_lease(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let a = schedule(&*store, &t, now + ms(500)).await;
    let b = schedule(&*store, &t, now + ms(600)).await;
    let c = schedule(&*store, &t, now + ms(700)).await;
    let held = store
        .claim_ahead(now, now + secs(1), 10, LEASE, &[], &[])
        .await
        .unwrap();
    assert_eq!(claimed_ids(&held), vec![a.id, b.id, c.id]);
    let token = held[0].lease_token;

    // Without the lease (another instance): as an attempt under way.
    assert!(matches!(
        store.cancel(&ACME, &a.id, now).await.unwrap(),
        Transition::InFlight
    ));
    assert!(matches!(
        store
            .reschedule(&ACME, &b.id, now + hours(1), now)
            .await
            .unwrap(),
        Transition::InFlight
    ));
    // A token that is not the lease's changes nothing either.
    assert!(matches!(
        store
            .cancel_held(&ACME, &a.id, now, Some(Uuid::new_v4()))
            .await
            .unwrap(),
        Transition::InFlight
    ));
    // Another account, even with the lease: not found.
    assert!(matches!(
        store
            .cancel_held(&GLOBEX, &a.id, now, Some(token))
            .await
            .unwrap(),
        Transition::NotFound
    ));

    // The holder of the lease wins.
    let cancelled = done(
        store
            .cancel_held(&ACME, &a.id, now, Some(token))
            .await
            .unwrap(),
    );
    assert_eq!(cancelled.state, State::Cancelled);
    let moved = done(
        store
            .reschedule_held(&ACME, &b.id, now + hours(1), now, Some(token))
            .await
            .unwrap(),
    );
    assert_eq!(moved.state, State::Scheduled);
    assert_eq!(moved.delivery_time, now + hours(1));

    // The one left is given back as due as it was.
    assert_eq!(store.release(&[(c.id, token)]).await.unwrap(), 1);
    assert_eq!(store.next_due().await.unwrap(), Some(now + ms(700)));
    // Rescheduled, the other is free of the lease: due at its new time, for
    // anyone.
    let due = store.claim_due(now + hours(1), 10, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&due), vec![c.id, b.id]);
}

async fn an_ahead_claim_leaves_out_the_accounts_fenced_off_and_no_other(store: Arc<dyn Store>) {
    let ours = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let fenced = schedule(&*store, &ours, now + ms(100)).await;
    let free = schedule(&*store, &theirs, now + ms(200)).await;
    let ahead = store
        .claim_ahead(
            now,
            now + secs(1),
            10,
            LEASE,
            &[],
            std::slice::from_ref(&*ACME),
        )
        .await
        .unwrap();
    assert_eq!(claimed_ids(&ahead), vec![free.id]);
    assert_eq!(
        ahead[0].account, *GLOBEX,
        "a claim says whose message it is"
    );
    let later = store
        .claim_ahead(now, now + secs(1), 10, LEASE, &[], &[])
        .await
        .unwrap();
    assert_eq!(
        claimed_ids(&later),
        vec![fenced.id],
        "taken once the fence is down"
    );
    assert_eq!(later[0].account, *ACME);
}
