//! Targets (docs/api.md#targets): create, validate, list, get, merge-patch, enable,
//! disable, delete; write-only secrets; the private-network guard; and the
//! request conventions of §1 (content type, malformed JSON, body limit).

mod common;

use std::{collections::HashSet, time::Duration};

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use common::{
    in_ms,
    problem::{assert_invalid, assert_problem},
    receiver::{Received, Receiver, Reply},
    Api, TestApp,
};
use hmac::{Hmac, Mac};
use reqwest::{Method, Response};
use serde_json::{json, Value};
use sha2::Sha256;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn is_target_id(id: &str) -> bool {
    id.strip_prefix("DI-T-").is_some_and(|hex| {
        hex.len() == 10 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

async fn created(r: Response) -> Value {
    let status = r.status();
    let location = r
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_string());
    let text = r.text().await.unwrap();
    assert_eq!(status, 201, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let id = body["targetId"].as_str().unwrap();
    let location = location.expect("a Location header");
    assert!(location.ends_with(&format!("/targets/{id}")), "{location}");
    body
}

async fn ok_json(r: Response) -> Value {
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn id_of(v: &Value) -> String {
    v["targetId"].as_str().unwrap().to_string()
}

async fn patch_json(api: &Api, path: &str, body: Value) -> Response {
    api.req(Method::PATCH, path)
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn raw(api: &Api, method: Method, path: &str, content_type: &str, body: Vec<u8>) -> Response {
    api.req(method, path)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap()
}

/// Checks a Standard Webhooks signature made with the `whsec_` secret.
fn assert_signed_with(secret: &str, got: &Received) {
    let key = B64
        .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
        .unwrap();
    let id = got.header("webhook-id").expect("webhook-id");
    let ts = got.header("webhook-timestamp").expect("webhook-timestamp");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&got.body);
    let expected = format!("v1,{}", B64.encode(mac.finalize().into_bytes()));
    let signatures = got.header("webhook-signature").expect("webhook-signature");
    assert!(
        signatures.split(' ').any(|s| s == expected),
        "{signatures} is not signed with the secret shown at creation"
    );
}

/// Schedules a message due now and returns what the receiver got.
async fn deliver_one(api: &Api, rx: &Receiver, target_id: &str) -> Received {
    let before = rx.count();
    let m = api.schedule(target_id, &in_ms(0), "ping").await;
    let got = rx.wait_for(before + 1, Duration::from_secs(5)).await;
    api.wait_for_state(
        m["messageId"].as_str().unwrap(),
        "Delivered",
        Duration::from_secs(5),
    )
    .await;
    got[before].clone()
}

/// Returns once the clock is a millisecond past `instant` (RFC 3339), so
/// that what is created next is created later.
async fn until_the_clock_passes(instant: &str) {
    let after =
        chrono::DateTime::parse_from_rfc3339(instant).unwrap() + chrono::TimeDelta::milliseconds(1);
    while chrono::Utc::now() < after {
        tokio::task::yield_now().await;
    }
}

fn webhook_body(url: &str) -> Value {
    json!({"name": "orders", "type": "webhook", "config": {"url": url}})
}

// ---------------------------------------------------------------------------
// Create
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_created_webhook_target_shows_its_generated_signing_secret_once() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = created(
        api.post(
            "/targets",
            json!({"name": "orders", "type": "webhook", "config": {
                "url": "https://example.com/hook", "headers": {"X-Api-Key": "key-1"}, "timeoutMs": 2500}}),
        )
        .await,
    )
    .await;
    let id = id_of(&t);
    assert!(is_target_id(&id), "{id}");
    assert_eq!(t["name"], "orders");
    assert_eq!(t["type"], "webhook");
    assert_eq!(t["enabled"], true);
    assert_eq!(t["config"]["url"], "https://example.com/hook");
    assert_eq!(t["config"]["timeoutMs"], 2500);
    assert_eq!(t["config"]["headers"]["X-Api-Key"], "***");
    let secret = t["config"]["signingSecret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert!(
        B64.decode(&secret["whsec_".len()..])
            .is_ok_and(|k| k.len() >= 16),
        "a whsec_ secret of at least 16 bytes: {secret}"
    );
    for stamp in ["createdAt", "updatedAt"] {
        let s = t[stamp].as_str().unwrap();
        assert!(s.ends_with('Z'), "{stamp} in UTC: {s}");
        chrono::DateTime::parse_from_rfc3339(s).unwrap();
    }

    let again = ok_json(api.get(&format!("/targets/{id}")).await).await;
    assert_eq!(again["config"]["signingSecret"], "***");
    assert_eq!(again["config"]["headers"]["X-Api-Key"], "***");
    assert_eq!(again["config"]["url"], "https://example.com/hook");
    assert_eq!(again["createdAt"], t["createdAt"]);
    let list = ok_json(api.get("/targets").await).await;
    assert_eq!(list["items"][0]["config"]["signingSecret"], "***");
    assert_eq!(list["items"][0]["config"]["headers"]["X-Api-Key"], "***");
    let text = serde_json::to_string(&list).unwrap();
    assert!(!text.contains(secret) && !text.contains("key-1"), "{text}");
    app.shutdown().await;
}

#[tokio::test]
async fn the_secret_shown_at_creation_signs_the_deliveries() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = created(
        api.post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {"url": rx.url("/hook"), "headers": {"X-Api-Key": "key-1"}}}),
        )
        .await,
    )
    .await;
    let got = deliver_one(&api, &rx, &id_of(&t)).await;
    assert_signed_with(t["config"]["signingSecret"].as_str().unwrap(), &got);
    assert_eq!(got.header("x-api-key").as_deref(), Some("key-1"));
    app.shutdown().await;
}

