//! Ordering keys (docs/api.md#ordering-keys) through the API, with real receivers: the
//! messages of one target and key are attempted one at a time, in order of
//! delivery time and then creation, each waiting while an earlier one is
//! Scheduled (retries included); keys never hold each other back; the key
//! travels in `dispatch-ordering-key`.

mod common;

use std::{collections::HashMap, time::Duration};

use common::{
    fast_ladder, in_ms,
    receiver::{Gate, Received, Receiver, Reply},
    Api, TestApp,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

/// Schedules `payload` for `at` with `key` (none: no orderingKey); returns the messageId.
async fn schedule(api: &Api, target: &str, at: &str, key: Option<&str>, payload: &str) -> String {
    let mut body = json!({"targetId": target, "deliveryTime": at, "payload": payload});
    if let Some(key) = key {
        body["orderingKey"] = json!(key);
    }
    let r = api.post("/messages", body).await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let m: Value = r.json().await.unwrap();
    assert_eq!(m["orderingKey"], json!(key));
    m["messageId"].as_str().unwrap().to_string()
}

fn id_of(r: &Received) -> String {
    r.header("webhook-id").unwrap()
}

/// The messageIds of the requests that carried `key`, in arrival order.
fn arrivals(received: &[Received], key: &str) -> Vec<String> {
    received
        .iter()
        .filter(|r| r.header("dispatch-ordering-key").as_deref() == Some(key))
        .map(id_of)
        .collect()
}

/// `ids` each twice (a failed attempt and its immediate retry), in order.
fn twice_each(ids: &[String]) -> Vec<String> {
    ids.iter().flat_map(|id| [id.clone(), id.clone()]).collect()
}

#[tokio::test]
async fn a_keys_messages_go_one_at_a_time_in_order_each_after_the_one_before_succeeded() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    // Every message fails its first attempt: its immediate retry succeeds.
    rx.fail_once_each();
    rx.always(Reply::status(200).delay(Duration::from_millis(5)));
    let t = api.webhook(&rx.url("/hook")).await;
    let t = t["targetId"].as_str().unwrap();
    // All due at one instant, created interleaved: creation decides the order.
    let at = in_ms(300);
    let mut by_key: HashMap<&str, Vec<String>> = HashMap::new();
    let mut plain = Vec::new();
    for i in 0..5 {
        for key in ["red", "green", "blue"] {
            let id = schedule(&api, t, &at, Some(key), &format!("{key}-{i}")).await;
            by_key.entry(key).or_default().push(id);
        }
        plain.push(schedule(&api, t, &at, None, &format!("plain-{i}")).await);
    }
    let received = rx.wait_for(40, WAIT).await;
    for (key, ids) in &by_key {
        assert_eq!(
            arrivals(&received, key),
            twice_each(ids),
            "key {key}: each message (failed once, then its retry) only after the one before succeeded"
        );
        for id in ids {
            api.wait_for_state(id, "Delivered", WAIT).await;
        }
    }
    assert_eq!(rx.max_concurrent_per_key(), 1);
    // Keyless messages carry no key and keep no order.
    for id in &plain {
        let theirs: Vec<&Received> = received.iter().filter(|r| &id_of(r) == id).collect();
        assert_eq!(theirs.len(), 2);
        assert!(theirs
            .iter()
            .all(|r| r.header("dispatch-ordering-key").is_none()));
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_message_due_earlier_goes_first_whatever_the_creation_order() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = api.webhook(&rx.url("/hook")).await;
    let t = t["targetId"].as_str().unwrap();
    let late = schedule(&api, t, &in_ms(900), Some("k"), "late").await;
    let early = schedule(&api, t, &in_ms(300), Some("k"), "early").await;
    let received = rx.wait_for(2, WAIT).await;
    assert_eq!(arrivals(&received, "k"), vec![early, late]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_retrying_message_holds_back_its_key_but_not_another_key() {
    let app = TestApp::spawn_with(|c| {
        fast_ladder(c);
        c.retry.minute_delay = Duration::from_millis(600);
    })
    .await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    // The first round of the head fails (two attempts); its next round succeeds.
    rx.then([Reply::status(503), Reply::status(503)]);
    let t = api.webhook(&rx.url("/hook")).await;
    let t = t["targetId"].as_str().unwrap();
    let head = schedule(&api, t, &in_ms(0), Some("k"), "head").await;
    rx.wait_for(2, WAIT).await;
    let next = schedule(&api, t, &in_ms(0), Some("k"), "next").await;
    let other = schedule(&api, t, &in_ms(0), Some("other"), "other").await;
    // Another key goes at once while the head waits for its next round.
    api.wait_for_state(&other, "Delivered", WAIT).await;
    let waiting = api.message(&next).await;
    assert_eq!(waiting["state"], "Scheduled");
    assert_eq!(
        waiting["attemptCount"], 0,
        "held back, not attempted: {waiting}"
    );
    assert_eq!(api.message(&head).await["state"], "Scheduled");

    api.wait_for_state(&next, "Delivered", WAIT).await;
    let received = rx.received();
    assert_eq!(
        arrivals(&received, "k"),
        vec![head.clone(), head.clone(), head.clone(), next],
        "the next message only after the head's third attempt succeeded"
    );
    assert_eq!(api.attempts(&head).await.len(), 3);
    app.shutdown().await;
}

#[tokio::test]
async fn a_message_due_earlier_than_the_head_in_flight_waits_for_its_attempt_to_end() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let gate = Gate::new();
    rx.then([Reply::status(200).held_until(&gate)]);
    let t = api.webhook(&rx.url("/hook")).await;
    let t = t["targetId"].as_str().unwrap();
    let head = schedule(&api, t, &in_ms(0), Some("k"), "head").await;
    rx.wait_for(1, WAIT).await;
    // Due before the head, but the head is already under way.
    let earlier = schedule(&api, t, &in_ms(-60_000), Some("k"), "earlier").await;
    passed_over(&api, t, &rx, &earlier).await;
    gate.open();
    api.wait_for_state(&earlier, "Delivered", WAIT).await;
    api.wait_for_state(&head, "Delivered", WAIT).await;
    assert_eq!(arrivals(&rx.received(), "k"), vec![head, earlier]);
    assert_eq!(rx.max_concurrent_per_key(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_dead_lettered_head_lets_the_next_go() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(400)]);
    let t = api.webhook(&rx.url("/hook")).await;
    let t = t["targetId"].as_str().unwrap();
    let at = in_ms(200);
    let head = schedule(&api, t, &at, Some("k"), "head").await;
    let next = schedule(&api, t, &at, Some("k"), "next").await;
    api.wait_for_state(&next, "Delivered", WAIT).await;
    assert_eq!(api.message(&head).await["state"], "DeadLetter");
    assert_eq!(arrivals(&rx.received(), "k"), vec![head, next]);
    app.shutdown().await;
}

/// Schedules a keyless sentinel due with `held_back` (a message of
/// `target` just scheduled) and waits until it has been delivered: the
/// sweeper has looked since `held_back` was committed and, had it been free
/// to go, would have claimed it with the sentinel or before. It must not
/// have been attempted.
async fn passed_over(api: &Api, target: &str, rx: &Receiver, held_back: &str) {
    let due = api.message(held_back).await["deliveryTime"]
        .as_str()
        .unwrap()
        .to_string();
    let sentinel = schedule(api, target, &due, None, "sentinel").await;
    api.wait_for_state(&sentinel, "Delivered", WAIT).await;
    assert!(
        rx.received().iter().all(|r| id_of(r) != held_back),
        "a message held back by its key was sent"
    );
    assert_eq!(api.message(held_back).await["attemptCount"], 0);
}

/// A head whose first round failed and that now waits a minute for its
/// next; the sweeper's poll is slower than the test's patience, so what
/// arrives in time was woken, not polled.
async fn waiting_head(app_poll: Duration) -> (TestApp, Api, Receiver, String, String, String) {
    let app = TestApp::spawn_with(|c| {
        c.sweeper.poll_interval = app_poll;
    })
    .await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(503), Reply::status(503)]);
    let t = api.webhook(&rx.url("/hook")).await;
    let t = t["targetId"].as_str().unwrap().to_string();
    let head = schedule(&api, &t, &in_ms(0), Some("k"), "head").await;
    rx.wait_for(2, WAIT).await;
    let next = schedule(&api, &t, &in_ms(0), Some("k"), "next").await;
    (app, api, rx, t, head, next)
}

