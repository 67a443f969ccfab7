//! Cancel and reschedule (`ActionStore`): which states they apply to, and
//! how a live lease holds them off.

use crate::support::*;

checks!(
    cancelling_a_scheduled_message_makes_it_cancelled_and_unclaimable,
    cancelling_a_dead_letter_makes_it_cancelled,
    cancel_and_reschedule_of_a_delivered_message_answer_wrong_state,
    cancel_and_reschedule_of_a_cancelled_message_answer_wrong_state,
    cancel_and_reschedule_of_an_unknown_or_foreign_message_answer_not_found,
    cancel_and_reschedule_answer_in_flight_while_a_lease_holds_and_succeed_after_it_expired,
    rescheduling_resets_the_ladder_and_sets_delivery_and_next_attempt_times,
    rescheduling_a_dead_letter_makes_it_scheduled_again,
);

async fn cancelling_a_scheduled_message_makes_it_cancelled_and_unclaimable(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    let at = now + secs(1);
    let cancelled = done(store.cancel(&ACME, &m.id, at).await.unwrap());
    assert_eq!(cancelled.id, m.id);
    assert_eq!(cancelled.state, State::Cancelled);
    assert_eq!(cancelled.cancelled_at, Some(at));
    assert_eq!(cancelled.next_attempt_at, None);
    assert_eq!(cancelled.updated_at, at);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Cancelled);
    assert_eq!(read.cancelled_at, Some(at));
    assert_eq!(read.next_attempt_at, None);
    assert_eq!(read.delivery_time, m.delivery_time);
    assert!(store
        .claim_due(now + hours(2), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);
}

async fn cancelling_a_dead_letter_makes_it_cancelled(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &m, now).await;
    let cancelled = done(store.cancel(&ACME, &m.id, now + secs(1)).await.unwrap());
    assert_eq!(cancelled.state, State::Cancelled);
    assert_eq!(cancelled.cancelled_at, Some(now + secs(1)));
    assert_eq!(get(&*store, &m).await.state, State::Cancelled);
    assert_eq!(
        attempts_of(&*store, &m).await.len(),
        1,
        "its attempts are kept"
    );
}

