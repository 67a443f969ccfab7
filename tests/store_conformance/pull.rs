//! Pull targets (`PullStore`): receives hide messages under a token and
//! count them, the store says when something is next receivable, the last
//! allowed receive ends in a dead letter when its visibility runs out, and
//! a sweeper's claim never takes a pull target's message. Every instant is
//! the check's own.

use dispatch::{
    domain::{
        event::{Pattern, Subscription},
        ids::SubscriptionId,
        receipt::ReceiptHandle,
        target::pull::PullConfig,
        told::DEAD_LETTERED,
    },
    store::{pull::ReceiveAsk, EventQuery},
};

use crate::support::*;

checks!(
    a_receive_hides_counts_and_records_and_the_latest_handle_alone_acks,
    the_store_says_when_a_target_next_has_something_to_receive,
    the_last_allowed_receive_ends_in_a_dead_letter_when_its_visibility_runs_out,
    the_sweeper_never_claims_a_pull_targets_message,
    the_dead_letters_after_a_last_receive_and_after_retention_are_told,
);

async fn pull_target(store: &dyn Store) -> Target {
    let t = Target {
        config: TargetConfig::Pull(PullConfig::default()),
        ..target_value(&ACME, "queue", time::now())
    };
    insert_target(store, &t).await;
    t
}

fn ask(max: u32, visibility: TimeDelta, max_receives: u32) -> ReceiveAsk {
    ReceiveAsk {
        max,
        visibility,
        max_receives,
        then_wait: true,
    }
}

async fn a_receive_hides_counts_and_records_and_the_latest_handle_alone_acks(
    store: Arc<dyn Store>,
) {
    let t = pull_target(&*store).await;
    let now = time::now();
    let m = schedule_at(&*store, &t, now - secs(1), now - secs(2)).await;
    let first = store
        .receive(&ACME, &t.id, ask(10, secs(30), 5), now)
        .await
        .unwrap();
    assert_eq!(first.items.len(), 1);
    assert_eq!(first.items[0].receive_count, 1);
    assert_eq!(first.items[0].message.attempt_count, 1);
    // Hidden: nothing now, and it is receivable again at the visibility's end.
    let hidden = store
        .receive(&ACME, &t.id, ask(10, secs(30), 5), now + secs(29))
        .await
        .unwrap();
    assert!(hidden.items.is_empty());
    assert_eq!(hidden.next_at, Some(now + secs(30)));
    let second = store
        .receive(&ACME, &t.id, ask(10, secs(30), 5), now + secs(30))
        .await
        .unwrap();
    assert_eq!(second.items[0].receive_count, 2);
    let attempts = attempts_of(&*store, &m).await;
    assert_eq!(attempt_numbers(&attempts), [1, 2]);
    assert!(attempts
        .iter()
        .all(|a| a.outcome == AttemptOutcome::Received));

    // Another account's target, or an earlier receive's handle: nothing.
    let other = Target {
        config: TargetConfig::Pull(PullConfig::default()),
        ..target_value(&GLOBEX, "theirs", time::now())
    };
    insert_target(&*store, &other).await;
    let handles = [first.items[0].handle, second.items[0].handle];
    assert_eq!(
        store
            .ack(&GLOBEX, &other.id, &handles, now + secs(31))
            .await
            .unwrap(),
        [false, false]
    );
    assert_eq!(
        store
            .ack(&ACME, &t.id, &handles, now + secs(31))
            .await
            .unwrap(),
        [false, true]
    );
    let m = get(&*store, &m).await;
    assert_eq!(m.state, State::Delivered);
    assert_eq!(m.delivered_at, Some(now + secs(31)));
    let forged = ReceiptHandle {
        message: m.id,
        token: uuid::Uuid::new_v4(),
    };
    assert_eq!(
        store
            .ack(&ACME, &t.id, &[forged], now + secs(32))
            .await
            .unwrap(),
        [false]
    );
}

async fn the_store_says_when_a_target_next_has_something_to_receive(store: Arc<dyn Store>) {
    let t = pull_target(&*store).await;
    let empty = pull_target(&*store).await;
    let now = time::now();
    schedule_at(&*store, &t, now + secs(40), now).await;
    schedule_at(&*store, &t, now + secs(20), now).await;
    let next = store
        .next_receivable(&[t.id.clone(), empty.id.clone()])
        .await
        .unwrap();
    assert_eq!(next, [(t.id.clone(), now + secs(20))]);
    // A nack gives a received message back at its delay's end.
    let got = store
        .receive(&ACME, &t.id, ask(1, secs(30), 5), now + secs(20))
        .await
        .unwrap();
    assert_eq!(
        store
            .nack(
                &ACME,
                &t.id,
                &[got.items[0].handle],
                now + secs(25),
                now + secs(21)
            )
            .await
            .unwrap(),
        [true]
    );
    let next = store
        .next_receivable(std::slice::from_ref(&t.id))
        .await
        .unwrap();
    assert_eq!(next, [(t.id.clone(), now + secs(25))]);
}

