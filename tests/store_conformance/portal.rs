//! What the portal reads (`PortalReads`): the overview and message counts,
//! and listing messages by delivery time.

use crate::support::*;

checks!(
    the_overview_counts_by_target_and_state_and_what_happened_since_the_cutoff,
    count_messages_counts_what_each_filter_field_selects,
    listing_messages_by_delivery_time_gives_the_range_newest_first_and_pages_within_it,
);

/// The overview's counts by (target, state); each pair appears once.
fn counts_of(o: &Overview) -> HashMap<(TargetId, State), u64> {
    let map: HashMap<_, _> = o
        .counts
        .iter()
        .map(|c| ((c.target_id.clone(), c.state), c.count))
        .collect();
    assert_eq!(
        map.len(),
        o.counts.len(),
        "one count per target and state: {:?}",
        o.counts
    );
    map
}

async fn the_overview_counts_by_target_and_state_and_what_happened_since_the_cutoff(
    store: Arc<dyn Store>,
) {
    let t1 = add_target(&*store, &ACME).await;
    let t2 = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let now = time::now();
    let since = now - hours(1);

    // Finished ones first, each driven to its state while it is the only one due.
    let old_delivered = schedule(&*store, &t1, now - hours(3)).await;
    deliver(&*store, &old_delivered, now - hours(2)).await;
    let delivered = schedule(&*store, &t1, now - minutes(40)).await;
    attempt_and_record(
        &*store,
        &delivered,
        now - minutes(30),
        &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
        Next::Delivered,
    )
    .await;
    let delivered2 = schedule(&*store, &t2, now - minutes(20)).await;
    deliver(&*store, &delivered2, now - minutes(10)).await;
    let old_dead = schedule(&*store, &t1, now - hours(3)).await;
    dead_letter(&*store, &old_dead, now - hours(2)).await;
    // Two failures before the cutoff, a third after it and dead since.
    let dead = schedule(&*store, &t2, now - hours(3)).await;
    attempt_and_record(
        &*store,
        &dead,
        now - hours(2),
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
        ],
        Next::Retry(now - minutes(30)),
    )
    .await;
    attempt_and_record(
        &*store,
        &dead,
        now - minutes(20),
        &[AttemptOutcome::NonRetryableFailure],
        Next::DeadLetter,
    )
    .await;
    let cancelled = schedule(&*store, &t1, now + hours(1)).await;
    done(
        store
            .cancel(&ACME, &cancelled.id, now - minutes(5))
            .await
            .unwrap(),
    );
    // Another account's, in the window.
    let their_delivered = schedule(&*store, &theirs, now - minutes(20)).await;
    attempt_and_record(
        &*store,
        &their_delivered,
        now - minutes(10),
        &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
        Next::Delivered,
    )
    .await;
    let their_dead = schedule(&*store, &theirs, now - minutes(20)).await;
    dead_letter(&*store, &their_dead, now - minutes(10)).await;

    // Scheduled ones last, some due. The oldest due is another account's or
    // paused; of the rest the later-created is the older due.
    let their_due = schedule(&*store, &theirs, now - hours(2)).await;
    schedule(&*store, &t1, now + hours(1)).await;
    schedule(&*store, &t2, now - minutes(1)).await;
    let due_old = schedule(&*store, &t1, now - minutes(5)).await;
    let mut off = target_value(&ACME, "off", now);
    off.enabled = false;
    insert_target(&*store, &off).await;
    schedule(&*store, &off, now - minutes(30)).await;

    let o = store.overview(&ACME, since, now).await.unwrap();
    let expected_counts = HashMap::from([
        ((t1.id.clone(), State::Delivered), 2),
        ((t1.id.clone(), State::DeadLetter), 1),
        ((t1.id.clone(), State::Cancelled), 1),
        ((t1.id.clone(), State::Scheduled), 2),
        ((t2.id.clone(), State::Delivered), 1),
        ((t2.id.clone(), State::DeadLetter), 1),
        ((t2.id.clone(), State::Scheduled), 1),
        ((off.id.clone(), State::Scheduled), 1),
    ]);
    assert_eq!(counts_of(&o), expected_counts);
    assert_eq!(o.total(State::Scheduled), 4);
    assert_eq!(o.total(State::Delivered), 3);
    assert_eq!(o.count(&t1.id, State::Cancelled), 1);
    assert_eq!(o.count(&theirs.id, State::Scheduled), 0);
    assert_eq!(
        o.delivered, 2,
        "delivered since the cutoff (not two hours ago, not another account's)"
    );
    assert_eq!(o.dead_lettered, 1, "dead-lettered since the cutoff");
    assert_eq!(
        o.failed_attempts, 2,
        "failed attempts since the cutoff (a success is not one)"
    );
    assert_eq!(
        o.oldest_due,
        Some((due_old.id, now - minutes(5))),
        "the oldest due, unpaused Scheduled message of the account"
    );

    // A window from before everything counts everything the account did.
    let wide = store.overview(&ACME, now - hours(3), now).await.unwrap();
    assert_eq!(counts_of(&wide), expected_counts);
    assert_eq!(wide.delivered, 3);
    assert_eq!(wide.dead_lettered, 2);
    assert_eq!(wide.failed_attempts, 5);
    // A window starting now: nothing happened in it yet.
    let empty = store.overview(&ACME, now, now).await.unwrap();
    assert_eq!(counts_of(&empty), expected_counts);
    assert_eq!(
        (empty.delivered, empty.dead_lettered, empty.failed_attempts),
        (0, 0, 0)
    );

    // Whether a message is due is a question of `now`.
    let earlier = store
        .overview(&ACME, since, now - minutes(10))
        .await
        .unwrap();
    assert_eq!(
        earlier.oldest_due, None,
        "nothing unpaused of the account is due ten minutes ago"
    );
    let later = store.overview(&ACME, since, now + hours(2)).await.unwrap();
    assert_eq!(later.oldest_due, Some((due_old.id, now - minutes(5))));

    // The other account sees its own only.
    let g = store.overview(&GLOBEX, since, now).await.unwrap();
    assert_eq!(
        counts_of(&g),
        HashMap::from([
            ((theirs.id.clone(), State::Delivered), 1),
            ((theirs.id.clone(), State::DeadLetter), 1),
            ((theirs.id.clone(), State::Scheduled), 1),
        ])
    );
    assert_eq!(g.delivered, 1);
    assert_eq!(g.dead_lettered, 1);
    assert_eq!(g.failed_attempts, 2);
    assert_eq!(g.oldest_due, Some((their_due.id, now - hours(2))));

    // An account with nothing.
    store.ensure_account(&account_id("initech")).await.unwrap();
    let none = store
        .overview(&account_id("initech"), since, now)
        .await
        .unwrap();
    assert!(none.counts.is_empty());
    assert_eq!(
        (
            none.delivered,
            none.dead_lettered,
            none.failed_attempts,
            none.oldest_due
        ),
        (0, 0, 0, None)
    );

    // Counts say what happened, not what the rows are now: a redriven dead
    // letter is no longer waiting, but it was dead-lettered in the window.
    done(
        store
            .reschedule(&ACME, &dead.id, now + hours(1), now)
            .await
            .unwrap(),
    );
    let redriven = store.overview(&ACME, since, now).await.unwrap();
    assert_eq!(redriven.count(&t2.id, State::DeadLetter), 0);
    assert_eq!(redriven.dead_lettered, 1, "dead-lettered since the cutoff");
}

