//! Pull targets (docs/api.md#pull-targets) through the API, on the store
//! under test: the target's config and its limits; receive, ack, nack and
//! visibility with their receipt handles; receives counted and recorded as
//! attempts; dead letters after the last allowed receive and after the
//! retention; long polling; order per key; what each scope and another
//! account may do; and, on PostgreSQL, two instances sharing the consumers.

mod common;

use std::{collections::HashSet, time::Duration};

use common::{
    in_ms,
    problem::{assert_invalid, assert_problem},
    receiver::Receiver,
    Api, TestApp,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

async fn pull_target(api: &Api, config: Value) -> String {
    let r = api
        .post(
            "/targets",
            json!({"name": "queue", "type": "pull", "config": config}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let t: Value = r.json().await.unwrap();
    t["targetId"].as_str().unwrap().to_string()
}

async fn receive(api: &Api, target: &str, body: Value) -> Vec<Value> {
    let r = api.post(&format!("/targets/{target}/receive"), body).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let out: Value = r.json().await.unwrap();
    out["items"].as_array().unwrap().clone()
}

async fn ack(api: &Api, target: &str, handles: &[&str]) -> Value {
    let r = api
        .post(
            &format!("/targets/{target}/ack"),
            json!({ "receiptHandles": handles }),
        )
        .await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    r.json().await.unwrap()
}

fn handle(item: &Value) -> &str {
    item["receiptHandle"].as_str().unwrap()
}

#[tokio::test]
async fn a_pull_target_has_its_defaults_and_its_limits_answer_400_by_field() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let r = api
        .post(
            "/targets",
            json!({"name": "queue", "type": "pull", "config": {}}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let t: Value = r.json().await.unwrap();
    assert_eq!(t["type"], "pull");
    assert_eq!(
        t["config"],
        json!({"visibilityTimeout": "60s", "maxReceiveCount": 5, "retention": "14d"})
    );
    let id = t["targetId"].as_str().unwrap();
    let r = api
        .patch(
            &format!("/targets/{id}"),
            json!({"config": {"visibilityTimeout": "5m", "maxReceiveCount": 3}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let t: Value = r.json().await.unwrap();
    assert_eq!(
        t["config"],
        json!({"visibilityTimeout": "5m", "maxReceiveCount": 3, "retention": "14d"})
    );

    for (config, field) in [
        (
            json!({"visibilityTimeout": "0s"}),
            "config.visibilityTimeout",
        ),
        (
            json!({"visibilityTimeout": "13h"}),
            "config.visibilityTimeout",
        ),
        (json!({"visibilityTimeout": 60}), "config.visibilityTimeout"),
        (
            json!({"visibilityTimeout": "a\u{0}"}),
            "config.visibilityTimeout",
        ),
        (json!({"maxReceiveCount": 0}), "config.maxReceiveCount"),
        (json!({"maxReceiveCount": 1001}), "config.maxReceiveCount"),
        (json!({"maxReceiveCount": 1.5}), "config.maxReceiveCount"),
        (json!({"retention": "59s"}), "config.retention"),
        (json!({"retention": "15d"}), "config.retention"),
        (
            json!({"flowControl": {"parallelism": 5}}),
            "config.flowControl",
        ),
        (
            json!({"circuitBreaker": {"failures": 5}}),
            "config.circuitBreaker",
        ),
    ] {
        let r = api
            .post(
                "/targets",
                json!({"name": "queue", "type": "pull", "config": config}),
            )
            .await;
        assert_invalid(r, field).await;
    }
    let listed: Value = api.get("/targets").await.json().await.unwrap();
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        1,
        "no bad target was made"
    );
}

#[tokio::test]
async fn a_message_is_received_hidden_acked_and_delivered() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    // A body of null is an empty one.
    let r = api
        .post(&format!("/targets/{t}/receive"), Value::Null)
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["items"], json!([]));
    let m = api.schedule(&t, &in_ms(-1000), "hello \"pull\"").await;
    let id = m["messageId"].as_str().unwrap();

    // A body may be left out.
    let r = api.post_empty(&format!("/targets/{t}/receive")).await;
    assert_eq!(r.status(), 200);
    let items = r.json::<Value>().await.unwrap()["items"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(items.len(), 1);
    let item = &items[0];
    assert_eq!(item["messageId"], id);
    assert_eq!(item["receiveCount"], 1);
    assert_eq!(item["payload"], "hello \"pull\"");
    assert_eq!(item["originalDeliveryTime"], m["deliveryTime"]);
    assert_eq!(item["enqueuedAt"], m["createdAt"]);
    assert!(item["deliveryTime"].as_str().unwrap().ends_with('Z'));
    assert!(item["orderingKey"].is_null() && item["eventId"].is_null() && item["type"].is_null());

    // Hidden: no other receive gets it.
    assert!(receive(&api, &t, json!({"max": 10})).await.is_empty());
    let during = api.message(id).await;
    assert_eq!(during["state"], "Scheduled");
    assert_eq!(during["attemptCount"], 1);

    let out = ack(&api, &t, &[handle(item)]).await;
    assert_eq!(out, json!({"acked": 1, "stale": []}));
    let m = api.message(id).await;
    assert_eq!(m["state"], "Delivered");
    assert!(m["deliveredAt"].is_string());
    let attempts = api.attempts(id).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "Received");
    assert_eq!(attempts[0]["attempt"], 1);

    // Acked once is acked: the handle is stale now.
    let out = ack(&api, &t, &[handle(item)]).await;
    assert_eq!(out, json!({"acked": 0, "stale": [handle(item)]}));
    // The counters are the process's (other tests run beside this one).
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap();
    let text = metrics.text().await.unwrap();
    for name in ["dispatch_pull_received_total", "dispatch_pull_acked_total"] {
        let value: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {text}"))
            .parse()
            .unwrap();
        assert!(value >= 1.0, "{name} {value}");
    }
    assert!(
        text.contains("dispatch_pull_depth{state=\"due\"}"),
        "{text}"
    );
}

#[tokio::test]
async fn receives_take_the_earliest_due_first_up_to_max_and_nothing_before_its_time() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    let later = api.schedule(&t, &in_ms(3_600_000), "later").await;
    let second = api.schedule(&t, &in_ms(-1000), "second").await;
    let first = api.schedule(&t, &in_ms(-2000), "first").await;
    let third = api.schedule(&t, &in_ms(-500), "third").await;

    let items = receive(&api, &t, json!({"max": 2})).await;
    let ids: Vec<&str> = items
        .iter()
        .map(|i| i["messageId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            first["messageId"].as_str().unwrap(),
            second["messageId"].as_str().unwrap()
        ]
    );
    let items = receive(&api, &t, json!({"max": 100})).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["messageId"], third["messageId"]);
    assert!(
        receive(&api, &t, json!({})).await.is_empty(),
        "{later} is not due"
    );
}

#[tokio::test]
async fn an_unacked_message_comes_back_when_its_visibility_runs_out_and_the_old_handle_goes_stale()
{
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({"visibilityTimeout": "1s"})).await;
    let m = api.schedule(&t, &in_ms(-1), "again").await;
    let first = receive(&api, &t, json!({})).await;
    assert_eq!(first.len(), 1);
    // A long poll is answered when the visibility runs out.
    let started = std::time::Instant::now();
    let second = receive(&api, &t, json!({"wait": "10s"})).await;
    assert_eq!(second.len(), 1, "received again after its visibility");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(second[0]["messageId"], m["messageId"]);
    assert_eq!(second[0]["receiveCount"], 2);
    assert_ne!(handle(&first[0]), handle(&second[0]));

    let out = ack(&api, &t, &[handle(&first[0]), handle(&second[0])]).await;
    assert_eq!(out, json!({"acked": 1, "stale": [handle(&first[0])]}));
    let attempts = api.attempts(m["messageId"].as_str().unwrap()).await;
    assert_eq!(attempts.len(), 2);
}

#[tokio::test]
async fn after_its_last_allowed_receive_runs_out_a_message_is_a_dead_letter() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(
        &api,
        json!({"visibilityTimeout": "1s", "maxReceiveCount": 2}),
    )
    .await;
    let m = api.schedule(&t, &in_ms(-1), "unacked").await;
    let id = m["messageId"].as_str().unwrap();
    assert_eq!(receive(&api, &t, json!({})).await.len(), 1);
    let again = receive(&api, &t, json!({"wait": "10s"})).await;
    assert_eq!(again[0]["receiveCount"], 2);
    let dead = api.wait_for_state(id, "DeadLetter", WAIT).await;
    assert_eq!(dead["lastError"], "not acknowledged after 2 receives");
    assert!(dead["deadLetteredAt"].is_string());
    // Not received a third time, and its handle is stale.
    assert!(receive(&api, &t, json!({})).await.is_empty());
    let out = ack(&api, &t, &[handle(&again[0])]).await;
    assert_eq!(out["acked"], 0);

    // Redrive starts the count over.
    let r = api
        .post("/messages/redrive", json!({"messageIds": [id]}))
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["count"], 1);
    let items = receive(&api, &t, json!({})).await;
    assert_eq!(items[0]["receiveCount"], 1);
}

