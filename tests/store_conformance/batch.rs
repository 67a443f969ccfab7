//! Scheduling a batch (`MessageStore::insert_batch`): answers in order,
//! several accounts, paused targets, atomicity, concurrency.

use crate::support::*;

checks!(
    a_batch_answers_each_item_in_order_and_creates_only_the_messages_whose_target_exists,
    a_batch_of_over_a_thousand_with_keys_among_them_answers_each_in_order,
    an_empty_batch_answers_an_empty_list,
    a_batch_may_hold_messages_of_several_accounts,
    a_batch_item_for_a_disabled_target_is_inserted_paused,
    batch_inserted_messages_are_claimable_when_due,
    a_batch_that_fails_part_way_leaves_nothing_behind,
    concurrent_batches_with_the_same_keys_in_another_order_each_create_a_message_once,
);

async fn a_batch_answers_each_item_in_order_and_creates_only_the_messages_whose_target_exists(
    store: Arc<dyn Store>,
) {
    let ours = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let a = message_value(&ours, now + hours(1), now);
    let missing = message_value(&target_value(&ACME, "never stored", now), now, now);
    let b = message_value(&ours, now - secs(1), now);
    let mut foreign = message_value(&theirs, now, now);
    foreign.account = ACME.clone();
    let c = message_value(&ours, now + hours(2), now);
    let items = [
        plain(&a),
        plain(&missing),
        plain(&b),
        plain(&foreign),
        plain(&c),
    ];

    let outcomes = batch(&*store, &items).await;
    assert_eq!(
        kinds(&outcomes),
        [
            "Created",
            "UnknownTarget",
            "Created",
            "UnknownTarget",
            "Created"
        ]
    );
    for (i, expected) in [(0, &a), (2, &b), (4, &c)] {
        let returned = created_ref(&outcomes[i]);
        assert_eq!(returned.id, expected.id, "outcome {i} answers item {i}");
        assert_eq!(returned.delivery_time, expected.delivery_time);
        assert_eq!(returned.payload, expected.payload);

        let m = get(&*store, expected).await;
        assert_eq!(m.account, *ACME);
        assert_eq!(m.target_id, ours.id);
        assert_eq!(m.state, State::Scheduled);
        assert_eq!(m.delivery_time, expected.delivery_time);
        assert_eq!(m.next_attempt_at, Some(expected.delivery_time));
        assert_eq!(m.attempt_count, 0);
        assert_eq!(m.created_at, now);
        assert_eq!(m.updated_at, now);
        assert_eq!(m.payload, expected.payload);
    }
    assert!(!exists(&*store, &missing).await);
    assert!(!exists(&*store, &foreign).await);
    assert!(store
        .get_message(&GLOBEX, &foreign.id)
        .await
        .unwrap()
        .is_none());
    assert_eq!(ids_of(&*store, &ACME).await, set([a.id, b.id, c.id]));
    assert!(ids_of(&*store, &GLOBEX).await.is_empty());
}

/// More items than one statement takes (stores may insert keyless items
/// many rows a statement): every 7th for an unknown target, every 5th with a
/// key, answered in order.
async fn a_batch_of_over_a_thousand_with_keys_among_them_answers_each_in_order(
    store: Arc<dyn Store>,
) {
    let ours = add_target(&*store, &ACME).await;
    let missing = target_value(&ACME, "never stored", time::now());
    let now = time::now();
    let messages: Vec<Message> = (0..1_203)
        .map(|i| {
            let target = if i % 7 == 3 { &missing } else { &ours };
            message_value(target, now + secs(i), now)
        })
        .collect();
    let items: Vec<BatchItem> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if i % 5 == 0 {
                keyed(m, &format!("key-{i}"), b"hash", DAY)
            } else {
                plain(m)
            }
        })
        .collect();
    let outcomes = batch(&*store, &items).await;
    let mut expected = HashSet::new();
    for (i, (m, o)) in messages.iter().zip(&outcomes).enumerate() {
        if i % 7 == 3 {
            assert_eq!(
                kinds(std::slice::from_ref(o)),
                ["UnknownTarget"],
                "item {i}"
            );
        } else {
            assert_eq!(created_ref(o).id, m.id, "item {i}");
            expected.insert(m.id);
        }
    }
    let all = store
        .list_messages(&ACME, &MessageFilter::default(), None, 2_000)
        .await
        .unwrap();
    assert_eq!(set(message_ids(&all)), expected);
    for (i, m) in messages
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 7 != 3)
        .step_by(97)
    {
        let got = get(&*store, m).await;
        assert_eq!(got.delivery_time, m.delivery_time, "item {i}");
        assert_eq!(got.state, State::Scheduled);
    }
    // The key of an item for an unknown target is not kept; the others are.
    for i in [0usize, 5, 10, 45, 1_195, 1_200] {
        let o = probe_key(&*store, &ours, &format!("key-{i}"), b"hash", now).await;
        let want = if i % 7 == 3 { "Created" } else { "Replayed" };
        assert_eq!(kinds(std::slice::from_ref(&o)), [want], "key-{i}");
    }
}

async fn an_empty_batch_answers_an_empty_list(store: Arc<dyn Store>) {
    add_target(&*store, &ACME).await;
    assert!(store.insert_batch(&[]).await.unwrap().is_empty());
    assert!(ids_of(&*store, &ACME).await.is_empty());
}

