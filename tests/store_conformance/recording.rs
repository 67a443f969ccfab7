//! Recording attempts (`DeliveryStore::record`): what each outcome does to
//! its message, and how stale results are dropped.

use crate::support::*;

checks!(
    recording_a_success_marks_the_message_delivered,
    recording_a_retry_schedules_the_next_attempt_at_the_given_time,
    recording_a_dead_letter_sets_dead_lettered_at_and_stops_claims,
    several_attempts_in_one_record_are_all_stored_in_order,
    attempt_texts_with_a_nul_character_are_stored_with_it_replaced,
    a_record_with_a_stale_lease_token_is_dropped_whole,
    a_record_batch_applies_each_result_under_its_own_lease,
    a_record_after_a_cancel_or_reschedule_is_dropped,
    a_batch_of_told_and_other_results_records_each_and_counts_all,
);

async fn recording_a_success_marks_the_message_delivered(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let finished = now + ms(250);
    let recorded_at = now + ms(300);
    let a = attempt(1, AttemptOutcome::Success, finished);
    let written = store
        .record(
            &[recorded(&c, vec![a.clone()], Next::Delivered)],
            recorded_at,
        )
        .await
        .unwrap();
    assert_eq!(written, 1);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Delivered);
    assert_eq!(read.attempt_count, 1);
    assert_eq!(
        read.next_attempt_at, None,
        "only a Scheduled message has one"
    );
    let delivered_at = read.delivered_at.expect("delivered_at is set");
    assert!(
        finished <= delivered_at && delivered_at <= recorded_at,
        "delivered_at {delivered_at} is when the attempt finished or was recorded"
    );
    assert_eq!(read.last_error, None);
    assert_eq!(read.cancelled_at, None);
    assert_eq!(read.dead_lettered_at, None);
    assert_eq!(read.delivery_time, m.delivery_time);
    assert!(read.updated_at > m.updated_at, "updated_at moves");

    let attempts = attempts_of(&*store, &m).await;
    assert_eq!(attempts.len(), 1);
    assert_attempt_eq(&attempts[0], &a);

    assert!(store
        .claim_due(now + days(30), 100, LEASE)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);
}

async fn recording_a_retry_schedules_the_next_attempt_at_the_given_time(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let mut second = attempt(2, AttemptOutcome::RetryableFailure, now + ms(40));
    second.error = Some("timed out after 10s".into());
    second.status_code = None;
    second.response_body = None;
    // The receiver asked for a minute (Retry-After): the record keeps it.
    second.retry_after_ms = Some(60_000);
    let attempts = vec![
        attempt(1, AttemptOutcome::RetryableFailure, now + ms(20)),
        second,
    ];
    let retry_at = now + secs(60);
    let written = store
        .record(
            &[recorded(&c, attempts, Next::Retry(retry_at))],
            now + ms(50),
        )
        .await
        .unwrap();
    assert_eq!(written, 2);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.next_attempt_at, Some(retry_at));
    assert_eq!(read.attempt_count, 2);
    assert_eq!(
        read.last_error.as_deref(),
        Some("timed out after 10s"),
        "the last attempt's error"
    );
    assert_eq!(read.delivered_at, None);
    assert_eq!(read.dead_lettered_at, None);
    assert_eq!(
        read.delivery_time, m.delivery_time,
        "a retry keeps the requested delivery time"
    );

    let waits: Vec<Option<u64>> = attempts_of(&*store, &m)
        .await
        .iter()
        .map(|a| a.retry_after_ms)
        .collect();
    assert_eq!(waits, [None, Some(60_000)]);

    assert_eq!(store.next_due().await.unwrap(), Some(retry_at));
    assert!(store
        .claim_due(retry_at - ms(1), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
    let again = claim_only(&*store, &m, retry_at + ms(1), LEASE).await;
    assert_eq!(again.attempt_count, 2, "attempts so far");
    assert_eq!(again.ladder_attempts, 2, "the ladder position recorded");
    assert_eq!(again.delivery_time, m.delivery_time);
    assert_ne!(again.lease_token, c.lease_token);
}

async fn recording_a_dead_letter_sets_dead_lettered_at_and_stops_claims(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let finished = now + secs(1);
    let a = attempt(1, AttemptOutcome::NonRetryableFailure, finished);
    let written = store
        .record(&[recorded(&c, vec![a], Next::DeadLetter)], now + secs(2))
        .await
        .unwrap();
    assert_eq!(written, 1);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::DeadLetter);
    let at = read.dead_lettered_at.expect("dead_lettered_at is set");
    assert!(
        finished <= at && at <= now + secs(2),
        "dead_lettered_at {at}"
    );
    assert_eq!(read.next_attempt_at, None);
    assert_eq!(read.attempt_count, 1);
    assert_eq!(read.last_error.as_deref(), Some("HTTP 404 on attempt 1"));
    assert_eq!(read.delivered_at, None);
    assert!(store
        .claim_due(now + days(30), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);
}

async fn several_attempts_in_one_record_are_all_stored_in_order(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let attempts = vec![
        attempt(1, AttemptOutcome::RetryableFailure, now + ms(10)),
        attempt(2, AttemptOutcome::RetryableFailure, now + ms(20)),
        attempt(3, AttemptOutcome::Success, now + ms(30)),
    ];
    let written = store
        .record(
            &[recorded(&c, attempts.clone(), Next::Delivered)],
            now + ms(40),
        )
        .await
        .unwrap();
    assert_eq!(written, 3);
    let stored = attempts_of(&*store, &m).await;
    assert_eq!(attempt_numbers(&stored), vec![1, 2, 3]);
    for (s, a) in stored.iter().zip(&attempts) {
        assert_attempt_eq(s, a);
    }
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Delivered);
    assert_eq!(read.attempt_count, 3);
}

