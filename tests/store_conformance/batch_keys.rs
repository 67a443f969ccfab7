//! Idempotency keys within a batch (`MessageStore::insert_batch`): new,
//! replayed, in conflict, expired; and a key repeated within one batch, the
//! rule the service keeps above every store (`service::insert_once`), over
//! each store.

use crate::support::*;

checks!(
    a_batch_item_with_an_unknown_target_answers_unknown_target_and_its_key_is_not_kept,
    a_batch_items_key_is_new_replayed_or_in_conflict_as_with_insert_message,
    a_batch_item_takes_over_an_expired_key_but_not_one_within_its_ttl,
    each_batch_item_is_judged_by_its_own_key_ttl,
    a_key_repeated_within_a_batch_replays_the_first_items_response_or_conflicts,
    a_key_repeated_within_a_batch_after_an_unknown_target_answers_unknown_target_or_conflicts,
    the_same_key_for_two_accounts_in_one_batch_is_two_keys,
);

async fn a_batch_item_with_an_unknown_target_answers_unknown_target_and_its_key_is_not_kept(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    // A target that does not exist yet.
    let later = target_value(&ACME, "later", now);
    let lost = message_value(&later, now + hours(1), now);
    let good = message_value(&t, now + hours(1), now);
    let elsewhere = message_value(&later, now + hours(1), now);
    let outcomes = batch(
        &*store,
        &[
            keyed(&lost, "order-7", b"body-7", DAY),
            keyed(&good, "order-8", b"body-8", DAY),
            keyed(&elsewhere, "order-9", b"body-9", DAY),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["UnknownTarget", "Created", "UnknownTarget"]
    );
    assert!(!exists(&*store, &lost).await);
    assert_eq!(ids_of(&*store, &ACME).await, set([good.id]));

    // Once the target exists, the same request is new (no replay of a
    // response for a message never stored); so is another request with the
    // key that went with the unknown target.
    insert_target(&*store, &later).await;
    let retry = message_value(&later, now + hours(1), now + secs(1));
    let fixed = message_value(&t, now + hours(1), now + secs(1));
    let outcomes = batch(
        &*store,
        &[
            keyed(&retry, "order-7", b"body-7", DAY),
            keyed(&fixed, "order-9", b"body-9-fixed", DAY),
            keyed(&good, "order-8", b"body-8", DAY),
        ],
    )
    .await;
    assert_eq!(kinds(&outcomes), ["Created", "Created", "Replayed"]);
    assert_eq!(created_ref(&outcomes[0]).id, retry.id);
    assert_eq!(created_ref(&outcomes[1]).id, fixed.id);
    assert_eq!(replayed_response(&outcomes[2]), response_for(&good));
    assert_eq!(
        ids_of(&*store, &ACME).await,
        set([good.id, retry.id, fixed.id])
    );
}

async fn a_batch_items_key_is_new_replayed_or_in_conflict_as_with_insert_message(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let p1 = message_value(&t, now + hours(1), now - secs(10));
    let p2 = message_value(&t, now + hours(1), now - secs(10));
    created(
        store
            .insert_message(&p1, Some(&idem("held-1", b"h1", DAY, response_for(&p1))))
            .await
            .unwrap(),
    );
    created(
        store
            .insert_message(&p2, Some(&idem("held-2", b"h2", DAY, response_for(&p2))))
            .await
            .unwrap(),
    );

    let new = message_value(&t, now + hours(2), now);
    let same = message_value(&t, now + hours(1), now);
    let other = message_value(&t, now + hours(3), now);
    let same_again = message_value(&t, now + hours(1), now);
    let other_again = message_value(&t, now + hours(4), now);
    let outcomes = once(
        &*store,
        &[
            keyed(&new, "new", b"hn", DAY),
            keyed(&same, "held-1", b"h1", DAY),
            keyed(&other, "held-2", b"h2-other", DAY),
            keyed(&same_again, "held-1", b"h1", DAY),
            keyed(&other_again, "held-1", b"h1-other", DAY),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        [
            "Created",
            "Replayed",
            "KeyConflict",
            "Replayed",
            "KeyConflict"
        ]
    );
    assert_eq!(created_ref(&outcomes[0]).id, new.id);
    assert_eq!(replayed_response(&outcomes[1]), response_for(&p1));
    assert_eq!(
        replayed_response(&outcomes[3]),
        response_for(&p1),
        "a key held before the batch replays what it holds, however often"
    );
    assert_eq!(ids_of(&*store, &ACME).await, set([p1.id, p2.id, new.id]));

    // The new key is kept with its response; the held ones are unchanged.
    assert_eq!(
        replayed_response(&probe_key(&*store, &t, "new", b"hn", now).await),
        response_for(&new)
    );
    assert_eq!(
        replayed_response(&probe_key(&*store, &t, "held-2", b"h2", now).await),
        response_for(&p2),
        "a conflict does not replace the key's request"
    );
    assert!(matches!(
        probe_key(&*store, &t, "held-1", b"h1-other", now).await,
        InsertOutcome::KeyConflict
    ));
}

async fn a_batch_item_takes_over_an_expired_key_but_not_one_within_its_ttl(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let ttl = Duration::from_secs(3600);
    // Keys stored 2 h, 1 h + 1 ms, exactly 1 h and 30 min before `now`.
    let mut stored = Vec::new();
    for (key, age) in [
        ("old", hours(2)),
        ("just-expired", hours(1) + ms(1)),
        ("edge", hours(1)),
        ("recent", TimeDelta::minutes(30)),
    ] {
        let m = message_value(&t, now + hours(1), now - age);
        created(
            store
                .insert_message(&m, Some(&idem(key, b"first", ttl, response_for(&m))))
                .await
                .unwrap(),
        );
        stored.push(m);
    }

    let old = message_value(&t, now + hours(2), now);
    let just = message_value(&t, now + hours(2), now);
    let edge = message_value(&t, now + hours(2), now);
    let recent = message_value(&t, now + hours(2), now);
    let outcomes = batch(
        &*store,
        &[
            keyed(&old, "old", b"second", ttl),
            keyed(&just, "just-expired", b"second", ttl),
            keyed(&edge, "edge", b"second", ttl),
            keyed(&recent, "recent", b"second", ttl),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Created", "KeyConflict", "KeyConflict"],
        "keys older than the ttl are taken over; one exactly as old as the ttl is not yet"
    );
    assert_eq!(created_ref(&outcomes[0]).id, old.id);
    assert_eq!(created_ref(&outcomes[1]).id, just.id);
    assert!(!exists(&*store, &edge).await);
    assert!(!exists(&*store, &recent).await);

    // The taken keys now name the new requests.
    assert_eq!(
        replayed_response(&probe_key(&*store, &t, "old", b"second", now).await),
        response_for(&old)
    );
    assert!(matches!(
        probe_key(&*store, &t, "old", b"first", now).await,
        InsertOutcome::KeyConflict
    ));

    // Two hours on (a batch created in the future), "recent" has expired too.
    let later = message_value(&t, now + hours(3), now + hours(2));
    let outcomes = batch(&*store, &[keyed(&later, "recent", b"third", ttl)]).await;
    assert_eq!(created_ref(&outcomes[0]).id, later.id);
    let mut expected = set(message_ids(&stored));
    expected.extend([old.id, just.id, later.id]);
    assert_eq!(ids_of(&*store, &ACME).await, expected);
}

async fn each_batch_item_is_judged_by_its_own_key_ttl(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let tiny = Duration::from_millis(1);
    let old = message_value(&t, now + hours(1), now - hours(1));
    created(
        store
            .insert_message(
                &old,
                Some(&idem("short", b"first", tiny, response_for(&old))),
            )
            .await
            .unwrap(),
    );
    // Item 1's key is remembered a day; item 2's a millisecond, so the hour-old
    // "short" has expired for item 2, as it would for insert_message.
    let long = message_value(&t, now + hours(1), now);
    let short = message_value(&t, now + hours(1), now);
    let outcomes = batch(
        &*store,
        &[
            keyed(&long, "long", b"x", DAY),
            keyed(&short, "short", b"second", tiny),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Created"],
        "item 2's expired key is taken over under item 2's own ttl"
    );
    assert_eq!(
        ids_of(&*store, &ACME).await,
        set([old.id, long.id, short.id])
    );
}

async fn a_key_repeated_within_a_batch_replays_the_first_items_response_or_conflicts(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m0 = message_value(&t, now + hours(1), now);
    let m1 = message_value(&t, now + hours(1), now);
    let m2 = message_value(&t, now + hours(2), now);
    let m3 = message_value(&t, now + hours(1), now);
    let m4 = message_value(&t, now + hours(1), now);
    let outcomes = once(
        &*store,
        &[
            keyed(&m0, "k", b"h1", DAY),
            keyed(&m1, "k", b"h1", DAY),
            keyed(&m2, "k", b"h2", DAY),
            plain(&m3),
            keyed(&m4, "k", b"h1", DAY),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Replayed", "KeyConflict", "Created", "Replayed"]
    );
    assert_eq!(created_ref(&outcomes[0]).id, m0.id);
    assert_eq!(
        replayed_response(&outcomes[1]),
        response_for(&m0),
        "the first item's response, not the second's"
    );
    assert_eq!(replayed_response(&outcomes[4]), response_for(&m0));
    assert_eq!(created_ref(&outcomes[3]).id, m3.id);
    assert_eq!(ids_of(&*store, &ACME).await, set([m0.id, m3.id]));

    // After the batch the key holds the first item's request.
    assert_eq!(
        replayed_response(&probe_key(&*store, &t, "k", b"h1", now).await),
        response_for(&m0)
    );
    assert!(matches!(
        probe_key(&*store, &t, "k", b"h2", now).await,
        InsertOutcome::KeyConflict
    ));
}

async fn a_key_repeated_within_a_batch_after_an_unknown_target_answers_unknown_target_or_conflicts(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let nowhere = target_value(&ACME, "never stored", now);
    let u0 = message_value(&nowhere, now + hours(1), now);
    let u1 = message_value(&nowhere, now + hours(1), now);
    let outcomes = once(
        &*store,
        &[keyed(&u0, "k", b"h1", DAY), keyed(&u1, "k", b"h1", DAY)],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["UnknownTarget", "UnknownTarget"],
        "the same request again is answered like the first"
    );

    // Within one batch, another request with the key is a conflict, even
    // though the first item's target was unknown.
    let v0 = message_value(&nowhere, now + hours(1), now);
    let v1 = message_value(&t, now + hours(1), now);
    let outcomes = once(
        &*store,
        &[keyed(&v0, "k2", b"h1", DAY), keyed(&v1, "k2", b"h2", DAY)],
    )
    .await;
    assert_eq!(kinds(&outcomes), ["UnknownTarget", "KeyConflict"]);
    assert!(ids_of(&*store, &ACME).await.is_empty(), "nothing inserted");

    // Neither key is kept: later requests with them are new.
    for key in ["k", "k2"] {
        assert!(
            matches!(
                probe_key(&*store, &t, key, b"h3", now).await,
                InsertOutcome::Created(_)
            ),
            "{key} is not held"
        );
    }
}

async fn the_same_key_for_two_accounts_in_one_batch_is_two_keys(store: Arc<dyn Store>) {
    let ours = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let a = message_value(&ours, now + hours(1), now);
    let g = message_value(&theirs, now + hours(1), now);
    let g2 = message_value(&theirs, now + hours(1), now);
    let a2 = message_value(&ours, now + hours(2), now);
    let outcomes = once(
        &*store,
        &[
            keyed(&a, "k", b"h1", DAY),
            keyed(&g, "k", b"h1", DAY),
            keyed(&g2, "k", b"h1", DAY),
            keyed(&a2, "k", b"h2", DAY),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Created", "Replayed", "KeyConflict"]
    );
    assert_eq!(created_ref(&outcomes[1]).id, g.id);
    assert_eq!(
        replayed_response(&outcomes[2]),
        response_for(&g),
        "&GLOBEX replays its own first response"
    );
    assert_eq!(ids_of(&*store, &ACME).await, set([a.id]));
    assert_eq!(ids_of(&*store, &GLOBEX).await, set([g.id]));
}

/// A batch through the service's repeated-key rule, then this store.
async fn once(store: &dyn Store, items: &[BatchItem]) -> Vec<InsertOutcome> {
    let outcomes = dispatch::service::insert_once(store, items.to_vec())
        .await
        .unwrap();
    assert_eq!(outcomes.len(), items.len(), "one outcome per item");
    outcomes
}
