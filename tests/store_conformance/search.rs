//! The portal's payload search (`PortalReads::search_payloads`): exact text,
//! case and all, with no wildcards; within the account and the filter; and
//! bounded: each search looks at no more than `scan` messages, says where
//! it stopped, and a next search goes on below that.

use crate::support::*;

checks!(a_payload_search_finds_exact_text_within_a_bounded_scan_and_goes_on_below_it);

async fn a_payload_search_finds_exact_text_within_a_bounded_scan_and_goes_on_below_it(
    store: Arc<dyn Store>,
) {
    let t1 = add_target(&*store, &ACME).await;
    let t2 = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let at = time::now() + days(1);
    let tag = |i: usize| match i {
        2 | 5 | 12 | 20 | 27 => "blue-whale",
        15 => "blue_whale",
        25 => "Blue-Whale",
        22 => "blue%whale",
        _ => "grey",
    };
    // m[0] is the oldest, m[29] the newest: one by one, so ids ascend.
    let mut m = Vec::new();
    for i in 0..30 {
        let mut v = message_value(&t1, at, time::now());
        v.payload = Payload::parse(format!("{{\"n\": {i}, \"tag\": \"{}\"}}", tag(i))).unwrap();
        m.push(insert(&*store, &v).await.id);
    }
    let mut other = message_value(&t2, at, time::now());
    other.payload = Payload::parse("{\"tag\": \"blue-whale\"}".to_string()).unwrap();
    let other = insert(&*store, &other).await.id;
    let mut foreign = message_value(&theirs, at, time::now());
    foreign.payload = Payload::parse("{\"tag\": \"blue-whale\"}".to_string()).unwrap();
    insert(&*store, &foreign).await;

    let of_t1 = MessageFilter {
        target_id: Some(t1.id.clone()),
        ..MessageFilter::default()
    };
    let search = |before: Option<MessageId>, text: &'static str, scan: u32, limit: u32| {
        let (store, f) = (store.clone(), of_t1.clone());
        async move {
            store
                .search_payloads(&ACME, &f, before.as_ref(), text, scan, limit)
                .await
                .unwrap()
        }
    };

    // Ten at a time: m29..m20, then m19..m10, then m9..m0 (the last).
    let ten_at_a_time = || async {
        let first = search(None, "blue-whale", 10, 100).await;
        assert_eq!(message_ids(&first.messages), [m[27], m[20]]);
        assert_eq!(first.scanned_to, Some(m[20]));
        let second = search(first.scanned_to, "blue-whale", 10, 100).await;
        assert_eq!(message_ids(&second.messages), [m[12]]);
        assert_eq!(second.scanned_to, Some(m[10]));
        let third = search(second.scanned_to, "blue-whale", 10, 100).await;
        assert_eq!(message_ids(&third.messages), [m[5], m[2]]);
        assert_eq!(third.scanned_to, None, "nothing lies below m0");
        second.scanned_to
    };
    ten_at_a_time().await;

    // A scan that covers them all; the limit holds.
    let all = search(None, "blue-whale", 1000, 100).await;
    assert_eq!(
        message_ids(&all.messages),
        [m[27], m[20], m[12], m[5], m[2]]
    );
    assert_eq!(all.scanned_to, None);
    let two = search(None, "blue-whale", 1000, 2).await;
    assert_eq!(message_ids(&two.messages), [m[27], m[20]]);

    // Exact: case counts, and `_` and `%` are themselves.
    let case = search(None, "Blue-Whale", 1000, 100).await;
    assert_eq!(message_ids(&case.messages), [m[25]]);
    let underscore = search(None, "blue_whale", 1000, 100).await;
    assert_eq!(message_ids(&underscore.messages), [m[15]]);
    let percent = search(None, "blue%whale", 1000, 100).await;
    assert_eq!(message_ids(&percent.messages), [m[22]]);
    let nothing = search(None, "orca", 1000, 100).await;
    assert!(nothing.messages.is_empty());

    // The filter and the account hold: the whole account finds t2's too,
    // never the other account's.
    let everywhere = store
        .search_payloads(
            &ACME,
            &MessageFilter::default(),
            None,
            "blue-whale",
            1000,
            100,
        )
        .await
        .unwrap();
    assert_eq!(
        message_ids(&everywhere.messages),
        [other, m[27], m[20], m[12], m[5], m[2]]
    );

    // States do not part them: with some cancelled, the same scans end at
    // the same messages and find the same ones, in one order of ids.
    for i in [27, 12, 3] {
        done(store.cancel(&ACME, &m[i], time::now()).await.unwrap());
    }
    let below_m10 = ten_at_a_time().await;
    let short = search(below_m10, "blue-whale", 3, 100).await;
    assert_eq!(message_ids(&short.messages), [] as [MessageId; 0]);
    assert_eq!(short.scanned_to, Some(m[7]));
    let everywhere = store
        .search_payloads(&ACME, &MessageFilter::default(), None, "blue-whale", 4, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&everywhere.messages), [other, m[27]]);
    assert_eq!(everywhere.scanned_to, Some(m[27]));
}
