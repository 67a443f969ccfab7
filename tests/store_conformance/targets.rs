//! Targets (`TargetStore`): create, read, list and page, change,
//! enable/disable, delete.

use crate::support::*;

checks!(
    an_inserted_target_reads_back_unchanged_and_a_duplicate_id_is_refused,
    a_target_is_invisible_to_another_account,
    target_paging_goes_on_when_the_cursors_target_was_deleted,
    targets_are_listed_newest_first_and_paged_with_the_after_cursor,
    updating_a_target_changes_its_name_and_config_in_its_own_account_only,
    disabling_and_enabling_a_target_flips_enabled_in_its_own_account_only,
    deleting_a_target_answers_deleted_then_not_found,
    deleting_a_target_deletes_its_finished_messages_and_only_its,
    a_target_with_a_scheduled_message_cannot_be_deleted,
    a_target_with_a_dead_letter_cannot_be_deleted,
    a_target_whose_messages_are_all_finished_can_be_deleted,
);

async fn an_inserted_target_reads_back_unchanged_and_a_duplicate_id_is_refused(
    store: Arc<dyn Store>,
) {
    let now = time::now();
    let mut t = target_value(&ACME, "orders", now - secs(5));
    t.updated_at = now;
    t.config = TargetConfig::Sqs(SqsConfig {
        queue_url: "https://sqs.eu-north-1.amazonaws.com/123456789012/orders.fifo".into(),
        region: "eu-north-1".into(),
        endpoint_url: Some("http://127.0.0.1:5000".into()),
        credentials: None,
        message_group_id: Some("group-1".into()),
        format: Default::default(),
        limits: Default::default(),
    });
    insert_target(&*store, &t).await;
    let read = store.get_target(&ACME, &t.id).await.unwrap().unwrap();
    assert_target_eq(&read, &t);

    let mut w = target_value(&ACME, "hooks", now);
    w.enabled = false;
    insert_target(&*store, &w).await;
    assert_target_eq(&store.get_target(&ACME, &w.id).await.unwrap().unwrap(), &w);

    // The same id again, even with other fields: refused, the first is kept.
    let mut dup = w.clone();
    dup.name = "impostor".into();
    dup.enabled = true;
    assert!(!store.insert_target(&dup).await.unwrap());
    assert_target_eq(&store.get_target(&ACME, &w.id).await.unwrap().unwrap(), &w);

    assert!(store
        .get_target(&ACME, &TargetId::new())
        .await
        .unwrap()
        .is_none());
}

async fn a_target_is_invisible_to_another_account(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    store.ensure_account(&GLOBEX).await.unwrap();
    assert!(store.get_target(&GLOBEX, &t.id).await.unwrap().is_none());
    assert!(store
        .list_targets(&GLOBEX, None, 100)
        .await
        .unwrap()
        .is_empty());
    // Nor can the other account take the id.
    let mut dup = target_value(&GLOBEX, "mine", time::now());
    dup.id = t.id.clone();
    assert!(!store.insert_target(&dup).await.unwrap());
    assert!(store.get_target(&GLOBEX, &t.id).await.unwrap().is_none());
    assert_eq!(
        store.get_target(&ACME, &t.id).await.unwrap().unwrap().name,
        "orders"
    );
}

async fn target_paging_goes_on_when_the_cursors_target_was_deleted(store: Arc<dyn Store>) {
    let t0 = time::now() - secs(60);
    let mut targets = Vec::new();
    for i in 0..3 {
        let t = target_value(&ACME, &format!("t{i}"), t0 + ms(i * 1_000));
        insert_target(&*store, &t).await;
        targets.push(t);
    }
    let first = store.list_targets(&ACME, None, 1).await.unwrap();
    assert_eq!(first[0].id, targets[2].id);
    let cursor = TargetCursor::after(&first[0]);
    assert!(matches!(
        store.delete_target(&ACME, &first[0].id).await.unwrap(),
        DeleteTarget::Deleted
    ));
    let rest = store.list_targets(&ACME, Some(&cursor), 10).await.unwrap();
    let ids: Vec<_> = rest.iter().map(|t| t.id.clone()).collect();
    assert_eq!(ids, vec![targets[1].id.clone(), targets[0].id.clone()]);
    assert_eq!(TargetCursor::decode(&cursor.encode()), Some(cursor));
}

