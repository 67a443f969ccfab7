//! Scheduling and reading messages (`MessageStore`): single inserts,
//! `insert_messages`, listing and paging, and a message's attempts.

use crate::support::*;

checks!(
    a_message_for_a_missing_or_foreign_target_answers_unknown_target,
    an_inserted_message_reads_back_as_scheduled_with_its_fields,
    the_largest_payload_reads_back_exactly,
    a_payload_with_a_nul_character_reads_back_exactly,
    a_batch_insert_returns_the_inserted_ids_and_skips_unknown_and_foreign_targets,
    messages_are_listed_newest_first_and_paged_with_the_before_cursor,
    listing_messages_filters_by_state_and_by_target,
    another_accounts_messages_are_invisible,
    attempts_are_listed_oldest_first_and_paged_with_the_after_cursor,
    attempts_of_an_unknown_or_foreign_message_answer_none,
);

async fn a_message_for_a_missing_or_foreign_target_answers_unknown_target(store: Arc<dyn Store>) {
    let theirs = add_target(&*store, &GLOBEX).await;
    store.ensure_account(&ACME).await.unwrap();
    let now = time::now();

    let missing = target_value(&ACME, "never stored", now);
    let m = message_value(&missing, now, now);
    assert!(matches!(
        store.insert_message(&m, None).await.unwrap(),
        InsertOutcome::UnknownTarget
    ));
    assert!(store.get_message(&ACME, &m.id).await.unwrap().is_none());

    // &GLOBEX's target, used by &ACME.
    let mut foreign = message_value(&theirs, now, now);
    foreign.account = ACME.clone();
    assert!(matches!(
        store.insert_message(&foreign, None).await.unwrap(),
        InsertOutcome::UnknownTarget
    ));
    assert!(store
        .get_message(&ACME, &foreign.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_message(&GLOBEX, &foreign.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .claim_due(now + secs(1), 100, LEASE)
        .await
        .unwrap()
        .is_empty());
}

async fn an_inserted_message_reads_back_as_scheduled_with_its_fields(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let value = message_value(&t, now + hours(2), now);
    let returned = insert(&*store, &value).await;
    assert_eq!(returned.id, value.id);
    assert_eq!(returned.state, State::Scheduled);

    let m = get(&*store, &value).await;
    assert_eq!(m.id, value.id);
    assert_eq!(m.account, *ACME);
    assert_eq!(m.target_id, t.id);
    assert_eq!(m.state, State::Scheduled);
    assert_eq!(m.delivery_time, now + hours(2));
    assert_eq!(
        m.next_attempt_at,
        Some(now + hours(2)),
        "a Scheduled message's next attempt is its delivery time"
    );
    assert_eq!(m.attempt_count, 0);
    assert_eq!(m.delivered_at, None);
    assert_eq!(m.cancelled_at, None);
    assert_eq!(m.dead_lettered_at, None);
    assert_eq!(m.last_error, None);
    assert_eq!(m.created_at, now);
    assert_eq!(m.updated_at, now);
    assert_eq!(m.payload, value.payload);
    assert_eq!(attempts_of(&*store, &m).await.len(), 0, "no attempts yet");

    // The fields the API answers with come from Created as well.
    assert_eq!(returned.target_id, m.target_id);
    assert_eq!(returned.delivery_time, m.delivery_time);
    assert_eq!(returned.next_attempt_at, m.next_attempt_at);
    assert_eq!(returned.created_at, m.created_at);
    assert_eq!(returned.payload, m.payload);
}

async fn the_largest_payload_reads_back_exactly(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    // 61,440 four-byte characters (245,760 bytes), with quotes, backslashes
    // and a newline on the way.
    let mut text: String = "𝄞".repeat(MAX_PAYLOAD_CHARS - 8);
    text.push_str("\"\\\n'\t€é");
    assert_eq!(text.chars().count(), MAX_PAYLOAD_CHARS - 1);
    text.push('x');
    let mut value = message_value(&t, now + hours(1), now);
    value.payload = Payload::parse(text.clone()).unwrap();
    insert(&*store, &value).await;
    assert_eq!(get(&*store, &value).await.payload.as_str(), text);
}

async fn a_payload_with_a_nul_character_reads_back_exactly(store: Arc<dyn Store>) {
    // docs/api.md#scheduling-a-message: `payload` is any JSON-embeddable string; "\u0000" is one.
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let text = "before\u{0}after \u{1f} \u{7f}".to_string();
    let mut value = message_value(&t, now + hours(1), now);
    value.payload = Payload::parse(text.clone()).unwrap();
    let outcome = store.insert_message(&value, None).await;
    assert!(
        matches!(outcome, Ok(InsertOutcome::Created(_))),
        "a payload with U+0000 is stored, got {outcome:?}"
    );
    assert_eq!(get(&*store, &value).await.payload.as_str(), text);
    let claimed = store
        .claim_due(now + hours(1) + ms(1), 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].payload, text);
}

async fn a_batch_insert_returns_the_inserted_ids_and_skips_unknown_and_foreign_targets(
    store: Arc<dyn Store>,
) {
    let ours = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let a = message_value(&ours, now + hours(1), now);
    let b = message_value(&ours, now - secs(1), now);
    let missing = message_value(&target_value(&ACME, "missing", now), now, now);
    let mut foreign = message_value(&theirs, now, now);
    foreign.account = ACME.clone();
    let batch = [a.clone(), missing.clone(), b.clone(), foreign.clone()];

    let ids = store.insert_messages(&ACME, &batch).await.unwrap();
    assert_eq!(set(ids.clone()), set([a.id, b.id]));
    assert_eq!(ids.len(), 2, "each inserted id once");

    let read = get(&*store, &a).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.target_id, ours.id);
    assert_eq!(read.delivery_time, now + hours(1));
    assert_eq!(read.next_attempt_at, Some(now + hours(1)));
    assert_eq!(read.payload, a.payload);
    assert!(store
        .get_message(&ACME, &missing.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_message(&ACME, &foreign.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_message(&GLOBEX, &foreign.id)
        .await
        .unwrap()
        .is_none());

    // The batch's due message is claimable like any other.
    let claimed = store.claim_due(now, 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&claimed), vec![b.id]);

    assert!(store.insert_messages(&ACME, &[]).await.unwrap().is_empty());
}

/// &ACME's whole list without a filter, page by page with the `before`
/// cursor; at most `expected` ids, or the paging does not end.
async fn all_pages(store: &dyn Store, page_size: u32, expected: usize) -> Vec<MessageId> {
    let mut paged = Vec::new();
    let mut before: Option<MessageId> = None;
    loop {
        let page = store
            .list_messages(&ACME, &MessageFilter::default(), before.as_ref(), page_size)
            .await
            .unwrap();
        assert!(page.len() <= page_size as usize, "the limit is honoured");
        let Some(last) = page.last() else {
            return paged;
        };
        before = Some(last.id);
        paged.extend(message_ids(&page));
        assert!(paged.len() <= expected, "paging terminates");
    }
}

async fn messages_are_listed_newest_first_and_paged_with_the_before_cursor(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(schedule(&*store, &t, now + hours(1 + i)).await.id);
    }
    let their = schedule(&*store, &theirs, now + hours(1)).await;
    let expected = newest_first(ids);

    let all = store
        .list_messages(&ACME, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&all), expected, "newest (highest id) first");

    for page_size in [1u32, 3] {
        let paged = all_pages(&*store, page_size, expected.len()).await;
        assert_eq!(paged, expected, "paging by {page_size}");
    }

    let theirs_listed = store
        .list_messages(&GLOBEX, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&theirs_listed), vec![their.id]);
}

