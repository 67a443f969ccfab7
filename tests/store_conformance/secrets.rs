//! Secrets (`SecretStore`): the token-signing keys, and secrets at rest
//! (docs/operations.md#secrets-at-rest). The sealing checks open one database several times with
//! different keys, and read the raw columns to see what the database really
//! holds (see `sealing`).

use crate::{sealing::*, support::*};

checks!(
    the_first_signing_key_is_made_once_and_reading_makes_none,
    instances_starting_together_keep_every_key_they_made,
);

checks!(sealed:
    sealed_secrets_are_not_in_the_database_and_every_read_gets_them_back,
    without_a_key_secrets_are_stored_as_they_are,
    a_previous_key_still_reads_what_it_sealed_and_writes_use_the_current_key,
    rotation_seals_plain_and_previous_key_rows_under_the_current_key,
    a_row_sealed_under_a_key_not_configured_fails_cleanly_and_its_messages_wait,
    sealed_secrets_moved_onto_another_target_do_not_read,
    rotation_without_a_key_is_refused,
);

async fn the_first_signing_key_is_made_once_and_reading_makes_none(store: Arc<dyn Store>) {
    assert!(
        store.signing_keys().await.unwrap().is_empty(),
        "reading the keys makes none"
    );
    let now = time::now();
    assert!(
        store.ensure_signing_key(now).await.unwrap(),
        "a key is made when there is none"
    );
    let first = store.signing_keys().await.unwrap();
    assert_eq!(first.len(), 1);
    for key in &first {
        assert!(!key.kid.is_empty(), "a key has a kid");
        assert!(
            key.secret.len() >= 32,
            "an HS256 key has at least 256 bits, got {} bytes",
            key.secret.len()
        );
    }
    for _ in 0..3 {
        let again = store.signing_keys().await.unwrap();
        assert_eq!(
            again
                .iter()
                .map(|k| (&k.kid, &k.secret))
                .collect::<Vec<_>>(),
            first
                .iter()
                .map(|k| (&k.kid, &k.secret))
                .collect::<Vec<_>>(),
            "the keys are stable across calls"
        );
        assert!(
            !store.ensure_signing_key(now + secs(1)).await.unwrap(),
            "no key is made when there is one"
        );
    }
}

/// Instances that start together on one database may each make a first
/// key (PostgreSQL) or only one of them may (SQLite's one writer); either
/// way every key made is there to read, and none is made afterwards.
async fn instances_starting_together_keep_every_key_they_made(store: Arc<dyn Store>) {
    let now = time::now();
    let starts = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.ensure_signing_key(now).await.unwrap() })
    });
    let made = futures::future::join_all(starts)
        .await
        .into_iter()
        .filter(|made| *made.as_ref().unwrap())
        .count();
    assert!(made >= 1, "one of them made the first key");
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(keys.len(), made, "each key made is kept");
    assert!(!store.ensure_signing_key(now + secs(1)).await.unwrap());
    assert_eq!(store.signing_keys().await.unwrap().len(), made);
}

// ---------------------------------------------------------------------------

async fn sealed_secrets_are_not_in_the_database_and_every_read_gets_them_back(db: Db) {
    let store = db.open(sealer(1, &[])).await;
    store.ensure_signing_key(time::now()).await.unwrap();
    let current = key(1).id().to_string();
    let hook = webhook_with_secrets(&ACME, "hook");
    let queue = sqs_with_secret(&ACME);
    insert_target(&*store, &hook).await;
    insert_target(&*store, &queue).await;
    for t in [&hook, &queue] {
        assert_sealed_under(&db, t, &current).await;
        assert_reads_back(&*store, t).await;
    }
    // The rest of the configuration stays readable in the database.
    assert!(db
        .raw_target(&hook.id)
        .await
        .config
        .contains("https://example.com/hook"));

    let listed = store.list_targets(&ACME, None, 10).await.unwrap();
    assert_eq!(listed.len(), 2);
    for t in &listed {
        let expected = if t.id == hook.id { &hook } else { &queue };
        assert_target_eq(t, expected);
    }

    // An update seals the new secrets; enabling and disabling read them back.
    let mut changed = hook.clone();
    if let TargetConfig::Webhook(w) = &mut changed.config {
        w.headers.insert("X-Api-Key".into(), SECRETS[1].into());
    }
    changed.updated_at = hook.updated_at + secs(1);
    assert_target_eq(
        &store.update_target(&changed).await.unwrap().unwrap(),
        &changed,
    );
    assert_sealed_under(&db, &changed, &current).await;
    let off = store
        .set_target_enabled(&ACME, &hook.id, false, time::now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(off.config, changed.config);
    store
        .set_target_enabled(&ACME, &hook.id, true, time::now())
        .await
        .unwrap();

    // The claim hands the sweeper the secrets, for every message of a target.
    let now = time::now();
    let m1 = schedule(&*store, &changed, now - ms(20)).await;
    let m2 = schedule(&*store, &changed, now - ms(10)).await;
    let m3 = schedule(&*store, &queue, now - ms(5)).await;
    let claimed = store.claim_due(now, 10, LEASE).await.unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![m1.id, m2.id, m3.id]
    );
    assert_eq!(*claimed[0].target, changed.config);
    assert_eq!(*claimed[1].target, changed.config);
    assert_eq!(*claimed[2].target, queue.config);

    assert_keys_sealed_under(&db, &*store, &current).await;
}