async fn cancel_and_reschedule_of_a_delivered_message_answer_wrong_state(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &m, now).await;
    assert!(matches!(
        store.cancel(&ACME, &m.id, now + secs(1)).await.unwrap(),
        Transition::WrongState(State::Delivered)
    ));
    assert!(matches!(
        store
            .reschedule(&ACME, &m.id, now + hours(1), now + secs(1))
            .await
            .unwrap(),
        Transition::WrongState(State::Delivered)
    ));
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Delivered);
    assert_eq!(read.cancelled_at, None);
    assert_eq!(read.next_attempt_at, None);
    assert_eq!(read.delivery_time, m.delivery_time);
    assert!(store
        .claim_due(now + hours(2), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
}

async fn cancel_and_reschedule_of_a_cancelled_message_answer_wrong_state(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    done(store.cancel(&ACME, &m.id, now).await.unwrap());
    assert!(matches!(
        store.cancel(&ACME, &m.id, now + secs(1)).await.unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    assert!(matches!(
        store
            .reschedule(&ACME, &m.id, now + hours(2), now + secs(1))
            .await
            .unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Cancelled);
    assert_eq!(
        read.cancelled_at,
        Some(now),
        "the first cancel's time stays"
    );
    assert!(store
        .claim_due(now + hours(3), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
}

async fn cancel_and_reschedule_of_an_unknown_or_foreign_message_answer_not_found(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    store.ensure_account(&GLOBEX).await.unwrap();
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    let unknown = MessageId::at(now);
    for (account, id) in [(&*ACME, unknown), (&*GLOBEX, m.id)] {
        assert!(
            matches!(
                store.cancel(account, &id, now).await.unwrap(),
                Transition::NotFound
            ),
            "cancel {account} {id}"
        );
        assert!(
            matches!(
                store
                    .reschedule(account, &id, now + hours(2), now)
                    .await
                    .unwrap(),
                Transition::NotFound
            ),
            "reschedule {account} {id}"
        );
    }
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.next_attempt_at, Some(now + hours(1)));
}

async fn cancel_and_reschedule_answer_in_flight_while_a_lease_holds_and_succeed_after_it_expired(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    assert!(matches!(
        store.cancel(&ACME, &m.id, now + secs(1)).await.unwrap(),
        Transition::InFlight
    ));
    assert!(matches!(
        store
            .reschedule(&ACME, &m.id, now + hours(1), now + secs(1))
            .await
            .unwrap(),
        Transition::InFlight
    ));
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.cancelled_at, None);
    assert_eq!(read.delivery_time, m.delivery_time);

    // The attempt finishes within its lease: it is recorded.
    let result = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::RetryableFailure], now + secs(2)),
        Next::Retry(now + secs(3)),
    );
    assert_eq!(store.record(&[result], now + secs(2)).await.unwrap(), 1);
    // No lease now: cancel applies.
    let cancelled = done(store.cancel(&ACME, &m.id, now + secs(2)).await.unwrap());
    assert_eq!(cancelled.state, State::Cancelled);

    // A claim whose lease expired without a record: both apply again.
    let m2 = schedule(&*store, &t, now - secs(1)).await;
    let c2 = claim_only(&*store, &m2, now + secs(3), LEASE).await;
    let after = now + secs(3) + secs(31);
    let moved = done(
        store
            .reschedule(&ACME, &m2.id, now + hours(1), after)
            .await
            .unwrap(),
    );
    assert_eq!(moved.state, State::Scheduled);
    assert_eq!(moved.next_attempt_at, Some(now + hours(1)));
    let late = recorded(
        &c2,
        attempts_after(&c2, &[AttemptOutcome::Success], after),
        Next::Delivered,
    );
    assert_eq!(
        store.record(&[late], after).await.unwrap(),
        0,
        "the expired claim's result is stale"
    );
    let cancelled = done(store.cancel(&ACME, &m2.id, after + secs(1)).await.unwrap());
    assert_eq!(cancelled.state, State::Cancelled);
}

async fn rescheduling_resets_the_ladder_and_sets_delivery_and_next_attempt_times(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let first_retry = now + secs(60);
    attempt_and_record(
        &*store,
        &m,
        now,
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
        ],
        Next::Retry(first_retry),
    )
    .await;
    let c = attempt_and_record(
        &*store,
        &m,
        first_retry + ms(1),
        &[AttemptOutcome::RetryableFailure],
        Next::Retry(first_retry + secs(60)),
    )
    .await;
    assert_eq!(c.ladder_attempts, 2);

    let new_time = now + hours(1);
    let at = first_retry + secs(1);
    let moved = done(store.reschedule(&ACME, &m.id, new_time, at).await.unwrap());
    assert_eq!(moved.state, State::Scheduled);
    assert_eq!(
        moved.delivery_time, new_time,
        "the requested time is the new delivery time"
    );
    assert_eq!(moved.next_attempt_at, Some(new_time));
    assert_eq!(moved.updated_at, at);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.delivery_time, new_time);
    assert_eq!(read.next_attempt_at, Some(new_time));
    assert_eq!(
        read.attempt_count, 3,
        "attempts made before the reschedule still count"
    );
    assert_eq!(store.next_due().await.unwrap(), Some(new_time));
    assert!(store
        .claim_due(first_retry + secs(60), 10, LEASE)
        .await
        .unwrap()
        .is_empty());

    let c = claim_only(&*store, &m, new_time + ms(1), LEASE).await;
    assert_eq!(c.ladder_attempts, 0, "the ladder starts over");
    assert_eq!(c.attempt_count, 3, "attempt numbers continue");
    assert_eq!(c.delivery_time, new_time);

    // A reschedule into the past makes it due at once.
    let r = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::RetryableFailure], new_time),
        Next::Retry(new_time + secs(60)),
    );
    assert_eq!(store.record(&[r], new_time).await.unwrap(), 1);
    done(
        store
            .reschedule(&ACME, &m.id, now - hours(1), new_time + secs(1))
            .await
            .unwrap(),
    );
    let c = claim_only(&*store, &m, new_time + secs(1), LEASE).await;
    assert_eq!(c.ladder_attempts, 0);
    assert_eq!(c.attempt_count, 4);
    assert_eq!(c.delivery_time, now - hours(1));
}

async fn rescheduling_a_dead_letter_makes_it_scheduled_again(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &m, now).await;
    let new_time = now + secs(10);
    let moved = done(
        store
            .reschedule(&ACME, &m.id, new_time, now + secs(1))
            .await
            .unwrap(),
    );
    assert_eq!(moved.state, State::Scheduled);
    assert_eq!(moved.dead_lettered_at, None);
    assert_eq!(moved.next_attempt_at, Some(new_time));
    assert_eq!(moved.delivery_time, new_time);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.dead_lettered_at, None);
    assert_eq!(read.next_attempt_at, Some(new_time));
    assert_eq!(store.next_due().await.unwrap(), Some(new_time));

    let c = claim_only(&*store, &m, new_time + ms(1), LEASE).await;
    assert_eq!(c.ladder_attempts, 0);
    assert_eq!(c.attempt_count, 1);
    let r = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::Success], new_time + secs(1)),
        Next::Delivered,
    );
    assert_eq!(store.record(&[r], new_time + secs(1)).await.unwrap(), 1);
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Delivered);
    assert_eq!(read.attempt_count, 2);
    let attempts = attempts_of(&*store, &m).await;
    assert_eq!(attempt_numbers(&attempts), vec![1, 2]);
    assert_eq!(attempts[0].outcome, AttemptOutcome::NonRetryableFailure);
    assert_eq!(attempts[1].outcome, AttemptOutcome::Success);
}
