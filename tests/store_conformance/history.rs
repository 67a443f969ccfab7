//! Each message's history of manual actions (`ActionStore` writes it,
//! `PortalReads::list_events` reads it).

use crate::support::*;

checks!(cancel_and_reschedule_are_recorded_in_the_messages_history,);

async fn cancel_and_reschedule_are_recorded_in_the_messages_history(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    store.ensure_account(GLOBEX).await.unwrap();
    let now = time::now();

    let m = schedule(&*store, &t, now + hours(1)).await;
    assert!(
        events_of(&*store, &m).await.is_empty(),
        "a new message has no history"
    );
    let new_time = now + hours(3);
    done(
        store
            .reschedule(ACME, &m.id, new_time, now + secs(1))
            .await
            .unwrap(),
    );
    done(store.cancel(ACME, &m.id, now + secs(2)).await.unwrap());
    let history = vec![
        event(
            now + secs(1),
            EventKind::Rescheduled,
            State::Scheduled,
            Some(new_time),
        ),
        event(now + secs(2), EventKind::Cancelled, State::Scheduled, None),
    ];
    assert_eq!(events_of(&*store, &m).await, history, "oldest first");

    // Refused actions leave no trace.
    assert!(matches!(
        store.cancel(ACME, &m.id, now + secs(3)).await.unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    assert!(matches!(
        store
            .reschedule(ACME, &m.id, now + hours(4), now + secs(3))
            .await
            .unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    assert!(matches!(
        store.cancel(GLOBEX, &m.id, now + secs(3)).await.unwrap(),
        Transition::NotFound
    ));
    assert_eq!(events_of(&*store, &m).await, history);

    // From DeadLetter.
    let dead_cancelled = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &dead_cancelled, now).await;
    done(
        store
            .cancel(ACME, &dead_cancelled.id, now + secs(4))
            .await
            .unwrap(),
    );
    assert_eq!(
        events_of(&*store, &dead_cancelled).await,
        vec![event(
            now + secs(4),
            EventKind::Cancelled,
            State::DeadLetter,
            None
        )]
    );
    let dead_moved = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &dead_moved, now + secs(5)).await;
    done(
        store
            .reschedule(ACME, &dead_moved.id, now + hours(1), now + secs(6))
            .await
            .unwrap(),
    );
    assert_eq!(
        events_of(&*store, &dead_moved).await,
        vec![event(
            now + secs(6),
            EventKind::Rescheduled,
            State::DeadLetter,
            Some(now + hours(1))
        )]
    );

    // Attempts are not manual actions; nor is a refused one in flight.
    let delivered = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &delivered, now + secs(7)).await;
    assert!(events_of(&*store, &delivered).await.is_empty());
    let in_flight = schedule(&*store, &t, now - secs(1)).await;
    claim_only(&*store, &in_flight, now + secs(8), LEASE).await;
    assert!(matches!(
        store
            .reschedule(ACME, &in_flight.id, now + hours(1), now + secs(9))
            .await
            .unwrap(),
        Transition::InFlight
    ));
    assert!(matches!(
        store
            .cancel(ACME, &in_flight.id, now + secs(9))
            .await
            .unwrap(),
        Transition::InFlight
    ));
    assert!(events_of(&*store, &in_flight).await.is_empty());

    // Another account gets an empty list, as for an unknown message.
    for id in [m.id, dead_cancelled.id, dead_moved.id] {
        assert!(
            store.list_events(GLOBEX, &id).await.unwrap().is_empty(),
            "{id} has no history in another account"
        );
    }
    assert!(store
        .list_events(ACME, &MessageId::new())
        .await
        .unwrap()
        .is_empty());
}