#[tokio::test]
async fn nack_gives_a_message_back_at_once_or_after_its_delay() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    api.schedule(&t, &in_ms(-1), "n").await;
    let items = receive(&api, &t, json!({})).await;
    let r = api
        .post(
            &format!("/targets/{t}/nack"),
            json!({"receiptHandles": [handle(&items[0]), "not-a-handle"]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"released": 1, "stale": ["not-a-handle"]})
    );
    let items = receive(&api, &t, json!({})).await;
    assert_eq!(items[0]["receiveCount"], 2, "receivable again at once");

    let r = api
        .post(
            &format!("/targets/{t}/nack"),
            json!({"receiptHandles": [handle(&items[0])], "delay": "1s"}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["released"], 1);
    assert!(
        receive(&api, &t, json!({})).await.is_empty(),
        "not before its delay"
    );
    let items = receive(&api, &t, json!({"wait": "10s"})).await;
    assert_eq!(items[0]["receiveCount"], 3);
    // One handle sent twice is one message given back.
    let r = api
        .post(
            &format!("/targets/{t}/nack"),
            json!({"receiptHandles": [handle(&items[0]), handle(&items[0])]}),
        )
        .await;
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"released": 1, "stale": []})
    );
}

#[tokio::test]
async fn a_nacked_last_receive_is_a_dead_letter_when_its_delay_ends() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({"maxReceiveCount": 1})).await;
    let m = api.schedule(&t, &in_ms(-1), "last").await;
    let id = m["messageId"].as_str().unwrap();
    let items = receive(&api, &t, json!({})).await;
    let r = api
        .post(
            &format!("/targets/{t}/nack"),
            json!({"receiptHandles": [handle(&items[0])], "delay": "1s"}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["released"], 1);
    assert_eq!(
        api.message(id).await["state"],
        "Scheduled",
        "until its delay ends"
    );
    let dead = api.wait_for_state(id, "DeadLetter", WAIT).await;
    assert_eq!(dead["lastError"], "not acknowledged after 1 receives");
    assert!(receive(&api, &t, json!({})).await.is_empty());
}