#[tokio::test]
async fn a_supplied_secret_is_write_only_even_in_the_create_response() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let r = api
        .post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {
                "url": "https://example.com/", "signingSecret": secret,
                "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example.com/token",
                         "clientId": "cid", "clientSecret": "csecret", "scopes": ["a"]}}}),
        )
        .await;
    let t = created(r).await;
    assert_eq!(t["config"]["signingSecret"], "***");
    assert_eq!(t["config"]["auth"]["clientSecret"], "***");
    assert_eq!(t["config"]["auth"]["clientId"], "cid");
    let text = t.to_string();
    assert!(
        !text.contains(secret) && !text.contains("csecret"),
        "{text}"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_webhook_url_that_is_not_http_is_refused_on_config_url() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for url in [
        "ftp://example.com/hook",
        "mailto:ops@example.com",
        "not a url",
        "",
    ] {
        assert_invalid(api.post("/targets", webhook_body(url)).await, "config.url").await;
    }
    let r = api
        .post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {}}),
        )
        .await;
    assert_invalid(r, "config.url").await;
    let list = ok_json(api.get("/targets").await).await;
    assert_eq!(list["items"], json!([]));
    app.shutdown().await;
}

#[tokio::test]
async fn a_target_without_a_name_or_with_an_unknown_type_is_refused_on_that_field() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let r = api
        .post(
            "/targets",
            json!({"type": "webhook", "config": {"url": "https://example.com/"}}),
        )
        .await;
    assert_invalid(r, "name").await;
    let r = api
        .post(
            "/targets",
            json!({"name": "", "type": "webhook", "config": {"url": "https://example.com/"}}),
        )
        .await;
    assert_invalid(r, "name").await;
    for kind in [json!("ftp"), json!(null), json!(7)] {
        let r = api
            .post(
                "/targets",
                json!({"name": "n", "type": kind, "config": {"url": "https://example.com/"}}),
            )
            .await;
        assert_invalid(r, "type").await;
    }
    let r = api
        .post("/targets", json!({"name": "n", "type": "webhook"}))
        .await;
    assert_invalid(r, "config").await;
    app.shutdown().await;
}

#[tokio::test]
async fn bad_webhook_headers_and_timeouts_are_refused_on_their_fields() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let r = api
        .post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {"url": "https://example.com/", "headers": {"User-Agent": "me"}}}),
        )
        .await;
    assert_invalid(r, "config.headers.User-Agent").await;
    let r = api
        .post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {"url": "https://example.com/", "timeoutMs": -1}}),
        )
        .await;
    assert_invalid(r, "config.timeoutMs").await;
    let r = api
        .post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {"url": "https://example.com/", "signingSecret": "hunter2"}}),
        )
        .await;
    let body = assert_invalid(r, "config.signingSecret").await;
    assert!(!body.to_string().contains("hunter2"), "{body}");
    app.shutdown().await;
}

