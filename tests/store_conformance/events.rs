//! Subscriptions and events (`SubscriptionStore`, `EventStore`): fan-out at
//! publish, in one transaction, to each target whose enabled subscriptions
//! match (each target once); a message made of an event is a message like
//! any other (its key's order on its target, its target's pause); one
//! idempotency key makes one event however many publish it at once; replay
//! and the archive's retention.

use dispatch::{
    domain::{
        event::{Event, EventType, Pattern, Subscription},
        ids::{EventId, SubscriptionId},
    },
    store::{EventQuery, EventRange, EventView, PublishItem, Published, ResponseJson},
};

use crate::{sealing::Db, support::*};

checks!(sealed: a_purged_event_takes_its_list_of_messages_with_it);

checks!(
    an_event_reaches_each_matching_target_once_and_lists_its_messages,
    an_event_keeps_its_payload_and_key_exactly_in_its_messages,
    a_changed_or_disabled_subscription_matches_by_what_it_says_now,
    an_event_message_waits_behind_the_earlier_message_of_its_key,
    an_event_message_for_a_disabled_target_waits_until_it_is_enabled,
    one_key_makes_one_event_however_many_publish_it_at_once,
    a_group_of_publishes_answers_each_as_if_published_alone_in_its_order,
    a_replay_makes_each_event_of_the_range_into_a_message_to_the_target,
    the_archive_forgets_events_past_their_time_but_not_their_messages,
);

fn subscription(target: &Target, types: &[&str], now: DateTime<Utc>) -> Subscription {
    Subscription {
        id: SubscriptionId::new(),
        account: target.account.clone(),
        target_id: target.id.clone(),
        name: String::new(),
        types: types.iter().map(|t| Pattern::parse(t).unwrap()).collect(),
        enabled: true,
        created_at: now,
        updated_at: now,
    }
}

async fn subscribe(store: &dyn Store, target: &Target, types: &[&str]) -> Subscription {
    let s = subscription(target, types, time::now());
    assert!(store.insert_subscription(&s).await.unwrap());
    s
}

fn event(account: &AccountId, ty: &str, key: Option<&str>, now: DateTime<Utc>) -> Event {
    Event {
        id: EventId::at(now),
        account: account.clone(),
        ty: EventType::parse(ty).unwrap(),
        payload: Payload::parse(format!("{{\"type\": \"{ty}\"}}")).unwrap(),
        delivery_time: now,
        ordering_key: key.map(ordering_key),
        created_at: now,
    }
}

fn render(v: &EventView) -> ResponseJson {
    serde_json::value::to_raw_value(&json!({"eventId": v.event.id.to_string()})).unwrap()
}

async fn publish(store: &dyn Store, e: &Event) -> EventView {
    match store.publish_event(e, None, &render).await.unwrap() {
        Published::Created(view) => view,
        other => panic!("expected Created, got {other:?}"),
    }
}

fn targets_of(v: &EventView) -> HashSet<TargetId> {
    v.messages.iter().map(|m| m.target_id.clone()).collect()
}

