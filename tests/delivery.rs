//! Webhook delivery (docs/api.md#delivery-formats, #retries): the request format and its signature,
//! the classification of responses and errors, attempt records, the retry
//! ladder and its timing, disabled targets, and the private-network guard at
//! connection time.

#[path = "delivery/claim_ahead.rs"]
mod claim_ahead;
mod common;
#[path = "delivery/raw.rs"]
mod raw;
#[path = "delivery/secret_rotation.rs"]
mod secret_rotation;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    body::Bytes,
    http::{HeaderMap, Method, StatusCode},
    Router,
};
use base64::{engine::general_purpose::STANDARD as B64, Engine};
use chrono::{DateTime, Utc};
use common::{
    fast_ladder, in_ms,
    receiver::{Receiver, Reply},
    Api, TestApp,
};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

const WAIT: Duration = Duration::from_secs(5);

fn s(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

fn time(v: &Value) -> DateTime<Utc> {
    let t = s(v);
    assert!(t.ends_with('Z'), "{t} is not in UTC with Z");
    DateTime::parse_from_rfc3339(t)
        .unwrap_or_else(|e| panic!("{t}: {e}"))
        .with_timezone(&Utc)
}

async fn schedule_now(api: &Api, target: &Value, payload: &str) -> String {
    let m = api
        .schedule(s(&target["targetId"]), &in_ms(0), payload)
        .await;
    s(&m["messageId"]).to_string()
}

/// What a Standard Webhooks receiver does: recompute the HMAC and compare it
/// with every `v1,` signature in the header.
fn signature_is_valid(secret: &str, id: &str, timestamp: &str, body: &[u8], header: &str) -> bool {
    let key = B64
        .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
        .expect("a base64 secret");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let expected = B64.encode(mac.finalize().into_bytes());
    header
        .split(' ')
        .any(|sig| sig.strip_prefix("v1,") == Some(expected.as_str()))
}

/// A receiver that also records the request method and answers raw bytes,
/// which `common::receiver` cannot (it keeps no method and answers strings).
#[derive(Clone)]
struct RawSink {
    url: String,
    seen: Arc<Mutex<Vec<(Method, HeaderMap, Bytes)>>>,
}

impl RawSink {
    async fn start(status: u16, body: Vec<u8>) -> Self {
        let seen: Arc<Mutex<Vec<(Method, HeaderMap, Bytes)>>> = Arc::default();
        let record = seen.clone();
        let app = Router::new().fallback(move |method: Method, headers: HeaderMap, b: Bytes| {
            let record = record.clone();
            let body = body.clone();
            async move {
                record.lock().unwrap().push((method, headers, b));
                (StatusCode::from_u16(status).unwrap(), body)
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/sink", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, seen }
    }

    fn seen(&self) -> Vec<(Method, HeaderMap, Bytes)> {
        self.seen.lock().unwrap().clone()
    }
}

/// The ladder's timing tests measure gaps of a few milliseconds; the other
/// tests of this file, running in parallel on the same machine, would add
/// their own load to what is measured. Timing tests hold this exclusively,
/// every other test shares it.
static MACHINE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn share_the_machine() -> tokio::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().await
}

async fn have_the_machine_alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().await
}

/// The gap between one attempt's end and the next one's start, in ms.
fn gaps_ms(attempts: &[Value]) -> Vec<i64> {
    attempts
        .windows(2)
        .map(|w| (time(&w[1]["startedAt"]) - time(&w[0]["finishedAt"])).num_milliseconds())
        .collect()
}

/// Checks the measured gaps between attempts against the ladder's steps
/// (`(kind, step ms)` per gap) in a way a busy machine cannot break but a
/// wrong ladder does:
/// - no attempt comes before its step is over (the timestamps are whole
///   milliseconds, so one of rounding is allowed);
/// - no attempt waits more than a generous `LATE_MS` past its step;
/// - the typical (median) gap of each kind is under its step plus `slack`
///   (the contract's tolerance, where it applies), which is no more than
///   the step between kinds: a skipped step fails the first rule, a
///   doubled or a wrong one this one, while a few attempts delayed by the
///   machine's load do not.
fn assert_ladder_timing(gaps: &[i64], steps: &[(&str, i64)], slack: i64) {
    const LATE_MS: i64 = 1_000;
    assert_eq!(gaps.len(), steps.len(), "one step per gap: {gaps:?}");
    let mut wrong = Vec::new();
    let mut by_kind: std::collections::BTreeMap<&str, (i64, Vec<i64>)> = Default::default();
    for (i, (&gap, &(kind, step))) in gaps.iter().zip(steps).enumerate() {
        if gap < step - 1 {
            wrong.push(format!(
                "after attempt {}: {gap} ms, before its {kind} step of {step} ms",
                i + 1
            ));
        }
        if gap > step + LATE_MS {
            wrong.push(format!(
                "after attempt {}: {gap} ms, over {LATE_MS} ms past its {kind} step of {step} ms",
                i + 1
            ));
        }
        by_kind
            .entry(kind)
            .or_insert((step, Vec::new()))
            .1
            .push(gap);
    }
    for (kind, (step, mut measured)) in by_kind {
        measured.sort_unstable();
        let median = measured[measured.len() / 2];
        if median >= step + slack {
            wrong.push(format!(
                "{kind} steps take {median} ms typically, expected {step} ms (+ under {slack} ms)"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "ladder timing is off:\n{}\nall gaps (ms): {gaps:?}",
        wrong.join("\n")
    );
}

// ---------------------------------------------------------------- format

#[tokio::test]
async fn a_webhook_is_a_signed_json_post_with_the_standard_webhooks_headers() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = api
        .webhook_with(
            &rx.url("/hook"),
            json!({"headers": {"X-Api-Key": "key-123", "X-Tenant": "acme"}}),
        )
        .await;
    let secret = s(&target["config"]["signingSecret"]).to_string();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let payload = "Hello, \"World\"! € 😀\n{\"nested\": true}";
    let original = in_ms(-5_000);
    let m = api
        .schedule(s(&target["targetId"]), &original, payload)
        .await;
    let id = s(&m["messageId"]);

    let got = rx.wait_for(1, WAIT).await;
    let req = &got[0];
    assert_eq!(req.path, "/hook");
    let ct = req.header("content-type").unwrap_or_default();
    assert_eq!(
        ct.split(';').next().unwrap().trim(),
        "application/json",
        "{ct}"
    );
    let ua = req.header("user-agent").unwrap_or_default();
    assert!(ua.starts_with("Dispatch/"), "User-Agent {ua}");
    assert_eq!(req.header("x-api-key").as_deref(), Some("key-123"));
    assert_eq!(req.header("x-tenant").as_deref(), Some("acme"));
    assert_eq!(req.header("webhook-id").as_deref(), Some(id));

    let timestamp = req.header("webhook-timestamp").expect("webhook-timestamp");
    let ts: i64 = timestamp.parse().expect("unix seconds");
    assert!(
        (Utc::now().timestamp() - ts).abs() <= 5,
        "webhook-timestamp {ts} is not near now"
    );
    let signature = req.header("webhook-signature").expect("webhook-signature");
    assert!(signature.starts_with("v1,"), "{signature}");
    assert!(
        signature_is_valid(&secret, id, &timestamp, &req.body, &signature),
        "the signature {signature} does not verify"
    );
    assert!(
        !signature_is_valid(&secret, id, &timestamp, b"{}", &signature),
        "the check in this test verifies anything"
    );

    let body = req.json();
    assert_eq!(body["messageId"], id);
    assert_eq!(body["targetId"], target["targetId"]);
    assert_eq!(body["payload"], payload);
    assert_eq!(body["originalDeliveryTime"], m["deliveryTime"]);
    assert_eq!(body["originalDeliveryTime"], original.as_str());
    let attempt_time = time(&body["deliveryTime"]);
    assert!(
        attempt_time >= time(&body["originalDeliveryTime"]) + chrono::TimeDelta::seconds(4),
        "deliveryTime {attempt_time} is not the attempt's time"
    );
    assert!(
        (req.at - attempt_time).num_milliseconds().abs() < 2_000,
        "deliveryTime {attempt_time} is not when the request was made ({})",
        req.at
    );
    api.wait_for_state(id, "Delivered", WAIT).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_webhook_uses_the_post_method() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let sink = RawSink::start(204, Vec::new()).await;
    let api = app.api("acme").await;
    let target = api.webhook(&sink.url).await;
    let id = schedule_now(&api, &target, "x").await;
    api.wait_for_state(&id, "Delivered", WAIT).await;
    let seen = sink.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, Method::POST);
    app.shutdown().await;
}

#[tokio::test]
async fn every_retry_carries_the_same_webhook_id_and_a_fresh_valid_signature() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(500)]);
    let api = app.api("acme").await;
    let target = api.webhook_with(&rx.url("/hook"), json!({})).await;
    let secret = s(&target["config"]["signingSecret"]).to_string();
    let id = schedule_now(&api, &target, "again").await;
    let m = api.wait_for_state(&id, "Delivered", WAIT).await;
    assert_eq!(m["attemptCount"], 2);
    let got = rx.received();
    assert_eq!(got.len(), 2);
    for req in &got {
        assert_eq!(req.header("webhook-id").as_deref(), Some(id.as_str()));
        let ts = req.header("webhook-timestamp").unwrap();
        let sig = req.header("webhook-signature").unwrap();
        assert!(signature_is_valid(&secret, &id, &ts, &req.body, &sig));
        assert_eq!(req.json()["originalDeliveryTime"], m["deliveryTime"]);
    }
    app.shutdown().await;
}

