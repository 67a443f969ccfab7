//! Dispatch's own events (docs/api.md#dispatchs-own-events) through the API,
//! on the store under test: what happens to a message is published as an
//! event of its account, in order per message, to the subscriptions that
//! name `dispatch.` types and to no other; messages made from them tell
//! nothing (no loops).

mod common;

use std::time::Duration;

use common::{in_ms, receiver::Receiver, receiver::Reply, Api, TestApp};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

async fn subscribe(api: &Api, target: &str, types: &[&str]) {
    let r = api
        .post(
            "/subscriptions",
            json!({"targetId": target, "types": types}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
}

async fn events(api: &Api, ty: &str) -> Vec<Value> {
    let r = api.get(&format!("/events?type={ty}&limit=100")).await;
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["items"]
        .as_array()
        .unwrap()
        .clone()
}

/// A webhook target at the receiver's `path`; its id.
async fn hook(api: &Api, receiver: &Receiver, path: &str) -> String {
    id_of(&api.webhook(&receiver.url(path)).await)
}

/// The id a created target or message answered with.
fn id_of(created: &Value) -> String {
    created
        .get("messageId")
        .or_else(|| created.get("targetId"))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no id in {created}"))
        .to_string()
}

/// The event's payload (a JSON text) as JSON.
fn told(envelope: &Value) -> Value {
    serde_json::from_str(envelope["payload"].as_str().unwrap()).unwrap()
}

/// Waits until every message the listener got is Delivered: their records
/// are written, and whatever they would have told with them.
async fn settle(api: &Api, got: &[common::receiver::Received]) {
    for g in got {
        api.wait_for_state(g.json()["messageId"].as_str().unwrap(), "Delivered", WAIT)
            .await;
    }
}

#[tokio::test]
async fn each_failed_attempt_then_the_delivery_is_told_in_order_and_the_telling_tells_nothing() {
    let app = TestApp::spawn_with(common::fast_ladder).await;
    let api = app.api("acme").await;
    let flaky = Receiver::start().await;
    flaky.fail_once_each();
    let listener = Receiver::start().await;
    let work = hook(&api, &flaky, "/hook").await;
    let hears = hook(&api, &listener, "/told").await;
    // `dispatch.*` matches the events about the listener's own messages too:
    // were they told, this would never end.
    subscribe(&api, &hears, &["dispatch.*"]).await;

    let m = api
        .post(
            "/messages",
            json!({"targetId": work, "payload": "invoice 7", "deliveryTime": in_ms(0),
                   "orderingKey": "customer-1"}),
        )
        .await;
    assert_eq!(m.status(), 201);
    let id = m.json::<Value>().await.unwrap()["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let delivered = api.wait_for_state(&id, "Delivered", WAIT).await;

    let got = listener.wait_for(2, WAIT).await;
    let types: Vec<String> = got
        .iter()
        .map(|g| g.json()["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        types,
        [
            "dispatch.message.attempt_failed",
            "dispatch.message.delivered"
        ],
        "a message's failed attempt is told before its delivery"
    );
    let (failed, done) = (told(&got[0].json()), told(&got[1].json()));
    assert_eq!(failed["messageId"], id.as_str());
    assert_eq!(failed["targetId"], work.as_str());
    assert_eq!(failed["orderingKey"], "customer-1");
    assert_eq!(failed["eventId"], Value::Null);
    assert_eq!(failed["type"], Value::Null);
    assert_eq!(failed["attemptCount"], 1);
    assert!(
        failed["lastError"].as_str().unwrap().contains("500"),
        "{failed}"
    );
    let attempts = api.attempts(&id).await;
    assert_eq!(
        failed["nextAttemptAt"]
            .as_str()
            .map(|t| t.parse::<chrono::DateTime<chrono::Utc>>().unwrap()),
        Some(attempts[1]["startedAt"].as_str().unwrap().parse().unwrap()),
        "the retry is told as it came"
    );
    assert_eq!(done["attemptCount"], 2);
    assert_eq!(done["deliveredAt"], delivered["deliveredAt"]);
    for g in &got {
        assert_eq!(
            g.header("dispatch-ordering-key").as_deref(),
            Some(id.as_str()),
            "the events about a message are ordered by its id"
        );
    }

    // The listener's own deliveries told nothing: two events in all.
    settle(&api, &got).await;
    assert_eq!(events(&api, "dispatch.message.delivered").await.len(), 1);
    assert_eq!(
        events(&api, "dispatch.message.attempt_failed").await.len(),
        1
    );
    assert_eq!(listener.count(), 2);
    app.shutdown().await;
}

/// The sweeper looks on its own only every minute: what it delivers within
/// a test's wait, something woke it for.
fn woken_only(c: &mut dispatch::config::Config) {
    common::fast_ladder(c);
    c.sweeper.poll_interval = Duration::from_secs(60);
}

#[tokio::test]
async fn a_dead_letter_is_told_to_the_subscription_that_names_its_type_alone() {
    let app = TestApp::spawn_with(woken_only).await;
    let api = app.api("acme").await;
    let gone = Receiver::start().await;
    gone.always(Reply::status(410));
    let listener = Receiver::start().await;
    let work = hook(&api, &gone, "/hook").await;
    let hears = hook(&api, &listener, "/told").await;
    subscribe(&api, &hears, &["dispatch.message.dead_lettered"]).await;

    let id = id_of(&api.schedule(&work, &in_ms(0), "p").await);
    let dead = api.wait_for_state(&id, "DeadLetter", WAIT).await;
    let got = listener.wait_for(1, WAIT).await;
    let e = got[0].json();
    assert_eq!(e["type"], "dispatch.message.dead_lettered");
    let p = told(&e);
    assert_eq!(p["messageId"], id.as_str());
    assert_eq!(p["attemptCount"], 1);
    assert_eq!(p["lastError"], dead["lastError"]);
    assert_eq!(p["deadLetteredAt"], dead["deadLetteredAt"]);
    assert_eq!(p["orderingKey"], Value::Null);

    // The failed attempt matched no subscription: no event of it is kept.
    settle(&api, &got).await;
    assert!(events(&api, "dispatch.message.attempt_failed")
        .await
        .is_empty());
    assert_eq!(listener.count(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn star_and_other_accounts_hear_nothing_and_nothing_is_kept_for_them() {
    let app = TestApp::spawn().await;
    let acme = app.api("acme").await;
    let other = app.api("globex").await;
    let receiver = Receiver::start().await;
    let listener = Receiver::start().await;
    let work = hook(&acme, &receiver, "/hook").await;
    // Acme listens to every type: `*` is not Dispatch's own.
    let everything = hook(&acme, &listener, "/all").await;
    subscribe(&acme, &everything, &["*"]).await;
    // Another account listens to Dispatch's own: its own messages only.
    let theirs = hook(&other, &listener, "/other").await;
    subscribe(&other, &theirs, &["dispatch.*"]).await;

    let id = id_of(&acme.schedule(&work, &in_ms(0), "p").await);
    acme.wait_for_state(&id, "Delivered", WAIT).await;
    assert_eq!(receiver.count(), 1);
    assert_eq!(listener.count(), 0);
    for api in [&acme, &other] {
        assert!(events(api, "dispatch.message.delivered").await.is_empty());
    }
    // A disabled subscription tells nothing either.
    let r = acme
        .get(&format!("/subscriptions?targetId={everything}"))
        .await;
    let sub = r.json::<Value>().await.unwrap()["items"][0]["subscriptionId"]
        .as_str()
        .unwrap()
        .to_string();
    let r = acme
        .patch(
            &format!("/subscriptions/{sub}"),
            json!({"types": ["dispatch.*"], "enabled": false}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let id = id_of(&acme.schedule(&work, &in_ms(0), "q").await);
    acme.wait_for_state(&id, "Delivered", WAIT).await;
    assert!(events(&acme, "dispatch.message.delivered").await.is_empty());
    assert_eq!(listener.count(), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn a_pull_consumers_ack_and_its_last_receive_given_back_are_told() {
    let app = TestApp::spawn_with(woken_only).await;
    let api = app.api("acme").await;
    let listener = Receiver::start().await;
    let hears = hook(&api, &listener, "/told").await;
    subscribe(&api, &hears, &["dispatch.message.*"]).await;
    let r = api
        .post(
            "/targets",
            json!({"name": "queue", "type": "pull", "config": {"maxReceiveCount": 1}}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let queue = r.json::<Value>().await.unwrap()["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let first = id_of(&api.schedule(&queue, &in_ms(0), "one").await);
    let second = id_of(&api.schedule(&queue, &in_ms(0), "two").await);
    let got: Value = api
        .post(&format!("/targets/{queue}/receive"), json!({"max": 2}))
        .await
        .json()
        .await
        .unwrap();
    let handle = |id: &str| -> Value {
        got["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["messageId"] == id)
            .unwrap()["receiptHandle"]
            .clone()
    };
    let r = api
        .post(
            &format!("/targets/{queue}/ack"),
            json!({"receiptHandles": [handle(&first)]}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["acked"], 1);
    // Given back after its only allowed receive, the other is a dead letter.
    let r = api
        .post(
            &format!("/targets/{queue}/nack"),
            json!({"receiptHandles": [handle(&second)]}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["released"], 1);
    let dead = api.wait_for_state(&second, "DeadLetter", WAIT).await;

    let told_of = listener.wait_for(2, WAIT).await;
    let by_type = |ty: &str| -> Value {
        told(
            &told_of
                .iter()
                .find(|g| g.json()["type"] == ty)
                .unwrap_or_else(|| panic!("no {ty}"))
                .json(),
        )
    };
    let delivered = by_type("dispatch.message.delivered");
    assert_eq!(delivered["messageId"], first.as_str());
    assert_eq!(delivered["targetId"], queue.as_str());
    assert_eq!(delivered["attemptCount"], 1, "one receive");
    assert_eq!(
        delivered["deliveredAt"],
        api.message(&first).await["deliveredAt"]
    );
    let died = by_type("dispatch.message.dead_lettered");
    assert_eq!(died["messageId"], second.as_str());
    assert_eq!(died["lastError"], dead["lastError"]);
    assert_eq!(died["deadLetteredAt"], dead["deadLetteredAt"]);
    settle(&api, &told_of).await;
    assert_eq!(listener.count(), 2);
    app.shutdown().await;
}

#[tokio::test]
async fn a_breaker_that_opens_and_closes_is_told_in_order_and_its_probe_is_not() {
    let app = TestApp::spawn_with(common::fast_ladder).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(500), Reply::status(500)]);
    rx.always(Reply::status(200));
    let listener = Receiver::start().await;
    let hears = hook(&api, &listener, "/told").await;
    subscribe(&api, &hears, &["dispatch.target.*"]).await;
    let target = api
        .webhook_with(
            &rx.url("/b"),
            json!({"circuitBreaker": {"failures": 2, "cooldown": "1s"},
                   "flowControl": {"parallelism": 1}}),
        )
        .await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let a = id_of(&api.schedule(&target, &in_ms(0), "a").await);
    let b = id_of(&api.schedule(&target, &in_ms(0), "b").await);
    api.wait_for_state(&a, "Delivered", WAIT).await;
    api.wait_for_state(&b, "Delivered", WAIT).await;

    let got = listener.wait_for(2, WAIT).await;
    let types: Vec<String> = got
        .iter()
        .map(|g| g.json()["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        types,
        [
            "dispatch.target.breaker_opened",
            "dispatch.target.breaker_closed"
        ]
    );
    let (opened, closed) = (told(&got[0].json()), told(&got[1].json()));
    assert_eq!(opened["targetId"], target.as_str());
    assert_eq!(opened["state"], "open");
    assert_eq!(opened["consecutiveFailures"], 2);
    assert!(opened["openUntil"].is_string(), "{opened}");
    assert_eq!(
        closed,
        json!({"targetId": target, "state": "closed", "consecutiveFailures": 0, "openUntil": null})
    );
    for g in &got {
        assert_eq!(
            g.header("dispatch-ordering-key").as_deref(),
            Some(target.as_str())
        );
    }
    // The half-open probe and the messages' own fates were not told.
    settle(&api, &got).await;
    assert_eq!(listener.count(), 2);
    assert!(events(&api, "dispatch.message.delivered").await.is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn a_breaker_taken_away_while_open_is_told_closed_and_its_messages_go() {
    let app = TestApp::spawn_with(common::fast_ladder).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(500)]);
    rx.always(Reply::status(200));
    let listener = Receiver::start().await;
    let hears = hook(&api, &listener, "/told").await;
    subscribe(&api, &hears, &["dispatch.target.*"]).await;
    // Open after one failure, for an hour: only the patch can close it.
    let target = id_of(
        &api.webhook_with(
            &rx.url("/b"),
            json!({"circuitBreaker": {"failures": 1, "cooldown": "1h"}}),
        )
        .await,
    );
    let a = id_of(&api.schedule(&target, &in_ms(0), "a").await);
    let opened = listener.wait_for(1, WAIT).await;
    assert_eq!(opened[0].json()["type"], "dispatch.target.breaker_opened");
    let r = api.get(&format!("/targets/{target}")).await;
    assert_eq!(r.json::<Value>().await.unwrap()["health"]["state"], "open");

    let r = api
        .patch(
            &format!("/targets/{target}"),
            json!({"config": {"circuitBreaker": null}}),
        )
        .await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let patched: Value = r.json().await.unwrap();
    // Without a breaker there is no health to show.
    assert!(patched["health"].is_null(), "{patched}");
    let got = listener.wait_for(2, WAIT).await;
    assert_eq!(got[1].json()["type"], "dispatch.target.breaker_closed");
    assert_eq!(
        told(&got[1].json()),
        json!({"targetId": target, "state": "closed", "consecutiveFailures": 0, "openUntil": null})
    );
    // The message the breaker held goes on its ladder.
    api.wait_for_state(&a, "Delivered", WAIT).await;
    // A patch that keeps no breaker and had none tells nothing more.
    let r = api
        .patch(&format!("/targets/{target}"), json!({"name": "renamed"}))
        .await;
    assert_eq!(r.status(), 200);
    settle(&api, &got).await;
    assert_eq!(listener.count(), 2);
    app.shutdown().await;
}
