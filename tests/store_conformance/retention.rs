//! Retention (`DeliveryStore::purge_expired`): what expires and what is
//! kept, in batches.

use crate::support::*;

checks!(
    purging_deletes_expired_finished_messages_with_their_attempts_and_keeps_the_rest,
    purging_deletes_old_failed_attempts_but_keeps_their_message_and_successes,
    purging_deletes_idempotency_keys_older_than_the_cutoff,
    purging_honours_the_batch_size_and_repeated_calls_delete_everything_expired,
);

async fn purging_deletes_expired_finished_messages_with_their_attempts_and_keeps_the_rest(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    // Each finished message is driven to its state while it is the only one due.
    let at = |ago: TimeDelta| now - ago;
    let old_delivered = schedule_at(&*store, &t, at(days(3)), at(days(3))).await;
    attempt_and_record(
        &*store,
        &old_delivered,
        at(days(2)),
        &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
        Next::Delivered,
    )
    .await;
    let new_delivered = schedule_at(&*store, &t, at(hours(2)), at(hours(2))).await;
    deliver(&*store, &new_delivered, at(hours(1))).await;
    let old_cancelled = schedule_at(&*store, &t, now + hours(1), at(days(3))).await;
    done(
        store
            .cancel(&ACME, &old_cancelled.id, at(days(2)))
            .await
            .unwrap(),
    );
    let new_cancelled = schedule_at(&*store, &t, now + hours(1), at(hours(3))).await;
    done(
        store
            .cancel(&ACME, &new_cancelled.id, at(hours(1)))
            .await
            .unwrap(),
    );
    let old_dead = schedule_at(&*store, &t, at(days(10)), at(days(10))).await;
    dead_letter(&*store, &old_dead, at(days(8))).await;
    // Dead for two days: past the delivered cutoff, not the dead-letter one.
    let new_dead = schedule_at(&*store, &t, at(days(3)), at(days(3))).await;
    dead_letter(&*store, &new_dead, at(days(2))).await;
    // Scheduled long ago and never attempted: Scheduled messages never expire.
    let old_scheduled = schedule_at(&*store, &t, at(days(30)), at(days(30))).await;

    let cutoffs = Cutoffs {
        delivered_before: at(hours(24)),
        cancelled_before: at(hours(24)),
        dead_letters_before: at(days(7)),
        failed_attempts_before: at(days(7)),
        idempotency_before: at(hours(24)),
    };
    let purged = store.purge_expired(&cutoffs, 100).await.unwrap();
    assert_eq!(purged.messages, 3, "{purged:?}");
    assert_eq!(purged.idempotency_keys, 0);

    for gone in [&old_delivered, &old_cancelled, &old_dead] {
        assert!(
            store.get_message(&ACME, &gone.id).await.unwrap().is_none(),
            "{} is purged",
            gone.id
        );
        assert!(store
            .list_attempts(&ACME, &gone.id, None, 10)
            .await
            .unwrap()
            .is_none());
    }
    assert_eq!(get(&*store, &new_delivered).await.state, State::Delivered);
    assert_eq!(attempts_of(&*store, &new_delivered).await.len(), 1);
    assert_eq!(get(&*store, &new_cancelled).await.state, State::Cancelled);
    assert_eq!(get(&*store, &new_dead).await.state, State::DeadLetter);
    assert_eq!(attempts_of(&*store, &new_dead).await.len(), 1);
    assert_eq!(get(&*store, &old_scheduled).await.state, State::Scheduled);

    // The purged message's attempts went with it: a message stored again
    // under the same id starts with none.
    let mut reborn = message_value(&t, now + hours(1), now);
    reborn.id = old_delivered.id;
    insert(&*store, &reborn).await;
    assert!(
        attempts_of(&*store, &reborn).await.is_empty(),
        "no attempt rows outlive their message"
    );

    // Nothing more is expired.
    let again = store.purge_expired(&cutoffs, 100).await.unwrap();
    assert_eq!(again, Purged::default());
}