// ---------------------------------------------------------------- classification

#[tokio::test]
async fn answers_200_and_204_and_other_2xx_deliver_the_message() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let mut cases = Vec::new();
    for status in [200u16, 201, 202, 204] {
        let rx = Receiver::start().await;
        rx.always(Reply::status(status));
        let target = api.webhook(&rx.url("/hook")).await;
        cases.push((status, rx, schedule_now(&api, &target, "x").await));
    }
    for (status, rx, id) in cases {
        let m = api.wait_for_state(&id, "Delivered", WAIT).await;
        assert_eq!(m["attemptCount"], 1, "{status}");
        assert!(m["nextAttemptAt"].is_null(), "{status}: {m}");
        let delivered_at = time(&m["deliveredAt"]);
        assert!(delivered_at >= time(&m["deliveryTime"]), "{status}: {m}");
        let attempts = api.attempts(&id).await;
        assert_eq!(attempts.len(), 1, "{status}");
        assert_eq!(attempts[0]["outcome"], "Success", "{status}");
        assert_eq!(attempts[0]["statusCode"], status, "{status}");
        assert!(attempts[0]["error"].is_null(), "{status}: {}", attempts[0]);
        assert_eq!(rx.count(), 1, "{status}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn client_errors_dead_letter_the_message_after_exactly_one_attempt() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let mut cases = Vec::new();
    for status in [400u16, 401, 403, 404, 405, 409, 410, 413, 422] {
        let rx = Receiver::start().await;
        rx.always(Reply::status(status).body("no"));
        let target = api.webhook(&rx.url("/hook")).await;
        cases.push((status, rx, schedule_now(&api, &target, "x").await));
    }
    for (status, _, id) in &cases {
        let m = api.wait_for_state(id, "DeadLetter", WAIT).await;
        assert_eq!(m["attemptCount"], 1, "{status}: {m}");
        time(&m["deadLetteredAt"]);
        assert!(m["nextAttemptAt"].is_null(), "{status}: {m}");
        assert!(m["lastError"].is_string(), "{status}: {m}");
    }
    // An immediate retry runs under the same claim, before the result is
    // recorded: a DeadLetter state means none came. Nor is anything left due.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    for (status, rx, id) in &cases {
        assert_eq!(rx.count(), 1, "{status} was retried");
        let attempts = api.attempts(id).await;
        assert_eq!(attempts.len(), 1, "{status}");
        assert_eq!(attempts[0]["outcome"], "NonRetryableFailure", "{status}");
        assert_eq!(attempts[0]["statusCode"], *status, "{status}");
        assert_eq!(attempts[0]["responseBody"], "no", "{status}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn redirects_are_not_followed_and_dead_letter_the_message() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let elsewhere = Receiver::start().await;
    let mut cases = Vec::new();
    for status in [301u16, 302, 303, 307, 308] {
        let rx = Receiver::start().await;
        rx.always(Reply::status(status).header("location", &elsewhere.url("/moved")));
        let target = api.webhook(&rx.url("/hook")).await;
        cases.push((status, rx, schedule_now(&api, &target, "x").await));
    }
    for (status, rx, id) in &cases {
        let m = api.wait_for_state(id, "DeadLetter", WAIT).await;
        assert_eq!(m["attemptCount"], 1, "{status}: {m}");
        let attempts = api.attempts(id).await;
        assert_eq!(attempts.len(), 1, "{status}");
        assert_eq!(attempts[0]["outcome"], "NonRetryableFailure", "{status}");
        assert_eq!(attempts[0]["statusCode"], *status, "{status}");
        assert_eq!(rx.count(), 1, "{status}");
    }
    // A redirect would have been followed within the attempt, which has been
    // recorded; and nothing is left due to follow it later.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(
        elsewhere.count(),
        0,
        "a redirect target was requested: {:?}",
        elsewhere.received()
    );
    app.shutdown().await;
}

#[tokio::test]
async fn server_errors_429_408_and_425_are_retried() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let mut cases = Vec::new();
    for status in [500u16, 502, 503, 504, 429, 408, 425] {
        let rx = Receiver::start().await;
        rx.then([Reply::status(status).body("busy")]);
        let target = api.webhook(&rx.url("/hook")).await;
        cases.push((status, rx, schedule_now(&api, &target, "x").await));
    }
    for (status, rx, id) in &cases {
        let m = api.wait_for_state(id, "Delivered", WAIT).await;
        assert_eq!(m["attemptCount"], 2, "{status}: {m}");
        let attempts = api.attempts(id).await;
        assert_eq!(attempts.len(), 2, "{status}");
        assert_eq!(attempts[0]["outcome"], "RetryableFailure", "{status}");
        assert_eq!(attempts[0]["statusCode"], *status, "{status}");
        assert!(attempts[0]["error"].is_string(), "{status}");
        assert_eq!(attempts[1]["outcome"], "Success", "{status}");
        assert_eq!(rx.count(), 2, "{status}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_retry_that_succeeds_delivers_the_message_on_the_second_attempt() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.then([
        Reply::status(500).body("oops"),
        Reply::status(200).body("thanks"),
    ]);
    let api = app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await;
    let id = schedule_now(&api, &target, "x").await;
    let m = api.wait_for_state(&id, "Delivered", WAIT).await;
    assert_eq!(m["attemptCount"], 2);
    time(&m["deliveredAt"]);
    assert!(m["deadLetteredAt"].is_null(), "{m}");
    let attempts = api.attempts(&id).await;
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["attempt"], 1);
    assert_eq!(attempts[0]["outcome"], "RetryableFailure");
    assert_eq!(attempts[0]["statusCode"], 500);
    assert_eq!(attempts[0]["responseBody"], "oops");
    assert_eq!(attempts[1]["attempt"], 2);
    assert_eq!(attempts[1]["outcome"], "Success");
    assert_eq!(attempts[1]["statusCode"], 200);
    assert_eq!(attempts[1]["responseBody"], "thanks");
    assert!(attempts[1]["error"].is_null(), "{}", attempts[1]);
    // Delivered is final: nothing is due for a third request.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 2);
    app.shutdown().await;
}

