//! Redrive (`ActionStore::bulk_batch` with `BulkAction::Redrive`): which
//! dead letters move, and how.

use crate::support::*;

checks!(
    redrive_moves_the_accounts_dead_letters_to_scheduled_with_a_fresh_ladder,
    redrive_moves_only_the_dead_letters_that_match_the_target_ids_and_delivery_range,
    redriven_dead_letters_of_a_disabled_target_are_held_until_it_is_enabled,
);

async fn dead_letter_ids(store: &dyn Store, account: &AccountId) -> HashSet<MessageId> {
    let dead = filter(None, Some(State::DeadLetter), None, None);
    set(message_ids(
        &store
            .list_messages(account, &dead, None, 1000)
            .await
            .unwrap(),
    ))
}

/// `m` was redriven by a call at `now` to deliver at `at`.
async fn assert_redriven(store: &dyn Store, m: &Message, at: DateTime<Utc>, now: DateTime<Utc>) {
    let read = get(store, m).await;
    assert_eq!(read.state, State::Scheduled, "{} is Scheduled", m.id);
    assert_eq!(read.delivery_time, at, "{}: the new delivery time", m.id);
    assert_eq!(read.next_attempt_at, Some(at), "{}: next attempt", m.id);
    assert_eq!(read.dead_lettered_at, None, "{}: dead_lettered_at", m.id);
    assert_eq!(read.updated_at, now, "{}: updated_at", m.id);
    let events = events_of(store, m).await;
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::DeadLettered, EventKind::Rescheduled],
        "{}: its dead-lettering stays in its history, the redrive after it",
        m.id
    );
    assert_eq!(
        events[1],
        event(now, EventKind::Rescheduled, State::DeadLetter, Some(at)),
        "{}: the redrive is in its history",
        m.id
    );
}

async fn redrive_moves_the_accounts_dead_letters_to_scheduled_with_a_fresh_ladder(
    store: Arc<dyn Store>,
) {
    let t1 = add_target(&*store, &ACME).await;
    let t2 = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    // A dead letter after three attempts on the ladder…
    let dead1 = schedule(&*store, &t1, now - hours(3)).await;
    attempt_and_record(
        &*store,
        &dead1,
        now - hours(3) + secs(1),
        &[AttemptOutcome::RetryableFailure],
        Next::Retry(now - hours(2)),
    )
    .await;
    let c = attempt_and_record(
        &*store,
        &dead1,
        now - hours(2) + secs(1),
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::NonRetryableFailure,
        ],
        Next::DeadLetter,
    )
    .await;
    assert_eq!(c.ladder_attempts, 1, "the ladder had moved on");
    // …and one after one.
    let dead2 = schedule(&*store, &t2, now - hours(2)).await;
    dead_letter(&*store, &dead2, now - minutes(90)).await;
    let delivered = schedule(&*store, &t1, now - hours(1)).await;
    deliver(&*store, &delivered, now - minutes(50)).await;
    let cancelled = schedule(&*store, &t1, now + hours(1)).await;
    done(
        store
            .cancel(&ACME, &cancelled.id, now - minutes(40))
            .await
            .unwrap(),
    );
    let their_dead = schedule(&*store, &theirs, now - hours(1)).await;
    dead_letter(&*store, &their_dead, now - minutes(30)).await;
    let scheduled = schedule(&*store, &t2, now + hours(2)).await;

    let at = now + minutes(10);
    let redriven_at = now + secs(1);
    let moved = redrive_all(
        &*store,
        &ACME,
        &MessageFilter::default(),
        None,
        at,
        redriven_at,
    )
    .await
    .unwrap();
    assert_eq!(moved, 2, "the account's two dead letters");
    assert_redriven(&*store, &dead1, at, redriven_at).await;
    assert_redriven(&*store, &dead2, at, redriven_at).await;

    // Nothing else moved.
    assert_eq!(get(&*store, &delivered).await.state, State::Delivered);
    assert_eq!(get(&*store, &cancelled).await.state, State::Cancelled);
    let read = get(&*store, &scheduled).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.delivery_time, now + hours(2));
    assert_eq!(read.updated_at, scheduled.updated_at);
    let read = get(&*store, &their_dead).await;
    assert_eq!(
        read.state,
        State::DeadLetter,
        "another account's dead letter"
    );
    assert!(read.dead_lettered_at.is_some());
    for m in [&delivered, &scheduled, &their_dead] {
        assert!(
            events_of(&*store, m)
                .await
                .iter()
                .all(|e| e.kind != EventKind::Rescheduled),
            "{}: no redrive event",
            m.id
        );
    }
    assert_eq!(
        events_of(&*store, &cancelled).await.len(),
        1,
        "only the cancel"
    );

    // Claimable at `at`, not before; the ladder starts over and the attempt
    // numbers go on.
    assert_eq!(store.next_due().await.unwrap(), Some(at));
    assert!(store
        .claim_due(at - ms(1), 100, LEASE)
        .await
        .unwrap()
        .is_empty());
    let claimed = store.claim_due(at, 100, LEASE).await.unwrap();
    assert_eq!(set(claimed_ids(&claimed)), set([dead1.id, dead2.id]));
    for c in &claimed {
        assert_eq!(c.ladder_attempts, 0, "{}: a fresh ladder", c.id);
        assert_eq!(c.delivery_time, at);
        let expected_attempts = if c.id == dead1.id { 3 } else { 1 };
        assert_eq!(c.attempt_count, expected_attempts, "{}", c.id);
    }

    // Nothing of the account is dead any more.
    assert_eq!(
        redrive_all(
            &*store,
            &ACME,
            &MessageFilter::default(),
            None,
            at,
            now + secs(2)
        )
        .await
        .unwrap(),
        0
    );
    // The other account redrives its own.
    assert_eq!(
        redrive_all(
            &*store,
            &GLOBEX,
            &MessageFilter::default(),
            None,
            at,
            now + secs(3)
        )
        .await
        .unwrap(),
        1
    );
    assert_redriven(&*store, &their_dead, at, now + secs(3)).await;
}