#[tokio::test]
async fn an_sqs_target_is_created_and_its_config_validated() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let queue = "https://sqs.eu-north-1.amazonaws.com/123456789012/orders";
    let t = created(
        api.post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {
                "queueUrl": queue, "region": "eu-north-1",
                "credentials": {"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "s3cr3t"}}}),
        )
        .await,
    )
    .await;
    assert!(is_target_id(&id_of(&t)));
    assert_eq!(t["type"], "sqs");
    assert_eq!(t["config"]["queueUrl"], queue);
    assert_eq!(t["config"]["region"], "eu-north-1");
    assert_eq!(t["config"]["credentials"]["accessKeyId"], "AKIAEXAMPLE");
    assert_eq!(t["config"]["credentials"]["secretAccessKey"], "***");
    assert!(!t.to_string().contains("s3cr3t"));

    let sqs = |config: Value| json!({"name": "q", "type": "sqs", "config": config});
    let cases = [
        (json!({"region": "eu-north-1"}), "config.queueUrl"),
        (
            json!({"queueUrl": "not a url", "region": "eu-north-1"}),
            "config.queueUrl",
        ),
        (json!({"queueUrl": queue}), "config.region"),
        (
            json!({"queueUrl": queue, "region": "Europe"}),
            "config.region",
        ),
        (
            json!({"queueUrl": queue, "region": "eu-north-1", "credentials": {"accessKeyId": "A"}}),
            "config.credentials.secretAccessKey",
        ),
    ];
    for (config, field) in cases {
        assert_invalid(api.post("/targets", sqs(config)).await, field).await;
    }
    app.shutdown().await;
}