async fn targets_are_listed_newest_first_and_paged_with_the_after_cursor(store: Arc<dyn Store>) {
    let t0 = time::now() - secs(60);
    // Six targets; two share a creation time, so the order must break ties
    // and the cursor must neither skip nor repeat them.
    let offsets = [0, 1_000, 2_000, 2_000, 3_000, 4_000];
    let mut targets = Vec::new();
    for (i, off) in offsets.iter().enumerate() {
        let t = target_value(&ACME, &format!("t{i}"), t0 + ms(*off));
        insert_target(&*store, &t).await;
        targets.push(t);
    }
    insert_target(&*store, &target_value(&GLOBEX, "theirs", t0 + ms(5_000))).await;

    let all = store.list_targets(&ACME, None, 100).await.unwrap();
    assert_eq!(all.len(), 6, "only the account's targets");
    for pair in all.windows(2) {
        assert!(
            pair[0].created_at >= pair[1].created_at,
            "newest first: {} then {}",
            pair[0].created_at,
            pair[1].created_at
        );
    }
    assert_eq!(all[0].id, targets[5].id);
    assert_eq!(all[5].id, targets[0].id);
    assert_target_eq(&all[0], &targets[5]);

    // Pages of 2 and of 1 give the same sequence.
    for page_size in [1u32, 2, 4] {
        let mut paged = Vec::new();
        let mut after: Option<TargetCursor> = None;
        loop {
            let page = store
                .list_targets(&ACME, after.as_ref(), page_size)
                .await
                .unwrap();
            assert!(page.len() <= page_size as usize, "the limit is honoured");
            if page.is_empty() {
                break;
            }
            after = Some(TargetCursor::after(page.last().unwrap()));
            paged.extend(page.into_iter().map(|t| t.id));
            assert!(paged.len() <= 6, "paging terminates");
        }
        assert_eq!(
            paged,
            all.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
            "paging by {page_size} matches the full list"
        );
    }
}

async fn updating_a_target_changes_its_name_and_config_in_its_own_account_only(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let later = t.updated_at + secs(10);
    let changed = Target {
        name: "renamed".into(),
        config: webhook("https://example.org/other"),
        updated_at: later,
        ..t.clone()
    };
    let updated = store
        .update_target(&changed)
        .await
        .unwrap()
        .expect("the target is updated");
    assert_target_eq(&updated, &changed);
    assert_target_eq(
        &store.get_target(&ACME, &t.id).await.unwrap().unwrap(),
        &changed,
    );

    // Another account cannot update it, and an unknown id updates nothing.
    store.ensure_account(&GLOBEX).await.unwrap();
    let foreign = Target {
        account: GLOBEX.clone(),
        name: "hijacked".into(),
        updated_at: later + secs(1),
        ..changed.clone()
    };
    assert!(store.update_target(&foreign).await.unwrap().is_none());
    let unknown = Target {
        id: TargetId::new(),
        ..changed.clone()
    };
    assert!(store.update_target(&unknown).await.unwrap().is_none());
    assert!(store
        .get_target(&ACME, &unknown.id)
        .await
        .unwrap()
        .is_none());
    assert_target_eq(
        &store.get_target(&ACME, &t.id).await.unwrap().unwrap(),
        &changed,
    );
}

async fn disabling_and_enabling_a_target_flips_enabled_in_its_own_account_only(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let t1 = t.updated_at + secs(1);
    let disabled = store
        .set_target_enabled(&ACME, &t.id, false, t1)
        .await
        .unwrap()
        .expect("the target is disabled");
    assert!(!disabled.enabled);
    assert_eq!(disabled.updated_at, t1, "a change bumps updated_at");
    assert_eq!(disabled.name, t.name);
    assert_eq!(disabled.config, t.config);
    assert!(
        !store
            .get_target(&ACME, &t.id)
            .await
            .unwrap()
            .unwrap()
            .enabled
    );

    store.ensure_account(&GLOBEX).await.unwrap();
    assert!(store
        .set_target_enabled(&GLOBEX, &t.id, true, t1 + secs(1))
        .await
        .unwrap()
        .is_none());
    assert!(
        !store
            .get_target(&ACME, &t.id)
            .await
            .unwrap()
            .unwrap()
            .enabled
    );
    assert!(store
        .set_target_enabled(&ACME, &TargetId::new(), true, t1)
        .await
        .unwrap()
        .is_none());

    let t2 = t1 + secs(2);
    let enabled = store
        .set_target_enabled(&ACME, &t.id, true, t2)
        .await
        .unwrap()
        .expect("the target is enabled");
    assert!(enabled.enabled);
    assert_eq!(enabled.updated_at, t2);
    assert!(
        store
            .get_target(&ACME, &t.id)
            .await
            .unwrap()
            .unwrap()
            .enabled
    );
}