async fn without_a_key_secrets_are_stored_as_they_are(db: Db) {
    let store = db.open(None).await;
    let hook = webhook_with_secrets(&ACME, "hook");
    insert_target(&*store, &hook).await;
    let raw = db.raw_target(&hook.id).await;
    assert_eq!((raw.key_id, raw.sealed), (None, None));
    assert!(raw.config.contains(SECRETS[0]) && raw.config.contains(SECRETS[3]));
    assert_reads_back(&*store, &hook).await;
    store.ensure_signing_key(time::now()).await.unwrap();
    let keys = store.signing_keys().await.unwrap();
    let raw = db.raw_signing_keys().await;
    assert_eq!(raw.len(), 1);
    assert_eq!((&raw[0].1, &raw[0].2), (&keys[0].secret, &None));
}

async fn a_previous_key_still_reads_what_it_sealed_and_writes_use_the_current_key(db: Db) {
    let store = db.open(sealer(1, &[])).await;
    let hook = webhook_with_secrets(&ACME, "hook");
    insert_target(&*store, &hook).await;
    store.ensure_signing_key(time::now()).await.unwrap();
    let keys = store.signing_keys().await.unwrap();
    drop(store);

    let store = db.open(sealer(2, &[1])).await;
    assert_reads_back(&*store, &hook).await;
    let again = store.signing_keys().await.unwrap();
    assert_eq!(again[0].kid, keys[0].kid);
    assert_eq!(again[0].secret, keys[0].secret);
    assert_sealed_under(&db, &hook, key(1).id()).await;

    let mut changed = hook.clone();
    changed.name = "renamed".into();
    store.update_target(&changed).await.unwrap().unwrap();
    assert_sealed_under(&db, &changed, key(2).id()).await;
    let fresh = sqs_with_secret(&ACME);
    insert_target(&*store, &fresh).await;
    assert_sealed_under(&db, &fresh, key(2).id()).await;
    assert_reads_back(&*store, &changed).await;
}

async fn rotation_seals_plain_and_previous_key_rows_under_the_current_key(db: Db) {
    // Written before any key: plain. One header value looks like sealed data.
    let store = db.open(None).await;
    let mut plain = webhook_with_secrets(&ACME, "plain");
    if let TargetConfig::Webhook(w) = &mut plain.config {
        w.headers.insert(
            "X-Looks-Sealed".into(),
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into(),
        );
    }
    insert_target(&*store, &plain).await;
    store.ensure_signing_key(time::now()).await.unwrap();
    let keys = store.signing_keys().await.unwrap();
    drop(store);
    // Written under the key before this one.
    let store = db.open(sealer(1, &[])).await;
    assert_reads_back(&*store, &plain).await;
    let old = sqs_with_secret(&GLOBEX);
    insert_target(&*store, &old).await;
    drop(store);
    // Written under the current key: rotation leaves it alone.
    let store = db.open(sealer(2, &[1])).await;
    let current = webhook_with_secrets(&ACME, "current");
    insert_target(&*store, &current).await;
    let before = db.raw_target(&current.id).await;

    let done = reseal_all(&*store, 1).await.unwrap();
    assert_eq!(
        (done.targets, done.signing_keys, done.unsettled),
        (2, 1, 0),
        "two targets and the signing key, a row a page"
    );
    assert_eq!(db.raw_target(&current.id).await.sealed, before.sealed);
    for t in [&plain, &old, &current] {
        assert_sealed_under(&db, t, key(2).id()).await;
        assert_reads_back(&*store, t).await;
    }
    assert!(!db.raw_target(&plain.id).await.holds("AAAAAAAAAAAAAAAAAAAA"));
    assert_keys_sealed_under(&db, &*store, key(2).id()).await;
    // Nothing is left to do.
    assert_eq!(
        store.reseal_targets(None, 100).await.unwrap(),
        ResealPage::default()
    );
    assert_eq!(reseal_all(&*store, 100).await.unwrap().targets, 0);
    drop(store);

    // The previous key can go.
    let store = db.open(sealer(2, &[])).await;
    for t in [&plain, &old, &current] {
        assert_reads_back(&*store, t).await;
    }
    let again = store.signing_keys().await.unwrap();
    assert_eq!(
        (&again[0].kid, &again[0].secret),
        (&keys[0].kid, &keys[0].secret)
    );
}