#[tokio::test]
async fn an_sns_target_is_created_and_its_config_validated() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let arn = "arn:aws:sns:us-east-1:123456789012:orders";
    let t = created(
        api.post(
            "/targets",
            json!({"name": "t", "type": "sns", "config": {"topicArn": arn, "region": "us-east-1",
                "credentials": {"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "s3cr3t"}}}),
        )
        .await,
    )
    .await;
    assert_eq!(t["type"], "sns");
    assert_eq!(t["config"]["topicArn"], arn);
    assert_eq!(t["config"]["region"], "us-east-1");

    let sns = |config: Value| json!({"name": "t", "type": "sns", "config": config});
    let cases = [
        (json!({"region": "us-east-1"}), "config.topicArn"),
        (
            json!({"topicArn": "arn:aws:sqs:us-east-1:123456789012:orders", "region": "us-east-1"}),
            "config.topicArn",
        ),
        (
            json!({"topicArn": "orders", "region": "us-east-1"}),
            "config.topicArn",
        ),
        (json!({"topicArn": arn}), "config.region"),
    ];
    for (config, field) in cases {
        assert_invalid(api.post("/targets", sns(config)).await, field).await;
    }
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// List and get
// ---------------------------------------------------------------------------

#[tokio::test]
async fn targets_are_listed_newest_first_in_pages_that_end_with_a_null_cursor() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let r = api
            .post(
                "/targets",
                json!({"name": format!("t{i}"), "type": "webhook", "config": {"url": "https://example.com/"}}),
            )
            .await;
        let t = created(r).await;
        ids.push(id_of(&t));
        // Distinct creation instants (milliseconds), so that the order is defined.
        until_the_clock_passes(t["createdAt"].as_str().unwrap()).await;
    }

    let all = ok_json(api.get("/targets").await).await;
    assert_eq!(all["items"].as_array().unwrap().len(), 5);
    assert_eq!(all["nextCursor"], Value::Null);

    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut path = "/targets?limit=2".to_string();
    loop {
        let page = ok_json(api.get(&path).await).await;
        let items = page["items"].as_array().unwrap();
        sizes.push(items.len());
        seen.extend(items.iter().cloned());
        match page["nextCursor"].as_str() {
            Some(cursor) => path = format!("/targets?limit=2&cursor={cursor}"),
            None => {
                assert_eq!(page["nextCursor"], Value::Null, "{page}");
                break;
            }
        }
        assert!(sizes.len() < 10, "paging does not end");
    }
    assert_eq!(sizes, vec![2, 2, 1]);
    let seen_ids: Vec<String> = seen.iter().map(id_of).collect();
    let unique: HashSet<&String> = seen_ids.iter().collect();
    assert_eq!(unique.len(), 5, "{seen_ids:?}");
    assert_eq!(unique, ids.iter().collect::<HashSet<_>>());
    assert_eq!(
        seen_ids,
        all["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(id_of)
            .collect::<Vec<_>>(),
        "pages follow the order of the full list"
    );
    let created_at: Vec<&str> = seen
        .iter()
        .map(|t| t["createdAt"].as_str().unwrap())
        .collect();
    let parsed: Vec<_> = created_at
        .iter()
        .map(|s| chrono::DateTime::parse_from_rfc3339(s).unwrap())
        .collect();
    assert!(
        parsed.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {created_at:?}"
    );
    assert_eq!(seen_ids[0], ids[4], "the newest target comes first");
    assert_eq!(seen_ids[4], ids[0], "the oldest target comes last");
    app.shutdown().await;
}

#[tokio::test]
async fn a_list_limit_outside_one_to_a_thousand_is_refused() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for limit in ["1001", "0", "-1", "ten"] {
        assert_invalid(api.get(&format!("/targets?limit={limit}")).await, "limit").await;
    }
    for limit in ["1", "1000"] {
        ok_json(api.get(&format!("/targets?limit={limit}")).await).await;
    }
    assert_invalid(
        api.get("/targets?cursor=%21%21not-a-cursor").await,
        "cursor",
    )
    .await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_unknown_target_id_answers_404() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for id in ["DI-T-0123456789", "DI-T-zzzz", "orders"] {
        let one = format!("/targets/{id}");
        assert_problem(api.get(&one).await, 404).await;
        assert_problem(api.patch(&one, json!({"name": "x"})).await, 404).await;
        assert_problem(api.post_empty(&format!("{one}/enable")).await, 404).await;
        assert_problem(api.post_empty(&format!("{one}/disable")).await, 404).await;
        assert_problem(api.delete(&one).await, 404).await;
    }
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// PATCH (JSON merge patch)
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_merge_patch_renames_a_target_and_keeps_the_rest() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = api.webhook("https://example.com/hook").await;
    let one = format!("/targets/{}", id_of(&t));

    let p = ok_json(api.patch(&one, json!({"name": "renamed"})).await).await;
    assert_eq!(p["name"], "renamed");
    assert_eq!(p["targetId"], t["targetId"]);
    assert_eq!(p["type"], "webhook");
    assert_eq!(p["config"]["url"], "https://example.com/hook");
    assert_eq!(p["config"]["signingSecret"], "***");
    assert_eq!(p["createdAt"], t["createdAt"]);
    let created = chrono::DateTime::parse_from_rfc3339(t["createdAt"].as_str().unwrap()).unwrap();
    let updated = chrono::DateTime::parse_from_rfc3339(p["updatedAt"].as_str().unwrap()).unwrap();
    assert!(updated >= created);

    // Plain application/json is accepted too.
    let p = ok_json(patch_json(&api, &one, json!({"name": "again"})).await).await;
    assert_eq!(p["name"], "again");
    assert_eq!(ok_json(api.get(&one).await).await["name"], "again");
    app.shutdown().await;
}

#[tokio::test]
async fn a_merge_patch_changes_the_url_and_deliveries_follow_it() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let old = Receiver::start().await;
    let new = Receiver::start().await;
    let t = api.webhook(&old.url("/old")).await;
    let one = format!("/targets/{}", id_of(&t));
    let p = ok_json(
        api.patch(&one, json!({"config": {"url": new.url("/new")}}))
            .await,
    )
    .await;
    assert_eq!(p["config"]["url"], new.url("/new"));
    assert_eq!(p["name"], t["name"]);
    let got = deliver_one(&api, &new, &id_of(&t)).await;
    assert_eq!(got.path, "/new");
    assert_eq!(old.count(), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn a_null_in_a_merge_patch_removes_one_header_and_keeps_the_others() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = created(
        api.post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {
                "url": rx.url("/hook"), "headers": {"X-Old": "old-value", "X-Keep": "keep-value"}}}),
        )
        .await,
    )
    .await;
    let one = format!("/targets/{}", id_of(&t));
    let p = ok_json(
        api.patch(
            &one,
            json!({"config": {"headers": {"X-Old": null, "X-New": "new-value"}}}),
        )
        .await,
    )
    .await;
    assert_eq!(
        p["config"]["headers"],
        json!({"X-Keep": "***", "X-New": "***"})
    );
    assert_eq!(p["config"]["url"], rx.url("/hook"));

    let got = deliver_one(&api, &rx, &id_of(&t)).await;
    assert_eq!(got.header("x-old"), None);
    assert_eq!(got.header("x-keep").as_deref(), Some("keep-value"));
    assert_eq!(got.header("x-new").as_deref(), Some("new-value"));
    // The signing secret was not touched by the patch.
    assert_signed_with(t["config"]["signingSecret"].as_str().unwrap(), &got);
    app.shutdown().await;
}

