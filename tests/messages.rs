//! The `/messages` API (docs/api.md#messages): scheduling and its validation, reading,
//! listing and paging, attempts, cancel, reschedule, idempotency keys, and a
//! cancel racing an attempt under way.

mod common;
#[path = "messages/races.rs"]
mod races;

use std::time::Duration;

use common::{
    fast_ladder, in_ms,
    problem::{assert_problem, error_fields},
    receiver::{Receiver, Reply},
    Api, TestApp,
};
use reqwest::{Method, Response};
use serde_json::{json, Value};

/// A target id that is well formed but exists nowhere.
const UNKNOWN_TARGET: &str = "DI-T-0000000000";

fn s(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

/// Asserts `DI-M-` + a lower-case hyphenated UUIDv7.
fn assert_message_id(id: &str) {
    let rest = id
        .strip_prefix("DI-M-")
        .unwrap_or_else(|| panic!("{id} does not start with DI-M-"));
    let uuid = uuid::Uuid::parse_str(rest).unwrap_or_else(|e| panic!("{id}: {e}"));
    assert_eq!(
        uuid.hyphenated().to_string(),
        rest,
        "{id} is not lower-case hyphenated"
    );
    assert_eq!(uuid.get_version_num(), 7, "{id} is not a UUIDv7");
}

/// Asserts an RFC 3339 time in UTC written with `Z`; returns it parsed.
fn utc(v: &Value) -> chrono::DateTime<chrono::Utc> {
    let t = s(v);
    assert!(t.ends_with('Z'), "{t} is not written in UTC with Z");
    let parsed = chrono::DateTime::parse_from_rfc3339(t).unwrap_or_else(|e| panic!("{t}: {e}"));
    assert_eq!(parsed.offset().local_minus_utc(), 0, "{t}");
    parsed.with_timezone(&chrono::Utc)
}

/// Posts `body` to /messages and asserts a 400 naming `field`.
async fn assert_refused(api: &Api, body: Value, field: &str) -> Value {
    let r = api.post("/messages", body.clone()).await;
    let p = assert_problem(r, 400).await;
    assert!(
        error_fields(&p).iter().any(|f| f == field),
        "posting {body} should name the field {field}: {p}"
    );
    p
}

/// An instance whose sweeper runs only when the test drives it
/// (`deliver_due_now`), so that "nothing was delivered" is a fact, not a wait.
async fn by_hand() -> TestApp {
    TestApp::spawn_with(|c| c.sweeper.enabled = false).await
}

async fn target_id(api: &Api, url: &str) -> String {
    s(&api.webhook(url).await["targetId"]).to_string()
}

async fn cancel(api: &Api, id: &str) -> Response {
    api.post_empty(&format!("/messages/{id}/cancel")).await
}

async fn reschedule(api: &Api, id: &str, at: &str) -> Response {
    api.post(
        &format!("/messages/{id}/reschedule"),
        json!({ "deliveryTime": at }),
    )
    .await
}

async fn list(api: &Api, query: &str) -> Value {
    let r = api.get(&format!("/messages{query}")).await;
    assert_eq!(r.status(), 200, "{query}: {:?}", r.text().await);
    r.json().await.unwrap()
}

fn ids(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| s(&m["messageId"]).to_string())
        .collect()
}

