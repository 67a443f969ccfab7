//! Flow control toward receivers (API.md §9): a receiver's Retry-After is
//! honoured up to `retry.max_retry_after` and kept on the attempt, a
//! connection that cannot be opened fails after `webhook.connect_timeout`,
//! not after the attempt's whole timeout, one hanging target does not hold
//! back another account; a target's `flowControl` (`limits`) and circuit
//! breaker (`breaker`).

#[path = "flow_control/breaker.rs"]
mod breaker;
mod common;
#[path = "flow_control/limits.rs"]
mod limits;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{
    in_ms,
    receiver::{Receiver, Reply},
    Api, TestApp,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

fn time(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc)
}

/// Schedules one message for now to a webhook at `url` (with `extra`
/// config) and waits for it to reach `state`; returns its attempts.
async fn deliver(api: &Api, url: &str, extra: Value, state: &str) -> Vec<Value> {
    let target = api.webhook_with(url, extra).await;
    let m = api
        .schedule(target["targetId"].as_str().unwrap(), &in_ms(0), "x")
        .await;
    let id = m["messageId"].as_str().unwrap();
    api.wait_for_state(id, state, WAIT).await;
    api.attempts(id).await
}

/// Milliseconds from the end of attempt `i` to the start of the next.
fn gap_after(attempts: &[Value], i: usize) -> i64 {
    (time(&attempts[i + 1]["startedAt"]) - time(&attempts[i]["finishedAt"])).num_milliseconds()
}

#[tokio::test]
async fn a_429_with_retry_after_in_seconds_turns_the_immediate_retry_into_a_wait_cut_to_the_cap() {
    let app = TestApp::spawn_with(|c| c.retry.max_retry_after = Duration::from_millis(400)).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    // An hour asked; 400 ms allowed.
    rx.then([Reply::status(429).header("Retry-After", "3600")]);
    rx.always(Reply::status(200));
    let attempts = deliver(&api, &rx.url("/hook"), json!({}), "Delivered").await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["statusCode"], 429);
    assert_eq!(attempts[0]["retryAfterMs"], 400, "{}", attempts[0]);
    assert!(attempts[1]["retryAfterMs"].is_null());
    // Without Retry-After the second attempt is immediate (the ladder's
    // first rung); with it, it waits.
    let gap = gap_after(&attempts, 0);
    assert!(gap >= 400, "the retry came {gap} ms after the 429");
    app.shutdown().await;
}

#[tokio::test]
async fn a_503_with_retry_after_as_an_http_date_waits_until_then() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let at = std::time::SystemTime::now() + Duration::from_secs(2);
    rx.then([Reply::status(503).header("Retry-After", &httpdate::fmt_http_date(at))]);
    rx.always(Reply::status(200));
    let attempts = deliver(&api, &rx.url("/hook"), json!({}), "Delivered").await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    // An HTTP date has whole seconds: the wait is up to two seconds.
    let waited = attempts[0]["retryAfterMs"].as_u64().unwrap();
    assert!((500..=2000).contains(&waited), "{waited} ms");
    let gap = gap_after(&attempts, 0);
    assert!(
        gap >= waited as i64,
        "waited {waited} ms, retried after {gap} ms"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn retry_after_is_ignored_on_other_statuses_and_a_429_without_it_retries_at_once() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.then([
        Reply::status(500).header("Retry-After", "3600"),
        Reply::status(200),
    ]);
    let attempts = deliver(&api, &rx.url("/a"), json!({}), "Delivered").await;
    assert_eq!(attempts.len(), 2);
    assert!(attempts[0]["retryAfterMs"].is_null(), "{}", attempts[0]);
    assert!(gap_after(&attempts, 0) < 1000, "an immediate retry");

    let rx = Receiver::start().await;
    rx.then([Reply::status(429), Reply::status(200)]);
    let attempts = deliver(&api, &rx.url("/b"), json!({}), "Delivered").await;
    assert_eq!(attempts.len(), 2);
    assert!(attempts[0]["retryAfterMs"].is_null(), "{}", attempts[0]);
    assert!(gap_after(&attempts, 0) < 1000, "an immediate retry");
    app.shutdown().await;
}

