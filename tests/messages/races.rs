//! A cancel or reschedule racing an attempt (docs/api.md#cancelling-and-rescheduling): it answers 409
//! while an attempt holds the message's lease, the attempt then completes;
//! an attempt that has delivered wins over a later cancel; a cancel that
//! comes first wins, and an attempt's late result never undoes it. Each
//! branch is driven to happen, none left to timing: a receiver holds the
//! attempt open until the test lets it go, the sweeper runs by hand, and a
//! stalled instance's claim is made with a clock set back.

use chrono::{TimeDelta, Utc};
use dispatch::{
    domain::{
        message::Attempt,
        retry::{AttemptOutcome, Next},
    },
    store::Recorded,
};

use super::common::receiver::Gate;
use super::*;

const FAR: &str = "2099-01-01T00:00:00Z";

/// Schedules a message due now whose attempt the receiver holds open until
/// `gate` opens; returns its id once the attempt is under way.
async fn attempt_held_open(api: &Api, gate: &Gate) -> (Receiver, String) {
    let rx = Receiver::start().await;
    rx.then([Reply::status(200).held_until(gate)]);
    let target = target_id(api, &rx.url("/hook")).await;
    let m = api.schedule(&target, &in_ms(0), "x").await;
    let id = s(&m["messageId"]).to_string();
    // The request has arrived: the attempt is under way and holds the lease.
    rx.wait_for(1, WAIT).await;
    let under_way = api.message(&id).await;
    assert_eq!(under_way["state"], "Scheduled", "{under_way}");
    assert_eq!(under_way["attemptCount"], 0, "{under_way}");
    (rx, id)
}

#[tokio::test]
async fn a_cancel_while_an_attempt_holds_the_lease_answers_409_and_the_attempt_delivers() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let gate = Gate::new();
    let (rx, id) = attempt_held_open(&api, &gate).await;

    let before = api.message(&id).await;
    assert_problem(cancel(&api, &id).await, 409).await;
    assert_eq!(
        api.message(&id).await,
        before,
        "a refused cancel changed it"
    );

    // The attempt ends: it delivers, and the refused cancel left no trace.
    gate.open();
    let m = api.wait_for_state(&id, "Delivered", WAIT).await;
    assert!(m["cancelledAt"].is_null(), "{m}");
    assert_eq!(m["attemptCount"], 1, "{m}");
    assert_eq!(rx.count(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_reschedule_while_an_attempt_holds_the_lease_answers_409_and_the_attempt_delivers() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let gate = Gate::new();
    let (rx, id) = attempt_held_open(&api, &gate).await;

    let before = api.message(&id).await;
    assert_problem(reschedule(&api, &id, FAR).await, 409).await;
    assert_eq!(
        api.message(&id).await,
        before,
        "a refused reschedule changed it"
    );

    gate.open();
    let m = api.wait_for_state(&id, "Delivered", WAIT).await;
    assert_ne!(m["deliveryTime"], FAR, "{m}");
    assert_eq!(m["attemptCount"], 1, "{m}");
    assert_eq!(rx.count(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn an_attempt_that_delivered_first_wins_and_a_later_cancel_answers_409() {
    let app = by_hand().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let m = api.schedule(&target, &in_ms(0), "x").await;
    let id = s(&m["messageId"]);
    // The attempt runs and is recorded before the cancel arrives.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 1);

    assert_problem(cancel(&api, id).await, 409).await;
    let m = api.message(id).await;
    assert_eq!(m["state"], "Delivered", "{m}");
    assert!(m["cancelledAt"].is_null(), "{m}");
    utc(&m["deliveredAt"]);
    assert_eq!(rx.count(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_cancel_before_the_attempt_is_claimed_wins_and_nothing_is_delivered() {
    let app = by_hand().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let m = api.schedule(&target, &in_ms(-1_000), "x").await;
    let id = s(&m["messageId"]);

    assert_eq!(cancel(&api, id).await.status(), 200);
    // The pass that would have attempted it finds nothing to claim.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 0, "a cancelled message was attempted");
    let m = api.message(id).await;
    assert_eq!(m["state"], "Cancelled", "{m}");
    assert!(api.attempts(id).await.is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn a_cancel_after_a_stalled_attempt_lost_its_lease_wins_over_the_attempts_late_success() {
    let app = by_hand().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let m = api.schedule(&target, &in_ms(-120_000), "x").await;
    let id = s(&m["messageId"]);

    // An instance claimed it a minute ago with a 30 s lease, then stalled:
    // its lease ran out half a minute ago, its attempt is still out.
    let store = app.store();
    let claimed_at = Utc::now() - TimeDelta::seconds(60);
    let claimed = store
        .claim_due(claimed_at, 10, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id.0.to_string(), id["DI-M-".len()..]);

    // The lease has ended: the cancel is not refused.
    let r = cancel(&api, id).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);

    // The stalled attempt comes back having delivered: too late to count.
    let now = Utc::now();
    let late = Recorded {
        id: claimed[0].id,
        lease_token: claimed[0].lease_token,
        attempts: vec![Attempt {
            attempt: 1,
            started_at: claimed_at,
            finished_at: now,
            duration_ms: (now - claimed_at).num_milliseconds() as u64,
            outcome: AttemptOutcome::Success,
            status_code: Some(200),
            error: None,
            response_body: None,
            retry_after_ms: None,
        }],
        ladder_attempts: 1,
        key: None,
        next: Next::Delivered,
        told: false,
    };
    assert_eq!(store.record(&[late], now).await.unwrap(), 0, "recorded");

    let m = api.message(id).await;
    assert_eq!(m["state"], "Cancelled", "{m}");
    assert!(m["deliveredAt"].is_null(), "{m}");
    utc(&m["cancelledAt"]);
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 0);
    app.shutdown().await;
}