async fn a_row_sealed_under_a_key_not_configured_fails_cleanly_and_its_messages_wait(db: Db) {
    let store = db.open(sealer(1, &[])).await;
    let hook = webhook_with_secrets(&ACME, "hook");
    insert_target(&*store, &hook).await;
    store.ensure_signing_key(time::now()).await.unwrap();
    let now = time::now();
    let m = schedule(&*store, &hook, now - ms(10)).await;
    drop(store);

    for wrong in [sealer(2, &[3]), None] {
        let store = db.open(wrong.clone()).await;
        let err = store.get_target(&ACME, &hook.id).await.unwrap_err();
        assert!(err.is_unknown_key(), "{err:?}");
        let text = shown(&err);
        assert!(text.contains(hook.id.as_str()), "names the row: {text}");
        assert!(text.contains(key(1).id()), "names the key id: {text}");
        for secret in SECRETS {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(store.list_targets(&ACME, None, 10).await.is_err());
        assert!(store.signing_keys().await.unwrap_err().is_unknown_key());
        // Its message is neither delivered nor dead-lettered: it waits for
        // an instance with the key.
        assert!(store.claim_due(now, 10, LEASE).await.unwrap().is_empty());
        assert_eq!(get(&*store, &m).await.state, State::Scheduled);
        if wrong.is_some() {
            let err = reseal_all(&*store, 10).await.unwrap_err();
            let text = shown(&err);
            assert!(
                text.contains(hook.id.as_str()),
                "rotate names the row: {text}"
            );
            for secret in SECRETS {
                assert!(!text.contains(secret), "{text}");
            }
            assert_sealed_under(&db, &hook, key(1).id()).await;
        }
        drop(store);
    }

    // With the key, once the lease taken above has ended, it is delivered.
    let store = db.open(sealer(1, &[])).await;
    let later = now + TimeDelta::from_std(LEASE).unwrap() * 2 + secs(1);
    let claimed = store.claim_due(later, 10, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, m.id);
    assert_eq!(*claimed[0].target, hook.config);
}

async fn sealed_secrets_moved_onto_another_target_do_not_read(db: Db) {
    let store = db.open(sealer(1, &[])).await;
    let victim = webhook_with_secrets(&ACME, "victim");
    let mut thief = webhook_with_secrets(&GLOBEX, "thief");
    if let TargetConfig::Webhook(w) = &mut thief.config {
        w.url = "https://attacker.example/hook".into();
    }
    insert_target(&*store, &victim).await;
    insert_target(&*store, &thief).await;
    db.copy_sealed_secrets(&victim.id, &thief.id).await;
    let err = store.get_target(&GLOBEX, &thief.id).await.unwrap_err();
    assert!(
        !err.is_unknown_key(),
        "the key is known, the value is not this row's: {err:?}"
    );
    assert!(shown(&err).contains(thief.id.as_str()), "{}", shown(&err));
    assert_reads_back(&*store, &victim).await;
}

async fn rotation_without_a_key_is_refused(db: Db) {
    let store = db.open(None).await;
    insert_target(&*store, &webhook_with_secrets(&ACME, "hook")).await;
    assert!(matches!(
        store.reseal_targets(None, 10).await,
        Err(StoreError::NoEncryptionKey)
    ));
    assert!(matches!(
        store.reseal_signing_keys(None, 10).await,
        Err(StoreError::NoEncryptionKey)
    ));
}
