//! Each message's history beside its attempts: manual actions (`ActionStore`
//! writes them) and dead-lettering (`DeliveryStore::record` writes it);
//! `PortalReads::list_events` reads it.

use crate::support::*;

checks!(cancels_reschedules_and_dead_letters_are_recorded_in_the_messages_history,);

async fn cancels_reschedules_and_dead_letters_are_recorded_in_the_messages_history(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    store.ensure_account(&GLOBEX).await.unwrap();
    let now = time::now();

    let m = schedule(&*store, &t, now + hours(1)).await;
    assert!(
        events_of(&*store, &m).await.is_empty(),
        "a new message has no history"
    );
    let new_time = now + hours(3);
    done(
        store
            .reschedule(&ACME, &m.id, new_time, now + secs(1))
            .await
            .unwrap(),
    );
    done(store.cancel(&ACME, &m.id, now + secs(2)).await.unwrap());
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
        store.cancel(&ACME, &m.id, now + secs(3)).await.unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    assert!(matches!(
        store
            .reschedule(&ACME, &m.id, now + hours(4), now + secs(3))
            .await
            .unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    assert!(matches!(
        store.cancel(&GLOBEX, &m.id, now + secs(3)).await.unwrap(),
        Transition::NotFound
    ));
    assert_eq!(events_of(&*store, &m).await, history);

    // From DeadLetter.
    let dead_cancelled = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &dead_cancelled, now).await;
    done(
        store
            .cancel(&ACME, &dead_cancelled.id, now + secs(4))
            .await
            .unwrap(),
    );
    let dead_lettered = |at, attempt: u32| MessageEvent {
        detail: Some(format!("HTTP 404 on attempt {attempt}")),
        ..event(at, EventKind::DeadLettered, State::Scheduled, None)
    };
    assert_eq!(
        events_of(&*store, &dead_cancelled).await,
        vec![
            dead_lettered(now, 1),
            event(now + secs(4), EventKind::Cancelled, State::DeadLetter, None)
        ],
        "dead-lettering is in the history, with its reason"
    );
    let dead_moved = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &dead_moved, now + secs(5)).await;
    done(
        store
            .reschedule(&ACME, &dead_moved.id, now + hours(1), now + secs(6))
            .await
            .unwrap(),
    );
    let moved_history = vec![
        dead_lettered(now + secs(5), 1),
        event(
            now + secs(6),
            EventKind::Rescheduled,
            State::DeadLetter,
            Some(now + hours(1)),
        ),
    ];
    assert_eq!(
        events_of(&*store, &dead_moved).await,
        moved_history,
        "a redrive keeps the dead-lettering it undid"
    );
    // Dead-lettered again after the redrive: a second line, with its own reason.
    dead_letter(&*store, &dead_moved, now + hours(1)).await;
    let mut twice = moved_history.clone();
    twice.push(dead_lettered(now + hours(1), 2));
    assert_eq!(events_of(&*store, &dead_moved).await, twice);

    // Attempts are not manual actions; nor is a refused one in flight.
    let delivered = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &delivered, now + secs(7)).await;
    assert!(events_of(&*store, &delivered).await.is_empty());
    let in_flight = schedule(&*store, &t, now - secs(1)).await;
    claim_only(&*store, &in_flight, now + secs(8), LEASE).await;
    assert!(matches!(
        store
            .reschedule(&ACME, &in_flight.id, now + hours(1), now + secs(9))
            .await
            .unwrap(),
        Transition::InFlight
    ));
    assert!(matches!(
        store
            .cancel(&ACME, &in_flight.id, now + secs(9))
            .await
            .unwrap(),
        Transition::InFlight
    ));
    assert!(events_of(&*store, &in_flight).await.is_empty());

    // Another account gets an empty list, as for an unknown message.
    for id in [m.id, dead_cancelled.id, dead_moved.id] {
        assert!(
            store.list_events(&GLOBEX, &id).await.unwrap().is_empty(),
            "{id} has no history in another account"
        );
    }
    assert!(store
        .list_events(&ACME, &MessageId::at(time::now()))
        .await
        .unwrap()
        .is_empty());
}
