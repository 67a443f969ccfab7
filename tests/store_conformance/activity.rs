//! The overview's charts (`PortalReads::activity`): per hour, the messages
//! delivered (and how late those delivered at their first attempt
//! arrived, from the later of their delivery time and the moment they were
//! scheduled: to the millisecond below a second, then to three significant
//! digits), the attempts that failed and the messages dead-lettered; per
//! target, deliveries and failures. Only the account's, only since the
//! window's start.

use chrono::DurationRound;
use dispatch::store::portal::{Hour, TargetActivity};

use crate::support::*;

checks!(activity_is_counted_per_hour_and_per_target_and_lateness_is_ranked,);

async fn activity_is_counted_per_hour_and_per_target_and_lateness_is_ranked(store: Arc<dyn Store>) {
    let t1 = add_target(&*store, &ACME).await;
    let t2 = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let h0 = now.duration_trunc(hours(1)).unwrap() - hours(2);
    let h1 = h0 + hours(1);

    // Before the window: not counted.
    let old = schedule(&*store, &t1, h0 - minutes(30)).await;
    deliver(&*store, &old, h0 - minutes(20)).await;
    // Hour h0: four first-attempt deliveries, 10, 20, 30 and 1,000 ms late:
    // three scheduled ahead, late from their delivery time...
    for late in [10, 1_000, 20] {
        let due = h0 + minutes(10);
        let m = schedule_at(&*store, &t1, due, due - minutes(5)).await;
        deliver(&*store, &m, due + ms(late)).await;
    }
    // ...and one scheduled for five hours before the moment it was
    // scheduled, delivered 30 ms after it: late from when it was scheduled.
    let scheduled = h0 + minutes(15);
    let backfill = schedule_at(&*store, &t1, h0 - hours(5), scheduled).await;
    deliver(&*store, &backfill, scheduled + ms(30)).await;
    // ...and one delivered at its second attempt, an hour late: counted,
    // its failure too, but not in the lateness of first attempts.
    let retried = schedule(&*store, &t1, h0 - minutes(40)).await;
    attempt_and_record(
        &*store,
        &retried,
        h0 + minutes(20),
        &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
        Next::Delivered,
    )
    .await;
    // Hour h1: a dead letter of t2, redriven since (it still counts).
    let dead = schedule(&*store, &t2, h1).await;
    dead_letter(&*store, &dead, h1 + minutes(5)).await;
    done(
        store
            .reschedule(&ACME, &dead.id, now + hours(5), h1 + minutes(6))
            .await
            .unwrap(),
    );
    // Hour h1: two of t2's first-attempt deliveries, later than a second:
    // their lateness counts to three significant digits.
    for late in [123_456, 12_345] {
        let due = h1 + minutes(7);
        let m = schedule_at(&*store, &t2, due, h1).await;
        deliver(&*store, &m, due + ms(late)).await;
    }
    // Another account's, in the window.
    let their = schedule(&*store, &theirs, h0 + minutes(1)).await;
    dead_letter(&*store, &their, h0 + minutes(2)).await;

    let a = store.activity(&ACME, h0).await.unwrap();
    assert_eq!(
        a.hours,
        vec![
            Hour {
                start: h0,
                delivered: 5,
                failed: 1,
                dead_lettered: 0,
                late_p50_ms: Some(20),
                late_p99_ms: Some(1_000),
            },
            Hour {
                start: h1,
                delivered: 2,
                failed: 1,
                dead_lettered: 1,
                late_p50_ms: Some(12_300),
                late_p99_ms: Some(123_000),
            },
        ],
        "only hours with something in them, oldest first"
    );
    assert_eq!(a.by_target.len(), 2, "{:?}", a.by_target);
    assert_eq!(
        a.by_target[&t1.id],
        TargetActivity {
            delivered: 5,
            failed: 1
        }
    );
    assert_eq!(a.by_target[&t1.id].success_rate(), Some(5.0 / 6.0));
    assert_eq!(
        a.by_target[&t2.id],
        TargetActivity {
            delivered: 2,
            failed: 1
        }
    );
    assert_eq!(a.by_target[&t2.id].success_rate(), Some(2.0 / 3.0));

    // A window from h1 holds h1 only; the other account sees its own.
    let later = store.activity(&ACME, h1).await.unwrap();
    assert_eq!(later.hours.len(), 1);
    assert_eq!(later.hours[0].start, h1);
    let g = store.activity(&GLOBEX, h0).await.unwrap();
    assert_eq!(
        (g.hours.len(), g.hours[0].dead_lettered, g.hours[0].failed),
        (1, 1, 1)
    );
    let none = store.activity(&account_id("initech"), h0).await.unwrap();
    assert!(none.hours.is_empty() && none.by_target.is_empty());
}
