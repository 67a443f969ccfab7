//! Idempotency keys of `insert_message` (`MessageStore`): replay, conflict,
//! expiry, scope, and concurrent requests with one key.

use crate::support::*;

checks!(
    the_same_idempotency_key_and_request_replay_the_first_response,
    the_same_idempotency_key_with_another_request_is_a_key_conflict,
    an_expired_idempotency_key_is_treated_as_new,
    idempotency_keys_are_scoped_to_their_account,
    an_idempotency_key_sent_with_an_unknown_target_is_not_remembered,
    concurrent_inserts_with_one_idempotency_key_create_one_message,
);

async fn the_same_idempotency_key_and_request_replay_the_first_response(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let first = message_value(&t, now + hours(1), now);
    let response = json!({"messageId": first.id.to_string(), "state": "Scheduled"});
    let key = idem("order-42", b"hash-of-body-1", DAY, response.clone());
    created(store.insert_message(&first, Some(&key)).await.unwrap());

    // A retry of the request: the API has built a new message and a new
    // response, but the first response is what comes back.
    let retry = message_value(&t, now + hours(1), now + secs(5));
    let retry_key = idem(
        "order-42",
        b"hash-of-body-1",
        DAY,
        json!({"messageId": retry.id.to_string()}),
    );
    match store
        .insert_message(&retry, Some(&retry_key))
        .await
        .unwrap()
    {
        InsertOutcome::Replayed {
            status,
            response: replayed,
        } => {
            assert_eq!(status, 201);
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(replayed.get()).unwrap(),
                response
            );
        }
        other => panic!("expected Replayed, got {other:?}"),
    }
    assert!(
        store.get_message(&ACME, &retry.id).await.unwrap().is_none(),
        "a replay creates no message"
    );
    let all = store
        .list_messages(&ACME, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&all), vec![first.id]);
}

async fn the_same_idempotency_key_with_another_request_is_a_key_conflict(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let first = message_value(&t, now + hours(1), now);
    let key = idem("order-42", b"hash-of-body-1", DAY, json!({"n": 1}));
    created(store.insert_message(&first, Some(&key)).await.unwrap());

    let other = message_value(&t, now + hours(3), now + secs(5));
    let other_key = idem("order-42", b"hash-of-body-2", DAY, json!({"n": 2}));
    assert!(matches!(
        store
            .insert_message(&other, Some(&other_key))
            .await
            .unwrap(),
        InsertOutcome::KeyConflict
    ));
    assert!(store.get_message(&ACME, &other.id).await.unwrap().is_none());

    // The conflict did not replace the stored request: the first still replays.
    let again = message_value(&t, now + hours(1), now + secs(6));
    assert!(matches!(
        store.insert_message(&again, Some(&key)).await.unwrap(),
        InsertOutcome::Replayed { .. }
    ));
}

async fn an_expired_idempotency_key_is_treated_as_new(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let tiny = Duration::from_millis(1);
    let old = message_value(&t, now + hours(1), now - hours(1));
    let old_key = idem("order-42", b"hash-old", tiny, json!({"n": "old"}));
    created(store.insert_message(&old, Some(&old_key)).await.unwrap());

    // An hour later the key has expired: another request with it is new.
    let fresh = message_value(&t, now + hours(2), now);
    let fresh_key = idem("order-42", b"hash-new", tiny, json!({"n": "fresh"}));
    let m = created(
        store
            .insert_message(&fresh, Some(&fresh_key))
            .await
            .unwrap(),
    );
    assert_eq!(m.id, fresh.id);
    assert!(store.get_message(&ACME, &old.id).await.unwrap().is_some());
    assert!(store.get_message(&ACME, &fresh.id).await.unwrap().is_some());

    // The key now belongs to the new request: it replays the new response.
    let replay = message_value(&t, now + hours(2), now);
    let replay_key = idem("order-42", b"hash-new", DAY, json!({"n": "ignored"}));
    match store
        .insert_message(&replay, Some(&replay_key))
        .await
        .unwrap()
    {
        InsertOutcome::Replayed { response, .. } => {
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(response.get()).unwrap(),
                json!({"n": "fresh"})
            )
        }
        other => panic!("expected Replayed, got {other:?}"),
    }
}

async fn idempotency_keys_are_scoped_to_their_account(store: Arc<dyn Store>) {
    let ours = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let a = message_value(&ours, now + hours(1), now);
    created(
        store
            .insert_message(&a, Some(&idem("k", b"acme-body", DAY, json!({"a": 1}))))
            .await
            .unwrap(),
    );
    // The same key in another account, with the same or another body: new.
    let b = message_value(&theirs, now + hours(1), now);
    created(
        store
            .insert_message(&b, Some(&idem("k", b"acme-body", DAY, json!({"b": 1}))))
            .await
            .unwrap(),
    );
    let c = message_value(&theirs, now + hours(1), now);
    assert!(matches!(
        store
            .insert_message(&c, Some(&idem("k", b"other", DAY, json!({"c": 1}))))
            .await
            .unwrap(),
        InsertOutcome::KeyConflict
    ));
    // And each account replays its own response.
    let again = message_value(&ours, now + hours(1), now);
    match store
        .insert_message(&again, Some(&idem("k", b"acme-body", DAY, json!({}))))
        .await
        .unwrap()
    {
        InsertOutcome::Replayed { response, .. } => {
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(response.get()).unwrap(),
                json!({"a": 1})
            )
        }
        other => panic!("expected Replayed, got {other:?}"),
    }
}

async fn an_idempotency_key_sent_with_an_unknown_target_is_not_remembered(store: Arc<dyn Store>) {
    store.ensure_account(&ACME).await.unwrap();
    let now = time::now();
    // A target that does not exist yet…
    let t = target_value(&ACME, "later", now);
    let m = message_value(&t, now + hours(1), now);
    let key = idem(
        "order-7",
        b"body",
        DAY,
        json!({"messageId": m.id.to_string()}),
    );
    assert!(matches!(
        store.insert_message(&m, Some(&key)).await.unwrap(),
        InsertOutcome::UnknownTarget
    ));
    // …is created; the same request again creates the message rather than
    // replaying a response for a message that was never stored.
    insert_target(&*store, &t).await;
    let retry = message_value(&t, now + hours(1), now + secs(1));
    let got = created(store.insert_message(&retry, Some(&key)).await.unwrap());
    assert_eq!(got.id, retry.id);
    assert!(store.get_message(&ACME, &retry.id).await.unwrap().is_some());
}

async fn concurrent_inserts_with_one_idempotency_key_create_one_message(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let barrier = barrier.clone();
        let m = message_value(&t, now + hours(1), now);
        tasks.push(tokio::spawn(async move {
            let key = idem("same-key", b"same-body", DAY, json!({"task": i}));
            barrier.wait().await;
            store.insert_message(&m, Some(&key)).await.unwrap()
        }));
    }
    let mut created_ids = Vec::new();
    let mut replays = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            InsertOutcome::Created(m) => created_ids.push(m.id),
            InsertOutcome::Replayed { response, .. } => replays.push(response.get().to_string()),
            other => panic!("expected Created or Replayed, got {other:?}"),
        }
    }
    assert_eq!(created_ids.len(), 1, "exactly one request creates");
    assert_eq!(replays.len(), 7);
    assert!(
        replays.windows(2).all(|w| w[0] == w[1]),
        "every replay is the same first response"
    );
    let all = store
        .list_messages(&ACME, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&all), created_ids);
}