async fn attempt_texts_with_a_nul_character_are_stored_with_it_replaced(store: Arc<dyn Store>) {
    // A receiver's body is decoded lossily as UTF-8 (docs/api.md#attempt-records), and U+0000
    // is valid UTF-8: a body with a NUL byte must not make the record fail.
    // Every store keeps attempt texts with U+0000 replaced by U+FFFD (text
    // columns of PostgreSQL cannot hold it), the same on every backend.
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let mut a = attempt(1, AttemptOutcome::RetryableFailure, now + ms(10));
    a.response_body = Some("bad\u{0}gateway".into());
    a.error = Some("HTTP 502: bad\u{0}gateway".into());
    let written = store
        .record(
            &[recorded(&c, vec![a.clone()], Next::Retry(now + secs(60)))],
            now + ms(20),
        )
        .await;
    assert!(
        matches!(written, Ok(1)),
        "the attempt is recorded, got {written:?}"
    );
    let stored = attempts_of(&*store, &m).await;
    assert_eq!(stored.len(), 1);
    let mut expected = a.clone();
    expected.response_body = Some("bad\u{FFFD}gateway".into());
    expected.error = Some("HTTP 502: bad\u{FFFD}gateway".into());
    assert_attempt_eq(&stored[0], &expected);
    assert_eq!(get(&*store, &m).await.last_error, expected.error);
}

async fn a_record_with_a_stale_lease_token_is_dropped_whole(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let stale = claim_only(&*store, &m, now, Duration::from_secs(1)).await;
    // The lease expired and another claim took the message.
    let current = claim_only(&*store, &m, now + secs(2), LEASE).await;
    assert_ne!(stale.lease_token, current.lease_token);

    let late = recorded(
        &stale,
        attempts_after(
            &stale,
            &[
                AttemptOutcome::RetryableFailure,
                AttemptOutcome::RetryableFailure,
            ],
            now + secs(3),
        ),
        Next::Retry(now + secs(60)),
    );
    assert_eq!(store.record(&[late], now + secs(3)).await.unwrap(), 0);
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.attempt_count, 0);
    assert_eq!(read.last_error, None);
    assert_eq!(read.next_attempt_at, m.next_attempt_at);
    assert!(attempts_of(&*store, &m).await.is_empty(), "no attempt rows");
    assert!(
        store
            .claim_due(now + secs(10), 10, LEASE)
            .await
            .unwrap()
            .is_empty(),
        "the stale record did not release the current lease"
    );

    // A token nobody issued is stale too.
    let forged = Recorded {
        lease_token: Uuid::new_v4(),
        ..recorded(
            &current,
            attempts_after(&current, &[AttemptOutcome::Success], now + secs(4)),
            Next::Delivered,
        )
    };
    assert_eq!(store.record(&[forged], now + secs(4)).await.unwrap(), 0);
    assert_eq!(get(&*store, &m).await.state, State::Scheduled);

    // The current claim's result applies.
    let good = recorded(
        &current,
        attempts_after(&current, &[AttemptOutcome::Success], now + secs(5)),
        Next::Delivered,
    );
    assert_eq!(
        store
            .record(std::slice::from_ref(&good), now + secs(5))
            .await
            .unwrap(),
        1
    );
    assert_eq!(get(&*store, &m).await.state, State::Delivered);
    // Recording it again changes nothing: its lease is gone.
    assert_eq!(store.record(&[good], now + secs(6)).await.unwrap(), 0);
    assert_eq!(attempts_of(&*store, &m).await.len(), 1);
}