async fn deleting_a_target_answers_deleted_then_not_found(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let kept = add_target(&*store, &ACME).await;
    store.ensure_account(&GLOBEX).await.unwrap();

    assert!(matches!(
        store.delete_target(&GLOBEX, &t.id).await.unwrap(),
        DeleteTarget::NotFound
    ));
    assert!(
        store.get_target(&ACME, &t.id).await.unwrap().is_some(),
        "another account's delete leaves it"
    );

    assert!(matches!(
        store.delete_target(&ACME, &t.id).await.unwrap(),
        DeleteTarget::Deleted
    ));
    assert!(store.get_target(&ACME, &t.id).await.unwrap().is_none());
    assert!(matches!(
        store.delete_target(&ACME, &t.id).await.unwrap(),
        DeleteTarget::NotFound
    ));
    assert!(matches!(
        store.delete_target(&ACME, &TargetId::new()).await.unwrap(),
        DeleteTarget::NotFound
    ));
    let left = store.list_targets(&ACME, None, 100).await.unwrap();
    assert_eq!(
        left.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        vec![kept.id]
    );
}

async fn a_target_with_a_scheduled_message_cannot_be_deleted(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    assert!(matches!(
        store.delete_target(&ACME, &t.id).await.unwrap(),
        DeleteTarget::HasPending
    ));
    assert!(store.get_target(&ACME, &t.id).await.unwrap().is_some());
    assert_eq!(get(&*store, &m).await.state, State::Scheduled);

    done(store.cancel(&ACME, &m.id, now).await.unwrap());
    assert!(matches!(
        store.delete_target(&ACME, &t.id).await.unwrap(),
        DeleteTarget::Deleted
    ));
}

async fn a_target_with_a_dead_letter_cannot_be_deleted(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &m, now).await;
    assert_eq!(get(&*store, &m).await.state, State::DeadLetter);
    assert!(matches!(
        store.delete_target(&ACME, &t.id).await.unwrap(),
        DeleteTarget::HasPending
    ));
    assert!(store.get_target(&ACME, &t.id).await.unwrap().is_some());

    done(store.cancel(&ACME, &m.id, now + secs(1)).await.unwrap());
    assert!(matches!(
        store.delete_target(&ACME, &t.id).await.unwrap(),
        DeleteTarget::Deleted
    ));
}

async fn a_target_whose_messages_are_all_finished_can_be_deleted(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let delivered = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &delivered, now).await;
    let cancelled = schedule(&*store, &t, now + hours(1)).await;
    done(store.cancel(&ACME, &cancelled.id, now).await.unwrap());
    assert!(matches!(
        store.delete_target(&ACME, &t.id).await.unwrap(),
        DeleteTarget::Deleted
    ));
    assert!(store.get_target(&ACME, &t.id).await.unwrap().is_none());
}

async fn deleting_a_target_deletes_its_finished_messages_and_only_its(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let other = add_target(&*store, &ACME).await;
    let now = time::now();
    let gone = schedule(&*store, &t, now + hours(1)).await;
    let stays = schedule(&*store, &other, now + hours(1)).await;
    for m in [&gone, &stays] {
        done(store.cancel(&ACME, &m.id, now).await.unwrap());
    }
    assert!(matches!(
        store.delete_target(&ACME, &t.id).await.unwrap(),
        DeleteTarget::Deleted
    ));
    assert!(store.get_message(&ACME, &gone.id).await.unwrap().is_none());
    assert_eq!(get(&*store, &stays).await.state, State::Cancelled);
    // A message for the deleted target is refused, not stored without one.
    let late = message_value(&t, now, now);
    assert!(matches!(
        store.insert_message(&late, None).await.unwrap(),
        InsertOutcome::UnknownTarget
    ));
    assert!(store.get_message(&ACME, &late.id).await.unwrap().is_none());
}