async fn a_batch_may_hold_messages_of_several_accounts(store: Arc<dyn Store>) {
    let ours = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let a1 = message_value(&ours, now + hours(1), now);
    let g1 = message_value(&theirs, now + hours(1), now);
    let a2 = message_value(&ours, now + hours(2), now);
    // &ACME naming &GLOBEX's target: unknown in &ACME.
    let mut crossed = message_value(&theirs, now + hours(1), now);
    crossed.account = ACME.clone();
    let outcomes = batch(
        &*store,
        &[plain(&a1), plain(&g1), plain(&a2), plain(&crossed)],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Created", "Created", "UnknownTarget"]
    );
    assert_eq!(created_ref(&outcomes[1]).account, *GLOBEX);
    assert_eq!(ids_of(&*store, &ACME).await, set([a1.id, a2.id]));
    assert_eq!(ids_of(&*store, &GLOBEX).await, set([g1.id]));
    assert_eq!(get(&*store, &g1).await.target_id, theirs.id);
    assert!(store.get_message(&GLOBEX, &a1.id).await.unwrap().is_none());
    assert!(store.get_message(&ACME, &g1.id).await.unwrap().is_none());
}

async fn a_batch_item_for_a_disabled_target_is_inserted_paused(store: Arc<dyn Store>) {
    let on = add_target(&*store, &ACME).await;
    let off = add_target(&*store, &ACME).await;
    let now = time::now();
    store
        .set_target_enabled(&ACME, &off.id, false, now)
        .await
        .unwrap()
        .unwrap();
    let held = message_value(&off, now - secs(10), now);
    let free = message_value(&on, now - secs(5), now);
    let outcomes = batch(&*store, &[plain(&held), plain(&free)]).await;
    assert_eq!(kinds(&outcomes), ["Created", "Created"]);
    assert_eq!(get(&*store, &held).await.state, State::Scheduled);
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(now - secs(5)),
        "the held message does not count"
    );
    let claimed = store.claim_due(now, 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&claimed), vec![free.id]);

    store
        .set_target_enabled(&ACME, &off.id, true, now + secs(1))
        .await
        .unwrap()
        .unwrap();
    let claimed = store.claim_due(now + secs(1), 100, LEASE).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![held.id],
        "released when enabled"
    );
}

async fn batch_inserted_messages_are_claimable_when_due(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let late = message_value(&t, now - secs(1), now);
    let early = message_value(&t, now - secs(3), now);
    let future = message_value(&t, now + hours(1), now);
    batch(
        &*store,
        &[plain(&late), keyed(&early, "k", b"h", DAY), plain(&future)],
    )
    .await;
    assert_eq!(store.next_due().await.unwrap(), Some(now - secs(3)));

    let claimed = store.claim_due(now, 100, LEASE).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![early.id, late.id],
        "oldest due first; the future one waits"
    );
    let c = &claimed[0];
    assert_eq!(c.target_id, t.id);
    assert_eq!(*c.target, t.config);
    assert_eq!(c.payload, early.payload.as_str());
    assert_eq!(c.delivery_time, now - secs(3));
    assert_eq!(c.attempt_count, 0);
    assert_eq!(c.ladder_attempts, 0);
    let results: Vec<Recorded> = claimed
        .iter()
        .map(|c| {
            recorded(
                c,
                attempts_after(c, &[AttemptOutcome::Success], now),
                Next::Delivered,
            )
        })
        .collect();
    assert_eq!(store.record(&results, now).await.unwrap(), 2);
    assert_eq!(get(&*store, &early).await.state, State::Delivered);

    let claimed = store.claim_due(now + hours(1), 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&claimed), vec![future.id]);
}

async fn a_batch_that_fails_part_way_leaves_nothing_behind(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let a = message_value(&t, now + hours(1), now);
    let b = message_value(&t, now + hours(1), now);
    // The third item repeats the first's message id: the batch cannot be stored.
    let result = store
        .insert_batch(&[
            keyed(&a, "k-a", b"ha", DAY),
            keyed(&b, "k-b", b"hb", DAY),
            plain(&a),
        ])
        .await;
    assert!(
        result.is_err(),
        "a duplicate message id fails the batch: {result:?}"
    );
    assert!(ids_of(&*store, &ACME).await.is_empty(), "nothing committed");
    // Nor are the keys of its items kept.
    for key in ["k-a", "k-b"] {
        assert!(
            matches!(
                probe_key(&*store, &t, key, b"other", now).await,
                InsertOutcome::Created(_)
            ),
            "{key} is not held"
        );
    }
}

async fn concurrent_batches_with_the_same_keys_in_another_order_each_create_a_message_once(
    store: Arc<dyn Store>,
) {
    // Two requests with the same 1,000 keys, one listing them backwards, at
    // the same moment: each key creates one message and the other batch
    // replays it; neither fails. Several rounds, as the overlap is a race.
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    for round in 0..5 {
        let keys: Vec<String> = (0..1000).map(|i| format!("r{round}-key-{i:04}")).collect();
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let mut tasks = Vec::new();
        for reversed in [false, true] {
            let mut order = keys.clone();
            if reversed {
                order.reverse();
            }
            let items: Vec<BatchItem> = order
                .iter()
                .map(|k| {
                    keyed(
                        &message_value(&t, now + hours(1), now),
                        k,
                        k.as_bytes(),
                        DAY,
                    )
                })
                .collect();
            let store = store.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                store.insert_batch(&items).await
            }));
        }
        let (mut created, mut replays) = (0, 0);
        for task in tasks {
            let outcomes = task
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: a concurrent batch failed: {e:?}"));
            for o in outcomes {
                match o {
                    InsertOutcome::Created(_) => created += 1,
                    InsertOutcome::Replayed { .. } => replays += 1,
                    other => panic!("expected Created or Replayed, got {other:?}"),
                }
            }
        }
        assert_eq!(created, 1000, "round {round}: each key creates one message");
        assert_eq!(replays, 1000, "round {round}");
        assert_eq!(
            store
                .count_messages(&ACME, &MessageFilter::default())
                .await
                .unwrap(),
            1000 * (round + 1)
        );
    }
}