/// With the backstop far away, only what the consumers and the watch learn
/// wakes them: each waiting consumer gets the message due at its time.
#[tokio::test]
async fn waiting_consumers_each_get_a_message_at_its_own_due_time() {
    let app = TestApp::spawn_with(|c| c.sweeper.poll_interval = Duration::from_secs(60)).await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    assert!(receive(&api, &t, json!({"wait": "100ms"})).await.is_empty());
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let (api, t) = (api.clone(), t.clone());
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                (
                    receive(&api, &t, json!({"max": 10, "wait": "15s"})).await,
                    started.elapsed(),
                )
            })
        })
        .collect();
    api.schedule(&t, &in_ms(300), "first").await;
    api.schedule(&t, &in_ms(1_500), "second").await;
    let mut got = Vec::new();
    for w in waiting {
        let (items, took) = w.await.unwrap();
        assert_eq!(items.len(), 1, "{items:?}");
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
        got.push(items[0]["payload"].as_str().unwrap().to_string());
    }
    got.sort();
    assert_eq!(got, ["first", "second"]);
}

#[tokio::test]
async fn visibility_hides_longer_or_shows_at_once_and_a_stale_handle_answers_409() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({"visibilityTimeout": "1s"})).await;
    api.schedule(&t, &in_ms(-1), "v").await;
    let items = receive(&api, &t, json!({})).await;
    let h = handle(&items[0]).to_string();
    let r = api
        .post(
            &format!("/targets/{t}/visibility"),
            json!({"receiptHandle": h, "visibilityTimeout": "1h"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = api
        .post(
            &format!("/targets/{t}/visibility"),
            json!({"receiptHandle": h, "visibilityTimeout": "0s"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let again = receive(&api, &t, json!({})).await;
    assert_eq!(again.len(), 1, "visible at once");
    let r = api
        .post(
            &format!("/targets/{t}/visibility"),
            json!({"receiptHandle": h, "visibilityTimeout": "10s"}),
        )
        .await;
    assert_problem(r, 409).await;
    for body in [
        json!({"receiptHandle": h}),
        json!({"receiptHandle": h, "visibilityTimeout": "13h"}),
        json!({"visibilityTimeout": "1s"}),
    ] {
        let r = api.post(&format!("/targets/{t}/visibility"), body).await;
        assert_problem(r, 400).await;
    }
}

#[tokio::test]
async fn a_long_poll_is_answered_when_a_message_is_scheduled_or_with_nothing_when_wait_ends() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;

    let started = std::time::Instant::now();
    assert!(receive(&api, &t, json!({"wait": "1s"})).await.is_empty());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(950), "{waited:?}");

    let waiting = {
        let api = api.clone();
        let t = t.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            (
                receive(&api, &t, json!({"wait": "20s"})).await,
                started.elapsed(),
            )
        })
    };
    // Whether the consumer waits already or not yet, it gets the message.
    let m = api.schedule(&t, &in_ms(-1), "wake up").await;
    let (items, took) = waiting.await.unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["messageId"], m["messageId"]);
    assert!(took < Duration::from_secs(10), "{took:?}");

    // A message due soon wakes a waiting consumer at its due time.
    let m = api.schedule(&t, &in_ms(700), "soon").await;
    let items = receive(&api, &t, json!({"wait": "10s"})).await;
    assert_eq!(items[0]["messageId"], m["messageId"]);
}