async fn a_record_batch_applies_each_result_under_its_own_lease(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m1 = schedule(&*store, &t, now - secs(2)).await;
    let m2 = schedule(&*store, &t, now - secs(1)).await;
    let old = store
        .claim_due(now, 10, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(set(claimed_ids(&old)), set([m1.id, m2.id]));
    let new = store.claim_due(now + secs(2), 10, LEASE).await.unwrap();
    assert_eq!(set(claimed_ids(&new)), set([m1.id, m2.id]));
    let pick = |v: &[Claimed], id: MessageId| v.iter().find(|c| c.id == id).unwrap().clone();

    // m1 under its current lease, m2 under its expired one.
    let c1 = pick(&new, m1.id);
    let c2 = pick(&old, m2.id);
    let batch = [
        recorded(
            &c1,
            attempts_after(
                &c1,
                &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
                now + secs(3),
            ),
            Next::Delivered,
        ),
        recorded(
            &c2,
            attempts_after(&c2, &[AttemptOutcome::Success], now + secs(3)),
            Next::Delivered,
        ),
    ];
    assert_eq!(store.record(&batch, now + secs(3)).await.unwrap(), 2);
    assert_eq!(get(&*store, &m1).await.state, State::Delivered);
    assert_eq!(attempts_of(&*store, &m1).await.len(), 2);
    assert_eq!(get(&*store, &m2).await.state, State::Scheduled);
    assert!(attempts_of(&*store, &m2).await.is_empty());
    assert_eq!(store.record(&[], now + secs(4)).await.unwrap(), 0);
}

async fn a_record_after_a_cancel_or_reschedule_is_dropped(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let lease = Duration::from_secs(1);

    let cancelled = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &cancelled, now, lease).await;
    done(
        store
            .cancel(&ACME, &cancelled.id, now + secs(2))
            .await
            .unwrap(),
    );
    let late = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::Success], now + secs(3)),
        Next::Delivered,
    );
    assert_eq!(store.record(&[late], now + secs(3)).await.unwrap(), 0);
    let read = get(&*store, &cancelled).await;
    assert_eq!(
        read.state,
        State::Cancelled,
        "never both cancelled and delivered"
    );
    assert_eq!(read.delivered_at, None);
    assert!(attempts_of(&*store, &cancelled).await.is_empty());

    let moved = schedule(&*store, &t, now + secs(5)).await;
    let c = claim_only(&*store, &moved, now + secs(6), lease).await;
    let new_time = now + hours(1);
    done(
        store
            .reschedule(&ACME, &moved.id, new_time, now + secs(8))
            .await
            .unwrap(),
    );
    let late = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::NonRetryableFailure], now + secs(9)),
        Next::DeadLetter,
    );
    assert_eq!(store.record(&[late], now + secs(9)).await.unwrap(), 0);
    let read = get(&*store, &moved).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.next_attempt_at, Some(new_time));
    assert_eq!(read.attempt_count, 0);
    assert!(attempts_of(&*store, &moved).await.is_empty());
}

/// Results of messages made from Dispatch's own events beside others in one
/// batch (PostgreSQL records the two apart): each is recorded, the count is
/// the batch's, and a stale one among them is still dropped.
async fn a_batch_of_told_and_other_results_records_each_and_counts_all(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let ms_: Vec<_> =
        futures::future::join_all((0..4).map(|i| schedule(&*store, &t, now - secs(4 - i)))).await;
    let claimed = store.claim_due(now, 10, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 4);
    let mut batch: Vec<Recorded> = claimed
        .iter()
        .enumerate()
        .map(|(i, c)| Recorded {
            told: i % 2 == 0,
            ..recorded(
                c,
                attempts_after(c, &[AttemptOutcome::Success], now + secs(1)),
                Next::Delivered,
            )
        })
        .collect();
    // One of the told ones under a lease it does not hold.
    batch[2].lease_token = Uuid::new_v4();
    let stale = batch[2].id;
    assert_eq!(store.record(&batch, now + secs(1)).await.unwrap(), 3);
    for m in &ms_ {
        let read = get(&*store, m).await;
        if m.id == stale {
            assert_eq!(read.state, State::Scheduled);
        } else {
            assert_eq!(read.state, State::Delivered, "{:?}", m.id);
        }
    }
}