async fn an_event_reaches_each_matching_target_once_and_lists_its_messages(store: Arc<dyn Store>) {
    let store = store.as_ref();
    let family = add_target(store, &ACME).await;
    let twice = add_target(store, &ACME).await;
    let other = add_target(store, &ACME).await;
    let theirs = add_target(store, &GLOBEX).await;
    subscribe(store, &family, &["order.*"]).await;
    subscribe(store, &twice, &["order.created", "*"]).await;
    subscribe(store, &twice, &["order.*"]).await;
    subscribe(store, &other, &["invoice.*", "order"]).await;
    subscribe(store, &theirs, &["*"]).await;
    let now = time::now();
    let e = event(&ACME, "order.created", None, now);
    let view = publish(store, &e).await;
    assert_eq!(view.messages.len(), 2, "one message per target");
    assert_eq!(
        targets_of(&view),
        [family.id.clone(), twice.id.clone()].into_iter().collect()
    );
    for r in &view.messages {
        let m = store
            .get_message(&ACME, &r.message_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.event_id, Some(e.id));
        assert_eq!(m.event_type.as_deref(), Some("order.created"));
        assert_eq!(m.payload, e.payload);
        assert_eq!(m.delivery_time, e.delivery_time);
        assert_eq!(m.state, State::Scheduled);
    }
    let got = store.get_event(&ACME, &e.id).await.unwrap().unwrap();
    assert_eq!(got.event, e);
    assert_eq!(targets_of(&got), targets_of(&view));
    assert!(got
        .messages
        .iter()
        .all(|m| m.state == Some(State::Scheduled)));
    assert!(store.get_event(&GLOBEX, &e.id).await.unwrap().is_none());
    // Dispatch's own types reach only patterns that name them.
    let own = publish(
        store,
        &event(&ACME, "dispatch.message.delivered", None, now),
    )
    .await;
    assert!(own.messages.is_empty());
}

async fn a_changed_or_disabled_subscription_matches_by_what_it_says_now(store: Arc<dyn Store>) {
    let store = store.as_ref();
    let t = add_target(store, &ACME).await;
    let mut s = subscribe(store, &t, &["order.*"]).await;
    let now = time::now();
    s.types = vec![Pattern::parse("invoice.paid").unwrap()];
    s.updated_at = now;
    assert!(store.update_subscription(&s).await.unwrap());
    let got = store.get_subscription(&ACME, &s.id).await.unwrap().unwrap();
    assert_eq!(got, s);
    assert!(publish(store, &event(&ACME, "order.created", None, now))
        .await
        .messages
        .is_empty());
    assert_eq!(
        publish(store, &event(&ACME, "invoice.paid", None, now))
            .await
            .messages
            .len(),
        1
    );
    s.enabled = false;
    assert!(store.update_subscription(&s).await.unwrap());
    assert!(publish(store, &event(&ACME, "invoice.paid", None, now))
        .await
        .messages
        .is_empty());
    // Another account's subscription is not theirs to change or delete.
    let mut foreign = s.clone();
    foreign.account = GLOBEX.clone();
    assert!(!store.update_subscription(&foreign).await.unwrap());
    assert!(!store.delete_subscription(&GLOBEX, &s.id).await.unwrap());
    assert!(store.delete_subscription(&ACME, &s.id).await.unwrap());
    assert!(store
        .get_subscription(&ACME, &s.id)
        .await
        .unwrap()
        .is_none());
}

async fn an_event_message_waits_behind_the_earlier_message_of_its_key(store: Arc<dyn Store>) {
    let store = store.as_ref();
    let t = add_target(store, &ACME).await;
    subscribe(store, &t, &["*"]).await;
    let now = time::now();
    let mut first = message_value(&t, now - secs(1), now - secs(1));
    first.ordering_key = Some(ordering_key("k"));
    let first = insert(store, &first).await;
    let view = publish(store, &event(&ACME, "a", Some("k"), now)).await;
    let claimed = store.claim_due(now + secs(1), 100, LEASE).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![first.id],
        "the key's first message only"
    );
    let c = &claimed[0];
    let done = recorded(
        c,
        attempts_after(c, &[AttemptOutcome::Success], now + secs(1)),
        Next::Delivered,
    );
    store.record(&[done], now + secs(1)).await.unwrap();
    let next = store.claim_due(now + secs(2), 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&next), vec![view.messages[0].message_id]);
    assert_eq!(next[0].event_id, Some(view.event.id));
    assert_eq!(next[0].event_type.as_deref(), Some("a"));
}