async fn post_with_key(api: &Api, key: &str, body: &Value) -> Response {
    api.req(Method::POST, "/messages")
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

const WAIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------- create

#[tokio::test]
async fn scheduling_a_message_answers_201_with_a_location_and_the_scheduled_message() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let r = api
        .post(
            "/messages",
            json!({"targetId": target, "deliveryTime": "2099-07-01T12:34:00Z", "payload": "Hello, World!"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let location = r
        .headers()
        .get("location")
        .expect("a Location header")
        .to_str()
        .unwrap()
        .to_string();
    let m: Value = r.json().await.unwrap();
    let id = s(&m["messageId"]);
    assert_message_id(id);
    assert!(
        location.ends_with(&format!("/messages/{id}")),
        "Location {location} does not name {id}"
    );
    assert_eq!(m["targetId"], target.as_str());
    assert_eq!(m["state"], "Scheduled");
    assert_eq!(m["deliveryTime"], "2099-07-01T12:34:00Z");
    assert_eq!(m["nextAttemptAt"], m["deliveryTime"]);
    assert_eq!(m["attemptCount"], 0);
    assert_eq!(m["payload"], "Hello, World!");
    for absent in ["deliveredAt", "cancelledAt", "deadLetteredAt", "lastError"] {
        assert!(m[absent].is_null(), "{absent} should be null: {m}");
    }
    let created = utc(&m["createdAt"]);
    utc(&m["updatedAt"]);
    assert!(
        (chrono::Utc::now() - created).num_seconds().abs() < 10,
        "{m}"
    );

    // The Location answers the same message.
    let got = api.message(id).await;
    assert_eq!(got, m);
    app.shutdown().await;
}

#[tokio::test]
async fn message_ids_are_distinct_and_time_ordered() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let mut previous = String::new();
    for _ in 0..5 {
        let m = api.schedule(&target, "2099-01-01T00:00:00Z", "x").await;
        let id = s(&m["messageId"]).to_string();
        assert_message_id(&id);
        assert!(id > previous, "{id} does not sort after {previous}");
        previous = id;
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_delivery_time_with_an_offset_is_converted_to_utc() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let m = api
        .schedule(&target, "2099-07-01T14:34:00+02:00", "x")
        .await;
    assert_eq!(m["deliveryTime"], "2099-07-01T12:34:00Z");
    assert_eq!(m["nextAttemptAt"], "2099-07-01T12:34:00Z");
    let m = api
        .schedule(&target, "2099-07-01T09:04:05.250-03:30", "x")
        .await;
    assert_eq!(m["deliveryTime"], "2099-07-01T12:34:05.250Z");
    app.shutdown().await;
}

#[tokio::test]
async fn a_delivery_time_without_an_offset_or_malformed_is_refused_with_the_field_named() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    for bad in [
        json!("2099-07-01T12:34:00"),
        json!("2099-07-01"),
        json!("tomorrow"),
        json!("2099-13-01T00:00:00Z"),
        json!(""),
        json!(1_700_000_000),
    ] {
        assert_refused(
            &api,
            json!({"targetId": target, "deliveryTime": bad, "payload": "x"}),
            "deliveryTime",
        )
        .await;
    }
    assert_eq!(list(&api, "").await["items"].as_array().unwrap().len(), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn a_payload_that_is_not_a_string_is_refused() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    for bad in [json!(42), json!({"a": 1}), json!(["a"]), json!(true)] {
        assert_refused(
            &api,
            json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": bad}),
            "payload",
        )
        .await;
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_payload_of_61440_characters_is_accepted_and_one_more_is_refused() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    for unit in ["a", "€", "😀"] {
        let ok = unit.repeat(61_440);
        let m = api.schedule(&target, "2099-01-01T00:00:00Z", &ok).await;
        assert_eq!(
            m["payload"].as_str().unwrap().chars().count(),
            61_440,
            "{unit}"
        );
        let got = api.message(s(&m["messageId"])).await;
        assert_eq!(got["payload"].as_str().unwrap(), ok, "{unit}");

        let p = assert_refused(
            &api,
            json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": unit.repeat(61_441)}),
            "payload",
        )
        .await;
        assert_eq!(error_fields(&p), ["payload"], "{p}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn missing_fields_are_each_named() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let r = api.post("/messages", json!({})).await;
    let p = assert_problem(r, 400).await;
    let fields = error_fields(&p);
    for f in ["targetId", "deliveryTime", "payload"] {
        assert!(fields.iter().any(|x| x == f), "{f} not named: {p}");
    }
    assert_refused(
        &api,
        json!({"deliveryTime": "2099-01-01T00:00:00Z", "payload": "x"}),
        "targetId",
    )
    .await;
    assert_refused(
        &api,
        json!({"targetId": target, "payload": "x"}),
        "deliveryTime",
    )
    .await;
    assert_refused(
        &api,
        json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z"}),
        "payload",
    )
    .await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_unknown_malformed_or_foreign_target_id_is_refused_as_the_first_error() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let other = app.api("globex").await;
    let foreign = target_id(&other, "http://127.0.0.1:9/hook").await;
    for bad in [
        UNKNOWN_TARGET,
        "nope",
        "DI-T-AABBCC1122",
        "DI-M-aabbcc1122",
        foreign.as_str(),
    ] {
        let r = api
            .post(
                "/messages",
                json!({"targetId": bad, "deliveryTime": "2099-01-01T00:00:00Z", "payload": "x"}),
            )
            .await;
        let p = assert_problem(r, 400).await;
        assert_eq!(p["errors"][0]["field"], "targetId", "{bad}: {p}");
    }
    assert_eq!(list(&api, "").await["items"].as_array().unwrap().len(), 0);
    assert_eq!(list(&other, "").await["items"].as_array().unwrap().len(), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn a_delivery_time_in_the_past_is_accepted_and_delivered_at_once() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let past = in_ms(-3_600_000);
    let m = api.schedule(&target, &past, "late").await;
    assert_eq!(m["deliveryTime"], past.as_str());
    let got = rx.wait_for(1, Duration::from_secs(1)).await;
    assert_eq!(got[0].json()["messageId"], m["messageId"]);
    let m = api
        .wait_for_state(s(&m["messageId"]), "Delivered", WAIT)
        .await;
    assert_eq!(m["attemptCount"], 1);
    assert_eq!(m["deliveryTime"], past.as_str());
    assert!(m["nextAttemptAt"].is_null(), "{m}");
    utc(&m["deliveredAt"]);
    app.shutdown().await;
}

// ---------------------------------------------------------------- get

#[tokio::test]
async fn an_unknown_malformed_or_foreign_message_id_answers_404() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let other = app.api("globex").await;
    let target = target_id(&other, "http://127.0.0.1:9/hook").await;
    let foreign = other.schedule(&target, "2099-01-01T00:00:00Z", "x").await;
    let unknown = format!("DI-M-{}", uuid::Uuid::now_v7());
    for id in [
        unknown.as_str(),
        "nope",
        "DI-M-",
        "DI-M-AAAAAAAA-2222-7333-8444-555555555555",
        "DI-T-aabbcc1122",
        s(&foreign["messageId"]),
    ] {
        let r = api.get(&format!("/messages/{id}")).await;
        assert_problem(r, 404).await;
        let r = api.get(&format!("/messages/{id}/attempts")).await;
        assert_problem(r, 404).await;
        assert_problem(cancel(&api, id).await, 404).await;
        assert_problem(reschedule(&api, id, "2099-01-01T00:00:00Z").await, 404).await;
    }
    // The owner still sees it, untouched.
    assert_eq!(
        other.message(s(&foreign["messageId"])).await["state"],
        "Scheduled"
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------- list

#[tokio::test]
async fn the_list_is_newest_first_and_shows_only_the_accounts_messages() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let other = app.api("globex").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let other_target = target_id(&other, "http://127.0.0.1:9/hook").await;
    other
        .schedule(&other_target, "2099-01-01T00:00:00Z", "theirs")
        .await;
    let mut created = Vec::new();
    // Delivery times in the opposite order: the list follows creation.
    for i in 0..4 {
        let m = api
            .schedule(&target, &format!("2099-01-0{}T00:00:00Z", 5 - i), "ours")
            .await;
        created.push(s(&m["messageId"]).to_string());
    }
    let page = list(&api, "").await;
    let mut newest_first = created.clone();
    newest_first.reverse();
    assert_eq!(ids(&page), newest_first);
    assert!(page["nextCursor"].is_null(), "{page}");
    let times: Vec<_> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| utc(&m["createdAt"]))
        .collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    assert_eq!(ids(&list(&other, "").await).len(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn the_list_filters_by_state_and_by_target() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let a = target_id(&api, "http://127.0.0.1:9/a").await;
    let b = target_id(&api, "http://127.0.0.1:9/b").await;
    let a1 = api.schedule(&a, "2099-01-01T00:00:00Z", "a1").await;
    let a2 = api.schedule(&a, "2099-01-01T00:00:00Z", "a2").await;
    let a3 = api.schedule(&a, "2099-01-01T00:00:00Z", "a3").await;
    let b1 = api.schedule(&b, "2099-01-01T00:00:00Z", "b1").await;
    let id = |m: &Value| s(&m["messageId"]).to_string();
    assert_eq!(cancel(&api, &id(&a2)).await.status(), 200);

    assert_eq!(ids(&list(&api, "?state=Cancelled").await), [id(&a2)]);
    assert_eq!(
        ids(&list(&api, "?state=Scheduled").await),
        [id(&b1), id(&a3), id(&a1)]
    );
    assert!(ids(&list(&api, "?state=Delivered").await).is_empty());
    assert!(ids(&list(&api, "?state=DeadLetter").await).is_empty());
    assert_eq!(
        ids(&list(&api, &format!("?targetId={a}")).await),
        [id(&a3), id(&a2), id(&a1)]
    );
    assert_eq!(ids(&list(&api, &format!("?targetId={b}")).await), [id(&b1)]);
    assert_eq!(
        ids(&list(&api, &format!("?targetId={a}&state=Scheduled")).await),
        [id(&a3), id(&a1)]
    );
    assert!(ids(&list(&api, &format!("?targetId={UNKNOWN_TARGET}")).await).is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn an_invalid_state_filter_answers_400() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for bad in ["scheduled", "Pending", "DELIVERED", "Dead%20Letter"] {
        let r = api.get(&format!("/messages?state={bad}")).await;
        let p = assert_problem(r, 400).await;
        assert!(error_fields(&p).iter().any(|f| f == "state"), "{bad}: {p}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn the_list_pages_with_limit_and_cursor_until_the_cursor_is_null() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let mut created = Vec::new();
    for i in 0..7 {
        let m = api
            .schedule(&target, "2099-01-01T00:00:00Z", &format!("m{i}"))
            .await;
        created.push(s(&m["messageId"]).to_string());
    }
    created.reverse();

    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut query = "?limit=3".to_string();
    loop {
        let page = list(&api, &query).await;
        let page_ids = ids(&page);
        sizes.push(page_ids.len());
        seen.extend(page_ids);
        match page["nextCursor"].as_str() {
            Some(cursor) => {
                assert!(sizes.len() < 5, "paging does not end: {sizes:?}");
                query = format!("?limit=3&cursor={}", urlencode(cursor));
            }
            None => break,
        }
    }
    assert_eq!(sizes, [3, 3, 1]);
    assert_eq!(seen, created);

    // Exactly a full last page: the cursor is null on it (or leads to an empty page).
    let page = list(&api, "?limit=7").await;
    assert_eq!(ids(&page), created);
    if let Some(cursor) = page["nextCursor"].as_str() {
        let rest = list(&api, &format!("?limit=7&cursor={}", urlencode(cursor))).await;
        assert!(ids(&rest).is_empty(), "{rest}");
    }
    // The default limit (50) covers them all.
    assert_eq!(ids(&list(&api, "").await), created);
    assert_eq!(ids(&list(&api, "?limit=1000").await), created);
    app.shutdown().await;
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn a_limit_over_1000_or_below_1_or_an_empty_filter_answers_400() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for bad in ["1001", "0", "-1", "many"] {
        let r = api.get(&format!("/messages?limit={bad}")).await;
        let p = assert_problem(r, 400).await;
        assert!(error_fields(&p).iter().any(|f| f == "limit"), "{bad}: {p}");
    }
    // A state sent empty names none the document allows: 400, not "no filter".
    for (query, field) in [("state=", "state"), ("limit=", "limit")] {
        let r = api.get(&format!("/messages?{query}")).await;
        let p = assert_problem(r, 400).await;
        assert!(error_fields(&p).iter().any(|f| f == field), "{query}: {p}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn attempts_are_listed_oldest_first_and_page_with_a_cursor() {
    let app = TestApp::spawn_with(|c| {
        fast_ladder(c);
        c.retry.immediate_retries = 1;
        c.retry.minute_rounds = 2;
        c.retry.hour_cycles = 1;
    })
    .await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(500));
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let m = api.schedule(&target, &in_ms(0), "x").await;
    let id = s(&m["messageId"]);
    let m = api.wait_for_state(id, "DeadLetter", WAIT).await;
    assert_eq!(m["attemptCount"], 4);

    let r = api.get(&format!("/messages/{id}/attempts?limit=3")).await;
    assert_eq!(r.status(), 200);
    let first: Value = r.json().await.unwrap();
    let numbers = |page: &Value| -> Vec<u64> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["attempt"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(numbers(&first), [1, 2, 3]);
    let cursor = s(&first["nextCursor"]);
    let r = api
        .get(&format!(
            "/messages/{id}/attempts?limit=3&cursor={}",
            urlencode(cursor)
        ))
        .await;
    assert_eq!(r.status(), 200);
    let second: Value = r.json().await.unwrap();
    assert_eq!(numbers(&second), [4]);
    assert!(second["nextCursor"].is_null(), "{second}");

    let all = api.attempts(id).await;
    let started: Vec<_> = all.iter().map(|a| utc(&a["startedAt"])).collect();
    assert!(started.windows(2).all(|w| w[0] <= w[1]), "{started:?}");
    for a in &all {
        assert_eq!(a["outcome"], "RetryableFailure", "{a}");
        assert_eq!(a["statusCode"], 500, "{a}");
        utc(&a["finishedAt"]);
    }
    let r = api
        .get(&format!("/messages/{id}/attempts?limit=1001"))
        .await;
    assert_problem(r, 400).await;
    app.shutdown().await;
}

// ---------------------------------------------------------------- cancel

#[tokio::test]
async fn cancelling_a_scheduled_message_makes_it_cancelled_and_it_is_never_delivered() {
    let app = by_hand().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    // Due already: only the cancel keeps the next pass from delivering it.
    let m = api.schedule(&target, &in_ms(-1_000), "x").await;
    let id = s(&m["messageId"]);
    let r = cancel(&api, id).await;
    assert_eq!(r.status(), 200);
    let c: Value = r.json().await.unwrap();
    assert_eq!(c["messageId"], id);
    assert_eq!(c["state"], "Cancelled");
    assert!(c["nextAttemptAt"].is_null(), "{c}");
    let cancelled_at = utc(&c["cancelledAt"]);
    assert!((chrono::Utc::now() - cancelled_at).num_seconds().abs() < 10);
    assert!(c["deliveredAt"].is_null(), "{c}");
    assert_eq!(c["deliveryTime"], m["deliveryTime"]);
    assert_eq!(api.message(id).await, c);

    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 0, "a cancelled message was delivered");
    assert_eq!(api.message(id).await["state"], "Cancelled");
    assert!(api.attempts(id).await.is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn cancelling_a_cancelled_message_answers_409() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let m = api.schedule(&target, "2099-01-01T00:00:00Z", "x").await;
    let id = s(&m["messageId"]);
    assert_eq!(cancel(&api, id).await.status(), 200);
    let before = api.message(id).await;
    assert_problem(cancel(&api, id).await, 409).await;
    assert_eq!(api.message(id).await, before);
    app.shutdown().await;
}

#[tokio::test]
async fn cancelling_or_rescheduling_a_delivered_message_answers_409() {
    let app = by_hand().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let m = api.schedule(&target, &in_ms(0), "x").await;
    let id = s(&m["messageId"]);
    assert_eq!(app.running().sweeper.deliver_due_now().await, 1);
    let delivered = api.message(id).await;
    assert_eq!(delivered["state"], "Delivered", "{delivered}");
    assert_problem(cancel(&api, id).await, 409).await;
    assert_problem(reschedule(&api, id, &in_ms(0)).await, 409).await;
    let after = api.message(id).await;
    assert_eq!(after["state"], "Delivered");
    assert!(after["cancelledAt"].is_null(), "{after}");
    assert_eq!(after["deliveredAt"], delivered["deliveredAt"]);
    // Had the refused reschedule taken, the message would be due now.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 1, "a refused reschedule delivered again");
    app.shutdown().await;
}

#[tokio::test]
async fn cancelling_a_dead_letter_makes_it_cancelled() {
    let app = by_hand().await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(400));
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let m = api.schedule(&target, &in_ms(0), "x").await;
    let id = s(&m["messageId"]);
    assert_eq!(app.running().sweeper.deliver_due_now().await, 1);
    assert_eq!(api.message(id).await["state"], "DeadLetter");
    let r = cancel(&api, id).await;
    assert_eq!(r.status(), 200);
    let c: Value = r.json().await.unwrap();
    assert_eq!(c["state"], "Cancelled");
    utc(&c["cancelledAt"]);
    assert!(c["nextAttemptAt"].is_null(), "{c}");
    assert_eq!(c["attemptCount"], 1);
    assert_problem(cancel(&api, id).await, 409).await;
    assert_problem(reschedule(&api, id, &in_ms(0)).await, 409).await;
    // Had the refused reschedule taken, the message would be due now.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 1);
    app.shutdown().await;
}

// ---------------------------------------------------------------- reschedule

#[tokio::test]
async fn rescheduling_a_scheduled_message_moves_its_delivery_time() {
    let app = by_hand().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;

    // Later: not delivered at the old time, which has come already.
    let early = api.schedule(&target, &in_ms(-1_000), "early").await;
    let early_id = s(&early["messageId"]);
    let r = reschedule(&api, early_id, "2099-07-01T14:34:00+02:00").await;
    assert_eq!(r.status(), 200);
    let moved: Value = r.json().await.unwrap();
    assert_eq!(moved["state"], "Scheduled");
    assert_eq!(moved["deliveryTime"], "2099-07-01T12:34:00Z");
    assert_eq!(moved["nextAttemptAt"], "2099-07-01T12:34:00Z");
    assert_eq!(moved["attemptCount"], 0);
    assert_eq!(api.message(early_id).await, moved);

    // Sooner: delivered at the new time, which the envelope reports.
    let late = api.schedule(&target, "2099-01-01T00:00:00Z", "late").await;
    let late_id = s(&late["messageId"]);
    let now = in_ms(0);
    let r = reschedule(&api, late_id, &now).await;
    assert_eq!(r.status(), 200);
    // One pass delivers what is due: the one moved sooner, not the one moved later.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 1);
    let got = rx.received();
    assert_eq!(got.len(), 1, "the message moved later was delivered");
    assert_eq!(got[0].json()["messageId"], late_id);
    assert_eq!(got[0].json()["originalDeliveryTime"], now.as_str());
    let m = api.message(late_id).await;
    assert_eq!(m["state"], "Delivered", "{m}");
    assert_eq!(m["deliveryTime"], now.as_str());

    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 1, "the message moved later was delivered");
    assert_eq!(api.message(early_id).await["state"], "Scheduled");
    app.shutdown().await;
}

#[tokio::test]
async fn rescheduling_a_dead_letter_schedules_it_again_and_its_attempts_keep_counting() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(400)]);
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let m = api.schedule(&target, &in_ms(0), "x").await;
    let id = s(&m["messageId"]);
    let dead = api.wait_for_state(id, "DeadLetter", WAIT).await;
    assert_eq!(dead["attemptCount"], 1);

    let again = in_ms(0);
    let r = reschedule(&api, id, &again).await;
    assert_eq!(r.status(), 200);
    let r: Value = r.json().await.unwrap();
    assert_eq!(r["state"], "Scheduled");
    assert_eq!(r["deliveryTime"], again.as_str());
    assert_eq!(r["attemptCount"], 1);

    let m = api.wait_for_state(id, "Delivered", WAIT).await;
    assert_eq!(m["attemptCount"], 2);
    assert_eq!(m["deliveryTime"], again.as_str());
    let attempts = api.attempts(id).await;
    let summary: Vec<_> = attempts
        .iter()
        .map(|a| (a["attempt"].clone(), a["outcome"].clone()))
        .collect();
    assert_eq!(
        summary,
        [
            (json!(1), json!("NonRetryableFailure")),
            (json!(2), json!("Success"))
        ]
    );
    let got = rx.received();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].json()["originalDeliveryTime"], again.as_str());
    app.shutdown().await;
}

#[tokio::test]
async fn a_rescheduled_dead_letter_starts_the_retry_ladder_over() {
    // Two attempts per ladder: one round of one attempt, two cycles.
    let app = TestApp::spawn_with(|c| {
        fast_ladder(c);
        c.retry.immediate_retries = 0;
        c.retry.minute_rounds = 1;
        c.retry.hour_cycles = 2;
    })
    .await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(503));
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let m = api.schedule(&target, &in_ms(0), "x").await;
    let id = s(&m["messageId"]);
    let dead = api.wait_for_state(id, "DeadLetter", WAIT).await;
    assert_eq!(dead["attemptCount"], 2);

    assert_eq!(reschedule(&api, id, &in_ms(0)).await.status(), 200);
    let dead = api.wait_for_state(id, "DeadLetter", WAIT).await;
    assert_eq!(dead["attemptCount"], 4, "{dead}");
    // A dead letter is not due again: no fifth attempt.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 4);
    let numbers: Vec<_> = api
        .attempts(id)
        .await
        .iter()
        .map(|a| a["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
    app.shutdown().await;
}

#[tokio::test]
async fn rescheduling_a_cancelled_message_answers_409() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let m = api.schedule(&target, "2099-01-01T00:00:00Z", "x").await;
    let id = s(&m["messageId"]);
    assert_eq!(cancel(&api, id).await.status(), 200);
    assert_problem(reschedule(&api, id, "2099-02-01T00:00:00Z").await, 409).await;
    let after = api.message(id).await;
    assert_eq!(after["state"], "Cancelled");
    assert_eq!(after["deliveryTime"], "2099-01-01T00:00:00Z");
    app.shutdown().await;
}

#[tokio::test]
async fn a_reschedule_with_an_invalid_body_answers_400_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let m = api.schedule(&target, "2099-01-01T00:00:00Z", "x").await;
    let id = s(&m["messageId"]);
    for body in [
        json!({}),
        json!({"deliveryTime": "2099-02-01T00:00:00"}),
        json!({"deliveryTime": "soon"}),
        json!({"deliveryTime": 42}),
        json!({"deliveryTime": null}),
    ] {
        let r = api
            .post(&format!("/messages/{id}/reschedule"), body.clone())
            .await;
        let p = assert_problem(r, 400).await;
        assert!(
            error_fields(&p).iter().any(|f| f == "deliveryTime"),
            "{body}: {p}"
        );
    }
    let r = api
        .req(Method::POST, &format!("/messages/{id}/reschedule"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_problem(r, 400).await;
    assert_eq!(api.message(id).await, m);
    app.shutdown().await;
}

// ---------------------------------------------------------------- idempotency

#[tokio::test]
async fn the_same_idempotency_key_and_body_answer_the_first_response_and_create_one_message() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let body =
        json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": "once"});
    let first = post_with_key(&api, "order-42", &body).await;
    assert_eq!(first.status(), 201);
    let first_location = first.headers().get("location").cloned();
    let first: Value = first.json().await.unwrap();

    let again = post_with_key(&api, "order-42", &body).await;
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers().get("location").cloned(), first_location);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["messageId"], first["messageId"]);
    assert_eq!(again, first);

    assert_eq!(ids(&list(&api, "").await), [s(&first["messageId"])]);
    app.shutdown().await;
}

#[tokio::test]
async fn concurrent_requests_with_one_key_create_one_message_and_others_each_their_own() {
    // Requests that arrive together are committed together: the key must
    // still name one message, and every other request gets its own.
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let body =
        json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": "once"});
    let same =
        futures::future::join_all((0..20).map(|_| post_with_key(&api, "order-7", &body))).await;
    let mut seen = std::collections::HashSet::new();
    for r in same {
        assert_eq!(r.status(), 201);
        let m: Value = r.json().await.unwrap();
        seen.insert(s(&m["messageId"]).to_string());
    }
    assert_eq!(seen.len(), 1, "one message for one key: {seen:?}");
    let other =
        json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": "another"});
    let conflicts =
        futures::future::join_all((0..5).map(|_| post_with_key(&api, "order-7", &other))).await;
    assert!(conflicts.iter().all(|r| r.status() == 409));
    let many = futures::future::join_all((0..40).map(|i| {
        api.post(
            "/messages",
            json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": format!("n{i}")}),
        )
    }))
    .await;
    assert!(many.iter().all(|r| r.status() == 201));
    assert_eq!(
        list(&api, "?limit=1000").await["items"]
            .as_array()
            .unwrap()
            .len(),
        41
    );
    app.shutdown().await;
}

#[tokio::test]
async fn the_same_idempotency_key_with_another_body_answers_409() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let body =
        json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": "one"});
    assert_eq!(post_with_key(&api, "k-1", &body).await.status(), 201);
    for other in [
        json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": "two"}),
        json!({"targetId": target, "deliveryTime": "2099-01-02T00:00:00Z", "payload": "one"}),
    ] {
        assert_problem(post_with_key(&api, "k-1", &other).await, 409).await;
    }
    assert_eq!(ids(&list(&api, "").await).len(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn an_idempotency_key_over_255_characters_answers_400() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let body = json!({"targetId": target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": "x"});
    assert_problem(post_with_key(&api, &"k".repeat(256), &body).await, 400).await;
    assert!(ids(&list(&api, "").await).is_empty());
    assert_eq!(
        post_with_key(&api, &"k".repeat(255), &body).await.status(),
        201
    );
    app.shutdown().await;
}

#[tokio::test]
async fn idempotency_keys_belong_to_one_account() {
    let app = TestApp::spawn().await;
    let acme = app.api("acme").await;
    let globex = app.api("globex").await;
    let acme_target = target_id(&acme, "http://127.0.0.1:9/hook").await;
    let globex_target = target_id(&globex, "http://127.0.0.1:9/hook").await;
    let a = post_with_key(
        &acme,
        "shared-key",
        &json!({"targetId": acme_target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": "x"}),
    )
    .await;
    assert_eq!(a.status(), 201);
    let a: Value = a.json().await.unwrap();
    let g = post_with_key(
        &globex,
        "shared-key",
        &json!({"targetId": globex_target, "deliveryTime": "2099-01-01T00:00:00Z", "payload": "x"}),
    )
    .await;
    assert_eq!(g.status(), 201);
    let g: Value = g.json().await.unwrap();
    assert_ne!(a["messageId"], g["messageId"]);
    assert_eq!(g["targetId"], globex_target.as_str());
    assert_eq!(ids(&list(&acme, "").await), [s(&a["messageId"])]);
    assert_eq!(ids(&list(&globex, "").await), [s(&g["messageId"])]);
    app.shutdown().await;
}
