//! Events and subscriptions (docs/api.md#events-and-subscriptions) through
//! the API, on the store under test: subscriptions' lifecycle and rules,
//! fan-out at publish (exact, family and `*` patterns; a target matched twice
//! gets one message; disabled subscriptions and other accounts match
//! nothing), the messages events make (their `eventId` and `type`, filters,
//! delivery to a real receiver), idempotency keys, the archive's reads, and
//! what each scope may do.

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

async fn subscribe(api: &Api, target: &str, types: &[&str]) -> Value {
    let r = api
        .post(
            "/subscriptions",
            json!({"targetId": target, "types": types}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    r.json().await.unwrap()
}

async fn publish(api: &Api, body: Value) -> Value {
    let r = api.post("/events", body).await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        location,
        format!("/events/{}", e["eventId"].as_str().unwrap())
    );
    e
}

/// The targets an event's messages went to.
fn reached(event: &Value) -> HashSet<String> {
    event["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["targetId"].as_str().unwrap().to_string())
        .collect()
}

async fn target(api: &Api, receiver: &Receiver) -> String {
    api.webhook(&receiver.url("/hook")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_subscription_is_created_read_listed_patched_and_deleted() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&api, &receiver).await;

    let r = api
        .post(
            "/subscriptions",
            json!({"targetId": t, "types": ["order.created", "invoice.*"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let s: Value = r.json().await.unwrap();
    let id = s["subscriptionId"].as_str().unwrap().to_string();
    assert!(id.starts_with("DI-U-") && id.len() == 15, "{id}");
    assert_eq!(location, format!("/subscriptions/{id}"));
    assert_eq!(s["targetId"], t);
    assert_eq!(s["name"], "");
    assert_eq!(s["enabled"], true);
    assert_eq!(s["types"], json!(["order.created", "invoice.*"]));
    assert_eq!(s["createdAt"], s["updatedAt"]);

    let got: Value = api.get(&location).await.json().await.unwrap();
    assert_eq!(got, s);

    let r = api
        .patch(
            &location,
            json!({"types": ["*"], "name": "all", "enabled": false}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["types"], json!(["*"]));
    assert_eq!(patched["name"], "all");
    assert_eq!(patched["enabled"], false);
    assert_eq!(patched["createdAt"], s["createdAt"]);

    // application/json is a merge patch too.
    let r = api
        .req(reqwest::Method::PATCH, &location)
        .json(&json!({"enabled": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["enabled"], true);

    let other = target(&api, &receiver).await;
    subscribe(&api, &other, &["x"]).await;
    let all: Value = api.get("/subscriptions").await.json().await.unwrap();
    assert_eq!(all["items"].as_array().unwrap().len(), 2);
    let of_t: Value = api
        .get(&format!("/subscriptions?targetId={t}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(of_t["items"].as_array().unwrap().len(), 1);
    assert_eq!(of_t["items"][0]["subscriptionId"], id.as_str());
    let page: Value = api
        .get("/subscriptions?limit=1")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let cursor = page["nextCursor"].as_str().unwrap();
    let rest: Value = api
        .get(&format!("/subscriptions?limit=1&cursor={cursor}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_ne!(rest["items"][0], page["items"][0]);

    assert_eq!(api.delete(&location).await.status(), 204);
    assert_problem(api.get(&location).await, 404).await;
    assert_problem(api.delete(&location).await, 404).await;
}

#[tokio::test]
async fn bad_subscriptions_are_refused_naming_the_field_and_change_nothing() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&api, &receiver).await;
    let theirs = target(&app.api("globex").await, &receiver).await;

    for (body, field) in [
        (
            json!({"targetId": t, "types": ["ok", "bad type"]}),
            "types[1]",
        ),
        (json!({"targetId": t, "types": ["a.**"]}), "types[0]"),
        (json!({"targetId": t, "types": ["*.a"]}), "types[0]"),
        (json!({"targetId": t, "types": [5]}), "types[0]"),
        (json!({"targetId": t, "types": []}), "types"),
        (json!({"targetId": t, "types": vec!["a"; 101]}), "types"),
        (json!({"targetId": t}), "types"),
        (json!({"types": ["a"]}), "targetId"),
        (json!({"targetId": theirs, "types": ["a"]}), "targetId"),
        (
            json!({"targetId": "DI-T-0000000000", "types": ["a"]}),
            "targetId",
        ),
        (
            json!({"targetId": t, "types": ["a"], "name": "x".repeat(201)}),
            "name",
        ),
        (
            json!({"targetId": t, "types": ["a"], "enabled": "yes"}),
            "enabled",
        ),
    ] {
        assert_invalid(api.post("/subscriptions", body.clone()).await, field).await;
    }
    let list: Value = api.get("/subscriptions").await.json().await.unwrap();
    assert_eq!(list["items"], json!([]), "nothing was created");

    let s = subscribe(&api, &t, &["a"]).await;
    let path = format!("/subscriptions/{}", s["subscriptionId"].as_str().unwrap());
    let other = target(&api, &receiver).await;
    assert_invalid(
        api.patch(&path, json!({"targetId": other})).await,
        "targetId",
    )
    .await;
    assert_invalid(
        api.patch(&path, json!({"types": ["ok", ""]})).await,
        "types[1]",
    )
    .await;
    let unchanged: Value = api.get(&path).await.json().await.unwrap();
    assert_eq!(unchanged, s);
}

#[tokio::test]
async fn another_accounts_subscriptions_and_events_answer_404() {
    let app = TestApp::spawn().await;
    let acme = app.api("acme").await;
    let globex = app.api("globex").await;
    let receiver = Receiver::start().await;
    let t = target(&acme, &receiver).await;
    let s = subscribe(&acme, &t, &["*"]).await;
    let e = publish(&acme, json!({"type": "a", "payload": "p"})).await;
    let s_path = format!("/subscriptions/{}", s["subscriptionId"].as_str().unwrap());
    let e_path = format!("/events/{}", e["eventId"].as_str().unwrap());

    assert_problem(globex.get(&s_path).await, 404).await;
    assert_problem(globex.patch(&s_path, json!({"enabled": false})).await, 404).await;
    assert_problem(globex.delete(&s_path).await, 404).await;
    assert_problem(globex.get(&e_path).await, 404).await;
    let theirs: Value = globex.get("/subscriptions").await.json().await.unwrap();
    assert_eq!(theirs["items"], json!([]));
    let theirs: Value = globex.get("/events").await.json().await.unwrap();
    assert_eq!(theirs["items"], json!([]));
    // Acme's event lists its message to acme, and none to globex.
    let by_event = format!("/messages?eventId={}", e["eventId"].as_str().unwrap());
    let mine: Value = acme.get(&by_event).await.json().await.unwrap();
    assert_eq!(mine["items"].as_array().unwrap().len(), 1, "{mine}");
    let theirs: Value = globex.get(&by_event).await.json().await.unwrap();
    assert_eq!(theirs["items"], json!([]));
    // Their event reaches none of acme's targets, whatever acme subscribed.
    let mine = publish(&globex, json!({"type": "a", "payload": "p"})).await;
    assert_eq!(mine["messages"], json!([]));
    // Still acme's, unchanged.
    assert_eq!(acme.get(&s_path).await.status(), 200);
}

#[tokio::test]
async fn an_event_reaches_each_target_whose_enabled_subscriptions_match_once() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let exact = target(&api, &receiver).await;
    let family = target(&api, &receiver).await;
    let all = target(&api, &receiver).await;
    let twice = target(&api, &receiver).await;
    let other_type = target(&api, &receiver).await;
    let disabled = target(&api, &receiver).await;
    subscribe(&api, &exact, &["order.created"]).await;
    subscribe(&api, &family, &["order.*"]).await;
    subscribe(&api, &all, &["*"]).await;
    subscribe(&api, &twice, &["order.created", "order.*"]).await;
    subscribe(&api, &twice, &["*"]).await;
    subscribe(&api, &other_type, &["invoice.*", "order"]).await;
    let off = subscribe(&api, &disabled, &["*"]).await;
    let r = api
        .patch(
            &format!("/subscriptions/{}", off["subscriptionId"].as_str().unwrap()),
            json!({"enabled": false}),
        )
        .await;
    assert_eq!(r.status(), 200);

    let e = publish(
        &api,
        json!({"type": "order.created", "payload": "{\"id\": 42}", "orderingKey": "order-42"}),
    )
    .await;
    assert!(e["eventId"].as_str().unwrap().starts_with("DI-E-"));
    assert_eq!(e["type"], "order.created");
    assert_eq!(e["payload"], "{\"id\": 42}");
    assert_eq!(e["orderingKey"], "order-42");
    let expected: HashSet<String> = [&exact, &family, &all, &twice]
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(reached(&e), expected);
    assert_eq!(
        e["messages"].as_array().unwrap().len(),
        4,
        "one message per target"
    );
    for m in e["messages"].as_array().unwrap() {
        assert_eq!(m["state"], "Scheduled");
    }

    // Each message is a message: its eventId and type, the event's payload,
    // orderingKey and delivery time; and it is delivered.
    for m in e["messages"].as_array().unwrap() {
        let id = m["messageId"].as_str().unwrap();
        let msg = api.message(id).await;
        assert_eq!(msg["eventId"], e["eventId"]);
        assert_eq!(msg["type"], "order.created");
        assert_eq!(msg["payload"], "{\"id\": 42}");
        assert_eq!(msg["orderingKey"], "order-42");
        assert_eq!(msg["deliveryTime"], e["deliveryTime"]);
        api.wait_for_state(id, "Delivered", WAIT).await;
    }
    // The envelope and the headers carry the event.
    let received = receiver.wait_for(4, WAIT).await;
    assert_eq!(received.len(), 4);
    for r in &received {
        let envelope = r.json();
        assert_eq!(envelope["eventId"], e["eventId"]);
        assert_eq!(envelope["type"], "order.created");
        assert_eq!(envelope["payload"], "{\"id\": 42}");
        assert_eq!(
            r.header("dispatch-event-type").as_deref(),
            Some("order.created")
        );
    }

    // Filters.
    let by_event: Value = api
        .get(&format!(
            "/messages?eventId={}",
            e["eventId"].as_str().unwrap()
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(by_event["items"].as_array().unwrap().len(), 4);
    api.schedule(&exact, &in_ms(0), "plain").await;
    let by_type: Value = api
        .get("/messages?type=order.created")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(by_type["items"].as_array().unwrap().len(), 4);
    let plain = api.get("/messages").await.json::<Value>().await.unwrap();
    let plain = plain["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["payload"] == "plain")
        .cloned()
        .unwrap();
    assert_eq!(plain["eventId"], Value::Null);
    assert_eq!(plain["type"], Value::Null);
    let delivered = receiver.wait_for(5, WAIT).await;
    let plain_envelope = delivered
        .iter()
        .map(|r| r.json())
        .find(|e| e["payload"] == "plain")
        .unwrap();
    assert!(plain_envelope.get("eventId").is_none() && plain_envelope.get("type").is_none());
    assert!(delivered
        .iter()
        .any(|r| r.json()["payload"] == "plain" && r.header("dispatch-event-type").is_none()));
    assert_invalid(api.get("/messages?eventId=DI-M-x").await, "eventId").await;
    assert_invalid(api.get("/messages?type=a..b").await, "type").await;

    // The event's page shows each message's state as it is now.
    let now: Value = api
        .get(&format!("/events/{}", e["eventId"].as_str().unwrap()))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(reached(&now), expected);
    for m in now["messages"].as_array().unwrap() {
        assert_eq!(m["state"], "Delivered");
    }
}

#[tokio::test]
async fn an_event_no_subscription_matches_is_kept_with_no_messages() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&api, &receiver).await;
    subscribe(&api, &t, &["order.*"]).await;
    let at = in_ms(60_000);
    let e = publish(
        &api,
        json!({"type": "invoice.paid", "payload": "p", "deliveryTime": at}),
    )
    .await;
    assert_eq!(e["messages"], json!([]));
    assert_eq!(e["orderingKey"], Value::Null);
    let got: Value = api
        .get(&format!("/events/{}", e["eventId"].as_str().unwrap()))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got, e);
    // "order" is not under "order.".
    let e = publish(&api, json!({"type": "order", "payload": "p"})).await;
    assert_eq!(e["messages"], json!([]));
}

#[tokio::test]
async fn bad_events_are_refused_naming_the_field_and_make_nothing() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&api, &receiver).await;
    subscribe(&api, &t, &["*", "dispatch.*"]).await;
    for (body, field) in [
        (
            json!({"type": "dispatch.message.delivered", "payload": "p"}),
            "type",
        ),
        (json!({"type": "a b", "payload": "p"}), "type"),
        (json!({"type": "", "payload": "p"}), "type"),
        (json!({"type": "x".repeat(256), "payload": "p"}), "type"),
        (json!({"payload": "p"}), "type"),
        (json!({"type": "a"}), "payload"),
        (
            json!({"type": "a", "payload": "x".repeat(61_441)}),
            "payload",
        ),
        (
            json!({"type": "a", "payload": "p", "deliveryTime": "tomorrow"}),
            "deliveryTime",
        ),
        (
            json!({"type": "a", "payload": "p", "orderingKey": ""}),
            "orderingKey",
        ),
    ] {
        assert_invalid(api.post("/events", body.clone()).await, field).await;
    }
    let events: Value = api.get("/events").await.json().await.unwrap();
    assert_eq!(events["items"], json!([]));
    let messages: Value = api.get("/messages").await.json().await.unwrap();
    assert_eq!(messages["items"], json!([]));
}

#[tokio::test]
async fn an_idempotency_key_answers_the_first_publish_again_and_makes_nothing_new() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&api, &receiver).await;
    subscribe(&api, &t, &["*"]).await;
    let body = json!({"type": "order.created", "payload": "p"});
    let send = |body: Value| {
        api.req(reqwest::Method::POST, "/events")
            .header("idempotency-key", "publish-1")
            .json(&body)
            .send()
    };
    let first = send(body.clone()).await.unwrap();
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    let again = send(body.clone()).await.unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(
        again.headers()["location"].to_str().unwrap(),
        format!("/events/{}", first["eventId"].as_str().unwrap())
    );
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    let other = send(json!({"type": "order.created", "payload": "q"}))
        .await
        .unwrap();
    assert_problem(other, 409).await;

    let events: Value = api.get("/events").await.json().await.unwrap();
    assert_eq!(events["items"].as_array().unwrap().len(), 1);
    let messages: Value = api.get("/messages").await.json().await.unwrap();
    assert_eq!(messages["items"].as_array().unwrap().len(), 1);
    assert_invalid(
        api.req(reqwest::Method::POST, "/events")
            .header("idempotency-key", "")
            .json(&body)
            .send()
            .await
            .unwrap(),
        "Idempotency-Key",
    )
    .await;
}

#[tokio::test]
async fn events_are_listed_newest_first_by_type_and_creation_time() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let before = in_ms(-1);
    let a = publish(&api, json!({"type": "a", "payload": "1"})).await;
    let b = publish(&api, json!({"type": "b", "payload": "2"})).await;
    let c = publish(&api, json!({"type": "a", "payload": "3"})).await;
    let ids = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["eventId"].as_str().unwrap().to_string())
            .collect()
    };
    let id = |e: &Value| e["eventId"].as_str().unwrap().to_string();
    let all: Value = api.get("/events").await.json().await.unwrap();
    assert_eq!(ids(&all), [id(&c), id(&b), id(&a)]);
    let of_a: Value = api.get("/events?type=a").await.json().await.unwrap();
    assert_eq!(ids(&of_a), [id(&c), id(&a)]);
    let page: Value = api.get("/events?limit=2").await.json().await.unwrap();
    assert_eq!(ids(&page), [id(&c), id(&b)]);
    let rest: Value = api
        .get(&format!(
            "/events?limit=2&cursor={}",
            page["nextCursor"].as_str().unwrap()
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ids(&rest), [id(&a)]);
    assert_eq!(rest["nextCursor"], Value::Null);

    let enc = |s: &str| s.replace('+', "%2B");
    let b_at = b["createdAt"].as_str().unwrap();
    let until_b: Value = api
        .get(&format!("/events?from={}&to={}", enc(&before), enc(b_at)))
        .await
        .json()
        .await
        .unwrap();
    assert!(!ids(&until_b).contains(&id(&b)), "`to` is exclusive");
    assert!(!ids(&until_b).contains(&id(&c)));
    let from_b: Value = api
        .get(&format!("/events?from={}", enc(b_at)))
        .await
        .json()
        .await
        .unwrap();
    assert!(ids(&from_b).contains(&id(&b)), "`from` is inclusive");
    assert!(!ids(&from_b).contains(&id(&a)) || a["createdAt"] == b["createdAt"]);
    assert_invalid(api.get("/events?from=yesterday").await, "from").await;
    // Sent empty, an instant is no instant.
    assert_invalid(api.get("/events?to=").await, "to").await;
    assert_invalid(api.get("/events?type=*").await, "type").await;
}

#[tokio::test]
async fn deleting_a_target_deletes_its_subscriptions() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&api, &receiver).await;
    let s = subscribe(&api, &t, &["*"]).await;
    assert_eq!(api.delete(&format!("/targets/{t}")).await.status(), 204);
    assert_problem(
        api.get(&format!(
            "/subscriptions/{}",
            s["subscriptionId"].as_str().unwrap()
        ))
        .await,
        404,
    )
    .await;
    let e = publish(&api, json!({"type": "a", "payload": "p"})).await;
    assert_eq!(e["messages"], json!([]));
}

#[tokio::test]
async fn subscriptions_need_the_target_scopes_and_events_the_message_scopes() {
    let app = TestApp::spawn().await;
    let admin = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&admin, &receiver).await;
    let s = subscribe(&admin, &t, &["*"]).await;
    let s_path = format!("/subscriptions/{}", s["subscriptionId"].as_str().unwrap());
    let e = publish(&admin, json!({"type": "a", "payload": "p"})).await;
    let e_path = format!("/events/{}", e["eventId"].as_str().unwrap());
    let with = |scopes: &'static [&'static str]| {
        let app = &app;
        async move {
            Api {
                base: app.base.clone(),
                http: app.http.clone(),
                token: app.token("acme", scopes).await,
            }
        }
    };
    let targets_read = with(&["targets:read"]).await;
    assert_eq!(targets_read.get(&s_path).await.status(), 200);
    assert_eq!(targets_read.get("/subscriptions").await.status(), 200);
    assert_problem(
        targets_read
            .post("/subscriptions", json!({"targetId": t, "types": ["a"]}))
            .await,
        403,
    )
    .await;
    assert_problem(
        targets_read.patch(&s_path, json!({"enabled": false})).await,
        403,
    )
    .await;
    assert_problem(targets_read.delete(&s_path).await, 403).await;
    assert_problem(
        targets_read
            .post("/events", json!({"type": "a", "payload": "p"}))
            .await,
        403,
    )
    .await;
    assert_problem(targets_read.get(&e_path).await, 403).await;

    let messages_write = with(&["messages:write"]).await;
    assert_eq!(
        messages_write
            .post("/events", json!({"type": "a", "payload": "p"}))
            .await
            .status(),
        201
    );
    assert_problem(messages_write.get(&s_path).await, 403).await;
    let messages_read = with(&["messages:read"]).await;
    assert_eq!(messages_read.get(&e_path).await.status(), 200);
    assert_eq!(messages_read.get("/events").await.status(), 200);
    assert_problem(
        messages_read
            .post("/events", json!({"type": "a", "payload": "p"}))
            .await,
        403,
    )
    .await;

    let targets_write = with(&["targets:write"]).await;
    assert_eq!(
        targets_write
            .patch(&s_path, json!({"enabled": false}))
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn a_replay_makes_a_range_of_events_into_messages_to_one_target() {
    let app = TestApp::spawn_with(|c| c.bulk.max = 3).await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let old = target(&api, &receiver).await;
    subscribe(&api, &old, &["*"]).await;
    let from = in_ms(-1);
    let a1 = publish(
        &api,
        json!({"type": "a.one", "payload": "1", "orderingKey": "k"}),
    )
    .await;
    let a2 = publish(
        &api,
        json!({"type": "a.two", "payload": "2", "orderingKey": "k"}),
    )
    .await;
    let b = publish(&api, json!({"type": "b.one", "payload": "3"})).await;
    let to = in_ms(1);

    // A new subscriber catches up on its patterns.
    let new = target(&api, &receiver).await;
    subscribe(&api, &new, &["a.*"]).await;
    let r = api
        .post(
            "/events/replay",
            json!({"targetId": new, "from": from, "to": to}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"count": 2}));
    let made: Value = api
        .get(&format!("/messages?targetId={new}"))
        .await
        .json()
        .await
        .unwrap();
    let made = made["items"].as_array().unwrap();
    assert_eq!(made.len(), 2);
    for m in made {
        assert!(m["type"].as_str().unwrap().starts_with("a."));
        assert_eq!(m["orderingKey"], "k");
        api.wait_for_state(m["messageId"].as_str().unwrap(), "Delivered", WAIT)
            .await;
    }
    // The event lists the message its replay made beside the first one.
    let e: Value = api
        .get(&format!("/events/{}", a1["eventId"].as_str().unwrap()))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        reached(&e),
        [old.clone(), new.clone()].into_iter().collect()
    );

    // Given types, those; `to` is exclusive.
    let r = api
        .post(
            "/events/replay",
            json!({"targetId": new, "from": from, "to": b["createdAt"], "types": ["*"]}),
        )
        .await;
    let count = r.json::<Value>().await.unwrap()["count"].as_u64().unwrap();
    assert!(count < 3, "the event at `to` is not replayed: {count}");
    let _ = a2;

    // More than bulk.max: 400, nothing made.
    let before: Value = api.get("/messages?limit=1000").await.json().await.unwrap();
    publish(&api, json!({"type": "a.three", "payload": "4"})).await;
    publish(&api, json!({"type": "a.four", "payload": "5"})).await;
    let r = api
        .post(
            "/events/replay",
            json!({"targetId": new, "from": from, "to": in_ms(1000), "types": ["*"]}),
        )
        .await;
    assert_problem(r, 400).await;
    let after: Value = api.get("/messages?limit=1000").await.json().await.unwrap();
    assert_eq!(
        after["items"].as_array().unwrap().len(),
        before["items"].as_array().unwrap().len() + 2 * 2,
        "only the two publishes made messages"
    );

    // A family is a prefix, not a LIKE pattern: `_` in it is itself.
    let odd = target(&api, &receiver).await;
    publish(&api, json!({"type": "aXb.c", "payload": "6"})).await;
    let r = api
        .post(
            "/events/replay",
            json!({"targetId": odd, "from": from, "to": in_ms(1000), "types": ["a_b.*"]}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"count": 0}));

    // A target without subscriptions and no types: nothing to replay.
    let bare = target(&api, &receiver).await;
    let r = api
        .post(
            "/events/replay",
            json!({"targetId": bare, "from": from, "to": to}),
        )
        .await;
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"count": 0}));
}