#[tokio::test]
async fn echoing_a_masked_target_back_in_a_patch_keeps_its_secrets() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = created(
        api.post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {
                "url": rx.url("/hook"), "headers": {"X-Api-Key": "key-1"}}}),
        )
        .await,
    )
    .await;
    let one = format!("/targets/{}", id_of(&t));
    // A client reads the target and sends it back with one change.
    let mut shown = ok_json(api.get(&one).await).await;
    assert_eq!(shown["config"]["signingSecret"], "***");
    shown["name"] = json!("renamed");
    let patch = json!({"name": shown["name"], "config": shown["config"]});
    let p = ok_json(patch_json(&api, &one, patch).await).await;
    assert_eq!(p["name"], "renamed");
    assert_eq!(p["config"]["signingSecret"], "***");
    assert_eq!(p["config"]["headers"]["X-Api-Key"], "***");

    let got = deliver_one(&api, &rx, &id_of(&t)).await;
    assert_eq!(got.header("x-api-key").as_deref(), Some("key-1"));
    assert_signed_with(t["config"]["signingSecret"].as_str().unwrap(), &got);
    app.shutdown().await;
}

/// The configuration as stored, secrets included.
async fn stored_config(app: &TestApp, target_id: &str) -> Value {
    let id = target_id.parse().unwrap();
    let target = app
        .store()
        .get_target(&common::account("acme"), &id)
        .await
        .unwrap()
        .expect("the target is stored");
    target.config.to_stored_json()
}

#[tokio::test]
async fn echoed_masks_keep_aws_and_oauth_client_secrets() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let sqs = created(
        api.post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {
                "queueUrl": "https://sqs.eu-north-1.amazonaws.com/123456789012/orders", "region": "eu-north-1",
                "credentials": {"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "aws-secret"}}}),
        )
        .await,
    )
    .await;
    let hook = created(
        api.post(
            "/targets",
            json!({"name": "h", "type": "webhook", "config": {
                "url": "https://example.com/",
                "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example.com/token",
                         "clientId": "cid", "clientSecret": "oauth-secret", "scopes": []}}}),
        )
        .await,
    )
    .await;
    for (t, name) in [(&sqs, "q2"), (&hook, "h2")] {
        let one = format!("/targets/{}", id_of(t));
        let shown = ok_json(api.get(&one).await).await;
        let p = ok_json(
            api.patch(&one, json!({"name": name, "config": shown["config"]}))
                .await,
        )
        .await;
        assert_eq!(p["name"], name);
    }
    let stored = stored_config(&app, &id_of(&sqs)).await;
    assert_eq!(stored["credentials"]["secretAccessKey"], "aws-secret");
    assert_eq!(stored["credentials"]["accessKeyId"], "AKIAEXAMPLE");
    let stored = stored_config(&app, &id_of(&hook)).await;
    assert_eq!(stored["auth"]["clientSecret"], "oauth-secret");
    assert_eq!(stored["auth"]["clientId"], "cid");
    // A new value replaces the secret.
    let one = format!("/targets/{}", id_of(&sqs));
    let p = ok_json(
        api.patch(
            &one,
            json!({"config": {"credentials": {"secretAccessKey": "rotated"}}}),
        )
        .await,
    )
    .await;
    assert_eq!(p["config"]["credentials"]["secretAccessKey"], "***");
    let stored = stored_config(&app, &id_of(&sqs)).await;
    assert_eq!(stored["credentials"]["secretAccessKey"], "rotated");
    assert_eq!(stored["credentials"]["accessKeyId"], "AKIAEXAMPLE");
    app.shutdown().await;
}

