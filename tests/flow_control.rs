//! Flow control toward receivers (docs/api.md#flow-control-and-fairness): a receiver's Retry-After is
//! honoured up to `retry.max_retry_after` and kept on the attempt, a
//! connection that cannot be opened fails after `webhook.connect_timeout`,
//! not after the attempt's whole timeout, one hanging target does not hold
//! back another account, nor does an account whose targets all hang; a
//! target's `flowControl` (`limits`) and circuit
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

/// The metrics recorder is process-wide and its series carry no account or
/// target: a test that asserts an exact delta (claims given back, breaker
/// transitions) holds `METRICS` alone; every other test of this binary holds
/// it shared, since any of them may give claims back when it stops.
static METRICS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn metrics_alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    METRICS.write().await
}

async fn metrics_shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    METRICS.read().await
}

/// The value of the series `series` (its name and labels as rendered) in
/// an app's metrics, read from its own recorder (what `/metrics` serves):
/// also after `shutdown`, once every task has counted what it did.
struct Meter(metrics_exporter_prometheus::PrometheusHandle);

impl Meter {
    fn of(app: &TestApp) -> Self {
        Self(app.running().state.metrics.clone())
    }

    fn read(&self, series: &str) -> f64 {
        let text = self.0.render();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.strip_prefix(' '))
                    .map(|v| v.parse::<f64>().unwrap())
            })
            .unwrap_or(0.0)
    }
}

const GIVEN_BACK: &str = "dispatch_claims_given_back_total";

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
    let _metrics = metrics_shared().await;
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
    let _metrics = metrics_shared().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let at = std::time::SystemTime::now() + Duration::from_secs(2);
    let date = httpdate::fmt_http_date(at);
    rx.then([Reply::status(503).header("Retry-After", &date)]);
    rx.always(Reply::status(200));
    let attempts = deliver(&api, &rx.url("/hook"), json!({}), "Delivered").await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    // The wait is what was left until the date (whole seconds) when the
    // answer was read, during the attempt: to within the 100 ms the
    // contract allows a delay (the attempt's times are the clock's, read
    // apart from the answer's).
    let until = |t: &Value| {
        let date: DateTime<Utc> = httpdate::parse_http_date(&date).unwrap().into();
        (date - time(t)).num_milliseconds().max(0)
    };
    let waited = attempts[0]["retryAfterMs"].as_u64().unwrap() as i64;
    let (least, most) = (
        until(&attempts[0]["finishedAt"]),
        until(&attempts[0]["startedAt"]),
    );
    assert!(
        (least - 100..=most + 100).contains(&waited),
        "waited {waited} ms; the date was {least} to {most} ms away"
    );
    let gap = gap_after(&attempts, 0);
    assert!(gap >= waited, "waited {waited} ms, retried after {gap} ms");
    app.shutdown().await;
}