#[tokio::test]
async fn a_timeout_is_a_retryable_failure_that_says_so() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(200).delay(Duration::from_millis(1000))]);
    let api = app.api("acme").await;
    let target = api
        .webhook_with(&rx.url("/hook"), json!({"timeoutMs": 200}))
        .await;
    assert_eq!(target["config"]["timeoutMs"], 200);
    let id = schedule_now(&api, &target, "x").await;
    let m = api.wait_for_state(&id, "Delivered", WAIT).await;
    assert_eq!(m["attemptCount"], 2);
    let attempts = api.attempts(&id).await;
    let first = &attempts[0];
    assert_eq!(first["outcome"], "RetryableFailure", "{first}");
    assert!(first["statusCode"].is_null(), "{first}");
    let error = s(&first["error"]).to_lowercase();
    assert!(
        error.contains("timeout") || error.contains("timed out"),
        "{error}"
    );
    let duration = first["durationMs"].as_u64().unwrap();
    assert!(
        (200..900).contains(&duration),
        "a 200 ms timeout took {duration} ms"
    );
    assert_eq!(attempts[1]["outcome"], "Success");
    app.shutdown().await;
}

#[tokio::test]
async fn a_refused_connection_is_a_retryable_failure() {
    let _machine = share_the_machine().await;
    // Two attempts in all: a retryable failure uses both, a non-retryable one only one.
    let app = TestApp::spawn_with(|c| {
        fast_ladder(c);
        c.retry.immediate_retries = 1;
        c.retry.minute_rounds = 1;
        c.retry.hour_cycles = 1;
    })
    .await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let api = app.api("acme").await;
    let target = api.webhook(&format!("http://{closed}/hook")).await;
    let id = schedule_now(&api, &target, "x").await;
    let m = api.wait_for_state(&id, "DeadLetter", WAIT).await;
    assert_eq!(m["attemptCount"], 2, "{m}");
    let attempts = api.attempts(&id).await;
    assert_eq!(attempts.len(), 2);
    for a in &attempts {
        assert_eq!(a["outcome"], "RetryableFailure", "{a}");
        assert!(a["statusCode"].is_null(), "{a}");
        assert!(!s(&a["error"]).is_empty(), "{a}");
        assert!(a["responseBody"].is_null(), "{a}");
    }
    assert_eq!(m["lastError"], attempts[1]["error"]);
    app.shutdown().await;
}