async fn redrive_moves_only_the_dead_letters_that_match_the_target_ids_and_delivery_range(
    store: Arc<dyn Store>,
) {
    let t1 = add_target(&*store, &ACME).await;
    let t2 = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let base = time::now();
    // Dead letters, each dead-lettered while it is the only one due.
    let mut n = 0;
    let mut dead = |target: Target, delivery: DateTime<Utc>| {
        n += 1;
        let store = store.clone();
        async move {
            let m = schedule(&*store, &target, delivery).await;
            dead_letter(&*store, &m, base + secs(n)).await;
            m
        }
    };
    let x1 = dead(t1.clone(), base - hours(3)).await;
    let x2 = dead(t1.clone(), base - hours(2)).await;
    let x3 = dead(t2.clone(), base - hours(2)).await;
    let x4 = dead(t2.clone(), base - hours(1)).await;
    let x5 = dead(t1.clone(), base - hours(1)).await;
    let their_dead = dead(theirs.clone(), base - hours(2)).await;
    let delivered = schedule(&*store, &t2, base - hours(2)).await;
    deliver(&*store, &delivered, base + secs(10)).await;
    // Scheduled and due within every range below.
    let pending = schedule(&*store, &t2, base - minutes(90)).await;
    let all = set([x1.id, x2.id, x3.id, x4.id, x5.id]);
    assert_eq!(dead_letter_ids(&*store, &ACME).await, all);

    let mut left = all.clone();
    let mut step = 0;
    let mut redrive = |f: MessageFilter, ids: Option<Vec<MessageId>>, expected: Vec<&Message>| {
        step += 1;
        let store = store.clone();
        let at = base + hours(1) + minutes(step);
        let now = base + minutes(step);
        for m in &expected {
            left.remove(&m.id);
        }
        let left = left.clone();
        let expected: Vec<Message> = expected.into_iter().cloned().collect();
        async move {
            let moved = redrive_all(&*store, &ACME, &f, ids.as_deref(), at, now)
                .await
                .unwrap();
            assert_eq!(
                moved,
                expected.len() as u64,
                "step {step}: {f:?} among {ids:?}"
            );
            for m in &expected {
                assert_redriven(&*store, m, at, now).await;
            }
            assert_eq!(
                dead_letter_ids(&*store, &ACME).await,
                left,
                "step {step}: the dead letters left"
            );
        }
    };

    // By target and delivery range [base-2h, base-1h): x3 (x2 is t1's; x4 is at the range's end).
    redrive(
        filter(
            Some(&t2),
            None,
            Some(base - hours(2)),
            Some(base - hours(1)),
        ),
        None,
        vec![&x3],
    )
    .await;
    // By ids: only the account's dead letters among them.
    redrive(
        MessageFilter::default(),
        Some(vec![
            x4.id,
            their_dead.id,
            delivered.id,
            pending.id,
            x3.id,
            MessageId::at(time::now()),
        ]),
        vec![&x4],
    )
    .await;
    // Ids and a target: both must match.
    redrive(
        filter(Some(&t2), None, None, None),
        Some(vec![x1.id, x5.id]),
        vec![],
    )
    .await;
    // No ids at all is nothing, not everything.
    redrive(MessageFilter::default(), Some(vec![]), vec![]).await;
    // Up to base-2h, exclusive: x1 (x2 is at base-2h).
    redrive(
        filter(None, None, None, Some(base - hours(2))),
        None,
        vec![&x1],
    )
    .await;
    // From base-1h, inclusive: x5.
    redrive(
        filter(None, None, Some(base - hours(1)), None),
        None,
        vec![&x5],
    )
    .await;
    // Everything else.
    redrive(MessageFilter::default(), None, vec![&x2]).await;

    // x3 and x4 were moved once only (after they were dead-lettered).
    assert_eq!(events_of(&*store, &x3).await.len(), 2);
    assert_eq!(events_of(&*store, &x4).await.len(), 2);
    assert_eq!(
        get(&*store, &x3).await.delivery_time,
        base + hours(1) + minutes(1)
    );
    // What is not a dead letter of the account is untouched.
    assert_eq!(get(&*store, &their_dead).await.state, State::DeadLetter);
    assert_eq!(
        events_of(&*store, &their_dead)
            .await
            .iter()
            .map(|e| e.kind)
            .collect::<Vec<_>>(),
        [EventKind::DeadLettered],
        "dead-lettered, never redriven"
    );
    assert_eq!(get(&*store, &delivered).await.state, State::Delivered);
    let read = get(&*store, &pending).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.delivery_time, base - minutes(90));
    assert!(events_of(&*store, &pending).await.is_empty());
}

