//! Counts for the account limits (`CountStore`): the scheduled messages of
//! each account follow the ways in and out of Scheduled (a message made, a
//! delivery, a dead letter, a cancel, a redrive), and folding the counts
//! changes none.

use crate::support::*;

checks!(the_scheduled_count_follows_every_way_in_and_out_of_scheduled,);

async fn the_scheduled_count_follows_every_way_in_and_out_of_scheduled(store: Arc<dyn Store>) {
    let now = time::now();
    let count = |a: &'static AccountId| {
        let store = store.clone();
        async move { store.scheduled_messages(a).await.unwrap() }
    };
    let (t, u) = (
        add_target(&*store, &ACME).await,
        add_target(&*store, &ACME).await,
    );
    let g = add_target(&*store, &GLOBEX).await;
    let mut of_t = Vec::new();
    for i in 0..4 {
        of_t.push(schedule(&*store, &t, now + secs(i)).await);
    }
    for _ in 0..3 {
        schedule(&*store, &u, now + hours(1)).await;
    }
    schedule(&*store, &g, now + hours(1)).await;
    assert_eq!(count(&ACME).await, 7);
    assert_eq!(count(&GLOBEX).await, 1);
    // A claim leaves them Scheduled; a delivery, a dead letter and a
    // cancel take them out.
    deliver(&*store, &of_t[0], now).await;
    dead_letter(&*store, &of_t[1], now + secs(1)).await;
    done(store.cancel(&ACME, &of_t[2].id, now).await.unwrap());
    assert_eq!(count(&ACME).await, 4);
    // A redrive brings the dead letter back.
    let redrive = Bulk {
        action: BulkAction::Redrive { at: now + secs(5) },
        target_id: None,
        ids: Some(vec![of_t[1].id]),
        range_on: RangeOn::DeliveryTime,
        from: None,
        to: None,
    };
    let batch = store
        .bulk_batch(&ACME, &redrive, None, 1000, now + secs(1))
        .await
        .unwrap();
    assert_eq!(batch.changed, 1);
    assert_eq!(count(&ACME).await, 5);
    store.fold_counts().await.unwrap();
    assert_eq!(count(&ACME).await, 5, "folding changes no count");
    assert_eq!(
        count(&GLOBEX).await,
        1,
        "another account's count is its own"
    );
}