#[tokio::test]
async fn cancelling_the_waiting_head_releases_the_next_at_once() {
    let (app, api, rx, t, head, next) = waiting_head(Duration::from_secs(60)).await;
    passed_over(&api, &t, &rx, &next).await;
    let r = api.post_empty(&format!("/messages/{head}/cancel")).await;
    assert_eq!(r.status(), 200);
    api.wait_for_state(&next, "Delivered", Duration::from_secs(5))
        .await;
    assert_eq!(
        arrivals(&rx.received(), "k"),
        vec![head.clone(), head, next]
    );
    app.shutdown().await;
}

#[tokio::test]
async fn rescheduling_the_head_after_the_next_lets_the_next_go_first() {
    let (app, api, rx, _, head, next) = waiting_head(Duration::from_secs(60)).await;
    let r = api
        .post(
            &format!("/messages/{head}/reschedule"),
            json!({"deliveryTime": in_ms(1500)}),
        )
        .await;
    assert_eq!(r.status(), 200);
    api.wait_for_state(&next, "Delivered", Duration::from_secs(5))
        .await;
    // The head keeps its new place and goes after.
    api.wait_for_state(&head, "Delivered", Duration::from_secs(10))
        .await;
    assert_eq!(
        arrivals(&rx.received(), "k"),
        vec![head.clone(), head.clone(), next, head]
    );
    app.shutdown().await;
}

/// Several instances on one database: PostgreSQL only.
mod postgres {
    use super::*;