async fn listing_messages_filters_by_state_and_by_target(store: Arc<dyn Store>) {
    let t1 = add_target(&*store, &ACME).await;
    let t2 = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();

    // Finished ones first, each driven to its state while it is the only one due.
    let delivered = schedule(&*store, &t1, now - secs(1)).await;
    deliver(&*store, &delivered, now).await;
    let dead = schedule(&*store, &t1, now - secs(1)).await;
    dead_letter(&*store, &dead, now).await;
    let s1 = schedule(&*store, &t1, now + hours(1)).await;
    let c1 = schedule(&*store, &t1, now + hours(1)).await;
    done(store.cancel(&ACME, &c1.id, now).await.unwrap());
    let s2 = schedule(&*store, &t2, now + hours(1)).await;
    let c2 = schedule(&*store, &t2, now + hours(1)).await;
    done(store.cancel(&ACME, &c2.id, now).await.unwrap());
    schedule(&*store, &theirs, now + hours(1)).await;

    let list = |target: Option<&Target>, state: Option<State>| {
        let store = store.clone();
        let filter = MessageFilter {
            target_id: target.map(|t| t.id.clone()),
            state,
            ..MessageFilter::default()
        };
        async move {
            let page = store
                .list_messages(&ACME, &filter, None, 100)
                .await
                .unwrap();
            for m in &page {
                if let Some(state) = filter.state {
                    assert_eq!(m.state, state, "only {state:?} messages");
                }
            }
            message_ids(&page)
        }
    };
    assert_eq!(
        list(None, Some(State::Scheduled)).await,
        newest_first(vec![s1.id, s2.id])
    );
    assert_eq!(
        list(None, Some(State::Cancelled)).await,
        newest_first(vec![c1.id, c2.id])
    );
    assert_eq!(list(None, Some(State::Delivered)).await, vec![delivered.id]);
    assert_eq!(list(None, Some(State::DeadLetter)).await, vec![dead.id]);
    assert_eq!(
        list(Some(&t2), None).await,
        newest_first(vec![s2.id, c2.id])
    );
    assert_eq!(
        list(Some(&t1), None).await,
        newest_first(vec![delivered.id, dead.id, s1.id, c1.id])
    );
    assert_eq!(list(Some(&t1), Some(State::Cancelled)).await, vec![c1.id]);
    assert_eq!(list(Some(&t2), Some(State::Delivered)).await, vec![]);
    assert_eq!(
        list(Some(&theirs), None).await,
        vec![],
        "another account's target filters to nothing"
    );
    // Without a state, every state's messages in one order of ids, paged
    // across the states (PostgreSQL merges each state's part of its index).
    let everything = newest_first(vec![delivered.id, dead.id, s1.id, c1.id, s2.id, c2.id]);
    assert_eq!(list(None, None).await, everything);
    for page_size in [1u32, 2, 4] {
        let paged = all_pages(&*store, page_size, everything.len()).await;
        assert_eq!(paged, everything, "paging by {page_size} across states");
    }

    // Paging within a filter.
    let cancelled = MessageFilter {
        target_id: None,
        state: Some(State::Cancelled),
        ..MessageFilter::default()
    };
    let first = store
        .list_messages(&ACME, &cancelled, None, 1)
        .await
        .unwrap();
    let second = store
        .list_messages(&ACME, &cancelled, Some(&first[0].id), 1)
        .await
        .unwrap();
    let third = store
        .list_messages(&ACME, &cancelled, Some(&second[0].id), 1)
        .await
        .unwrap();
    assert_eq!(
        [message_ids(&first), message_ids(&second)].concat(),
        newest_first(vec![c1.id, c2.id])
    );
    assert!(third.is_empty());
}

