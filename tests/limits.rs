//! Account limits (docs/api.md#account-limits) through the API, on the store
//! under test: each refusal is a 409 whose problem type ends in `/quota`
//! and whose detail names the key; nothing changes; reaching a limit is
//! allowed; other accounts are untouched; requests racing past a limit by
//! one leave the account at the limit.

mod common;

use common::{Api, TestApp};
use futures::future::join_all;
use serde_json::{json, Value};

fn small(c: &mut dispatch::config::Config) {
    c.limits.targets = 3;
    c.limits.subscriptions = 2;
    c.limits.schedules = 3;
    c.limits.schedule_runs_per_second = 2;
}

/// Asserts a 409 quota refusal naming `key`.
async fn refused(r: reqwest::Response, key: &str) {
    assert_eq!(r.status(), 409);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/problem+json"
    );
    let p: Value = r.json().await.unwrap();
    assert!(p["type"].as_str().unwrap().ends_with("/quota"), "{p}");
    assert!(p["detail"].as_str().unwrap().contains(key), "{p}");
}

async fn target(api: &Api, name: &str) -> reqwest::Response {
    api.post(
        "/targets",
        json!({"name": name, "type": "webhook", "config": {"url": "https://example.com/hook"}}),
    )
    .await
}

async fn count(api: &Api, path: &str) -> usize {
    let r = api.get(&format!("{path}?limit=100")).await;
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["items"]
        .as_array()
        .unwrap()
        .len()
}

fn id(v: &Value, field: &str) -> String {
    v[field].as_str().unwrap().to_string()
}

#[tokio::test]
async fn targets_up_to_the_limit_then_409_naming_the_key_and_other_accounts_unaffected() {
    let app = TestApp::spawn_with(small).await;
    let api = app.api("acme").await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = target(&api, &format!("t{i}")).await;
        assert_eq!(r.status(), 201, "the limit itself is reached");
        ids.push(id(&r.json().await.unwrap(), "targetId"));
    }
    refused(target(&api, "one too many").await, "limits.targets").await;
    assert_eq!(count(&api, "/targets").await, 3, "nothing was made");
    // Another account has its own count.
    let other = app.api("globex").await;
    assert_eq!(target(&other, "theirs").await.status(), 201);
    // Room again once one is deleted.
    assert_eq!(
        api.delete(&format!("/targets/{}", ids[0])).await.status(),
        204
    );
    assert_eq!(target(&api, "again").await.status(), 201);
    refused(target(&api, "past it").await, "limits.targets").await;
    app.shutdown().await;
}

