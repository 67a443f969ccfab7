//! `POST /messages/batch`: up to 1,000 messages in one request, each
//! answered on its own (`items[i]` answers `messages[i]`); the request as a
//! whole refused only when it is not a list of 1 to 1,000 messages; scopes;
//! idempotency keys within a batch, across batches and shared with the
//! `Idempotency-Key` header of `POST /messages`; delivery of what a batch
//! scheduled; the OpenAPI document. Runs on the store `DISPATCH_TEST_STORE`
//! names.

mod common;

use std::collections::HashSet;

use common::{
    in_ms,
    problem::{assert_problem, assert_problem_body, error_fields},
    receiver::Receiver,
    Api, TestApp,
};
use futures::StreamExt;
use reqwest::{Method, Response};
use serde_json::{json, Value};

/// A target id that is well formed but exists nowhere.
const UNKNOWN_TARGET: &str = "DI-T-0000000000";
const FAR: &str = "2099-07-01T12:34:00Z";

fn s(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

/// Asserts `DI-M-` + a UUIDv7.
fn assert_message_id(id: &str) {
    let rest = id
        .strip_prefix("DI-M-")
        .unwrap_or_else(|| panic!("{id} does not start with DI-M-"));
    let uuid = uuid::Uuid::parse_str(rest).unwrap_or_else(|e| panic!("{id}: {e}"));
    assert_eq!(uuid.get_version_num(), 7, "{id} is not a UUIDv7");
}

fn content_type(r: &Response) -> String {
    r.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

async fn target_id(api: &Api, url: &str) -> String {
    s(&api.webhook(url).await["targetId"]).to_string()
}

/// One message of a batch, without a key.
fn msg(target: &str, at: &str, payload: &str) -> Value {
    json!({"targetId": target, "deliveryTime": at, "payload": payload})
}

/// One message of a batch with an `idempotencyKey`.
fn keyed(target: &str, at: &str, payload: &str, key: &str) -> Value {
    json!({"targetId": target, "deliveryTime": at, "payload": payload, "idempotencyKey": key})
}

async fn post_batch(api: &Api, body: Value) -> Response {
    api.post("/messages/batch", body).await
}

/// Posts `messages` as a batch and asserts a 200 whose shape holds: one item
/// per message, `scheduled` counts the 201s and `failed` the rest, each item
/// is either a message or a problem with its own status. Returns the body.
async fn batch(api: &Api, messages: Vec<Value>) -> Value {
    let n = messages.len();
    let r = post_batch(api, json!({ "messages": messages })).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let ct = content_type(&r);
    assert!(ct.starts_with("application/json"), "{ct}");
    let body: Value = r.json().await.unwrap();
    let items = body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items[] in {body}"));
    assert_eq!(items.len(), n, "one item per message: {body}");
    let ok = items.iter().filter(|i| i["status"] == 201).count();
    assert_eq!(body["scheduled"], ok, "scheduled counts the 201s: {body}");
    assert_eq!(body["failed"], n - ok, "failed counts the rest: {body}");
    for (i, item) in items.iter().enumerate() {
        let status = item["status"]
            .as_u64()
            .unwrap_or_else(|| panic!("items[{i}] has no status: {item}"));
        if status == 201 {
            assert!(item["message"].is_object(), "items[{i}]: {item}");
            assert!(item.get("error").is_none(), "items[{i}]: {item}");
        } else {
            assert!(
                status == 400 || status == 409,
                "items[{i}] answers 201, 400 or 409: {item}"
            );
            assert_problem_body(&item["error"], status as u16);
            assert!(item.get("message").is_none(), "items[{i}]: {item}");
            assert_ne!(item["replayed"], true, "items[{i}]: {item}");
        }
    }
    body
}

fn item(body: &Value, i: usize) -> &Value {
    &body["items"][i]
}

/// Asserts items[i] was scheduled by this request; returns its message.
fn created(body: &Value, i: usize) -> Value {
    let it = item(body, i);
    assert_eq!(it["status"], 201, "items[{i}]: {body}");
    assert!(
        !it["replayed"].as_bool().unwrap_or(false),
        "items[{i}] is not a replay: {body}"
    );
    let m = it["message"].clone();
    assert_message_id(s(&m["messageId"]));
    assert_eq!(m["state"], "Scheduled", "items[{i}]: {body}");
    assert_eq!(m["attemptCount"], 0, "items[{i}]: {body}");
    m
}

/// Asserts items[i] is a replay; returns the message it answers with.
fn replayed(body: &Value, i: usize) -> Value {
    let it = item(body, i);
    assert_eq!(it["status"], 201, "items[{i}]: {body}");
    assert_eq!(it["replayed"], true, "items[{i}] is a replay: {body}");
    it["message"].clone()
}

/// Asserts items[i] failed with `status`; returns its problem.
fn failed(body: &Value, i: usize, status: u16) -> Value {
    let it = item(body, i);
    assert_eq!(it["status"], status, "items[{i}]: {body}");
    it["error"].clone()
}

/// Asserts items[i] is a 400 naming exactly `field`.
fn invalid(body: &Value, i: usize, field: &str) {
    let p = failed(body, i, 400);
    assert_eq!(error_fields(&p), [field], "items[{i}]: {body}");
}

async fn list(api: &Api, query: &str) -> Value {
    let r = api.get(&format!("/messages{query}")).await;
    assert_eq!(r.status(), 200, "{query}: {:?}", r.text().await);
    r.json().await.unwrap()
}

/// The ids of the account's messages (up to 1,000).
async fn listed_ids(api: &Api) -> HashSet<String> {
    let l = list(api, "?limit=1000").await;
    assert!(l["nextCursor"].is_null(), "{l}");
    l["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| s(&m["messageId"]).to_string())
        .collect()
}

fn id_set<'a>(ids: impl IntoIterator<Item = &'a Value>) -> HashSet<String> {
    ids.into_iter().map(|v| s(v).to_string()).collect()
}

fn api_with(app: &TestApp, token: &str) -> Api {
    Api {
        base: app.base.clone(),
        http: app.http.clone(),
        token: token.to_string(),
    }
}

async fn post_with_key(api: &Api, key: &str, body: &Value) -> Response {
    api.req(Method::POST, "/messages")
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

// ---------------------------------------------------------------- per item

#[tokio::test]
async fn a_mixed_batch_answers_each_message_in_order_and_schedules_only_the_valid_ones() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let other = app.api("globex").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let foreign = target_id(&other, "http://127.0.0.1:9/hook").await;

    let body = batch(
        &api,
        vec![
            msg(&target, FAR, "first"),
            json!({"targetId": target, "deliveryTime": FAR, "payload": 42}),
            json!({"targetId": target, "payload": "no time"}),
            msg(&target, "2099-07-01T12:34:00", "no offset"),
            msg(UNKNOWN_TARGET, FAR, "nowhere"),
            msg(&foreign, FAR, "theirs"),
            msg(&target, "2099-07-01T14:34:00+02:00", "last"),
            json!("not an object"),
        ],
    )
    .await;
    assert_eq!(body["scheduled"], 2, "{body}");
    assert_eq!(body["failed"], 6, "{body}");

    let first = created(&body, 0);
    assert_eq!(first["targetId"], target.as_str());
    assert_eq!(first["deliveryTime"], FAR);
    assert_eq!(first["nextAttemptAt"], FAR);
    assert_eq!(first["payload"], "first");
    invalid(&body, 1, "messages[1].payload");
    invalid(&body, 2, "messages[2].deliveryTime");
    invalid(&body, 3, "messages[3].deliveryTime");
    invalid(&body, 4, "messages[4].targetId");
    invalid(&body, 5, "messages[5].targetId");
    let last = created(&body, 6);
    assert_eq!(last["targetId"], target.as_str());
    assert_eq!(
        last["deliveryTime"], "2099-07-01T12:34:00Z",
        "converted to UTC"
    );
    assert_eq!(last["payload"], "last");
    assert_ne!(first["messageId"], last["messageId"]);
    // An entry that is not an object is refused on its own, named by its place.
    let p = failed(&body, 7, 400);
    let fields = error_fields(&p);
    assert!(
        fields.len() == 1 && fields[0].starts_with("messages[7]"),
        "{p}"
    );

    // What the batch answered is what GET shows; only the valid two exist.
    assert_eq!(api.message(s(&first["messageId"])).await, first);
    assert_eq!(api.message(s(&last["messageId"])).await, last);
    assert_eq!(
        listed_ids(&api).await,
        id_set([&first["messageId"], &last["messageId"]])
    );
    assert!(listed_ids(&other).await.is_empty(), "nothing in globex");
    app.shutdown().await;
}

#[tokio::test]
async fn a_batch_of_1000_messages_is_scheduled_and_every_message_can_be_read_and_listed() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let messages: Vec<Value> = (0..1000)
        .map(|i| msg(&target, FAR, &format!("message {i}")))
        .collect();
    let body = batch(&api, messages).await;
    assert_eq!(body["scheduled"], 1000);
    assert_eq!(body["failed"], 0);
    let answered: Vec<Value> = (0..1000).map(|i| created(&body, i)).collect();
    for (i, m) in answered.iter().enumerate() {
        assert_eq!(m["payload"], format!("message {i}"), "items[{i}] in order");
        assert_eq!(m["targetId"], target.as_str());
    }
    let ids = id_set(answered.iter().map(|m| &m["messageId"]));
    assert_eq!(ids.len(), 1000, "1000 distinct messages");

    // Every one reads back as answered.
    let got: Vec<(Value, Value)> = futures::stream::iter(answered.iter().cloned())
        .map(|m| {
            let api = api.clone();
            async move {
                let read = api.message(s(&m["messageId"])).await;
                (m, read)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(got.len(), 1000);
    for (answered, read) in &got {
        assert_eq!(read, answered);
    }
    // And the list holds exactly them.
    assert_eq!(listed_ids(&api).await, ids);
    let by_target = list(&api, &format!("?limit=1000&targetId={target}")).await;
    assert_eq!(by_target["items"].as_array().unwrap().len(), 1000);
    app.shutdown().await;
}

#[tokio::test]
async fn an_empty_list_1001_messages_or_a_body_that_is_not_a_list_answers_400_and_schedules_nothing(
) {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let too_many: Vec<Value> = (0..1001)
        .map(|i| msg(&target, FAR, &i.to_string()))
        .collect();
    for body in [
        json!({"messages": []}),
        json!({ "messages": too_many }),
        json!({}),
        json!({"messages": null}),
        json!({"messages": "a list"}),
        json!({"messages": 3}),
        json!({"messages": msg(&target, FAR, "one, not in a list")}),
        json!({"message": [msg(&target, FAR, "misnamed")]}),
    ] {
        let p = assert_problem(post_batch(&api, body.clone()).await, 400).await;
        let shown: String = body.to_string().chars().take(120).collect();
        assert_eq!(p["errors"][0]["field"], "messages", "{shown}: {p}");
    }
    // A body that is itself a list (or not JSON) is no batch either.
    let r = api
        .req(Method::POST, "/messages/batch")
        .json(&json!([msg(&target, FAR, "bare list")]))
        .send()
        .await
        .unwrap();
    assert_problem(r, 400).await;
    let r = api
        .req(Method::POST, "/messages/batch")
        .header("content-type", "application/json")
        .body("{\"messages\": [")
        .send()
        .await
        .unwrap();
    assert_problem(r, 400).await;
    assert!(listed_ids(&api).await.is_empty());

    // 1,000 is the limit, not 999.
    let most: Vec<Value> = (0..1000)
        .map(|i| msg(&target, FAR, &i.to_string()))
        .collect();
    assert_eq!(batch(&api, most).await["scheduled"], 1000);
    app.shutdown().await;
}

/// Posts `body` as it is written (JSON text a `Value` cannot hold: a member
/// given twice, a number out of range).
async fn post_text(api: &Api, body: String) -> Response {
    api.req(Method::POST, "/messages/batch")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The messages of a batch are read straight from their JSON text; what
/// that reading refuses is read again the general way, so odd but valid
/// JSON and every error answer as they do in any other body.
#[tokio::test]
async fn messages_written_oddly_answer_as_any_other_body_does() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let head = format!(r#""targetId":"{target}","deliveryTime":"{FAR}""#);

    // A member given twice: the last one counts, even after an invalid one.
    let r = post_text(
        &api,
        format!(
            r#"{{"messages":[{{{head},"payload":"first","payload":"last"}},{{{head},"payload":5,"payload":"fixed"}}]}}"#
        ),
    )
    .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["scheduled"], 2, "{body}");
    assert_eq!(created(&body, 0)["payload"], "last");
    assert_eq!(created(&body, 1)["payload"], "fixed");

    // A message that is a list, or no object at all, answers in its item.
    let r = post_text(
        &api,
        format!(r#"{{"messages":[["{target}","{FAR}","a list"],7,{{{head},"payload":"ok"}}]}}"#),
    )
    .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    invalid(&body, 0, "messages[0]");
    invalid(&body, 1, "messages[1]");
    assert_eq!(created(&body, 2)["payload"], "ok");

    // JSON whose value no reader holds answers for the whole body, and
    // schedules nothing: a number out of range, a lone surrogate, nesting
    // past 128 levels.
    let before = listed_ids(&api).await;
    for (odd, says) in [
        ("1e400", "number out of range"),
        (r#""a\ud800""#, "unexpected end of hex escape"),
        (
            &format!("{}{}", "[".repeat(200), "]".repeat(200)),
            "recursion limit exceeded",
        ),
    ] {
        let r = post_text(
            &api,
            format!(r#"{{"messages":[{{{head},"payload":"fine"}},{{{head},"payload":{odd}}}]}}"#),
        )
        .await;
        let p = assert_problem(r, 400).await;
        let detail = p["detail"].as_str().unwrap_or_default();
        assert!(
            detail.starts_with("the body is not valid JSON") && detail.contains(says),
            "{says}: {p}"
        );
    }
    assert_eq!(listed_ids(&api).await, before, "nothing was scheduled");
    app.shutdown().await;
}

#[tokio::test]
async fn an_idempotency_key_that_is_empty_too_long_not_a_string_or_has_a_control_character_is_refused_for_that_message(
) {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let body = batch(
        &api,
        vec![
            keyed(&target, FAR, "a", ""),
            keyed(&target, FAR, "b", &"k".repeat(256)),
            json!({"targetId": target, "deliveryTime": FAR, "payload": "c", "idempotencyKey": 7}),
            keyed(&target, FAR, "d", &"k".repeat(255)),
            json!({"targetId": target, "deliveryTime": FAR, "payload": "e", "idempotencyKey": null}),
            keyed(&target, FAR, "f", "line\nbreak"),
            keyed(&target, FAR, "g", "del\u{7f}"),
        ],
    )
    .await;
    invalid(&body, 0, "messages[0].idempotencyKey");
    invalid(&body, 1, "messages[1].idempotencyKey");
    invalid(&body, 2, "messages[2].idempotencyKey");
    invalid(&body, 5, "messages[5].idempotencyKey");
    invalid(&body, 6, "messages[6].idempotencyKey");
    let d = created(&body, 3);
    let e = created(&body, 4);
    assert_eq!(
        listed_ids(&api).await,
        id_set([&d["messageId"], &e["messageId"]])
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------- auth

#[tokio::test]
async fn a_batch_needs_a_token_and_the_messages_write_scope() {
    let app = TestApp::spawn().await;
    let owner = app.api("acme").await;
    let target = target_id(&owner, "http://127.0.0.1:9/hook").await;
    let body = json!({"messages": [msg(&target, FAR, "x")]});

    let r = app
        .http
        .post(app.url("/messages/batch"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_problem(r, 401).await;
    let forged = api_with(&app, "not-a-token");
    assert_problem(post_batch(&forged, body.clone()).await, 401).await;

    for scopes in [
        &["messages:read"][..],
        &["targets:read", "targets:write"][..],
    ] {
        let narrow = api_with(&app, &app.token("acme", scopes).await);
        let p = assert_problem(post_batch(&narrow, body.clone()).await, 403).await;
        assert!(
            s(&p["detail"]).contains("messages:write"),
            "{scopes:?}: {p}"
        );
    }
    assert!(listed_ids(&owner).await.is_empty(), "nothing was scheduled");

    let write = api_with(&app, &app.token("acme", &["messages:write"]).await);
    let r = post_batch(&write, body).await;
    assert_eq!(r.status(), 200);
    let out: Value = r.json().await.unwrap();
    assert_eq!(out["scheduled"], 1, "{out}");
    assert_eq!(
        listed_ids(&owner).await,
        id_set([&out["items"][0]["message"]["messageId"]])
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------- idempotency

#[tokio::test]
async fn a_key_repeated_within_a_batch_answers_the_first_message_or_409_for_another_message() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let body = batch(
        &api,
        vec![
            keyed(&target, FAR, "one", "k-1"),
            keyed(&target, FAR, "one", "k-1"),
            keyed(&target, FAR, "two", "k-2"),
            keyed(&target, FAR, "two, changed", "k-2"),
            keyed(&target, "2099-07-02T00:00:00Z", "two", "k-2"),
            msg(&target, FAR, "one"),
        ],
    )
    .await;
    let first = created(&body, 0);
    assert_eq!(
        replayed(&body, 1),
        first,
        "the first message's answer again"
    );
    let second = created(&body, 2);
    let p = failed(&body, 3, 409);
    assert!(s(&p["detail"]).contains("messages[3]"), "{p}");
    failed(&body, 4, 409);
    let unkeyed = created(&body, 5);
    assert_eq!(body["scheduled"], 4, "the replay counts as scheduled");
    assert_eq!(body["failed"], 2);
    assert_eq!(
        listed_ids(&api).await,
        id_set([
            &first["messageId"],
            &second["messageId"],
            &unkeyed["messageId"]
        ])
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_batch_sent_again_replays_every_keyed_answer_and_creates_no_message() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let messages = vec![
        keyed(&target, FAR, "a", "order-1"),
        keyed(&target, "2099-07-02T00:00:00+01:00", "b", "order-2"),
    ];
    let first = batch(&api, messages.clone()).await;
    let a = created(&first, 0);
    let b = created(&first, 1);

    let again = batch(&api, messages).await;
    assert_eq!(again["scheduled"], 2);
    assert_eq!(again["failed"], 0);
    assert_eq!(replayed(&again, 0), a);
    assert_eq!(replayed(&again, 1), b);
    assert_eq!(
        listed_ids(&api).await,
        id_set([&a["messageId"], &b["messageId"]])
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_key_reused_by_a_later_batch_with_another_message_answers_409_and_keeps_the_first() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let other_target = target_id(&api, "http://127.0.0.1:9/other").await;
    let first = batch(&api, vec![keyed(&target, FAR, "a", "order-1")]).await;
    let a = created(&first, 0);

    let later = batch(
        &api,
        vec![
            keyed(&target, FAR, "a, changed", "order-1"),
            keyed(&target, "2099-07-01T12:34:01Z", "a", "order-1"),
            keyed(&other_target, FAR, "a", "order-1"),
            keyed(&target, FAR, "c", "order-3"),
        ],
    )
    .await;
    for i in 0..3 {
        let p = failed(&later, i, 409);
        assert!(s(&p["detail"]).contains(&format!("messages[{i}]")), "{p}");
    }
    let c = created(&later, 3);
    assert_eq!(later["scheduled"], 1);
    assert_eq!(later["failed"], 3);

    // The conflicts did not take the key: the first message still replays.
    let again = batch(&api, vec![keyed(&target, FAR, "a", "order-1")]).await;
    assert_eq!(replayed(&again, 0), a);
    assert_eq!(
        listed_ids(&api).await,
        id_set([&a["messageId"], &c["messageId"]])
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_key_is_shared_with_the_idempotency_key_header_of_post_messages() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;

    // First POST /messages, then a batch.
    let single = msg(&target, FAR, "single");
    let r = post_with_key(&api, "shared-1", &single).await;
    assert_eq!(r.status(), 201);
    let m: Value = r.json().await.unwrap();
    let body = batch(
        &api,
        vec![
            keyed(&target, FAR, "single", "shared-1"),
            keyed(&target, FAR, "single, changed", "shared-1"),
        ],
    )
    .await;
    assert_eq!(replayed(&body, 0), m, "POST /messages's answer again");
    failed(&body, 1, 409);

    // First a batch, then POST /messages.
    let body = batch(&api, vec![keyed(&target, FAR, "batched", "shared-2")]).await;
    let b = created(&body, 0);
    let r = post_with_key(&api, "shared-2", &msg(&target, FAR, "batched")).await;
    assert_eq!(r.status(), 201);
    assert_eq!(
        r.headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let again: Value = r.json().await.unwrap();
    assert_eq!(again, b, "the batch's answer again");
    assert_problem(
        post_with_key(&api, "shared-2", &msg(&target, FAR, "other")).await,
        409,
    )
    .await;

    assert_eq!(
        listed_ids(&api).await,
        id_set([&m["messageId"], &b["messageId"]])
    );
    app.shutdown().await;
}

#[tokio::test]
async fn the_same_key_in_two_accounts_is_two_keys() {
    let app = TestApp::spawn().await;
    let acme = app.api("acme").await;
    let globex = app.api("globex").await;
    let acme_target = target_id(&acme, "http://127.0.0.1:9/hook").await;
    let globex_target = target_id(&globex, "http://127.0.0.1:9/hook").await;

    let a = created(
        &batch(&acme, vec![keyed(&acme_target, FAR, "x", "shared-key")]).await,
        0,
    );
    // globex's first use of the key is new, even with another message.
    let g = created(
        &batch(&globex, vec![keyed(&globex_target, FAR, "y", "shared-key")]).await,
        0,
    );
    assert_ne!(a["messageId"], g["messageId"]);
    assert_eq!(g["targetId"], globex_target.as_str());

    // Each account replays its own answer.
    let body = batch(&acme, vec![keyed(&acme_target, FAR, "x", "shared-key")]).await;
    assert_eq!(replayed(&body, 0), a);
    let body = batch(&globex, vec![keyed(&globex_target, FAR, "y", "shared-key")]).await;
    assert_eq!(replayed(&body, 0), g);

    assert_eq!(listed_ids(&acme).await, id_set([&a["messageId"]]));
    assert_eq!(listed_ids(&globex).await, id_set([&g["messageId"]]));
    app.shutdown().await;
}

#[tokio::test]
async fn the_key_of_a_message_whose_target_is_unknown_is_not_kept() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let other = app.api("globex").await;
    let target = target_id(&api, "http://127.0.0.1:9/hook").await;
    let foreign = target_id(&other, "http://127.0.0.1:9/hook").await;

    let body = batch(
        &api,
        vec![
            keyed(UNKNOWN_TARGET, FAR, "x", "order-1"),
            keyed(UNKNOWN_TARGET, FAR, "x", "order-1"),
            keyed(&foreign, FAR, "x", "order-2"),
        ],
    )
    .await;
    invalid(&body, 0, "messages[0].targetId");
    invalid(&body, 1, "messages[1].targetId");
    invalid(&body, 2, "messages[2].targetId");
    assert_eq!(body["scheduled"], 0);

    // Sent again with a target that exists, the keys are new: scheduled, not 409.
    let body = batch(
        &api,
        vec![
            keyed(&target, FAR, "x", "order-1"),
            keyed(&target, FAR, "x", "order-2"),
        ],
    )
    .await;
    let one = created(&body, 0);
    let two = created(&body, 1);
    assert_eq!(
        listed_ids(&api).await,
        id_set([&one["messageId"], &two["messageId"]])
    );
    assert!(listed_ids(&other).await.is_empty());
    app.shutdown().await;
}

// ---------------------------------------------------------------- delivery

#[tokio::test]
async fn messages_scheduled_by_a_batch_are_delivered_like_any_other() {
    // The sweeper is driven by hand: each pass claims whatever is due.
    let app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let past = in_ms(-60_000);
    let body = batch(
        &api,
        vec![
            msg(&target, &past, "due 0"),
            msg(&target, FAR, "not due"),
            msg(&target, &past, "due 1"),
            keyed(&target, &past, "due 2", "order-9"),
        ],
    )
    .await;
    let due: Vec<Value> = [0, 2, 3].iter().map(|&i| created(&body, i)).collect();
    let later = created(&body, 1);

    assert_eq!(app.running().sweeper.deliver_due_now().await, 3);
    let got = rx.received();
    assert_eq!(got.len(), 3);
    for m in &due {
        let id = s(&m["messageId"]);
        let d = api.message(id).await;
        assert_eq!(d["state"], "Delivered", "{d}");
        assert_eq!(d["attemptCount"], 1, "{d}");
        assert_eq!(d["deliveryTime"], past.as_str());
        let received: Vec<_> = got.iter().filter(|r| r.json()["messageId"] == id).collect();
        assert_eq!(received.len(), 1, "{id} delivered once");
        let envelope = received[0].json();
        assert_eq!(envelope["payload"], m["payload"]);
        assert_eq!(envelope["targetId"], target.as_str());
        assert_eq!(envelope["originalDeliveryTime"], past.as_str());
        assert_eq!(received[0].path, "/hook");
        assert_eq!(received[0].header("webhook-id").as_deref(), Some(id));
    }
    // The one not yet due waits.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 3, "only the due messages were delivered");
    assert_eq!(
        api.message(s(&later["messageId"])).await["state"],
        "Scheduled"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_batch_for_a_disabled_target_is_held_until_the_target_is_enabled() {
    // The sweeper is driven by hand: each pass claims whatever is due.
    let app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = target_id(&api, &rx.url("/hook")).await;
    let r = api.post_empty(&format!("/targets/{target}/disable")).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);

    let body = batch(&api, vec![msg(&target, &in_ms(-1_000), "held")]).await;
    let m = created(&body, 0);
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 0, "nothing is delivered to a disabled target");
    assert_eq!(api.message(s(&m["messageId"])).await["state"], "Scheduled");

    let r = api.post_empty(&format!("/targets/{target}/enable")).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    assert_eq!(app.running().sweeper.deliver_due_now().await, 1);
    let got = rx.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].json()["messageId"], m["messageId"]);
    assert_eq!(api.message(s(&m["messageId"])).await["state"], "Delivered");
    app.shutdown().await;
}

// ---------------------------------------------------------------- OpenAPI

#[tokio::test]
async fn the_openapi_document_lists_the_batch_endpoint() {
    let app = TestApp::spawn().await;
    let r = app.http.get(app.url("/openapi.json")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let doc: Value = r.json().await.unwrap();
    let op = &doc["paths"]["/messages/batch"]["post"];
    assert!(
        op.is_object(),
        "no POST /messages/batch in {}",
        doc["paths"]
    );
    assert_eq!(op["security"], json!([{"bearer": ["messages:write"]}]));
    for status in ["200", "400"] {
        assert!(op["responses"][status].is_object(), "{status}: {op}");
    }
    assert!(
        op["requestBody"]["content"]["application/json"].is_object(),
        "{op}"
    );
    // The item schema has the wire names.
    let schemas = &doc["components"]["schemas"];
    let item = &schemas["BatchMessageIn"]["properties"];
    for field in ["targetId", "deliveryTime", "payload", "idempotencyKey"] {
        assert!(item[field].is_object(), "{field} in {item}");
    }
    let out = &schemas["BatchOut"]["properties"];
    for field in ["items", "scheduled", "failed"] {
        assert!(out[field].is_object(), "{field} in {out}");
    }
    app.shutdown().await;
}