#[tokio::test]
async fn bad_replays_are_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&api, &receiver).await;
    let theirs = target(&app.api("globex").await, &receiver).await;
    let (from, to) = (in_ms(-60_000), in_ms(0));
    for (body, field) in [
        (
            json!({"targetId": theirs, "from": from, "to": to}),
            "targetId",
        ),
        (json!({"from": from, "to": to}), "targetId"),
        (json!({"targetId": t, "to": to}), "from"),
        (json!({"targetId": t, "from": from}), "to"),
        (json!({"targetId": t, "from": "then", "to": to}), "from"),
        (
            json!({"targetId": t, "from": from, "to": to, "types": ["a", "b c"]}),
            "types[1]",
        ),
        (
            json!({"targetId": t, "from": from, "to": to, "types": []}),
            "types",
        ),
        (
            json!({"targetId": t, "from": from, "to": to, "deliveryTime": "soon"}),
            "deliveryTime",
        ),
    ] {
        assert_invalid(api.post("/events/replay", body.clone()).await, field).await;
    }
    let messages_read = Api {
        base: app.base.clone(),
        http: app.http.clone(),
        token: app.token("acme", &["messages:read"]).await,
    };
    assert_problem(
        messages_read
            .post(
                "/events/replay",
                json!({"targetId": t, "from": from, "to": to}),
            )
            .await,
        403,
    )
    .await;
}