#[tokio::test]
async fn a_patch_cannot_change_the_type_or_break_the_config() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = api.webhook("https://example.com/hook").await;
    let one = format!("/targets/{}", id_of(&t));
    let r = api
        .patch(
            &one,
            json!({"type": "sqs", "config": {"queueUrl": "https://sqs.eu-north-1.amazonaws.com/123456789012/q", "region": "eu-north-1"}}),
        )
        .await;
    assert_invalid(r, "type").await;
    assert_invalid(
        api.patch(&one, json!({"config": {"url": "ftp://example.com/"}}))
            .await,
        "config.url",
    )
    .await;
    assert_invalid(api.patch(&one, json!({"name": null})).await, "name").await;
    assert_invalid(
        api.patch(&one, json!({"config": {"url": null}})).await,
        "config.url",
    )
    .await;
    let now = ok_json(api.get(&one).await).await;
    assert_eq!(now["type"], "webhook");
    assert_eq!(now["name"], t["name"]);
    assert_eq!(now["config"]["url"], "https://example.com/hook");
    app.shutdown().await;
}

#[tokio::test]
async fn a_patch_that_is_not_json_is_refused_with_415() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = api.webhook("https://example.com/hook").await;
    let one = format!("/targets/{}", id_of(&t));
    let r = raw(
        &api,
        Method::PATCH,
        &one,
        "text/plain",
        br#"{"name": "x"}"#.to_vec(),
    )
    .await;
    assert_problem(r, 415).await;
    assert_eq!(ok_json(api.get(&one).await).await["name"], t["name"]);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Enable and disable
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_target_can_be_disabled_and_enabled_again() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = api.webhook("https://example.com/hook").await;
    let one = format!("/targets/{}", id_of(&t));
    let d = ok_json(api.post_empty(&format!("{one}/disable")).await).await;
    assert_eq!(d["enabled"], false);
    assert_eq!(d["targetId"], t["targetId"]);
    assert_eq!(d["config"]["signingSecret"], "***");
    assert_eq!(ok_json(api.get(&one).await).await["enabled"], false);
    // Disabling twice is harmless.
    let d = ok_json(api.post_empty(&format!("{one}/disable")).await).await;
    assert_eq!(d["enabled"], false);
    let e = ok_json(api.post_empty(&format!("{one}/enable")).await).await;
    assert_eq!(e["enabled"], true);
    assert_eq!(ok_json(api.get(&one).await).await["enabled"], true);
    app.shutdown().await;
}