#[tokio::test]
async fn retry_after_is_ignored_on_other_statuses_and_a_429_without_it_retries_at_once() {
    let _metrics = metrics_shared().await;
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
    let _metrics = metrics_shared().await;
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

/// Another account's message due now, to a receiver that answers at once,
/// is attempted within a second of its time (the fairness bound).
async fn another_accounts_message_due_now_is_attempted_within_a_second(app: &TestApp) {
    let other = app.api("other").await;
    let ok = Receiver::start().await;
    ok.always(Reply::status(200));
    let t = other.webhook(&ok.url("/fast")).await;
    let m = other
        .schedule(t["targetId"].as_str().unwrap(), &in_ms(0), "on time")
        .await;
    let id = m["messageId"].as_str().unwrap();
    other.wait_for_state(id, "Delivered", WAIT).await;
    let attempts = other.attempts(id).await;
    // Due at its delivery time, or when it was created if that was later
    // (the request to schedule it took its time on a busy machine).
    let due = time(&m["deliveryTime"]).max(time(&m["createdAt"]));
    let late = (time(&attempts[0]["startedAt"]) - due).num_milliseconds();
    assert!(
        late <= 1000,
        "attempted {late} ms after it was due; the contract allows 1 s"
    );
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

    another_accounts_message_due_now_is_attempted_within_a_second(first).await;
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
    let _metrics = metrics_shared().await;
    let app = TestApp::spawn_with(small_share).await;
    a_hanging_target_does_not_hold_back_another_account(vec![app]).await;
}

/// While one account's targets all hang with messages due, more of them
/// than the instance has slots for, another account's message due now is
/// attempted within a second: the hanging account holds at most its part of
/// each instance's slots (all but a quarter of them while it is alone, the
/// quarter being less than a target's share here), though each of its
/// targets has slots free. `hog` is its targets' config.
async fn a_hanging_account_does_not_hold_back_another_account(instances: Vec<TestApp>, hog: Value) {
    let first = &instances[0];
    let hung = Receiver::start().await;
    let gate = common::receiver::Gate::new();
    hung.always(Reply::status(200).held_until(&gate));
    let careless = first.api("careless").await;
    for i in 0..4 {
        let target = careless
            .webhook_with(&hung.url(&format!("/slow/{i}")), hog.clone())
            .await;
        careless
            .schedule_many(target["targetId"].as_str().unwrap(), &in_ms(0), 100)
            .await;
    }
    // 4 targets of 8 slots each, 16 slots per instance: the account's part
    // is 12 of each instance's.
    let part = 12 * instances.len();
    hung.wait_for(part, WAIT).await;

    another_accounts_message_due_now_is_attempted_within_a_second(first).await;
    assert_eq!(
        hung.count(),
        part,
        "the hanging account holds its part of each instance and no more"
    );
    gate.open();
    for app in instances {
        app.shutdown().await;
    }
}

fn small_instance(c: &mut dispatch::config::Config) {
    c.sweeper.concurrency = 16;
    c.sweeper.target_concurrency = 8;
    c.sweeper.lease = Duration::from_secs(30);
}

#[tokio::test]
async fn a_hanging_account_does_not_hold_back_another_account_on_one_instance() {
    let _metrics = metrics_shared().await;
    let app = TestApp::spawn_with(small_instance).await;
    a_hanging_account_does_not_hold_back_another_account(vec![app], json!({"timeoutMs": 20000}))
        .await;
}

/// The same with gated targets: their claim starts what it takes at once,
/// and takes no more than the account's part.
#[tokio::test]
async fn a_hanging_account_with_gated_targets_does_not_hold_back_another_account() {
    let _metrics = metrics_shared().await;
    let app = TestApp::spawn_with(small_instance).await;
    a_hanging_account_does_not_hold_back_another_account(
        vec![app],
        json!({"timeoutMs": 20000, "flowControl": {"parallelism": 100}}),
    )
    .await;
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
    let _metrics = metrics_shared().await;
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
    let _metrics = metrics_alone().await;
    let app = TestApp::spawn_with(|c| {
        c.sweeper.target_concurrency = 2;
        // Attempts end 1 s before the lease does, and one may take up to
        // half the lease (3 s): what waited over 2 s for a slot is given
        // back; an attempt started at the claim may run 5 s.
        c.sweeper.lease = Duration::from_secs(6);
    })
    .await;
    let given_back = Meter::of(&app);
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let gate = common::receiver::Gate::new();
    // Quick at first (the target's messages are then claimed ahead of its
    // slots), then two answers held (its two slots) while two more wait.
    rx.then([
        Reply::status(200),
        Reply::status(200),
        Reply::status(200).held_until(&gate),
        Reply::status(200).held_until(&gate),
    ]);
    rx.always(Reply::status(200));
    let t = api.webhook(&rx.url("/slowing")).await;
    let target = t["targetId"].as_str().unwrap();
    let first = api.schedule_many(target, &in_ms(0), 2).await;
    rx.wait_for(2, WAIT).await;
    let before = given_back.read(GIVEN_BACK);
    let rest = api.schedule_many(target, &in_ms(0), 4).await;
    rx.wait_for(4, WAIT).await;
    // The two waiting have waited too long once a message due 2.5 s after
    // their claim has been delivered; the held attempts are well inside
    // their 5 s.
    let clock = Receiver::start().await;
    let c = api.webhook(&clock.url("/later")).await;
    let later = api
        .schedule(c["targetId"].as_str().unwrap(), &in_ms(2_500), "later")
        .await;
    api.wait_for_state(later["messageId"].as_str().unwrap(), "Delivered", WAIT)
        .await;
    gate.open();
    rx.wait_for(6, WAIT).await;
    let all: Vec<String> = first.iter().chain(&rest).cloned().collect();
    for id in &all {
        let m = api.wait_for_state(id, "Delivered", WAIT).await;
        let attempts = api.attempts(id).await;
        assert_eq!(attempts.len(), 1, "{m} {attempts:?}");
        assert_eq!(attempts[0]["outcome"], "Success", "{attempts:?}");
    }
    each_once(&rx, &all);
    app.shutdown().await;
    assert_eq!(
        given_back.read(GIVEN_BACK) - before,
        2.0,
        "the two that waited behind the held attempts were given back"
    );
}

/// What needs PostgreSQL itself: several instances on one database.
mod postgres {
    use sqlx::{Connection, PgConnection};

    use super::*;

    #[tokio::test]
    async fn a_hanging_target_does_not_hold_back_another_account_on_two_postgresql_instances() {
        let _metrics = metrics_shared().await;
        let first = TestApp::spawn_postgres_with(small_share).await;
        let second = TestApp::spawn_on(first.db.clone(), small_share).await;
        a_hanging_target_does_not_hold_back_another_account(vec![first, second]).await;
    }

    #[tokio::test]
    async fn a_hanging_account_does_not_hold_back_another_account_on_two_postgresql_instances() {
        let _metrics = metrics_shared().await;
        let first = TestApp::spawn_postgres_with(small_instance).await;
        let second = TestApp::spawn_on(first.db.clone(), small_instance).await;
        a_hanging_account_does_not_hold_back_another_account(
            vec![first, second],
            json!({"timeoutMs": 20000}),
        )
        .await;
    }

    /// The target's messages under a lease: claimed by an instance.
    async fn leased(app: &TestApp, target: &str) -> i64 {
        let mut db = PgConnection::connect(&app.db.url).await.unwrap();
        sqlx::query_scalar(
            "SELECT count(*) FROM messages WHERE target_id = $1 AND state = 'Scheduled' \
             AND lease_token IS NOT NULL",
        )
        .bind(target)
        .fetch_one(&mut db)
        .await
        .unwrap()
    }

    /// An instance that stops gives back the claimed messages still waiting
    /// for a slot: another instance delivers them at once, not after their
    /// lease ends.
    #[tokio::test]
    async fn a_stopping_instance_gives_back_what_waits_for_a_slot() {
        let _metrics = metrics_alone().await;
        let lease = Duration::from_secs(30);
        let share = move |c: &mut dispatch::config::Config| {
            c.sweeper.target_concurrency = 2;
            c.sweeper.lease = lease;
        };
        let first = TestApp::spawn_postgres_with(share).await;
        let meter = Meter::of(&first);
        let api = first.api("acme").await;
        let rx = Receiver::start().await;
        let gate = common::receiver::Gate::new();
        // Two quick answers (the target is quick: it is claimed ahead of
        // its slots), then two held (the first instance's slots), then
        // quick again.
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
        let waiting = api.schedule_many(target, &in_ms(0), 4).await;
        ids.extend(waiting.iter().cloned());
        let held: Vec<String> = rx.wait_for(4, WAIT).await[2..]
            .iter()
            .map(|r| r.header("webhook-id").unwrap())
            .collect();
        // One claim took all four: two in its slots, two waiting here.
        assert_eq!(
            leased(&first, target).await,
            4,
            "the premise: all four claimed"
        );
        let before = meter.read(GIVEN_BACK);
        let db = first.db.clone();
        let stopped_at = chrono::Utc::now();
        let stopping = tokio::spawn(first.shutdown());
        let second = TestApp::spawn_on(db, share).await;
        // The first instance still holds its two attempts (it stops once
        // they end): the other two reach the receiver through the second.
        let arrived = rx.wait_for(6, WAIT).await;
        let mut given: Vec<String> = arrived[4..]
            .iter()
            .map(|r| r.header("webhook-id").unwrap())
            .collect();
        let mut expected: Vec<String> = waiting
            .iter()
            .filter(|id| !held.contains(id))
            .cloned()
            .collect();
        given.sort();
        expected.sort();
        assert_eq!(given, expected, "the waiting two, from the second instance");
        for r in &arrived[4..] {
            let after = (r.at - stopped_at).to_std().unwrap_or_default();
            assert!(
                after < lease / 3,
                "delivered {after:?} after the stop; the lease is {lease:?}"
            );
        }
        gate.open();
        stopping.await.unwrap();
        assert_eq!(
            meter.read(GIVEN_BACK) - before,
            2.0,
            "the stopping instance gave back the two that waited"
        );
        each_once(&rx, &ids);
        second.shutdown().await;
    }
}