#[tokio::test]
async fn messages_of_a_key_are_received_one_at_a_time_in_order() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({"visibilityTimeout": "1s"})).await;
    let mut ids = Vec::new();
    for (i, at) in [-3000, -2000, -1000].into_iter().enumerate() {
        let r = api
            .post(
                "/messages",
                json!({"targetId": t, "deliveryTime": in_ms(at), "payload": i.to_string(),
                       "orderingKey": "order-1"}),
            )
            .await;
        assert_eq!(r.status(), 201);
        ids.push(r.json::<Value>().await.unwrap()["messageId"].clone());
    }
    let other = api.schedule(&t, &in_ms(-500), "no key").await;

    let items = receive(&api, &t, json!({"max": 10})).await;
    let got: Vec<&Value> = items.iter().map(|i| &i["messageId"]).collect();
    assert_eq!(
        got,
        [&ids[0], &other["messageId"]],
        "one of the key, and the other"
    );
    assert_eq!(items[0]["orderingKey"], "order-1");
    ack(&api, &t, &[handle(&items[1])]).await;
    // Its visibility runs out unacked: the same message again, not the next.
    let again = receive(&api, &t, json!({"wait": "10s"})).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0]["messageId"], ids[0]);
    ack(&api, &t, &[handle(&again[0])]).await;
    let next = receive(&api, &t, json!({"max": 10})).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0]["messageId"], ids[1]);
}

