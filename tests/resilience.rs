//! Several instances, crashes, database outages, retention: nothing is lost.
//! What needs several instances on one database, or a database server to
//! cut, is in `mod postgres`; the rest runs on the store under test.

mod common;
#[path = "resilience/postgres.rs"]
mod postgres;

use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};

use common::{
    in_ms,
    proxy::Proxy,
    receiver::{Gate, Receiver, Reply},
    serve_process, Api, Backend, TestApp, TestDb,
};
use futures::{stream, StreamExt};
use serde_json::{json, Value};

/// Schedules `n` messages for `target` at `at`, 16 requests at a time; returns their ids.
async fn schedule_many(api: &Api, target: &str, at: &str, n: usize) -> Vec<String> {
    stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let (target, at) = (target.to_string(), at.to_string());
            async move {
                api.schedule(&target, &at, &format!("m{i}")).await["messageId"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// A webhook target at the listener's `/told`, subscribed to `types` (of
/// Dispatch's own events); its id.
async fn listening_to(api: &Api, listener: &Receiver, types: &[&str]) -> String {
    let hears = target_at(api, &listener.url("/told")).await;
    let r = api
        .post("/subscriptions", json!({"targetId": hears, "types": types}))
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    hears
}

/// A webhook target at `url`; its id.
async fn target_at(api: &Api, url: &str) -> String {
    api.webhook(url).await["targetId"]
        .as_str()
        .unwrap()
        .to_string()
}

/// How many times each message id reached the receiver.
fn arrivals(rx: &Receiver) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in rx.received() {
        *seen
            .entry(r.json()["messageId"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    seen
}

async fn count_in_state(api: &Api, state: &str) -> usize {
    let mut total = 0;
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/messages?state={state}&limit=1000&cursor={c}"),
            None => format!("/messages?state={state}&limit=1000"),
        };
        let page: Value = api.get(&path).await.json().await.unwrap();
        total += page["items"].as_array().unwrap().len();
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return total,
        }
    }
}

/// Asks `check` every 50 ms until it answers `Ok`, or panics after
/// `within` with its last answer. For what only a query shows (readiness,
/// how many messages are in a state): nothing announces those.
async fn poll_until<F, Fut>(within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let why = match check().await {
            Ok(()) => return,
            Err(why) => why,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {within:?}: {why}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_until_all_delivered(api: &Api, n: usize, within: Duration) {
    poll_until(within, || async {
        match count_in_state(api, "Delivered").await {
            delivered if delivered == n => Ok(()),
            delivered => Err(format!("{delivered} of {n} delivered")),
        }
    })
    .await
}

#[tokio::test]
async fn retention_purges_what_expired_and_keeps_the_rest() {
    let app = TestApp::spawn_with(|c| {
        c.sweeper.enabled = false;
        c.retention.interval = Duration::from_secs(3600); // driven by hand below
        c.retention.delivered = Duration::from_millis(200);
        c.retention.cancelled = Duration::from_millis(200);
        c.retention.dead_letters = Duration::from_millis(200);
        c.retention.failed_attempts = Duration::from_millis(200);
        c.retention.batch_size = 2; // several batches
        common::fast_ladder(c);
    })
    .await;
    let ok = Receiver::start().await;
    let gone = Receiver::start().await;
    gone.always(Reply::status(404));
    let flaky = Receiver::start().await;
    flaky.always(Reply::status(500));
    let api = app.api("acme").await;
    let ok_t = api.webhook(&ok.url("/")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let gone_t = api.webhook(&gone.url("/")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let flaky_t = api.webhook(&flaky.url("/")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();

    let delivered = schedule_many(&api, &ok_t, &in_ms(-1), 3).await;
    let dead = schedule_many(&api, &gone_t, &in_ms(-1), 2).await;
    let retrying = api.schedule(&flaky_t, &in_ms(-1), "r").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let cancelled = api.schedule(&ok_t, &in_ms(3_600_000), "c").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let future = api.schedule(&ok_t, &in_ms(3_600_000), "f").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        api.post_empty(&format!("/messages/{cancelled}/cancel"))
            .await
            .status(),
        200
    );
    app.running().sweeper.deliver_due_now().await;
    assert_eq!(api.message(&retrying).await["state"], "Scheduled");
    assert!(!api.attempts(&retrying).await.is_empty());

    // A second on, the retention ages (compressed to 200 ms) have passed.
    let later =
        dispatch::clock::ManualClock::new(chrono::Utc::now() + chrono::TimeDelta::seconds(1));
    let store = app.store();
    let retention = app.running().state.config.retention.clone();
    // Two purges at once (as on two instances): neither takes what the
    // other purges (on PostgreSQL, SKIP LOCKED keeps them apart).
    let (p1, p2) = tokio::join!(
        dispatch::retention::purge_as_of(store.as_ref(), &retention, &later),
        dispatch::retention::purge_as_of(store.as_ref(), &retention, &later)
    );
    let (p1, p2) = (p1.unwrap(), p2.unwrap());
    assert_eq!(
        p1.messages + p2.messages,
        6,
        "3 delivered, 2 dead letters, 1 cancelled"
    );

    for id in delivered.iter().chain(&dead).chain([&cancelled]) {
        assert_eq!(
            api.get(&format!("/messages/{id}")).await.status(),
            404,
            "{id} was purged"
        );
    }
    assert_eq!(api.message(&future).await["state"], "Scheduled");
    // The retrying message stays; its failed attempt records are gone.
    assert_eq!(api.message(&retrying).await["state"], "Scheduled");
    assert!(api.attempts(&retrying).await.is_empty());
    app.shutdown().await;
}

#[tokio::test]
async fn a_message_whose_stored_target_is_unreadable_is_dead_lettered_told_and_the_rest_delivered()
{
    let app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    // The account hears of its dead letters, as of every other.
    let listener = Receiver::start().await;
    listening_to(&api, &listener, &["dispatch.message.dead_lettered"]).await;
    let good = target_at(&api, &rx.url("/good")).await;
    let broken = target_at(&api, &rx.url("/broken")).await;
    let ok = api.schedule(&good, &in_ms(-1), "fine").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let bad = api.schedule(&broken, &in_ms(-1), "lost?").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    // As after a manual edit or an incompatible upgrade: the config no longer parses.
    let message_id = bad.trim_start_matches("DI-M-");
    let (kind, detail): (String, Option<String>) = match common::backend() {
        Backend::Postgres => {
            let store = common::open_store(&app.db.url).await;
            sqlx::query("UPDATE targets SET config = '{}'::jsonb WHERE id = $1")
                .bind(&broken)
                .execute(store.pool())
                .await
                .unwrap();
            app.running().sweeper.deliver_due_now().await;
            sqlx::query_as("SELECT kind, detail FROM message_events WHERE message_id = $1::uuid")
                .bind(message_id)
                .fetch_one(store.pool())
                .await
                .unwrap()
        }
        Backend::Sqlite => {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(&app.db.url).await.unwrap();
            sqlx::query("UPDATE targets SET config = '{}' WHERE id = ?")
                .bind(&broken)
                .execute(&mut c)
                .await
                .unwrap();
            app.running().sweeper.deliver_due_now().await;
            sqlx::query_as("SELECT kind, detail FROM message_events WHERE message_id = ?")
                .bind(message_id)
                .fetch_one(&mut c)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        api.message(&ok).await["state"],
        "Delivered",
        "the readable message is not held up"
    );
    let m = api.message(&bad).await;
    assert_eq!(m["state"], "DeadLetter", "{m}");
    assert!(m["lastError"].as_str().unwrap().contains("corrupt"), "{m}");
    assert_eq!(kind, "DeadLettered", "its history says so");
    assert_eq!(detail.as_deref(), m["lastError"].as_str());
    assert_eq!(rx.count(), 1);
    // The event made with the dead letter goes out with the next sweep.
    app.running().sweeper.deliver_due_now().await;
    let got = listener.wait_for(1, Duration::from_secs(10)).await;
    let envelope = got[0].json();
    assert_eq!(envelope["type"], "dispatch.message.dead_lettered");
    let told: Value = serde_json::from_str(envelope["payload"].as_str().unwrap()).unwrap();
    assert_eq!(told["messageId"], bad.as_str());
    assert_eq!(told["targetId"], broken.as_str());
    assert_eq!(told["lastError"], m["lastError"]);
    app.shutdown().await;
}