// ---------------------------------------------------------------- attempt records

#[tokio::test]
async fn an_attempt_record_keeps_the_status_duration_error_and_first_1024_bytes_of_the_response() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let long: String = (0..3_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    rx.then([
        Reply::status(503)
            .body(long.clone())
            .delay(Duration::from_millis(150)),
        Reply::status(200).body("ok"),
    ]);
    let api = app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await;
    let id = schedule_now(&api, &target, "x").await;
    api.wait_for_state(&id, "Delivered", WAIT).await;
    let attempts = api.attempts(&id).await;
    assert_eq!(attempts.len(), 2);

    let first = &attempts[0];
    assert_eq!(first["attempt"], 1);
    assert_eq!(first["statusCode"], 503);
    assert_eq!(first["outcome"], "RetryableFailure");
    assert!(!s(&first["error"]).is_empty(), "{first}");
    let body = s(&first["responseBody"]);
    assert_eq!(body.len(), 1024);
    assert_eq!(body, &long[..1024]);
    let duration = first["durationMs"].as_u64().unwrap();
    assert!(
        (150..1500).contains(&duration),
        "a 150 ms reply took {duration} ms"
    );
    let (started, finished) = (time(&first["startedAt"]), time(&first["finishedAt"]));
    assert!(finished >= started, "{first}");
    assert!(
        ((finished - started).num_milliseconds() - duration as i64).abs() <= 2,
        "{first}"
    );

    let second = &attempts[1];
    assert_eq!(second["attempt"], 2);
    assert_eq!(second["statusCode"], 200);
    assert_eq!(second["outcome"], "Success");
    assert!(second["error"].is_null(), "{second}");
    assert_eq!(second["responseBody"], "ok");
    assert!(time(&second["startedAt"]) >= finished, "{second}");
    app.shutdown().await;
}