#[tokio::test]
async fn cancel_and_reschedule_make_a_handle_stale_and_reschedule_starts_the_count_over() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    let a = api.schedule(&t, &in_ms(-1), "a").await;
    let b = api.schedule(&t, &in_ms(-1), "b").await;
    let items = receive(&api, &t, json!({"max": 2})).await;
    assert_eq!(items.len(), 2);
    let (ha, hb) = (handle(&items[0]).to_string(), handle(&items[1]).to_string());
    let a_id = a["messageId"].as_str().unwrap();
    let b_id = b["messageId"].as_str().unwrap();

    let r = api.post_empty(&format!("/messages/{a_id}/cancel")).await;
    assert_eq!(r.status(), 200, "a received message can be cancelled");
    let r = api
        .post(
            &format!("/messages/{b_id}/reschedule"),
            json!({"deliveryTime": in_ms(-1)}),
        )
        .await;
    assert_eq!(r.status(), 200, "and rescheduled");
    let out = ack(&api, &t, &[&ha, &hb]).await;
    assert_eq!(out["acked"], 0);
    assert_eq!(api.message(a_id).await["state"], "Cancelled");
    let items = receive(&api, &t, json!({})).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["messageId"], b["messageId"]);
    assert_eq!(items[0]["receiveCount"], 1);
}

#[tokio::test]
async fn a_disabled_pull_target_answers_no_items_until_enabled() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    api.schedule(&t, &in_ms(-1), "wait").await;
    assert_eq!(
        api.post_empty(&format!("/targets/{t}/disable"))
            .await
            .status(),
        200
    );
    assert!(receive(&api, &t, json!({})).await.is_empty());
    assert_eq!(
        api.post_empty(&format!("/targets/{t}/enable"))
            .await
            .status(),
        200
    );
    assert_eq!(receive(&api, &t, json!({})).await.len(), 1);
}

#[tokio::test]
async fn the_sweeper_never_sends_a_pull_targets_message() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let hook = api.webhook(&rx.url("/hook")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let t = pull_target(&api, json!({})).await;
    let pulled = api.schedule(&t, &in_ms(-1), "stay").await;
    let pushed = api.schedule(&hook, &in_ms(-1), "go").await;
    // Delivered after the pull message fell due: the sweeper has looked.
    api.wait_for_state(pushed["messageId"].as_str().unwrap(), "Delivered", WAIT)
        .await;
    let m = api.message(pulled["messageId"].as_str().unwrap()).await;
    assert_eq!(m["state"], "Scheduled");
    assert_eq!(m["attemptCount"], 0);
}

#[tokio::test]
async fn bad_receives_acks_and_nacks_answer_400_and_change_nothing() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    let m = api.schedule(&t, &in_ms(-1), "kept").await;
    for (body, field) in [
        (json!({"max": 0}), "max"),
        (json!({"max": 101}), "max"),
        (json!({"max": "10"}), "max"),
        (json!({"wait": "21s"}), "wait"),
        (json!({"wait": 5}), "wait"),
        (json!({"visibilityTimeout": "0s"}), "visibilityTimeout"),
        (json!({"visibilityTimeout": "13h"}), "visibilityTimeout"),
    ] {
        let r = api.post(&format!("/targets/{t}/receive"), body).await;
        assert_invalid(r, field).await;
    }
    let many: Vec<String> = (0..1001).map(|i| i.to_string()).collect();
    for path in ["ack", "nack"] {
        for body in [
            json!({}),
            json!({"receiptHandles": []}),
            json!({"receiptHandles": "x"}),
            json!({"receiptHandles": [1]}),
            json!({ "receiptHandles": many }),
        ] {
            let r = api.post(&format!("/targets/{t}/{path}"), body).await;
            assert_invalid(r, "receiptHandles").await;
        }
    }
    let r = api
        .post(
            &format!("/targets/{t}/nack"),
            json!({"receiptHandles": ["x"], "delay": "13h"}),
        )
        .await;
    assert_invalid(r, "delay").await;
    // A handle with U+0000 in it is no handle: stale, not an error.
    let out = ack(&api, &t, &["a\u{0}b"]).await;
    assert_eq!(out, json!({"acked": 0, "stale": ["a\u{0}b"]}));
    let m = api.message(m["messageId"].as_str().unwrap()).await;
    assert_eq!(
        (m["state"].as_str(), m["attemptCount"].as_u64()),
        (Some("Scheduled"), Some(0))
    );
}