    /// One attempt in flight per instance, no claims ahead: an instance
    /// holds at most two messages (one in flight, one waiting for the
    /// slot), so the other instance finds the heads of the other keys. No
    /// attempt times out while the test holds the answers.
    fn one_at_a_time(c: &mut dispatch::config::Config) {
        c.sweeper.concurrency = 1;
        c.sweeper.claim_ahead = Duration::ZERO;
        c.sweeper.poll_interval = Duration::from_millis(200);
        c.webhook.timeout = Duration::from_secs(60);
        c.sweeper.lease = Duration::from_secs(90);
    }

    #[tokio::test]
    async fn two_instances_never_attempt_two_messages_of_a_key_at_once() {
        let first = TestApp::spawn_postgres_with(one_at_a_time).await;
        let second = TestApp::spawn_on(first.db.clone(), one_at_a_time).await;
        let api = first.api("acme").await;
        let rx = Receiver::start().await;
        rx.fail_once_each();
        // Every answer waits until two attempts are under way at once.
        let gate = Gate::new();
        rx.always(
            Reply::status(200)
                .delay(Duration::from_millis(15))
                .held_until(&gate),
        );
        let t = api.webhook(&rx.url("/hook")).await;
        let t = t["targetId"].as_str().unwrap();
        let keys = ["a", "b", "c", "d"];
        // One batch: every message visible to both instances at once.
        let at = in_ms(500);
        let messages: Vec<Value> = (0..10)
            .flat_map(|i| {
                let at = at.clone();
                keys.iter().map(move |k| json!({"targetId": t, "deliveryTime": at, "payload": format!("{k}{i}"), "orderingKey": k}))
            })
            .collect();
        let r = api
            .post("/messages/batch", json!({ "messages": messages }))
            .await;
        assert_eq!(r.status(), 200);
        let out: Value = r.json().await.unwrap();
        assert_eq!(out["scheduled"], 40, "{out}");
        let ids: Vec<String> = out["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["message"]["messageId"].as_str().unwrap().to_string())
            .collect();
        // Two requests held open together: each instance has one slot, so
        // each instance sent one of them. (Within 20 s, far less than the
        // attempts' timeout: no retry of a timed-out attempt counts.)
        let both = rx.wait_for(2, WAIT).await;
        assert_eq!(rx.max_concurrent(), 2);
        assert_ne!(
            both[0].header("dispatch-ordering-key"),
            both[1].header("dispatch-ordering-key"),
            "two keys, one per instance"
        );
        gate.open();
        let received = rx.wait_for(80, Duration::from_secs(30)).await;
        for (k, key) in keys.iter().enumerate() {
            let mine: Vec<String> = ids.iter().skip(k).step_by(keys.len()).cloned().collect();
            assert_eq!(arrivals(&received, key), twice_each(&mine), "key {key}");
        }
        assert_eq!(rx.max_concurrent_per_key(), 1);
        assert_eq!(
            rx.max_concurrent(),
            2,
            "the instances went side by side, one attempt each"
        );
        first.shutdown().await;
        second.shutdown().await;
    }
}

#[tokio::test]
async fn ordering_keys_are_checked_returned_and_filtered() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = api.webhook(&rx.url("/hook")).await;
    let t = t["targetId"].as_str().unwrap();
    let at = in_ms(3_600_000);
    for (key, why) in [
        (json!(""), "empty"),
        (json!("k".repeat(256)), "256 characters"),
        (json!("a\nb"), "a control character"),
        (json!(7), "not a string"),
    ] {
        let r = api
            .post(
                "/messages",
                json!({"targetId": t, "deliveryTime": at, "payload": "x", "orderingKey": key}),
            )
            .await;
        assert_eq!(r.status(), 400, "{why}");
        let p: Value = r.json().await.unwrap();
        assert_eq!(p["errors"][0]["field"], "orderingKey", "{why}: {p}");
    }
    let r = api
        .post(
            "/messages/batch",
            json!({"messages": [
                {"targetId": t, "deliveryTime": at, "payload": "x", "orderingKey": "é".repeat(255)},
                {"targetId": t, "deliveryTime": at, "payload": "x", "orderingKey": ""},
            ]}),
        )
        .await;
    let out: Value = r.json().await.unwrap();
    assert_eq!(out["items"][0]["status"], 201, "255 characters: {out}");
    assert_eq!(
        out["items"][1]["error"]["errors"][0]["field"],
        "messages[1].orderingKey"
    );

    let keyed = schedule(&api, t, &at, Some("order-17"), "x").await;
    let plain = schedule(&api, t, &at, None, "x").await;
    assert_eq!(api.message(&plain).await["orderingKey"], Value::Null);
    let listed: Value = api
        .get("/messages?orderingKey=order-17")
        .await
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["messageId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![keyed.as_str()]);
    // Another account's key of the same name is not theirs.
    let globex = app.api("globex").await;
    let theirs: Value = globex
        .get("/messages?orderingKey=order-17")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(theirs["items"], json!([]));
    app.shutdown().await;
}