/// Messages spread over targets, states and delivery times, around `base`:
/// `a` t1 base-2h Delivered, `b` t1 base-1h DeadLetter, `c` t2 base
/// Scheduled, `d` t2 base+1h Scheduled, `e` t1 base+1h Cancelled, `f` t1
/// base+2h Scheduled; and `g`, another account's, at base.
struct Spread {
    t1: Target,
    t2: Target,
    theirs: Target,
    base: DateTime<Utc>,
    a: Message,
    b: Message,
    c: Message,
    d: Message,
    e: Message,
    f: Message,
    g: Message,
}

async fn spread(store: &dyn Store) -> Spread {
    let t1 = add_target(store, &ACME).await;
    let t2 = add_target(store, &ACME).await;
    let theirs = add_target(store, &GLOBEX).await;
    let base = time::now();
    let a = schedule(store, &t1, base - hours(2)).await;
    deliver(store, &a, base - hours(2) + secs(1)).await;
    let b = schedule(store, &t1, base - hours(1)).await;
    dead_letter(store, &b, base - hours(1) + secs(1)).await;
    let c = schedule(store, &t2, base).await;
    let d = schedule(store, &t2, base + hours(1)).await;
    let e = schedule(store, &t1, base + hours(1)).await;
    done(store.cancel(&ACME, &e.id, base).await.unwrap());
    let f = schedule(store, &t1, base + hours(2)).await;
    let g = schedule(store, &theirs, base).await;
    Spread {
        t1,
        t2,
        theirs,
        base,
        a,
        b,
        c,
        d,
        e,
        f,
        g,
    }
}