async fn another_accounts_messages_are_invisible(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    store.ensure_account(&GLOBEX).await.unwrap();
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &m, now).await;

    assert!(store.get_message(&GLOBEX, &m.id).await.unwrap().is_none());
    assert!(store
        .list_attempts(&GLOBEX, &m.id, None, 100)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .list_messages(&GLOBEX, &MessageFilter::default(), None, 100)
        .await
        .unwrap()
        .is_empty());
    let by_target = MessageFilter {
        target_id: Some(t.id.clone()),
        state: None,
        ..MessageFilter::default()
    };
    assert!(store
        .list_messages(&GLOBEX, &by_target, None, 100)
        .await
        .unwrap()
        .is_empty());
    // Still there for its own account.
    assert_eq!(get(&*store, &m).await.state, State::Delivered);
    assert_eq!(attempts_of(&*store, &m).await.len(), 1);
}

async fn attempts_are_listed_oldest_first_and_paged_with_the_after_cursor(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let retry_at = now + secs(60);
    attempt_and_record(
        &*store,
        &m,
        now,
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
        ],
        Next::Retry(retry_at),
    )
    .await;
    let c = attempt_and_record(
        &*store,
        &m,
        retry_at + ms(1),
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::Success,
        ],
        Next::Delivered,
    )
    .await;
    assert_eq!(c.attempt_count, 2, "the second claim knows of two attempts");

    let all = attempts_of(&*store, &m).await;
    assert_eq!(attempt_numbers(&all), vec![1, 2, 3, 4, 5], "oldest first");
    assert_eq!(all[0].finished_at, now);
    assert_eq!(all[4].outcome, AttemptOutcome::Success);
    assert_eq!(get(&*store, &m).await.attempt_count, 5);

    let page = |after: Option<u32>| {
        let store = store.clone();
        let (account, id) = (m.account.clone(), m.id);
        async move {
            attempt_numbers(
                &store
                    .list_attempts(&account, &id, after, 2)
                    .await
                    .unwrap()
                    .unwrap(),
            )
        }
    };
    assert_eq!(page(None).await, vec![1, 2]);
    assert_eq!(page(Some(2)).await, vec![3, 4]);
    assert_eq!(page(Some(4)).await, vec![5]);
    assert_eq!(page(Some(5)).await, Vec::<u32>::new());
}

async fn attempts_of_an_unknown_or_foreign_message_answer_none(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    store.ensure_account(&GLOBEX).await.unwrap();
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    assert_eq!(
        store
            .list_attempts(&ACME, &m.id, None, 10)
            .await
            .unwrap()
            .map(|a| a.len()),
        Some(0),
        "a known message without attempts answers an empty list"
    );
    assert!(store
        .list_attempts(&ACME, &MessageId::at(time::now()), None, 10)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .list_attempts(&GLOBEX, &m.id, None, 10)
        .await
        .unwrap()
        .is_none());
}