async fn purging_deletes_old_failed_attempts_but_keeps_their_message_and_successes(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    // Still Scheduled: two failures nine days ago, one yesterday.
    let retrying = schedule_at(&*store, &t, now - days(10), now - days(10)).await;
    attempt_and_record(
        &*store,
        &retrying,
        now - days(9),
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
        ],
        Next::Retry(now - days(1)),
    )
    .await;
    attempt_and_record(
        &*store,
        &retrying,
        now - days(1) + ms(1),
        &[AttemptOutcome::RetryableFailure],
        Next::Retry(now + hours(1)),
    )
    .await;
    // Delivered nine days ago after a failure, kept by a long delivered retention.
    let delivered = schedule_at(&*store, &t, now - days(10), now - days(10)).await;
    attempt_and_record(
        &*store,
        &delivered,
        now - days(9),
        &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
        Next::Delivered,
    )
    .await;

    let cutoffs = Cutoffs {
        failed_attempts_before: now - days(7),
        ..cutoffs_keeping_everything(now)
    };
    let purged = store.purge_expired(&cutoffs, 100).await.unwrap();
    assert_eq!(
        purged,
        Purged {
            messages: 0,
            attempts: 3,
            idempotency_keys: 0,
            events: 0
        }
    );

    let read = get(&*store, &retrying).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.attempt_count, 3, "the count is not the rows kept");
    assert_eq!(read.next_attempt_at, Some(now + hours(1)));
    assert_eq!(
        attempt_numbers(&attempts_of(&*store, &retrying).await),
        vec![3]
    );

    let read = get(&*store, &delivered).await;
    assert_eq!(read.state, State::Delivered);
    let kept = attempts_of(&*store, &delivered).await;
    assert_eq!(
        attempt_numbers(&kept),
        vec![2],
        "a success is not a failed attempt"
    );
    assert_eq!(kept[0].outcome, AttemptOutcome::Success);

    // The next attempt of the retrying message is numbered on.
    let c = claim_only(&*store, &retrying, now + hours(1) + ms(1), LEASE).await;
    assert_eq!(c.attempt_count, 3);
}

async fn purging_deletes_idempotency_keys_older_than_the_cutoff(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let old = message_value(&t, now + hours(1), now - days(2));
    created(
        store
            .insert_message(&old, Some(&idem("old-key", b"a", DAY, json!({"n": 1}))))
            .await
            .unwrap(),
    );
    let recent = message_value(&t, now + hours(1), now - hours(1));
    created(
        store
            .insert_message(&recent, Some(&idem("new-key", b"a", DAY, json!({"n": 2}))))
            .await
            .unwrap(),
    );

    let cutoffs = Cutoffs {
        idempotency_before: now - hours(24),
        ..cutoffs_keeping_everything(now)
    };
    let purged = store.purge_expired(&cutoffs, 100).await.unwrap();
    assert_eq!(
        purged,
        Purged {
            messages: 0,
            attempts: 0,
            idempotency_keys: 1,
            events: 0
        }
    );
    // Both messages stay; only the key is forgotten.
    assert!(store.get_message(&ACME, &old.id).await.unwrap().is_some());

    // Even with a year-long ttl, the purged key is unknown now…
    let year = Duration::from_secs(365 * 24 * 3600);
    let m = message_value(&t, now + hours(1), now);
    created(
        store
            .insert_message(&m, Some(&idem("old-key", b"b", year, json!({}))))
            .await
            .unwrap(),
    );
    // …while the recent one is still remembered.
    let m = message_value(&t, now + hours(1), now);
    assert!(matches!(
        store
            .insert_message(&m, Some(&idem("new-key", b"b", year, json!({}))))
            .await
            .unwrap(),
        InsertOutcome::KeyConflict
    ));
}

async fn purging_honours_the_batch_size_and_repeated_calls_delete_everything_expired(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    // Five delivered two days ago, each sent with an idempotency key three days ago.
    let mut expired = Vec::new();
    for i in 0..5 {
        let m = message_value(&t, now - days(3), now - days(3));
        let key = idem(&format!("key-{i}"), b"h", DAY, json!({"i": i}));
        created(store.insert_message(&m, Some(&key)).await.unwrap());
        deliver(&*store, &m, now - days(2)).await;
        expired.push(m);
    }
    // And one Scheduled message with five failed attempts eight days ago.
    let retrying = schedule_at(&*store, &t, now - days(9), now - days(9)).await;
    attempt_and_record(
        &*store,
        &retrying,
        now - days(8),
        &[AttemptOutcome::RetryableFailure; 5],
        Next::Retry(now + hours(1)),
    )
    .await;

    let cutoffs = Cutoffs {
        delivered_before: now - hours(24),
        cancelled_before: now - hours(24),
        dead_letters_before: now - days(7),
        failed_attempts_before: now - days(7),
        idempotency_before: now - hours(24),
    };
    let mut total = Purged::default();
    let mut calls = 0;
    loop {
        let p = store.purge_expired(&cutoffs, 2).await.unwrap();
        if p == Purged::default() {
            break;
        }
        calls += 1;
        assert!(
            p.messages <= 2 && p.attempts <= 2 && p.idempotency_keys <= 2,
            "one call deletes at most a batch of each: {p:?}"
        );
        total.messages += p.messages;
        total.attempts += p.attempts;
        total.idempotency_keys += p.idempotency_keys;
        assert!(calls <= 20, "purging terminates");
    }
    assert!(
        calls >= 3,
        "five rows in batches of two take three calls, took {calls}"
    );
    assert_eq!(
        total,
        Purged {
            messages: 5,
            attempts: 5,
            idempotency_keys: 5,
            events: 0
        }
    );
    for m in &expired {
        assert!(store.get_message(&ACME, &m.id).await.unwrap().is_none());
    }
    assert!(attempts_of(&*store, &retrying).await.is_empty());
    assert_eq!(get(&*store, &retrying).await.attempt_count, 5);
}