async fn the_last_allowed_receive_ends_in_a_dead_letter_when_its_visibility_runs_out(
    store: Arc<dyn Store>,
) {
    let t = pull_target(&*store).await;
    let now = time::now();
    let m = schedule_at(&*store, &t, now - secs(1), now - secs(1)).await;
    let got = store
        .receive(&ACME, &t.id, ask(1, secs(10), 1), now)
        .await
        .unwrap();
    assert_eq!(got.last_until, Some(now + secs(10)));
    assert_eq!(
        store.next_unacked_end().await.unwrap(),
        Some(now + secs(10))
    );
    assert!(store
        .dead_letter_unacked(now + secs(9), 100)
        .await
        .unwrap()
        .is_empty());
    let dead = store
        .dead_letter_unacked(now + secs(10), 100)
        .await
        .unwrap();
    assert_eq!(dead, [(m.id, t.id.clone())]);
    let m = get(&*store, &m).await;
    assert_eq!(m.state, State::DeadLetter);
    assert_eq!(
        m.last_error.as_deref(),
        Some("not acknowledged after 1 receives")
    );
    // Once: a second pass, or a late receive, finds nothing.
    assert!(store
        .dead_letter_unacked(now + secs(11), 100)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .receive(&ACME, &t.id, ask(1, secs(10), 1), now + secs(11))
        .await
        .unwrap()
        .items
        .is_empty());
    assert_eq!(store.next_unacked_end().await.unwrap(), None);
}

async fn the_sweeper_never_claims_a_pull_targets_message(store: Arc<dyn Store>) {
    let t = pull_target(&*store).await;
    let now = time::now();
    schedule_at(&*store, &t, now - secs(1), now - secs(1)).await;
    assert!(store.claim_due(now, 100, LEASE).await.unwrap().is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);
}

/// The janitor's and the retention pass's dead letters are told, in their
/// transactions, to an account subscribed to them.
async fn the_dead_letters_after_a_last_receive_and_after_retention_are_told(store: Arc<dyn Store>) {
    let t = pull_target(&*store).await;
    let listener = add_target(&*store, &ACME).await;
    let now = time::now();
    assert!(store
        .insert_subscription(&Subscription {
            id: SubscriptionId::new(),
            account: ACME.clone(),
            target_id: listener.id.clone(),
            name: String::new(),
            types: vec![Pattern::parse(DEAD_LETTERED).unwrap()],
            enabled: true,
            created_at: now,
            updated_at: now,
        })
        .await
        .unwrap());
    let received = schedule_at(&*store, &t, now - secs(1), now - secs(1)).await;
    store
        .receive(&ACME, &t.id, ask(1, secs(10), 1), now)
        .await
        .unwrap();
    let never = schedule_at(&*store, &t, now + secs(1), now - secs(1)).await;
    assert_eq!(
        store
            .dead_letter_unacked(now + secs(10), 100)
            .await
            .unwrap()
            .len(),
        1
    );
    // After the default retention (14 days) from its delivery time.
    assert_eq!(
        store
            .expire_unreceived(now + TimeDelta::days(15), 100)
            .await
            .unwrap(),
        1
    );
    let told = store
        .list_published_events(
            &ACME,
            &EventQuery {
                ty: Some(DEAD_LETTERED.into()),
                from: None,
                to: None,
            },
            None,
            10,
        )
        .await
        .unwrap();
    let mut about: Vec<(String, Option<String>)> = told
        .iter()
        .map(|e| {
            let p: serde_json::Value = serde_json::from_str(e.event.payload.as_str()).unwrap();
            (
                p["messageId"].as_str().unwrap().to_string(),
                p["lastError"].as_str().map(str::to_string),
            )
        })
        .collect();
    about.sort();
    let mut expected = vec![
        (
            received.id.to_string(),
            Some("not acknowledged after 1 receives".to_string()),
        ),
        (never.id.to_string(), get(&*store, &never).await.last_error),
    ];
    expected.sort();
    assert_eq!(about, expected);
    assert!(expected[0].1.is_some() && expected[1].1.is_some());
    // Each made one message to the listener.
    assert!(told
        .iter()
        .all(|e| e.messages.len() == 1 && e.messages[0].target_id == listener.id));
}