/// An address that accepts no more connections: its accept queue is full
/// and nobody accepts, so a new connection's handshake is never answered.
async fn unanswering_address() -> (tokio::net::TcpListener, Vec<std::net::TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..8 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
    }
    (listener, held)
}

#[tokio::test]
async fn a_connection_that_cannot_be_opened_fails_after_the_connect_timeout_not_the_attempts() {
    let app = TestApp::spawn_with(|c| {
        c.webhook.connect_timeout = Duration::from_millis(300);
        c.retry.immediate_retries = 0;
        c.retry.minute_rounds = 1;
        c.retry.hour_cycles = 1;
    })
    .await;
    let api = app.api("acme").await;
    let (listener, _held) = unanswering_address().await;
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let attempts = deliver(&api, &url, json!({"timeoutMs": 8000}), "DeadLetter").await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    let a = &attempts[0];
    assert_eq!(a["outcome"], "RetryableFailure", "{a}");
    assert!(
        a["error"].as_str().unwrap().contains("connection failed"),
        "{a}"
    );
    let took = a["durationMs"].as_u64().unwrap();
    assert!(
        (300..4000).contains(&took),
        "a 300 ms connect timeout took {took} ms (the attempt may take 8 s)"
    );
    app.shutdown().await;
}

/// While one account's target hangs with 10,000 due messages, another
/// account's message due now is attempted within a second: the hanging
/// target holds at most `sweeper.target_concurrency` attempts per instance.
async fn a_hanging_target_does_not_hold_back_another_account(instances: Vec<TestApp>) {
    let first = &instances[0];
    let hung = Receiver::start().await;
    let gate = common::receiver::Gate::new();
    hung.always(Reply::status(200).held_until(&gate));
    let careless = first.api("careless").await;
    let target = careless
        .webhook_with(&hung.url("/slow"), json!({"timeoutMs": 20000}))
        .await;
    careless
        .schedule_many(target["targetId"].as_str().unwrap(), &in_ms(0), 10_000)
        .await;
    // Every instance has taken its share of the hanging target's messages.
    let share = 8 * instances.len();
    hung.wait_for(share, WAIT).await;

    let other = first.api("other").await;
    let ok = Receiver::start().await;
    ok.always(Reply::status(200));
    let t = other.webhook(&ok.url("/fast")).await;
    let m = other
        .schedule(t["targetId"].as_str().unwrap(), &in_ms(0), "on time")
        .await;
    let id = m["messageId"].as_str().unwrap();
    other.wait_for_state(id, "Delivered", WAIT).await;
    let attempts = other.attempts(id).await;
    let late = (time(&attempts[0]["startedAt"]) - time(&m["deliveryTime"])).num_milliseconds();
    assert!(late < 1000, "attempted {late} ms after its delivery time");
    assert_eq!(
        hung.count(),
        share,
        "the hanging target holds its share of each instance and no more"
    );
    gate.open();
    for app in instances {
        app.shutdown().await;
    }
}

fn small_share(c: &mut dispatch::config::Config) {
    c.sweeper.target_concurrency = 8;
    c.sweeper.lease = Duration::from_secs(30);
}

#[tokio::test]
async fn a_hanging_target_does_not_hold_back_another_account_on_one_instance() {
    let app = TestApp::spawn_with(small_share).await;
    a_hanging_target_does_not_hold_back_another_account(vec![app]).await;
}

#[tokio::test]
async fn a_hanging_target_does_not_hold_back_another_account_on_two_postgresql_instances() {
    let first = TestApp::spawn_postgres_with(small_share).await;
    let second = TestApp::spawn_on(first.db.clone(), small_share).await;
    a_hanging_target_does_not_hold_back_another_account(vec![first, second]).await;
}

/// Every message arrived exactly once (by `webhook-id`).
fn each_once(rx: &Receiver, ids: &[String]) {
    let mut seen: Vec<String> = rx
        .received()
        .iter()
        .map(|r| r.header("webhook-id").unwrap())
        .collect();
    seen.sort();
    let mut want = ids.to_vec();
    want.sort();
    assert_eq!(seen, want, "each message arrives exactly once");
}