#[tokio::test]
async fn events_outlive_their_messages_until_the_archive_forgets_them() {
    const HOUR: u64 = 3600;
    let app = TestApp::spawn_with(|c| {
        c.retention.interval = Duration::from_secs(HOUR); // driven by hand below
        c.retention.delivered = Duration::from_secs(HOUR);
        c.retention.events = Duration::from_secs(3 * HOUR);
    })
    .await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&api, &receiver).await;
    subscribe(&api, &t, &["*"]).await;
    let e = publish(&api, json!({"type": "a", "payload": "p"})).await;
    let path = format!("/events/{}", e["eventId"].as_str().unwrap());
    let id = e["messages"][0]["messageId"].as_str().unwrap().to_string();
    api.wait_for_state(&id, "Delivered", WAIT).await;

    let config = app.running().state.config.retention.clone();
    let purge_at = |hours: u64| {
        let store = app.store();
        let config = config.clone();
        async move {
            let clock = dispatch::clock::ManualClock::new(
                chrono::Utc::now() + chrono::TimeDelta::seconds((hours * HOUR) as i64),
            );
            dispatch::retention::purge_as_of(store.as_ref(), &config, &clock)
                .await
                .unwrap()
        }
    };

    // Two hours on: the message is gone, the event stays and says so.
    let p = purge_at(2).await;
    assert_eq!((p.messages, p.events), (1, 0));
    assert_problem(api.get(&format!("/messages/{id}")).await, 404).await;
    let kept: Value = api.get(&path).await.json().await.unwrap();
    assert_eq!(kept["messages"][0]["messageId"], id.as_str());
    assert_eq!(kept["messages"][0]["state"], Value::Null);

    // Four hours on: the archive forgets it.
    let p = purge_at(4).await;
    assert_eq!(p.events, 1);
    assert_problem(api.get(&path).await, 404).await;
}