#[tokio::test]
async fn scopes_accounts_and_target_types_are_held() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    api.schedule(&t, &in_ms(-1), "mine").await;
    let rx = Receiver::start().await;
    let hook = api.webhook(&rx.url("/hook")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();

    // A consumer's client: receive, ack, nack, visibility and nothing else.
    let consumer = Api {
        base: app.base.clone(),
        http: app.http.clone(),
        token: app.token("acme", &["messages:receive"]).await,
    };
    let r = consumer.get("/messages").await;
    assert_problem(r, 403).await;
    let r = consumer.get(&format!("/targets/{t}")).await;
    assert_problem(r, 403).await;
    let reader = Api {
        token: app.token("acme", &["messages:read", "targets:read"]).await,
        ..consumer.clone()
    };
    let r = reader
        .post(&format!("/targets/{t}/receive"), json!({}))
        .await;
    let p = assert_problem(r, 403).await;
    assert!(
        p["detail"].as_str().unwrap().contains("messages:receive"),
        "{p}"
    );

    // Another account's target is unknown, its handles stale.
    let globex = app.api("globex").await;
    let r = globex
        .post(&format!("/targets/{t}/receive"), json!({}))
        .await;
    assert_problem(r, 404).await;
    let other = pull_target(&globex, json!({})).await;
    let items = receive(&consumer, &t, json!({})).await;
    assert_eq!(items.len(), 1);
    let out = ack(&globex, &other, &[handle(&items[0])]).await;
    assert_eq!(out["acked"], 0, "another target's handle is stale");
    let r = globex
        .post(
            &format!("/targets/{t}/ack"),
            json!({"receiptHandles": [handle(&items[0])]}),
        )
        .await;
    assert_problem(r, 404).await;
    // A webhook is not pulled.
    let r = consumer
        .post(&format!("/targets/{hook}/receive"), json!({}))
        .await;
    assert_problem(r, 409).await;
    assert_eq!(ack(&consumer, &t, &[handle(&items[0])]).await["acked"], 1);
}