/// A target that answers quickly has messages claimed ahead of its slots
/// (they wait in the instance for one); it still never has more than
/// `sweeper.target_concurrency` attempts in flight.
#[tokio::test]
async fn a_quick_targets_burst_never_has_more_than_its_share_in_flight() {
    let app = TestApp::spawn_with(|c| c.sweeper.target_concurrency = 4).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200).delay(Duration::from_millis(2)));
    let t = api.webhook(&rx.url("/quick")).await;
    let ids = api
        .schedule_many(t["targetId"].as_str().unwrap(), &in_ms(300), 400)
        .await;
    rx.wait_for(400, Duration::from_secs(30)).await;
    assert!(
        rx.max_concurrent() <= 4,
        "{} attempts in flight at once",
        rx.max_concurrent()
    );
    each_once(&rx, &ids);
    app.shutdown().await;
}

/// Claimed messages that waited for a slot until too little of their lease
/// was left for an attempt are given back and claimed again, not attempted
/// and cut off at the lease's end: each is delivered at its first attempt.
#[tokio::test]
async fn messages_that_wait_too_long_for_a_slot_are_given_back_not_cut_off() {
    let app = TestApp::spawn_with(|c| {
        c.sweeper.target_concurrency = 2;
        // Attempts must end 1 s before the lease does: 2 s of it to use.
        c.sweeper.lease = Duration::from_secs(3);
    })
    .await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    // Quick at first (the target's messages are claimed ahead of its
    // slots), then each answer takes 1 s: those waiting behind them have
    // 1 s of lease left, too little for an attempt of up to 1.5 s.
    rx.then([Reply::status(200), Reply::status(200)]);
    rx.always(Reply::status(200).delay(Duration::from_millis(1000)));
    let t = api.webhook(&rx.url("/slowing")).await;
    let target = t["targetId"].as_str().unwrap();
    let first = api.schedule_many(target, &in_ms(0), 2).await;
    rx.wait_for(2, WAIT).await;
    let rest = api.schedule_many(target, &in_ms(0), 8).await;
    rx.wait_for(10, Duration::from_secs(20)).await;
    for id in first.iter().chain(&rest) {
        let m = api.wait_for_state(id, "Delivered", WAIT).await;
        let attempts = api.attempts(id).await;
        assert_eq!(attempts.len(), 1, "{m} {attempts:?}");
        assert_eq!(attempts[0]["outcome"], "Success", "{attempts:?}");
    }
    each_once(&rx, &first.iter().chain(&rest).cloned().collect::<Vec<_>>());
    app.shutdown().await;
}

/// An instance that stops gives back the claimed messages still waiting for
/// a slot: another instance delivers them at once, not after their lease
/// (30 s) ends.
#[tokio::test]
async fn a_stopping_instance_gives_back_what_waits_for_a_slot() {
    let share = |c: &mut dispatch::config::Config| c.sweeper.target_concurrency = 2;
    let first = TestApp::spawn_postgres_with(share).await;
    let api = first.api("acme").await;
    let rx = Receiver::start().await;
    let gate = common::receiver::Gate::new();
    // Two quick answers (the target is quick: it is claimed ahead), then
    // two held (the first instance's slots), then quick again.
    rx.then([
        Reply::status(200),
        Reply::status(200),
        Reply::status(200).held_until(&gate),
        Reply::status(200).held_until(&gate),
    ]);
    rx.always(Reply::status(200));
    let t = api.webhook(&rx.url("/held")).await;
    let target = t["targetId"].as_str().unwrap();
    let mut ids = api.schedule_many(target, &in_ms(0), 2).await;
    rx.wait_for(2, WAIT).await;
    ids.extend(api.schedule_many(target, &in_ms(0), 10).await);
    rx.wait_for(4, WAIT).await;
    let db = first.db.clone();
    let stopping = tokio::spawn(first.shutdown());
    let second = TestApp::spawn_on(db, share).await;
    rx.wait_for(12, WAIT).await;
    gate.open();
    stopping.await.unwrap();
    each_once(&rx, &ids);
    second.shutdown().await;
}