async fn an_event_message_for_a_disabled_target_waits_until_it_is_enabled(store: Arc<dyn Store>) {
    let store = store.as_ref();
    let t = add_target(store, &ACME).await;
    subscribe(store, &t, &["*"]).await;
    let now = time::now();
    store
        .set_target_enabled(&ACME, &t.id, false, now)
        .await
        .unwrap()
        .unwrap();
    let view = publish(store, &event(&ACME, "a", None, now)).await;
    assert_eq!(view.messages.len(), 1);
    assert!(store
        .claim_due(now + secs(1), 100, LEASE)
        .await
        .unwrap()
        .is_empty());
    store
        .set_target_enabled(&ACME, &t.id, true, now + secs(1))
        .await
        .unwrap()
        .unwrap();
    let claimed = store.claim_due(now + secs(2), 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&claimed), vec![view.messages[0].message_id]);
}

async fn one_key_makes_one_event_however_many_publish_it_at_once(store: Arc<dyn Store>) {
    let t = add_target(store.as_ref(), &ACME).await;
    subscribe(store.as_ref(), &t, &["*"]).await;
    let now = time::now();
    let key = idem("publish-1", b"same request", DAY, json!({}));
    let tries: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            let key = key.clone();
            let e = event(&ACME, "a", None, now + ms(i));
            tokio::spawn(async move { store.publish_event(&e, Some(&key), &render).await.unwrap() })
        })
        .collect();
    let mut created = Vec::new();
    let mut replayed = 0;
    for t in tries {
        match t.await.unwrap() {
            Published::Created(v) => created.push(v),
            Published::Replayed { .. } => replayed += 1,
            Published::KeyConflict => panic!("the same request"),
        }
    }
    assert_eq!(created.len(), 1, "one publish makes the event");
    assert_eq!(replayed, 7);
    let events = store
        .list_published_events(&ACME, &EventQuery::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    let messages = store
        .list_messages(&ACME, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(messages.len(), 1);
    // Another request under the key: a conflict, nothing made.
    let other = idem("publish-1", b"another request", DAY, json!({}));
    let answer = store
        .publish_event(&event(&ACME, "a", None, now), Some(&other), &render)
        .await
        .unwrap();
    assert!(matches!(answer, Published::KeyConflict), "{answer:?}");
}

async fn a_group_of_publishes_answers_each_as_if_published_alone_in_its_order(
    store: Arc<dyn Store>,
) {
    let store = store.as_ref();
    let ours = add_target(store, &ACME).await;
    let theirs = add_target(store, &GLOBEX).await;
    subscribe(store, &ours, &["order.*"]).await;
    subscribe(store, &theirs, &["*"]).await;
    let now = time::now();
    // A key an earlier request holds.
    let held = idem("held", b"request h", DAY, json!({}));
    let first = event(&ACME, "order.a", None, now);
    let Published::Created(earlier) = store
        .publish_event(&first, Some(&held), &render)
        .await
        .unwrap()
    else {
        panic!("the first publish makes its event")
    };
    let same = idem("k", b"request 1", DAY, json!({}));
    let other = idem("k", b"request 2", DAY, json!({}));
    let item = |e: Event, key: Option<&dispatch::store::IdempotencyInput>| PublishItem {
        event: e,
        key: key.cloned(),
    };
    let at = |i: i64| now + ms(i + 1);
    let items = vec![
        item(
            event(&ACME, "order.created", Some("o-1"), at(0)),
            Some(&same),
        ),
        item(
            event(&GLOBEX, "order.created", Some("o-1"), at(1)),
            Some(&same),
        ),
        item(event(&ACME, "order.paid", Some("o-1"), at(2)), None),
        item(event(&ACME, "order.created", None, at(3)), Some(&same)),
        item(event(&ACME, "order.created", None, at(4)), Some(&other)),
        item(event(&ACME, "order.a", None, at(5)), Some(&held)),
        item(event(&ACME, "invoice.sent", None, at(6)), None),
    ];
    let answers = store.publish_events(&items, &render).await.unwrap();
    assert_eq!(answers.len(), items.len());
    let created = |i: usize| match &answers[i] {
        Published::Created(v) => v.clone(),
        other => panic!("item {i}: expected Created, got {other:?}"),
    };
    let (a0, g1, a2, none) = (created(0), created(1), created(2), created(6));
    assert_eq!(targets_of(&a0), HashSet::from([ours.id.clone()]));
    // The same key in another account is another key.
    assert_eq!(targets_of(&g1), HashSet::from([theirs.id.clone()]));
    assert_eq!(targets_of(&a2), HashSet::from([ours.id.clone()]));
    assert!(none.messages.is_empty(), "no subscription takes invoice.*");
    // The key an earlier item took answers its answer again, or a conflict.
    match &answers[3] {
        Published::Replayed { status, response } => {
            assert_eq!(*status, 201);
            assert_eq!(response.get(), render(&a0).get());
        }
        other => panic!("item 3: expected Replayed, got {other:?}"),
    }
    assert!(
        matches!(answers[4], Published::KeyConflict),
        "{:?}",
        answers[4]
    );
    match &answers[5] {
        Published::Replayed { response, .. } => {
            assert_eq!(response.get(), render(&earlier).get())
        }
        other => panic!("item 5: expected Replayed, got {other:?}"),
    }
    // Only what was created exists: 1 + 4 events, 1 + 3 messages.
    let events = store
        .list_published_events(&ACME, &EventQuery::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(events.len(), 4, "ACME: the earlier one and items 0, 2, 6");
    let kept = store.get_event(&ACME, &a0.event.id).await.unwrap().unwrap();
    assert_eq!(kept.messages, a0.messages);
    // A key's messages keep the order of their events: item 0's before 2's.
    let (m0, m2) = (a0.messages[0].message_id, a2.messages[0].message_id);
    assert!(m0 < m2, "{m0} before {m2}");
    let later = now + secs(10);
    let claimed = store.claim_due(later, 100, LEASE).await.unwrap();
    let of_ours: Vec<_> = claimed
        .iter()
        .filter(|c| c.target_id == ours.id)
        .map(|c| c.id)
        .collect();
    assert!(
        of_ours.contains(&m0) && !of_ours.contains(&m2),
        "{of_ours:?}"
    );
    // Each message is due at its own event's time, and made when it was.
    let m = store.get_message(&ACME, &m2).await.unwrap().unwrap();
    assert_eq!(m.delivery_time, a2.event.delivery_time);
    assert_eq!(m.created_at, a2.event.created_at);
}

async fn a_replay_makes_each_event_of_the_range_into_a_message_to_the_target(
    store: Arc<dyn Store>,
) {
    let store = store.as_ref();
    let t = add_target(store, &ACME).await;
    let start = time::now();
    let a = publish(store, &event(&ACME, "a.x", Some("k"), start)).await;
    let b = publish(store, &event(&ACME, "a.y", Some("k"), start + ms(10))).await;
    publish(store, &event(&ACME, "b.x", None, start + ms(20))).await;
    publish(store, &event(&GLOBEX, "a.x", None, start + ms(20))).await;
    let range = EventRange {
        from: start,
        to: start + ms(30),
        patterns: vec![Pattern::parse("a.*").unwrap()],
    };
    assert_eq!(store.count_events(&ACME, &range, 100).await.unwrap(), 2);
    assert_eq!(
        store.count_events(&ACME, &range, 1).await.unwrap(),
        1,
        "counting stops at the limit"
    );
    let at = start + secs(5);
    // One event a batch: the cursor carries the replay on.
    let first = store
        .replay_batch(&ACME, &t.id, &range, None, 1, at, start + ms(40))
        .await
        .unwrap();
    assert_eq!((first.made, first.scanned), (1, 1));
    let second = store
        .replay_batch(
            &ACME,
            &t.id,
            &range,
            first.last.as_ref(),
            1,
            at,
            start + ms(40),
        )
        .await
        .unwrap();
    assert_eq!((second.made, second.scanned), (1, 1));
    let done = store
        .replay_batch(
            &ACME,
            &t.id,
            &range,
            second.last.as_ref(),
            1,
            at,
            start + ms(40),
        )
        .await
        .unwrap();
    assert_eq!(done.scanned, 0);
    for original in [&a, &b] {
        let got = store
            .get_event(&ACME, &original.event.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(targets_of(&got), [t.id.clone()].into_iter().collect());
    }
    // In order of the events, one at a time on their key.
    let claimed = store.claim_due(at + secs(1), 100, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].event_id, Some(a.event.id));
    // Another account's target makes nothing.
    let foreign = store
        .replay_batch(&GLOBEX, &t.id, &range, None, 10, at, start + ms(40))
        .await
        .unwrap();
    assert_eq!(foreign.made, 0);
}

/// An event's payload and key reach its row and its messages character
/// for character, whatever they hold: U+0000, quotes, backslashes, JSON
/// escapes, characters outside the BMP, text that reads as a number or a
/// time (the rows travel as arrays or as JSON text).
async fn an_event_keeps_its_payload_and_key_exactly_in_its_messages(store: Arc<dyn Store>) {
    let store = store.as_ref();
    let t = add_target(store, &ACME).await;
    subscribe(store, &t, &["*"]).await;
    let now = time::now();
    for payload in [
        "a\u{0}b\u{0}",
        "\"quoted\" \\ back\\slash \\u0041 \\n",
        "\u{1F600} caf\u{e9} \u{10FFFF}",
        "12345",
        "null",
        "  leading and trailing  ",
        "",
    ] {
        let mut e = event(&ACME, "a", Some("k\u{1F600}\"\\"), now);
        e.payload = Payload::parse(payload.to_string()).unwrap();
        let made = publish(store, &e).await;
        let got = store.get_event(&ACME, &e.id).await.unwrap().unwrap();
        assert_eq!(got.event.payload.as_str(), payload);
        let m = store
            .get_message(&ACME, &made.messages[0].message_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.payload.as_str(), payload, "{payload:?}");
        assert_eq!(m.ordering_key.as_deref(), Some("k\u{1F600}\"\\"));
    }
}

/// The purge deletes an event's list of messages with the event (no
/// foreign key does it on PostgreSQL) and leaves every other list.
async fn a_purged_event_takes_its_list_of_messages_with_it(db: Db) {
    let store = db.open(None).await;
    let store = store.as_ref();
    for _ in 0..2 {
        let t = add_target(store, &ACME).await;
        subscribe(store, &t, &["*"]).await;
    }
    let now = time::now();
    publish(store, &event(&ACME, "a", None, now - days(40))).await;
    let kept = publish(store, &event(&ACME, "a", None, now)).await;
    let listed = "SELECT count(*) FROM event_messages";
    assert_eq!(db.raw_count(listed).await, 4);
    assert_eq!(store.purge_events(now - days(30), 1000).await.unwrap(), 1);
    assert_eq!(db.raw_count(listed).await, 2);
    let got = store
        .get_event(&ACME, &kept.event.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.messages.len(), 2);
}

async fn the_archive_forgets_events_past_their_time_but_not_their_messages(store: Arc<dyn Store>) {
    let store = store.as_ref();
    let t = add_target(store, &ACME).await;
    subscribe(store, &t, &["*"]).await;
    let now = time::now();
    let old = publish(store, &event(&ACME, "a", None, now - days(40))).await;
    let new = publish(store, &event(&ACME, "a", None, now)).await;
    assert_eq!(store.purge_events(now - days(30), 1000).await.unwrap(), 1);
    assert!(store
        .get_event(&ACME, &old.event.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_event(&ACME, &new.event.id)
        .await
        .unwrap()
        .is_some());
    let m = store
        .get_message(&ACME, &old.messages[0].message_id)
        .await
        .unwrap();
    assert!(m.is_some(), "the message of a forgotten event stays");
    assert_eq!(store.purge_events(now - days(30), 1000).await.unwrap(), 0);
}