#[tokio::test]
async fn a_disabled_target_receives_nothing_until_it_is_enabled() {
    // The sweeper is driven by hand: each pass claims whatever is due.
    let app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = api.webhook(&rx.url("/hook")).await;
    let id = id_of(&t);
    ok_json(api.post_empty(&format!("/targets/{id}/disable")).await).await;
    let m = api.schedule(&id, &in_ms(-1000), "waiting").await;
    let mid = m["messageId"].as_str().unwrap();
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 0);
    let waiting = api.message(mid).await;
    assert_eq!(waiting["state"], "Scheduled");
    assert_eq!(waiting["attemptCount"], 0);

    ok_json(api.post_empty(&format!("/targets/{id}/enable")).await).await;
    assert_eq!(app.running().sweeper.deliver_due_now().await, 1);
    let got = rx.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].json()["payload"], "waiting");
    let done = api.message(mid).await;
    assert_eq!(done["state"], "Delivered", "{done}");
    assert_eq!(done["attemptCount"], 1);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Delete
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_deleted_target_answers_404_afterwards() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = api.webhook("https://example.com/hook").await;
    let one = format!("/targets/{}", id_of(&t));
    let r = api.delete(&one).await;
    assert_eq!(r.status(), 204);
    assert!(r.bytes().await.unwrap().is_empty());
    assert_problem(api.get(&one).await, 404).await;
    assert_problem(api.delete(&one).await, 404).await;
    assert_eq!(ok_json(api.get("/targets").await).await["items"], json!([]));
    let r = api
        .post(
            "/messages",
            json!({"targetId": id_of(&t), "deliveryTime": in_ms(1000), "payload": "x"}),
        )
        .await;
    let body = assert_problem(r, 400).await;
    assert_eq!(body["errors"][0]["field"], "targetId", "{body}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_target_with_a_scheduled_message_cannot_be_deleted_until_it_is_cancelled() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = api.webhook("https://example.com/hook").await;
    let one = format!("/targets/{}", id_of(&t));
    let m = api.schedule(&id_of(&t), &in_ms(3_600_000), "later").await;
    assert_problem(api.delete(&one).await, 409).await;
    assert_eq!(
        ok_json(api.get(&one).await).await["targetId"],
        t["targetId"]
    );
    let mid = m["messageId"].as_str().unwrap();
    assert_eq!(api.message(mid).await["state"], "Scheduled");

    ok_json(api.post_empty(&format!("/messages/{mid}/cancel")).await).await;
    assert_eq!(api.delete(&one).await.status(), 204);
    assert_problem(api.get(&one).await, 404).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_target_with_a_dead_letter_cannot_be_deleted() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(400));
    let t = api.webhook(&rx.url("/hook")).await;
    let one = format!("/targets/{}", id_of(&t));
    let m = api.schedule(&id_of(&t), &in_ms(0), "refused").await;
    api.wait_for_state(
        m["messageId"].as_str().unwrap(),
        "DeadLetter",
        Duration::from_secs(5),
    )
    .await;
    assert_problem(api.delete(&one).await, 409).await;
    assert_eq!(
        ok_json(api.get(&one).await).await["targetId"],
        t["targetId"]
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_target_whose_messages_were_delivered_can_be_deleted() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = api.webhook(&rx.url("/hook")).await;
    let other = api.webhook(&rx.url("/other")).await;
    let one = format!("/targets/{}", id_of(&t));
    for _ in 0..2 {
        deliver_one(&api, &rx, &id_of(&t)).await;
    }
    // Every message of the target is Delivered: nothing holds it back.
    let listed = ok_json(
        api.get(&format!("/messages?targetId={}&limit=1000", id_of(&t)))
            .await,
    )
    .await;
    let states: Vec<&Value> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["state"])
        .collect();
    assert_eq!(states, [&json!("Delivered"); 2], "{listed}");

    let r = api.delete(&one).await;
    assert_eq!(r.status(), 204);
    // Gone: not found, not listed, no message can be scheduled for it; the
    // account's other target stays.
    assert_problem(api.get(&one).await, 404).await;
    let left: Vec<Value> = ok_json(api.get("/targets").await).await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["targetId"].clone())
        .collect();
    assert_eq!(left, [other["targetId"].clone()]);
    let r = api
        .post(
            "/messages",
            json!({"targetId": id_of(&t), "deliveryTime": in_ms(1000), "payload": "x"}),
        )
        .await;
    assert_eq!(
        assert_problem(r, 400).await["errors"][0]["field"],
        "targetId"
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// The private-network guard
// ---------------------------------------------------------------------------

#[tokio::test]
async fn webhook_urls_on_private_networks_are_refused_by_default() {
    let app = TestApp::spawn_with(|c| c.webhook.allow_private_networks = false).await;
    let api = app.api("acme").await;
    for url in [
        "http://127.0.0.1/",
        "http://127.0.0.1:8080/hook",
        "http://localhost/",
        "http://LOCALHOST:3000/x",
        "http://10.0.0.1/",
        "http://192.168.1.10/",
        "http://172.16.5.4/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://0.0.0.0/",
        // Spellings of the same addresses.
        "http://2130706433/",
        "http://127.1/",
        "http://0x7f.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://api.localhost/",
        "http://[fd00:ec2::254]/",
        "http://[fe80::1]/",
        "http://100.100.100.200/",
    ] {
        let r = api.post("/targets", webhook_body(url)).await;
        assert_eq!(r.status(), 400, "{url} is refused: {:?}", r.text().await);
        let body =
            assert_invalid(api.post("/targets", webhook_body(url)).await, "config.url").await;
        assert_eq!(body["errors"][0]["field"], "config.url", "{url}: {body}");
    }
    assert_eq!(ok_json(api.get("/targets").await).await["items"], json!([]));

    let t = created(
        api.post("/targets", webhook_body("https://93.184.216.34/hook"))
            .await,
    )
    .await;
    assert_eq!(t["config"]["url"], "https://93.184.216.34/hook");
    // A change onto a private address is refused as well.
    let one = format!("/targets/{}", id_of(&t));
    assert_invalid(
        api.patch(&one, json!({"config": {"url": "http://169.254.169.254/"}}))
            .await,
        "config.url",
    )
    .await;
    assert_eq!(
        ok_json(api.get(&one).await).await["config"]["url"],
        "https://93.184.216.34/hook"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_fully_qualified_localhost_is_refused_like_localhost() {
    // `localhost.` is `localhost` (RFC 6761 §6.3): loopback, whatever the
    // resolver of the moment says.
    let app = TestApp::spawn_with(|c| c.webhook.allow_private_networks = false).await;
    let api = app.api("acme").await;
    for url in [
        "http://localhost./",
        "http://api.localhost./",
        "http://LocalHost.:8080/",
    ] {
        let r = api.post("/targets", webhook_body(url)).await;
        assert_eq!(r.status(), 400, "{url} is refused: {:?}", r.text().await);
    }
    assert_eq!(ok_json(api.get("/targets").await).await["items"], json!([]));
    app.shutdown().await;
}

#[tokio::test]
async fn private_webhook_urls_are_accepted_when_allowed() {
    let app = TestApp::spawn_with(|c| c.webhook.allow_private_networks = true).await;
    let api = app.api("acme").await;
    for url in [
        "http://127.0.0.1:9/",
        "http://10.0.0.1/",
        "http://localhost/",
    ] {
        created(api.post("/targets", webhook_body(url)).await).await;
    }
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Request conventions
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_body_that_is_not_json_is_refused_with_415() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let body = webhook_body("https://example.com/")
        .to_string()
        .into_bytes();
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/xml",
    ] {
        let r = raw(&api, Method::POST, "/targets", ct, body.clone()).await;
        assert_problem(r, 415).await;
    }
    let r = api
        .req(Method::POST, "/targets")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_problem(r, 415).await;
    // A charset parameter is still JSON.
    let r = raw(
        &api,
        Method::POST,
        "/targets",
        "application/json; charset=utf-8",
        body,
    )
    .await;
    created(r).await;
    app.shutdown().await;
}

#[tokio::test]
async fn malformed_json_is_refused_with_400() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for body in [
        &b"{\"name\": \"n\", "[..],
        b"not json",
        b"",
        b"[1, 2]",
        b"\"a string\"",
    ] {
        let r = raw(
            &api,
            Method::POST,
            "/targets",
            "application/json",
            body.to_vec(),
        )
        .await;
        let problem = assert_problem(r, 400).await;
        assert!(
            !problem.to_string().to_lowercase().contains("serde"),
            "{problem}"
        );
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_body_over_one_mebibyte_is_refused_with_413() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let big = json!({"name": "x".repeat(1024 * 1024 + 16), "type": "webhook",
                     "config": {"url": "https://example.com/"}});
    let r = raw(
        &api,
        Method::POST,
        "/targets",
        "application/json",
        big.to_string().into_bytes(),
    )
    .await;
    assert_problem(r, 413).await;
    // Just under the limit the body is read, and judged on its content.
    let under = json!({"name": "x".repeat(1024 * 1024 - 200), "type": "webhook",
                       "config": {"url": "https://example.com/"}});
    let bytes = under.to_string().into_bytes();
    assert!(bytes.len() < 1024 * 1024);
    let r = raw(&api, Method::POST, "/targets", "application/json", bytes).await;
    assert_invalid(r, "name").await;
    app.shutdown().await;
}