#[tokio::test]
async fn invalid_utf8_in_a_response_is_replaced_in_the_attempt_record() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;

    let invalid = RawSink::start(400, b"bad \xff\xfe bytes \xc3".to_vec()).await;
    let target = api.webhook(&invalid.url).await;
    let id = schedule_now(&api, &target, "x").await;
    api.wait_for_state(&id, "DeadLetter", WAIT).await;
    let attempts = api.attempts(&id).await;
    assert_eq!(
        attempts[0]["responseBody"],
        "bad \u{FFFD}\u{FFFD} bytes \u{FFFD}"
    );

    // The 1,024-byte cut falls inside a three-byte "€": its remains are replaced too.
    let mut cut = vec![b'a'; 1023];
    cut.extend_from_slice("€ and more".as_bytes());
    let cut_sink = RawSink::start(400, cut).await;
    let target = api.webhook(&cut_sink.url).await;
    let id = schedule_now(&api, &target, "x").await;
    api.wait_for_state(&id, "DeadLetter", WAIT).await;
    let attempts = api.attempts(&id).await;
    assert_eq!(
        s(&attempts[0]["responseBody"]),
        format!("{}\u{FFFD}", "a".repeat(1023))
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------- the ladder

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_that_always_fails_gets_240_attempts_on_the_ladder_then_the_message_is_a_dead_letter(
) {
    let _machine = have_the_machine_alone().await;
    // Steps a whole contract tolerance (100 ms) apart, so that each kind is
    // told from the next: 24 cycles of 4 minutes and an hour take 16 s.
    let app = TestApp::spawn_with(|c| {
        c.retry.minute_delay = Duration::from_millis(100);
        c.retry.hour_delay = Duration::from_millis(250);
    })
    .await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(500));
    let api = app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await;
    let id = schedule_now(&api, &target, "x").await;
    let m = api
        .wait_for_state(&id, "DeadLetter", Duration::from_secs(90))
        .await;
    assert_eq!(m["attemptCount"], 240, "{m}");
    time(&m["deadLetteredAt"]);
    assert!(m["nextAttemptAt"].is_null(), "{m}");
    assert!(m["lastError"].is_string(), "{m}");
    assert!(m["deliveredAt"].is_null(), "{m}");
    // A dead letter is not due again: no 241st attempt.
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 240);

    let attempts = api.attempts(&id).await;
    assert_eq!(attempts.len(), 240);
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a["attempt"], i + 1, "{a}");
        assert_eq!(a["outcome"], "RetryableFailure", "{a}");
        assert_eq!(a["statusCode"], 500, "{a}");
    }
    // gaps[n - 1] is the wait after attempt n: immediate after an odd
    // attempt, a minute (100 ms) after an even one, an hour (250 ms) after
    // every tenth.
    let gaps = gaps_ms(&attempts);
    let steps: Vec<(&str, i64)> = (1..=gaps.len())
        .map(|n| match n {
            n if n % 10 == 0 => ("hour", 250),
            n if n % 2 == 0 => ("minute", 100),
            _ => ("immediate", 0),
        })
        .collect();
    // Delays are honoured to within about 100 ms (the contract).
    assert_ladder_timing(&gaps, &steps, 100);
    assert!(
        time(&m["deadLetteredAt"]) >= time(&attempts[239]["finishedAt"]),
        "{m}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smaller_ladder_without_immediate_retries_gives_four_attempts() {
    let _machine = have_the_machine_alone().await;
    let app = TestApp::spawn_with(|c| {
        c.retry.minute_delay = Duration::from_millis(300);
        c.retry.hour_delay = Duration::from_millis(900);
        c.retry.immediate_retries = 0;
        c.retry.minute_rounds = 2;
        c.retry.hour_cycles = 2;
    })
    .await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(503));
    let api = app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await;
    let id = schedule_now(&api, &target, "x").await;
    let m = api.wait_for_state(&id, "DeadLetter", WAIT).await;
    assert_eq!(m["attemptCount"], 4, "{m}");
    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 4);
    let attempts = api.attempts(&id).await;
    assert_eq!(attempts.len(), 4);
    let gaps = gaps_ms(&attempts);
    // Three gaps are too few for a typical value: the steps are long enough
    // here for every gap to be told from a doubled one on its own.
    assert_ladder_timing(
        &gaps,
        &[("minute", 300), ("hour", 900), ("minute", 300)],
        300,
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------- disabled targets

async fn set_enabled(api: &Api, target: &str, enabled: bool) {
    let action = if enabled { "enable" } else { "disable" };
    let r = api.post_empty(&format!("/targets/{target}/{action}")).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let t: Value = r.json().await.unwrap();
    assert_eq!(t["enabled"], enabled);
}

#[tokio::test]
async fn a_disabled_target_receives_nothing_and_gets_its_messages_oldest_first_once_enabled() {
    let _machine = share_the_machine().await;
    // The sweeper is driven by hand, one message per claim, so that the
    // order of claims is the order of requests.
    let app = TestApp::spawn_with(|c| {
        c.sweeper.enabled = false;
        c.sweeper.batch_size = 1;
    })
    .await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await;
    let target_id = s(&target["targetId"]).to_string();
    set_enabled(&api, &target_id, false).await;
    let mut ids = Vec::new();
    for (i, ago) in [3_000, 2_000, 1_000].into_iter().enumerate() {
        let m = api
            .schedule(&target_id, &in_ms(-ago), &format!("m{i}"))
            .await;
        ids.push(s(&m["messageId"]).to_string());
    }

    assert_eq!(app.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 0);
    for id in &ids {
        let m = api.message(id).await;
        assert_eq!(m["state"], "Scheduled", "{m}");
        assert_eq!(m["attemptCount"], 0, "{m}");
        assert!(api.attempts(id).await.is_empty());
    }

    set_enabled(&api, &target_id, true).await;
    assert_eq!(app.running().sweeper.deliver_due_now().await, 3);
    let order: Vec<String> = rx
        .received()
        .iter()
        .map(|r| s(&r.json()["messageId"]).to_string())
        .collect();
    assert_eq!(order, ids, "not delivered oldest first");
    for id in &ids {
        let m = api.message(id).await;
        assert_eq!(m["state"], "Delivered", "{m}");
        assert_eq!(m["attemptCount"], 1, "disabling consumed an attempt: {m}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn the_running_sweeper_skips_a_disabled_target_and_delivers_when_it_is_enabled() {
    let _machine = share_the_machine().await;
    let app = TestApp::spawn_with(|c| c.sweeper.concurrency = 1).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await;
    let target_id = s(&target["targetId"]).to_string();
    set_enabled(&api, &target_id, false).await;
    let mut ids = Vec::new();
    for (i, at) in [in_ms(-2_000), in_ms(-1_000), in_ms(200)]
        .into_iter()
        .enumerate()
    {
        let m = api.schedule(&target_id, &at, &format!("m{i}")).await;
        ids.push(s(&m["messageId"]).to_string());
    }
    // A marker for an enabled target, due after all of them: with one
    // attempt at a time and claims oldest first, the sweeper reaches the
    // marker only after whatever of theirs it would claim.
    let marker_rx = Receiver::start().await;
    let marker_target = api.webhook(&marker_rx.url("/marker")).await;
    let marker = api
        .schedule(s(&marker_target["targetId"]), &in_ms(300), "marker")
        .await;
    api.wait_for_state(s(&marker["messageId"]), "Delivered", WAIT)
        .await;
    assert_eq!(rx.count(), 0, "a disabled target received a message");
    for id in &ids {
        let m = api.message(id).await;
        assert_eq!(m["state"], "Scheduled", "{m}");
        assert_eq!(m["attemptCount"], 0, "{m}");
    }

    set_enabled(&api, &target_id, true).await;
    let got = rx.wait_for(3, WAIT).await;
    let order: Vec<String> = got
        .iter()
        .map(|r| s(&r.json()["messageId"]).to_string())
        .collect();
    assert_eq!(order, ids, "not delivered oldest first");
    for id in &ids {
        let m = api.wait_for_state(id, "Delivered", WAIT).await;
        assert_eq!(m["attemptCount"], 1, "{m}");
    }
    app.shutdown().await;
}

// ---------------------------------------------------------------- private networks

/// Creates the target where private networks are allowed, then delivers from
/// an instance on the same database where they are not.
async fn delivered_by_a_guarded_instance(url_of: impl FnOnce(&Receiver) -> String) {
    let app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = api.webhook(&url_of(&rx)).await;
    let id = schedule_now(&api, &target, "x").await;
    // One instance at a time, so that this runs on the embedded store too.
    let db = app.db.clone();
    app.shutdown().await;
    let guarded = TestApp::spawn_on(db, |c| {
        c.webhook.allow_private_networks = false;
    })
    .await;
    let api = Api {
        base: guarded.base.clone(),
        ..api
    };
    let m = api.wait_for_state(&id, "DeadLetter", WAIT).await;
    assert_eq!(m["attemptCount"], 1, "{m}");
    let attempts = api.attempts(&id).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "NonRetryableFailure");
    assert!(attempts[0]["statusCode"].is_null());
    let error = s(&attempts[0]["error"]).to_lowercase();
    assert!(
        error.contains("refused") || error.contains("non-public") || error.contains("private"),
        "{error}"
    );
    assert!(
        !error.contains("connection refused"),
        "a connection was attempted: {error}"
    );
    // The attempt was refused before connecting, and nothing is left due.
    assert_eq!(guarded.running().sweeper.deliver_due_now().await, 0);
    assert_eq!(rx.count(), 0, "the private address was reached");
    guarded.shutdown().await;
}

#[tokio::test]
async fn a_loopback_ip_is_refused_at_connect_time_by_an_instance_that_forbids_private_networks() {
    let _machine = share_the_machine().await;
    delivered_by_a_guarded_instance(|rx| rx.url("/hook")).await;
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_at_connect_time_by_an_instance_that_forbids_private_networks(
) {
    let _machine = share_the_machine().await;
    delivered_by_a_guarded_instance(|rx| format!("http://localhost:{}/hook", rx.addr.port())).await;
}