#[tokio::test]
async fn targets_created_at_once_past_the_limit_leave_the_account_exactly_at_it() {
    let app = TestApp::spawn_with(|c| c.limits.targets = 5).await;
    let api = app.api("acme").await;
    for i in 0..4 {
        assert_eq!(target(&api, &format!("t{i}")).await.status(), 201);
    }
    // Eight requests race for the one place left.
    let answers = join_all((0..8).map(|i| {
        let api = &api;
        async move { target(api, &format!("racer{i}")).await }
    }))
    .await;
    let mut created = 0;
    for r in answers {
        match r.status().as_u16() {
            201 => created += 1,
            409 => refused(r, "limits.targets").await,
            other => panic!("{other}: {:?}", r.text().await),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(count(&api, "/targets").await, 5);
    app.shutdown().await;
}

#[tokio::test]
async fn subscriptions_up_to_the_limit_and_racing_ones_stop_at_it() {
    let app = TestApp::spawn_with(small).await;
    let api = app.api("acme").await;
    let t = id(&target(&api, "t").await.json().await.unwrap(), "targetId");
    let subscribe = |name: String| {
        let api = &api;
        let t = t.clone();
        async move {
            api.post(
                "/subscriptions",
                json!({"targetId": t, "types": ["order.*"], "name": name}),
            )
            .await
        }
    };
    assert_eq!(subscribe("first".into()).await.status(), 201);
    // Five race for the one place left.
    let answers = join_all((0..5).map(|i| subscribe(format!("racer{i}")))).await;
    let mut created = 0;
    for r in answers {
        match r.status().as_u16() {
            201 => created += 1,
            409 => refused(r, "limits.subscriptions").await,
            other => panic!("{other}: {:?}", r.text().await),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(count(&api, "/subscriptions").await, 2);
    app.shutdown().await;
}

async fn schedule(api: &Api, target: &str, rule: Value) -> reqwest::Response {
    let mut body = json!({"targetId": target, "name": "s", "payload": "tick"});
    for (k, v) in rule.as_object().unwrap() {
        body[k] = v.clone();
    }
    api.post("/schedules", body).await
}

#[tokio::test]
async fn schedules_paused_or_not_count_and_runs_a_second_bound_create_and_patch() {
    // 2 runs a second: 120 a minute.
    let app = TestApp::spawn_with(small).await;
    let api = app.api("acme").await;
    let t = id(&target(&api, "t").await.json().await.unwrap(), "targetId");
    // Each every second: 60 a minute; two reach the limit exactly.
    let a = schedule(&api, &t, json!({"every": "1s"})).await;
    assert_eq!(a.status(), 201);
    let a = id(&a.json().await.unwrap(), "scheduleId");
    let b = schedule(&api, &t, json!({"every": "1s", "paused": true})).await;
    assert_eq!(b.status(), 201, "{:?}", b.text().await);
    // Even a cron (once a minute) would pass it; a paused schedule counts.
    refused(
        schedule(&api, &t, json!({"cron": "* * * * *"})).await,
        "limits.schedule_runs_per_second",
    )
    .await;
    refused(
        schedule(&api, &t, json!({"every": "1h"})).await,
        "limits.schedule_runs_per_second",
    )
    .await;
    assert_eq!(count(&api, "/schedules").await, 2, "nothing was made");
    // A patch that makes a rule quieter is allowed ...
    let r = api
        .patch(
            &format!("/schedules/{a}"),
            json!({"cron": null, "every": "2s"}),
        )
        .await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    // ... and leaves room: 30 + 60 + 1 a minute.
    assert_eq!(
        schedule(&api, &t, json!({"cron": "0 9 * * *"}))
            .await
            .status(),
        201
    );
    // One that makes it busier again would pass it: refused, nothing changes.
    let r = api
        .patch(&format!("/schedules/{a}"), json!({"every": "1s"}))
        .await;
    refused(r, "limits.schedule_runs_per_second").await;
    let got: Value = api
        .get(&format!("/schedules/{a}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["every"], "2s", "the refused patch changed nothing");
    // Three schedules are the limit of schedules, whatever their runs.
    refused(
        schedule(&api, &t, json!({"cron": "0 10 1 1 *"})).await,
        "limits.schedules",
    )
    .await;
    app.shutdown().await;
}

/// Messages far in the future: they stay Scheduled for the whole test.
fn later() -> String {
    common::in_ms(3_600_000)
}

async fn post_message(api: &Api, target: &str) -> reqwest::Response {
    api.post(
        "/messages",
        json!({"targetId": target, "deliveryTime": later(), "payload": "x"}),
    )
    .await
}

async fn post_batch(api: &Api, target: &str, n: usize) -> reqwest::Response {
    let messages: Vec<Value> = (0..n)
        .map(|_| json!({"targetId": target, "deliveryTime": later(), "payload": "x"}))
        .collect();
    api.post("/messages/batch", json!({"messages": messages}))
        .await
}

async fn scheduled(api: &Api) -> usize {
    let r = api.get("/messages?state=Scheduled&limit=100").await;
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["items"]
        .as_array()
        .unwrap()
        .len()
}

async fn cancel(api: &Api, message: &str) {
    let r = api
        .post(&format!("/messages/{message}/cancel"), json!({}))
        .await;
    assert_eq!(r.status(), 200);
}

/// `limits.scheduled_messages` bounds every way messages become Scheduled:
/// one, a batch (whole), an event's fan-out (whole), a redrive (before any
/// change) and a schedule's creation; what leaves Scheduled makes room.
#[tokio::test]
async fn scheduled_messages_are_bounded_on_every_way_in_and_leaving_makes_room() {
    let app = TestApp::spawn_with(|c| c.limits.scheduled_messages = 5).await;
    let api = app.api("acme").await;
    // One dead letter first (its receiver refuses it for good).
    let refusing = common::receiver::Receiver::start().await;
    refusing.always(common::receiver::Reply::status(400));
    let bad = api.webhook(&refusing.url("/no")).await;
    let bad = id(&bad, "targetId");
    let dead = api.schedule(&bad, &common::in_ms(0), "x").await;
    let dead = id(&dead, "messageId");
    api.wait_for_state(&dead, "DeadLetter", std::time::Duration::from_secs(10))
        .await;

    let t = id(&target(&api, "far").await.json().await.unwrap(), "targetId");
    // A paused schedule makes no runs and needs no room.
    let r = schedule(&api, &t, json!({"every": "1h", "paused": true})).await;
    assert_eq!(r.status(), 201);
    let paused = id(&r.json().await.unwrap(), "scheduleId");
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = post_message(&api, &t).await;
        assert_eq!(r.status(), 201);
        ids.push(id(&r.json().await.unwrap(), "messageId"));
    }
    // A batch that would pass it is refused whole.
    refused(post_batch(&api, &t, 3).await, "limits.scheduled_messages").await;
    assert_eq!(scheduled(&api).await, 3, "nothing of the batch was made");
    // Reaching it exactly is allowed.
    let r = post_batch(&api, &t, 2).await;
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(scheduled(&api).await, 5);
    refused(post_message(&api, &t).await, "limits.scheduled_messages").await;
    // A redrive of the dead letter, a schedule: refused, nothing changed.
    let r = api
        .post("/messages/redrive", json!({"messageIds": [dead.clone()]}))
        .await;
    refused(r, "limits.scheduled_messages").await;
    assert_eq!(api.message(&dead).await["state"], "DeadLetter");
    refused(
        schedule(&api, &t, json!({"every": "1h"})).await,
        "limits.scheduled_messages",
    )
    .await;
    // At the limit a schedule may be renamed, not given other runs nor
    // resumed.
    let at = format!("/schedules/{paused}");
    assert_eq!(
        api.patch(&at, json!({"name": "renamed"})).await.status(),
        200
    );
    refused(
        api.patch(&at, json!({"every": "2h"})).await,
        "limits.scheduled_messages",
    )
    .await;
    refused(
        api.post(&format!("{at}/resume"), json!({})).await,
        "limits.scheduled_messages",
    )
    .await;
    // An event reaching two targets: refused whole while there is room for
    // one, made once there is room for both.
    let t2 = id(
        &target(&api, "second").await.json().await.unwrap(),
        "targetId",
    );
    for target in [&t, &t2] {
        let r = api
            .post(
                "/subscriptions",
                json!({"targetId": target, "types": ["order.*"], "name": "orders"}),
            )
            .await;
        assert_eq!(r.status(), 201);
    }
    cancel(&api, &ids[0]).await;
    let event = json!({"type": "order.created", "payload": "{\"n\": 1}", "deliveryTime": later()});
    refused(
        api.post("/events", event.clone()).await,
        "limits.scheduled_messages",
    )
    .await;
    assert_eq!(scheduled(&api).await, 4);
    cancel(&api, &ids[1]).await;
    assert_eq!(api.post("/events", event).await.status(), 201);
    assert_eq!(scheduled(&api).await, 5);
    // Another account has its own count.
    let other = app.api("globex").await;
    let theirs = id(
        &target(&other, "theirs").await.json().await.unwrap(),
        "targetId",
    );
    assert_eq!(post_message(&other, &theirs).await.status(), 201);
    app.shutdown().await;
}

/// A waiting receive holds one of the server's connections: an account has
/// at most `limits.waiting_receives` of them waiting on an instance. One
/// more answers 409 at once (a receive without `wait` is served as ever),
/// another account's receive waits as before, and once one of the waiting
/// ends, the account may wait again.
#[tokio::test]
async fn waiting_receives_up_to_the_limit_then_409_and_other_accounts_unaffected() {
    let app = TestApp::spawn_with(|c| c.limits.waiting_receives = 2).await;
    let api = app.api("acme").await;
    let other = app.api("other").await;
    let pull = |api: Api| async move {
        let r = api
            .post(
                "/targets",
                json!({"name": "queue", "type": "pull", "config": {}}),
            )
            .await;
        assert_eq!(r.status(), 201);
        id(&r.json().await.unwrap(), "targetId")
    };
    let (queue, theirs) = (pull(api.clone()).await, pull(other.clone()).await);
    let receive = |api: Api, target: String, wait: &'static str| async move {
        api.post(
            &format!("/targets/{target}/receive"),
            json!({"max": 1, "wait": wait}),
        )
        .await
    };
    // Two consumers wait (each tries again while a probe below holds the
    // place it would take).
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let (api, queue) = (api.clone(), queue.clone());
            tokio::spawn(async move {
                loop {
                    let r = receive(api.clone(), queue.clone(), "20s").await;
                    if r.status() != 409 {
                        return r;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    // Both wait: the account is at its limit, which a third would pass.
    let third = common::eventually(
        std::time::Duration::from_secs(5),
        "the third receive refused",
        async || {
            let r = receive(api.clone(), queue.clone(), "1s").await;
            if r.status() == 409 {
                Ok(r)
            } else {
                Err(r.status())
            }
        },
    )
    .await;
    refused(third, "limits.waiting_receives").await;
    let now = receive(api.clone(), queue.clone(), "0s").await;
    assert_eq!(now.status(), 200, "a receive that does not wait is served");
    // Another account waits as ever, and gets what falls due.
    let theirs_waiting = tokio::spawn(receive(other.clone(), theirs.clone(), "20s"));
    other.schedule(&theirs, &common::in_ms(0), "for them").await;
    let got: Value = theirs_waiting.await.unwrap().json().await.unwrap();
    assert_eq!(got["items"].as_array().unwrap().len(), 1, "{got}");
    // Messages for the account end its waits: it may wait again.
    for payload in ["one", "two"] {
        api.schedule(&queue, &common::in_ms(0), payload).await;
    }
    for w in waiting {
        let got: Value = w.await.unwrap().json().await.unwrap();
        assert_eq!(got["items"].as_array().unwrap().len(), 1, "{got}");
    }
    let again = receive(api.clone(), queue.clone(), "1s").await;
    assert_eq!(again.status(), 200, "waiting again once the others ended");
    app.shutdown().await;
}