async fn redriven_dead_letters_of_a_disabled_target_are_held_until_it_is_enabled(
    store: Arc<dyn Store>,
) {
    let on = add_target(&*store, &ACME).await;
    let off = add_target(&*store, &ACME).await;
    let now = time::now();
    let a = schedule(&*store, &on, now - minutes(2)).await;
    dead_letter(&*store, &a, now - minutes(1)).await;
    let b = schedule(&*store, &off, now - minutes(2)).await;
    dead_letter(&*store, &b, now - secs(50)).await;
    store
        .set_target_enabled(&ACME, &off.id, false, now - secs(10))
        .await
        .unwrap()
        .unwrap();

    let at = now + secs(10);
    let moved = redrive_all(&*store, &ACME, &MessageFilter::default(), None, at, now)
        .await
        .unwrap();
    assert_eq!(moved, 2);
    assert_redriven(&*store, &a, at, now).await;
    assert_redriven(&*store, &b, at, now).await;

    let claimed = store.claim_due(at + hours(1), 100, LEASE).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![a.id],
        "the disabled target's message is held"
    );
    store
        .set_target_enabled(&ACME, &off.id, true, now + secs(20))
        .await
        .unwrap()
        .unwrap();
    let claimed = store.claim_due(at + hours(1), 100, LEASE).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![b.id],
        "released once the target is enabled"
    );
    assert_eq!(claimed[0].ladder_attempts, 0);
}
