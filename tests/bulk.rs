//! Bulk redrive, cancel and replay (docs/api.md#bulk-redrive-cancel-and-replay) through the API: thousands
//! of messages in batches while deliveries go on, only the caller's, with
//! the filters checked and `bulk.max` kept.

mod common;

use std::time::Duration;

use common::{
    in_ms,
    receiver::{Gate, Receiver, Reply},
    Api, TestApp,
};
use dispatch::store::MessageFilter;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// How many of the target's messages are in `state`, counted page by page.
async fn count_in(api: &Api, target: &str, state: &str) -> usize {
    let (mut n, mut cursor) = (0, String::new());
    loop {
        let page: Value = api
            .get(&format!(
                "/messages?targetId={target}&state={state}&limit=1000{cursor}"
            ))
            .await
            .json()
            .await
            .unwrap();
        n += page["items"].as_array().unwrap().len();
        match page["nextCursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return n,
        }
    }
}

/// Waits until all `n` of the target's messages are in `state`, counted in
/// the store (paging thousands of messages through the API every poll would
/// slow the deliveries it waits for).
async fn wait_until_all_in(app: &TestApp, account: &str, target: &str, state: &str, n: u64) {
    let filter = MessageFilter {
        target_id: Some(target.parse().unwrap()),
        state: Some(dispatch::domain::message::State::parse(state).unwrap()),
        ..MessageFilter::default()
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = app
            .store()
            .count_messages(&common::account(account), &filter)
            .await
            .unwrap();
        if got == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{got} of {n} messages {state}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn bulk(api: &Api, action: &str, body: Value) -> (u16, Value) {
    let r = api.post(&format!("/messages/{action}"), body).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn redrive_replay_and_cancel_change_thousands_in_batches_while_deliveries_go_on() {
    const N: usize = 5000;
    const N64: u64 = N as u64;
    // One target takes all 5,000: let the sweeper keep more of them in
    // flight than its default so that the three rounds go quickly.
    let app = TestApp::spawn_with(|c| c.sweeper.target_concurrency = 256).await;
    let api = app.api("acme").await;
    let dead = Receiver::start().await;
    dead.always(Reply::status(400));
    let t = api.webhook(&dead.url("/a")).await;
    let t = t["targetId"].as_str().unwrap().to_string();
    let ids = api.schedule_many(&t, &in_ms(0), N).await;
    wait_until_all_in(&app, "acme", &t, "DeadLetter", N64).await;
    dead.always(Reply::status(200));

    // Another target's deliveries go on while each bulk call runs.
    let steady = Receiver::start().await;
    let s = api.webhook(&steady.url("/s")).await;
    let s = s["targetId"].as_str().unwrap().to_string();
    let side = |from: i64| {
        let api = api.clone();
        let s = s.clone();
        async move {
            for i in 0..20 {
                api.schedule(&s, &in_ms(from + i * 50), "side").await;
            }
        }
    };

    let from = in_ms(-600_000);
    let (status, out) = tokio::join!(
        side(0),
        bulk(&api, "redrive", json!({"targetId": t, "from": from}))
    )
    .1;
    assert_eq!((status, &out), (200, &json!({"count": N})));
    wait_until_all_in(&app, "acme", &t, "Delivered", N64).await;
    steady.wait_for(20, WAIT).await;
    let first = api.attempts(&ids[0]).await;
    assert_eq!(
        first.len(),
        2,
        "the dead-lettering attempt and the redriven one"
    );

    // Replay: the same messages again, attempts kept.
    let to = in_ms(1000);
    let (status, out) = tokio::join!(
        side(0),
        bulk(
            &api,
            "replay",
            json!({"targetId": t, "from": from, "to": to})
        )
    )
    .1;
    assert_eq!((status, &out), (200, &json!({"count": N})));
    wait_until_all_in(&app, "acme", &t, "Delivered", N64).await;
    steady.wait_for(40, WAIT).await;
    let again = api.attempts(&ids[0]).await;
    assert_eq!(again.len(), 3, "{again:?}");
    assert_eq!(again[2]["outcome"], "Success");
    assert_eq!(
        dead.count(),
        3 * N,
        "each message delivered three times: once dead, twice well"
    );
    let m = api.message(&ids[N - 1]).await;
    assert_eq!(m["messageId"], ids[N - 1].as_str(), "the same messageId");

    // Cancel by due time: only what is in range.
    let later = api.schedule_many(&t, &in_ms(3_600_000), N).await;
    let outside = api.schedule(&t, &in_ms(7_200_000), "outside").await;
    let (status, out) = bulk(
        &api,
        "cancel",
        json!({"targetId": t, "from": in_ms(3_000_000), "to": in_ms(4_000_000)}),
    )
    .await;
    assert_eq!((status, &out), (200, &json!({"count": N})));
    assert_eq!(api.message(&later[0]).await["state"], "Cancelled");
    assert_eq!(
        api.message(outside["messageId"].as_str().unwrap()).await["state"],
        "Scheduled"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn bulk_calls_change_only_the_callers_messages() {
    let app = TestApp::spawn().await;
    let acme = app.api("acme").await;
    let globex = app.api("globex").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(400));
    let t = acme.webhook(&rx.url("/a")).await;
    let t = t["targetId"].as_str().unwrap().to_string();
    let ids = acme.schedule_many(&t, &in_ms(0), 3).await;
    wait_until_all_in(&app, "acme", &t, "DeadLetter", 3).await;

    // Foreign ids are not counted and nothing of theirs changes.
    for action in ["redrive", "cancel"] {
        let (status, out) = bulk(&globex, action, json!({"messageIds": ids})).await;
        assert_eq!((status, &out), (200, &json!({"count": 0})), "{action}");
    }
    // A foreign target is as unknown as one that does not exist.
    for (action, body) in [
        ("redrive", json!({"targetId": t})),
        ("cancel", json!({"targetId": t})),
        (
            "replay",
            json!({"targetId": t, "from": in_ms(-60_000), "to": in_ms(0)}),
        ),
    ] {
        let (status, out) = bulk(&globex, action, body).await;
        assert_eq!(status, 400, "{action}: {out}");
        assert_eq!(out["errors"][0]["field"], "targetId", "{action}");
    }
    assert_eq!(count_in(&acme, &t, "DeadLetter").await, 3);

    // The owner's call, with one unknown id among its own.
    let mut listed = ids[..2].to_vec();
    listed.push("DI-M-0190f3a4-7b1c-7cde-8f00-112233445566".into());
    let (status, out) = bulk(
        &acme,
        "cancel",
        json!({"messageIds": listed, "state": "DeadLetter"}),
    )
    .await;
    assert_eq!((status, &out), (200, &json!({"count": 2})));
    assert_eq!(acme.message(&ids[2]).await["state"], "DeadLetter");
    app.shutdown().await;
}

#[tokio::test]
async fn bulk_filters_are_checked_and_bulk_max_changes_nothing_when_exceeded() {
    let app = TestApp::spawn_with(|c| c.bulk.max = 3).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = api.webhook(&rx.url("/a")).await;
    let t = t["targetId"].as_str().unwrap().to_string();
    let ids = api.schedule_many(&t, &in_ms(3_600_000), 4).await;

    let too_many: Vec<String> = (0..1001).map(|_| ids[0].clone()).collect();
    for (action, body, field) in [
        ("redrive", json!({}), "targetId"),
        ("cancel", json!({"from": in_ms(0)}), "targetId"),
        ("cancel", json!({"messageIds": too_many}), "messageIds"),
        (
            "cancel",
            json!({"targetId": t, "state": "Delivered"}),
            "state",
        ),
        (
            "cancel",
            json!({"targetId": t, "from": "yesterday"}),
            "from",
        ),
        (
            "redrive",
            json!({"targetId": "DI-T-0000000000"}),
            "targetId",
        ),
        (
            "redrive",
            json!({"targetId": t, "deliveryTime": 5}),
            "deliveryTime",
        ),
        ("replay", json!({"targetId": t, "to": in_ms(0)}), "from"),
        (
            "replay",
            json!({"from": in_ms(0), "to": in_ms(0)}),
            "targetId",
        ),
    ] {
        let (status, out) = bulk(&api, action, body.clone()).await;
        assert_eq!(status, 400, "{action} {body}: {out}");
        assert_eq!(out["errors"][0]["field"], field, "{action} {body}: {out}");
    }
    // Four match, three are allowed: nothing changes.
    let (status, out) = bulk(&api, "cancel", json!({"targetId": t})).await;
    assert_eq!(status, 400, "{out}");
    assert!(
        out["detail"].as_str().unwrap().contains("bulk.max"),
        "{out}"
    );
    assert_eq!(count_in(&api, &t, "Scheduled").await, 4);
    // Three do.
    let (status, out) = bulk(&api, "cancel", json!({"messageIds": ids[..3]})).await;
    assert_eq!((status, &out), (200, &json!({"count": 3})));
    assert_eq!(count_in(&api, &t, "Cancelled").await, 3);
    app.shutdown().await;
}

#[tokio::test]
async fn a_bulk_cancel_leaves_a_message_whose_attempt_is_under_way() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let gate = Gate::new();
    rx.then([Reply::status(200).held_until(&gate)]);
    let t = api.webhook(&rx.url("/a")).await;
    let t = t["targetId"].as_str().unwrap().to_string();
    let flying = api.schedule(&t, &in_ms(0), "now").await;
    rx.wait_for(1, WAIT).await;
    let waiting = api.schedule(&t, &in_ms(3_600_000), "later").await;
    let (status, out) = bulk(&api, "cancel", json!({"targetId": t})).await;
    assert_eq!((status, &out), (200, &json!({"count": 1})));
    assert_eq!(
        api.message(waiting["messageId"].as_str().unwrap()).await["state"],
        "Cancelled"
    );
    gate.open();
    api.wait_for_state(flying["messageId"].as_str().unwrap(), "Delivered", WAIT)
        .await;
    app.shutdown().await;
}

#[tokio::test]
async fn redriving_a_keys_dead_letters_keeps_the_keys_order() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(400));
    let t = api.webhook(&rx.url("/a")).await;
    let t = t["targetId"].as_str().unwrap().to_string();
    let at = in_ms(0);
    let mut ids = Vec::new();
    for i in 0..5 {
        let r = api
            .post(
                "/messages",
                json!({"targetId": t, "deliveryTime": at, "payload": format!("{i}"), "orderingKey": "k"}),
            )
            .await;
        let m: Value = r.json().await.unwrap();
        ids.push(m["messageId"].as_str().unwrap().to_string());
    }
    wait_until_all_in(&app, "acme", &t, "DeadLetter", 5).await;
    rx.always(Reply::status(200).delay(Duration::from_millis(10)));
    // All redriven for one instant: the order among them is their creation.
    let (status, out) = bulk(
        &api,
        "redrive",
        json!({"messageIds": ids, "deliveryTime": in_ms(200)}),
    )
    .await;
    assert_eq!((status, &out), (200, &json!({"count": 5})));
    wait_until_all_in(&app, "acme", &t, "Delivered", 5).await;
    let second_time: Vec<String> = rx.received()[5..]
        .iter()
        .map(|r| r.header("webhook-id").unwrap())
        .collect();
    assert_eq!(second_time, ids);
    assert_eq!(rx.max_concurrent_per_key(), 1);
    app.shutdown().await;
}