#[tokio::test]
async fn events_and_schedules_reach_a_pull_target() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    let r = api
        .post(
            "/subscriptions",
            json!({"targetId": t, "types": ["order.*"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = api
        .post(
            "/events",
            json!({"type": "order.created", "payload": "{\"id\":1}"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let e: Value = r.json().await.unwrap();
    let items = receive(&api, &t, json!({"wait": "5s"})).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["eventId"], e["eventId"]);
    assert_eq!(items[0]["type"], "order.created");
    assert_eq!(items[0]["payload"], "{\"id\":1}");
}

#[tokio::test]
async fn replay_bulk_cancel_and_schedules_work_on_a_pull_target() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({})).await;
    let from = in_ms(-1);
    let m = api.schedule(&t, &in_ms(-1), "again").await;
    let items = receive(&api, &t, json!({})).await;
    ack(&api, &t, &[handle(&items[0])]).await;
    // Replay makes the acked message receivable again, its count from 0.
    let r = api
        .post(
            "/messages/replay",
            json!({"targetId": t, "from": from, "to": in_ms(1000)}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["count"], 1);
    let items = receive(&api, &t, json!({})).await;
    assert_eq!(items[0]["messageId"], m["messageId"]);
    assert_eq!(items[0]["receiveCount"], 1);
    // A bulk cancel takes a received message too; its handle goes stale.
    let r = api
        .post("/messages/cancel", json!({"messageIds": [m["messageId"]]}))
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["count"], 1);
    assert_eq!(ack(&api, &t, &[handle(&items[0])]).await["acked"], 0);

    // A schedule's runs are received like any message.
    let r = api
        .post(
            "/schedules",
            json!({"targetId": t, "every": "1s", "payload": "tick"}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let items = receive(&api, &t, json!({"wait": "10s"})).await;
    assert_eq!(items[0]["payload"], "tick");
}

#[tokio::test]
async fn a_message_not_received_within_the_retention_is_a_dead_letter() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = pull_target(&api, json!({"retention": "1m"})).await;
    let held = api.schedule(&t, &in_ms(-62_000), "held").await;
    // A consumer works on this one: it is not expired under it.
    let got = receive(&api, &t, json!({"max": 1})).await;
    assert_eq!(got[0]["messageId"], held["messageId"]);
    let old = api.schedule(&t, &in_ms(-61_000), "old").await;
    let young = api.schedule(&t, &in_ms(-1_000), "young").await;
    // The retention pass, driven rather than waited for.
    let expired = app.store().expire_unreceived(app.now(), 100).await.unwrap();
    assert_eq!(expired, 1);
    let old = api.message(old["messageId"].as_str().unwrap()).await;
    assert_eq!(old["state"], "DeadLetter");
    assert_eq!(old["lastError"], "not received within 1m");
    assert_eq!(
        api.message(young["messageId"].as_str().unwrap()).await["state"],
        "Scheduled"
    );
    assert_eq!(
        api.message(held["messageId"].as_str().unwrap()).await["state"],
        "Scheduled"
    );
    assert_eq!(ack(&api, &t, &[handle(&got[0])]).await["acked"], 1);
}

mod postgres {
    use super::*;

    /// Two instances on one PostgreSQL database, configured alike, and a
    /// client of acme for each.
    async fn two_instances(
        configure: fn(&mut dispatch::config::Config),
    ) -> (TestApp, TestApp, Api, Api) {
        let first = TestApp::spawn_postgres_with(configure).await;
        let second = TestApp::spawn_on(first.db.clone(), configure).await;
        let a = first.api("acme").await;
        let b = Api {
            base: second.base.clone(),
            ..a.clone()
        };
        (first, second, a, b)
    }

    #[tokio::test]
    async fn two_instances_never_hand_out_one_message_twice() {
        let (_first, _second, a, b) = two_instances(|_| {}).await;
        let t = pull_target(&a, json!({"visibilityTimeout": "1h"})).await;
        let ids: HashSet<String> = a
            .schedule_many(&t, &in_ms(-1), 400)
            .await
            .into_iter()
            .collect();

        let mut consumers = Vec::new();
        for i in 0..8 {
            let api = if i % 2 == 0 { a.clone() } else { b.clone() };
            let t = t.clone();
            consumers.push(tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let items = receive(&api, &t, json!({"max": 7})).await;
                    if items.is_empty() {
                        return got;
                    }
                    let handles: Vec<&str> = items.iter().map(handle).collect();
                    assert_eq!(ack(&api, &t, &handles).await["acked"], items.len());
                    got.extend(
                        items
                            .iter()
                            .map(|i| i["messageId"].as_str().unwrap().to_string()),
                    );
                }
            }));
        }
        let mut seen = Vec::new();
        for c in consumers {
            seen.extend(c.await.unwrap());
        }
        let distinct: HashSet<String> = seen.iter().cloned().collect();
        assert_eq!(seen.len(), distinct.len(), "a message was received twice");
        assert_eq!(distinct, ids);
    }

    /// An instance stops (or dies) after a receive: nothing is lost, the
    /// message comes back on another instance when its visibility ends.
    #[tokio::test]
    async fn a_message_received_on_an_instance_that_stops_comes_back_on_another() {
        let (first, _second, a, b) = two_instances(|_| {}).await;
        let t = pull_target(&a, json!({"visibilityTimeout": "1s"})).await;
        let m = a.schedule(&t, &in_ms(-1), "kept").await;
        assert_eq!(receive(&a, &t, json!({})).await.len(), 1);
        first.shutdown().await;
        let items = receive(&b, &t, json!({"wait": "10s"})).await;
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["messageId"], m["messageId"]);
        assert_eq!(items[0]["receiveCount"], 2);
        assert_eq!(ack(&b, &t, &[handle(&items[0])]).await["acked"], 1);
    }

    #[tokio::test]
    async fn a_consumer_waiting_on_one_instance_gets_a_message_scheduled_on_another() {
        // Far beyond the test's window: only the other instance's word helps.
        let (_first, _second, a, b) =
            two_instances(|c| c.sweeper.poll_interval = Duration::from_secs(60)).await;
        let t = pull_target(&a, json!({})).await;
        // The watch on the second instance learns the target is empty.
        assert!(receive(&b, &t, json!({"wait": "1s"})).await.is_empty());
        let waiting = {
            let t = t.clone();
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                (
                    receive(&b, &t, json!({"wait": "20s"})).await,
                    started.elapsed(),
                )
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let m = a.schedule(&t, &in_ms(-1), "across").await;
        let (items, took) = waiting.await.unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["messageId"], m["messageId"]);
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
}

/// SQLite rebuilds `targets` and `attempts` to let them hold pull targets and
/// receives: a database made by the releases before keeps every row.
#[tokio::test]
async fn an_embedded_database_from_before_pull_targets_keeps_its_rows_through_the_upgrade() {
    use dispatch::store::{prelude::*, sqlite::SqliteStore};
    use sqlx::{migrate::Migrator, sqlite::SqliteConnectOptions, SqlitePool};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dispatch.db");
    let before: Vec<_> = sqlx::migrate!("migrations/sqlite")
        .migrations
        .iter()
        .filter(|m| m.version < 20261209000100)
        .cloned()
        .collect();
    let old = Migrator {
        migrations: before.into(),
        ..Migrator::DEFAULT
    };
    let pool = SqlitePool::connect_with(
        SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .foreign_keys(true),
    )
    .await
    .unwrap();
    old.run(&pool).await.unwrap();
    let target = "DI-T-0123456789";
    let message = "0190f3a4-7b1c-7cde-8f00-112233445566";
    for sql in [
        "INSERT INTO accounts (name, created_at) VALUES ('acme', 0)".to_string(),
        format!(
            "INSERT INTO targets (id, account, name, kind, enabled, config, created_at, updated_at) \
             VALUES ('{target}', 'acme', 'old', 'webhook', 1, \
             '{{\"url\":\"https://example.com/hook\",\"signingSecret\":\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"}}', 0, 0)"
        ),
        format!(
            "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, \
             next_attempt_at, claim_at, attempt_count, created_at, updated_at) \
             VALUES ('{message}', 'acme', '{target}', 'Scheduled', 'kept', 0, 0, 0, 1, 0, 0)"
        ),
        format!(
            "INSERT INTO attempts (message_id, attempt, started_at, finished_at, duration_ms, outcome, \
             status_code, account, target_id) VALUES ('{message}', 1, 0, 1, 1, 'RetryableFailure', 503, 'acme', '{target}')"
        ),
    ] {
        sqlx::query(&sql).execute(&pool).await.unwrap();
    }
    pool.close().await;

    let store = SqliteStore::open(&path).await.expect("the upgrade applies");
    let acme = common::account("acme");
    let id = dispatch::domain::ids::MessageId(message.parse().unwrap());
    let m = store
        .get_message(&acme, &id)
        .await
        .unwrap()
        .expect("the message is kept");
    assert_eq!(m.payload.as_str(), "kept");
    let target_id: dispatch::domain::ids::TargetId = target.parse().unwrap();
    assert!(store.get_target(&acme, &target_id).await.unwrap().is_some());
    let attempts = store
        .list_attempts(&acme, &id, None, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(attempts.len(), 1, "its attempt is kept");
    // The rebuilt tables still hold their keys: the message goes with its target.
    drop(store);
    let pool = SqlitePool::connect_with(
        SqliteConnectOptions::new()
            .filename(&path)
            .foreign_keys(true),
    )
    .await
    .unwrap();
    let (violations,): (i64,) = sqlx::query_as("SELECT count(*) FROM pragma_foreign_key_check")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(violations, 0);
    sqlx::query("DELETE FROM targets")
        .execute(&pool)
        .await
        .unwrap();
    let (left,): (i64,) = sqlx::query_as("SELECT count(*) FROM messages")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "ON DELETE CASCADE still holds");
}