#[tokio::test]
async fn a_message_made_from_an_event_lives_as_any_message_retried_cancelled_rescheduled_and_bulk_cancelled(
) {
    let app = TestApp::spawn_with(common::fast_ladder).await;
    let api = app.api("acme").await;
    let flaky = Receiver::start().await;
    flaky.fail_once_each();
    let calm = Receiver::start().await;
    let a = target(&api, &flaky).await;
    let b = target(&api, &calm).await;
    subscribe(&api, &a, &["order.*"]).await;
    subscribe(&api, &b, &["order.created"]).await;
    let later = in_ms(3_600_000);
    let e = publish(
        &api,
        json!({"type": "order.created", "payload": "p", "deliveryTime": later}),
    )
    .await;
    let of = |t: &str| -> String {
        e["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["targetId"] == t)
            .unwrap()["messageId"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (on_a, on_b) = (of(&a), of(&b));

    // Rescheduled to now, it goes through the ladder: a failure, then a success.
    let r = api
        .post(
            &format!("/messages/{on_a}/reschedule"),
            json!({"deliveryTime": in_ms(0)}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let m = api.wait_for_state(&on_a, "Delivered", WAIT).await;
    assert_eq!(m["attemptCount"], 2, "{m}");
    assert_eq!(m["eventId"], e["eventId"]);
    let got = flaky.received();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|g| g.json()["eventId"] == e["eventId"]));

    // Cancelled, it stays cancelled; the event says where each stands.
    let r = api.post_empty(&format!("/messages/{on_b}/cancel")).await;
    assert_eq!(r.status(), 200);
    let read: Value = api
        .get(&format!("/events/{}", e["eventId"].as_str().unwrap()))
        .await
        .json()
        .await
        .unwrap();
    let states: HashSet<(String, String)> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["messageId"].as_str().unwrap().to_string(),
                m["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        states,
        HashSet::from([
            (on_a.clone(), "Delivered".to_string()),
            (on_b.clone(), "Cancelled".to_string())
        ])
    );

    // A bulk cancel by target takes event messages as it takes any.
    let second = publish(
        &api,
        json!({"type": "order.shipped", "payload": "q", "deliveryTime": later}),
    )
    .await;
    let shipped = second["messages"][0]["messageId"].as_str().unwrap();
    let r = api
        .post(
            "/messages/cancel",
            json!({"targetId": a, "from": in_ms(-60_000), "to": in_ms(7_200_000)}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["count"], 1);
    assert_eq!(api.message(shipped).await["state"], "Cancelled");
    let listed: Value = api
        .get(&format!(
            "/messages?eventId={}",
            second["eventId"].as_str().unwrap()
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["items"][0]["state"], "Cancelled");
    assert_eq!(calm.count(), 0, "the cancelled message was sent");
    app.shutdown().await;
}

#[tokio::test]
async fn concurrent_publishes_under_one_key_make_one_event_and_the_rest_answer_as_it_did() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let receiver = Receiver::start().await;
    let t = target(&api, &receiver).await;
    subscribe(&api, &t, &["*"]).await;
    let body = json!({"type": "order.created", "payload": "p", "orderingKey": "o-1"});
    // Sent at once, most of them land in the same group commit.
    let sends = (0..24).map(|i| {
        let (key, body) = if i % 3 == 2 {
            // Others' keys and bodies, in the same groups.
            (
                format!("solo-{i}"),
                json!({"type": "order.paid", "payload": format!("{i}")}),
            )
        } else {
            ("shared".to_string(), body.clone())
        };
        let req = api
            .req(reqwest::Method::POST, "/events")
            .header("idempotency-key", key)
            .json(&body);
        async move {
            let r = req.send().await.unwrap();
            let replayed = r.headers().contains_key("idempotent-replayed");
            (
                r.status().as_u16(),
                replayed,
                r.json::<Value>().await.unwrap(),
            )
        }
    });
    let answers = futures::future::join_all(sends).await;
    let shared: Vec<_> = answers
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 2)
        .map(|(_, a)| a)
        .collect();
    assert!(
        shared.iter().all(|(status, ..)| *status == 201),
        "{shared:?}"
    );
    assert_eq!(
        shared.iter().filter(|(_, replayed, _)| !replayed).count(),
        1,
        "one made the event: {shared:?}"
    );
    let first = &shared.iter().find(|(_, replayed, _)| !replayed).unwrap().2;
    assert!(
        shared.iter().all(|(_, _, body)| body == first),
        "{shared:?}"
    );
    let events: Value = api.get("/events?limit=100").await.json().await.unwrap();
    assert_eq!(events["items"].as_array().unwrap().len(), 1 + 8);
    let messages: Value = api.get("/messages?limit=100").await.json().await.unwrap();
    assert_eq!(messages["items"].as_array().unwrap().len(), 1 + 8);
    // Another body under the shared key now: 409, nothing made.
    let r = api
        .req(reqwest::Method::POST, "/events")
        .header("idempotency-key", "shared")
        .json(&json!({"type": "order.created", "payload": "other"}))
        .send()
        .await
        .unwrap();
    assert_problem(r, 409).await;
    app.shutdown().await;
}