async fn count_messages_counts_what_each_filter_field_selects(store: Arc<dyn Store>) {
    let s = spread(&*store).await;
    let (t1, t2, base) = (&s.t1, &s.t2, s.base);
    let cases: Vec<(&str, MessageFilter, Vec<&Message>)> = vec![
        (
            "no filter",
            MessageFilter::default(),
            vec![&s.a, &s.b, &s.c, &s.d, &s.e, &s.f],
        ),
        (
            "target t1",
            filter(Some(t1), None, None, None),
            vec![&s.a, &s.b, &s.e, &s.f],
        ),
        (
            "target t2",
            filter(Some(t2), None, None, None),
            vec![&s.c, &s.d],
        ),
        (
            "another account's target",
            filter(Some(&s.theirs), None, None, None),
            vec![],
        ),
        (
            "Scheduled",
            filter(None, Some(State::Scheduled), None, None),
            vec![&s.c, &s.d, &s.f],
        ),
        (
            "Delivered",
            filter(None, Some(State::Delivered), None, None),
            vec![&s.a],
        ),
        (
            "DeadLetter",
            filter(None, Some(State::DeadLetter), None, None),
            vec![&s.b],
        ),
        (
            "Cancelled",
            filter(None, Some(State::Cancelled), None, None),
            vec![&s.e],
        ),
        (
            "from base (inclusive)",
            filter(None, None, Some(base), None),
            vec![&s.c, &s.d, &s.e, &s.f],
        ),
        (
            "from base + 1ms",
            filter(None, None, Some(base + ms(1)), None),
            vec![&s.d, &s.e, &s.f],
        ),
        (
            "to base (exclusive)",
            filter(None, None, None, Some(base)),
            vec![&s.a, &s.b],
        ),
        (
            "to base + 1ms",
            filter(None, None, None, Some(base + ms(1))),
            vec![&s.a, &s.b, &s.c],
        ),
        (
            "to the earliest delivery time",
            filter(None, None, None, Some(base - hours(2))),
            vec![],
        ),
        (
            "from after the latest delivery time",
            filter(None, None, Some(base + hours(2) + ms(1)), None),
            vec![],
        ),
        (
            "[base-1h, base+1h)",
            filter(None, None, Some(base - hours(1)), Some(base + hours(1))),
            vec![&s.b, &s.c],
        ),
        (
            "an empty range",
            filter(None, None, Some(base + hours(1)), Some(base + hours(1))),
            vec![],
        ),
        (
            "t1, Scheduled, from base",
            filter(Some(t1), Some(State::Scheduled), Some(base), None),
            vec![&s.f],
        ),
        (
            "t2 from base+1h",
            filter(Some(t2), None, Some(base + hours(1)), None),
            vec![&s.d],
        ),
        (
            "t1 in [base-1h, base+2h)",
            filter(Some(t1), None, Some(base - hours(1)), Some(base + hours(2))),
            vec![&s.b, &s.e],
        ),
        (
            "Cancelled to base+1h",
            filter(None, Some(State::Cancelled), None, Some(base + hours(1))),
            vec![],
        ),
        (
            "Cancelled to base+1h+1ms",
            filter(
                None,
                Some(State::Cancelled),
                None,
                Some(base + hours(1) + ms(1)),
            ),
            vec![&s.e],
        ),
    ];
    for (name, f, expected) in &cases {
        let n = store.count_messages(&ACME, f).await.unwrap();
        assert_eq!(n, expected.len() as u64, "count with {name}");
        for cap in [0, 1, n, n + 1] {
            assert_eq!(
                store.count_messages_upto(&ACME, f, cap).await.unwrap(),
                n.min(cap),
                "{name}: counted up to {cap}"
            );
        }
        // The count is what listing with the same filter gives.
        let listed = store.list_messages(&ACME, f, None, 100).await.unwrap();
        assert_eq!(
            set(message_ids(&listed)),
            set(expected.iter().map(|m| m.id)),
            "list with {name}"
        );
    }

    // The other account counts its own only.
    let theirs = |f: MessageFilter| {
        let store = store.clone();
        async move { store.count_messages(&GLOBEX, &f).await.unwrap() }
    };
    assert_eq!(theirs(MessageFilter::default()).await, 1);
    assert_eq!(theirs(filter(Some(t1), None, None, None)).await, 0);
    assert_eq!(
        theirs(filter(None, None, Some(base), Some(base + ms(1)))).await,
        1
    );
    assert_eq!(
        theirs(filter(None, Some(State::Scheduled), None, Some(base))).await,
        0
    );
    store.ensure_account(&account_id("initech")).await.unwrap();
    assert_eq!(
        store
            .count_messages(&account_id("initech"), &MessageFilter::default())
            .await
            .unwrap(),
        0
    );
}

