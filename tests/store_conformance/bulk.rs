//! Bulk actions over more than one state (`ActionStore::bulk_count` and
//! `bulk_batch` with a cancel of both Scheduled and DeadLetter): the
//! matches of both states, in one order of ids, batch after batch.

use crate::support::*;

checks!(a_bulk_cancel_takes_both_states_in_one_order_of_ids_batch_by_batch);

async fn a_bulk_cancel_takes_both_states_in_one_order_of_ids_batch_by_batch(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    // Dead letters and scheduled messages in turn, by id; each dead letter
    // driven there while it is the only one due.
    let mut matched = Vec::new();
    for i in 0..6 {
        if i % 2 == 0 {
            let m = schedule(&*store, &t, now - secs(1)).await;
            dead_letter(&*store, &m, now).await;
            matched.push(m.id);
        } else {
            matched.push(schedule(&*store, &t, now + hours(1)).await.id);
        }
    }
    let delivered = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &delivered, now).await;
    let their = schedule(&*store, &theirs, now + hours(1)).await;

    let bulk = Bulk {
        action: BulkAction::Cancel { only: None },
        target_id: None,
        ids: None,
        range_on: RangeOn::DeliveryTime,
        from: None,
        to: None,
    };
    let later = now + secs(2);
    assert_eq!(store.bulk_count(&ACME, &bulk, 100, later).await.unwrap(), 6);
    assert_eq!(
        store.bulk_count(&ACME, &bulk, 4, later).await.unwrap(),
        4,
        "capped"
    );

    let mut after: Option<MessageId> = None;
    for pair in matched.chunks(2) {
        let batch = store
            .bulk_batch(&ACME, &bulk, after.as_ref(), 2, later)
            .await
            .unwrap();
        assert_eq!(
            (batch.scanned, batch.changed, batch.last),
            (2, 2, Some(pair[1])),
            "the next two ids, a dead letter and a scheduled one"
        );
        for id in pair {
            let m = store.get_message(&ACME, id).await.unwrap().unwrap();
            assert_eq!(m.state, State::Cancelled, "{id} is cancelled");
        }
        after = batch.last;
    }
    let end = store
        .bulk_batch(&ACME, &bulk, after.as_ref(), 2, later)
        .await
        .unwrap();
    assert_eq!((end.scanned, end.changed, end.last), (0, 0, None));
    assert_eq!(store.bulk_count(&ACME, &bulk, 100, later).await.unwrap(), 0);
    assert_eq!(get(&*store, &delivered).await.state, State::Delivered);
    assert_eq!(get(&*store, &their).await.state, State::Scheduled);
}