async fn listing_messages_by_delivery_time_gives_the_range_newest_first_and_pages_within_it(
    store: Arc<dyn Store>,
) {
    let s = spread(&*store).await;
    let base = s.base;
    let (from, to) = (base - hours(1), base + hours(2));
    let range = filter(None, None, Some(from), Some(to));
    let expected = newest_first(vec![s.b.id, s.c.id, s.d.id, s.e.id]);
    let all = store.list_messages(&ACME, &range, None, 100).await.unwrap();
    assert_eq!(message_ids(&all), expected);
    for m in &all {
        assert!(
            from <= m.delivery_time && m.delivery_time < to,
            "{} is due {}, outside [{from}, {to})",
            m.id,
            m.delivery_time
        );
    }

    for page_size in [1u32, 3] {
        let mut paged = Vec::new();
        let mut before: Option<MessageId> = None;
        loop {
            let page = store
                .list_messages(&ACME, &range, before.as_ref(), page_size)
                .await
                .unwrap();
            assert!(page.len() <= page_size as usize, "the limit is honoured");
            if page.is_empty() {
                break;
            }
            before = Some(page.last().unwrap().id);
            paged.extend(message_ids(&page));
            assert!(paged.len() <= expected.len(), "paging terminates");
        }
        assert_eq!(paged, expected, "paging by {page_size} within the range");
    }

    let list = |f: MessageFilter| {
        let store = store.clone();
        async move { message_ids(&store.list_messages(&ACME, &f, None, 100).await.unwrap()) }
    };
    assert_eq!(
        list(filter(None, Some(State::Scheduled), Some(from), Some(to))).await,
        newest_first(vec![s.c.id, s.d.id])
    );
    assert_eq!(
        list(filter(Some(&s.t1), None, Some(from), Some(to))).await,
        newest_first(vec![s.b.id, s.e.id])
    );
    assert_eq!(
        list(filter(None, None, Some(base), None)).await,
        newest_first(vec![s.c.id, s.d.id, s.e.id, s.f.id])
    );
    assert_eq!(
        list(filter(None, None, None, Some(base))).await,
        newest_first(vec![s.a.id, s.b.id])
    );
    assert_eq!(
        list(filter(None, None, Some(base + hours(3)), None)).await,
        vec![]
    );
    let theirs = store
        .list_messages(
            &GLOBEX,
            &filter(None, None, Some(from), Some(to)),
            None,
            100,
        )
        .await
        .unwrap();
    assert_eq!(message_ids(&theirs), vec![s.g.id]);
}
