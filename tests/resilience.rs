//! Several instances, crashes, database outages, retention: nothing is lost.
//! These run on PostgreSQL whatever DISPATCH_TEST_STORE says: several
//! instances on one database is what PostgreSQL is for.

mod common;

use std::{collections::HashMap, process::Stdio, sync::Arc, time::Duration};

use common::{
    free_port, in_ms, proxy::Proxy, receiver::Receiver, receiver::Reply, Api, TestApp, TestDb,
};
use futures::{stream, StreamExt};
use serde_json::Value;

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

async fn wait_until_all_delivered(api: &Api, n: usize, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let delivered = count_in_state(api, "Delivered").await;
        if delivered == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {delivered} of {n} delivered within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `dispatch_messages_delivered_total` as an instance's `/metrics` reports it.
async fn delivered_total(base: &str) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("dispatch_messages_delivered_total"))
        .filter(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        .map(|rest| rest.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_deliver_2000_due_messages_each_exactly_once() {
    // Each instance may have 32 attempts in flight, and each attempt takes
    // 50 ms: one instance alone would need 3 s, so both must take part.
    let concurrency = 32;
    let a = TestApp::spawn_postgres_with(|c| c.sweeper.concurrency = concurrency).await;
    // The second instance is its own process: the metrics recorder is one per
    // process, so its /metrics counts its deliveries and nothing else.
    let b_port = free_port();
    let b_base = format!("http://127.0.0.1:{b_port}");
    let mut b = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("serve")
        .env("DATABASE_URL", &a.db.url)
        .env("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{b_port}"))
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .env("DISPATCH_SWEEPER__CONCURRENCY", concurrency.to_string())
        .env("DISPATCH_SWEEPER__POLL_INTERVAL", "1s")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the dispatch binary starts");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ready = reqwest::get(format!("{b_base}/health/ready")).await;
        if ready.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second instance became ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(delivered_total(&b_base).await, 0.0);

    let rx = Receiver::start().await;
    rx.always(Reply::status(200).delay(Duration::from_millis(50)));
    let api = a.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    // Far enough ahead that scheduling finishes first; then all fall due together.
    let ids = schedule_many(&api, &target, &in_ms(4_000), 2_000).await;
    rx.wait_for(2_000, Duration::from_secs(60)).await;
    wait_until_all_delivered(&api, 2_000, Duration::from_secs(30)).await;
    let seen = arrivals(&rx);
    assert_eq!(seen.len(), 2_000, "every message arrives");
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    assert!(
        twice.is_empty(),
        "no message is delivered twice while its lease holds: {twice:?}"
    );
    assert!(ids.iter().all(|id| seen.contains_key(id)));
    // Each message arrived once, from one of the two: what the second did not
    // deliver, the first did.
    let by_b = delivered_total(&b_base).await;
    assert!(
        by_b > 0.0 && by_b < 2_000.0,
        "both instances delivered: the second {by_b} of 2000, the first the rest"
    );
    b.start_kill().unwrap();
    b.wait().await.unwrap();
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_with_attempts_in_flight_loses_no_message() {
    // The API instance does not deliver; a separate process does, and is killed.
    let api_app = TestApp::spawn_postgres_with(|c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200).delay(Duration::from_millis(400)));
    let api = api_app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let ids = schedule_many(&api, &target, &in_ms(-1_000), 300).await;

    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("serve")
        .env("DATABASE_URL", &api_app.db.url)
        .env(
            "DISPATCH_SERVER__LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .env("DISPATCH_WEBHOOK__TIMEOUT", "1s")
        .env("DISPATCH_SWEEPER__LEASE", "2s")
        .env("DISPATCH_SWEEPER__CONCURRENCY", "50")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the dispatch binary starts");
    // Kill it abruptly while attempts are under way.
    rx.wait_for(60, Duration::from_secs(30)).await;
    worker.start_kill().unwrap();
    worker.wait().await.unwrap();
    let before = arrivals(&rx).len();
    assert!(
        before < 300,
        "the crash came before everything was delivered ({before})"
    );

    // Another instance takes over once the leases expire.
    let survivor = TestApp::spawn_on(api_app.db.clone(), |c| {
        c.sweeper.lease = Duration::from_secs(2);
        c.webhook.timeout = Duration::from_secs(1);
    })
    .await;
    wait_until_all_delivered(&api, 300, Duration::from_secs(60)).await;
    let seen = arrivals(&rx);
    assert!(
        ids.iter().all(|id| seen.contains_key(id)),
        "every message reached the receiver"
    );
    survivor.shutdown().await;
    api_app.shutdown().await;
}

/// The test database, reached through a proxy that can be cut.
async fn proxied_db() -> (Arc<TestDb>, Proxy, String) {
    let db = Arc::new(TestDb::postgres().await);
    let parsed = url::Url::parse(&db.url).unwrap();
    let upstream = format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(5432)
    );
    let proxy = Proxy::start(upstream).await;
    let mut proxied = parsed.clone();
    proxied.set_host(Some("127.0.0.1")).unwrap();
    proxied.set_port(Some(proxy.addr.port())).unwrap();
    (db, proxy, proxied.to_string())
}

async fn ready_status(app: &TestApp) -> u16 {
    app.http
        .get(app.url("/health/ready"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_outage_makes_the_service_unready_and_loses_nothing() {
    let (db, proxy, proxied_url) = proxied_db().await;
    let app = TestApp::spawn_on(db, |c| c.database.url = proxied_url).await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200).delay(Duration::from_millis(300)));
    let api = app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let now = schedule_many(&api, &target, &in_ms(-10), 20).await;
    let later = schedule_many(&api, &target, &in_ms(1_500), 20).await;
    assert_eq!(ready_status(&app).await, 200);

    // Cut while the first attempts are in flight: their results cannot be recorded yet.
    rx.wait_for(1, Duration::from_secs(10)).await;
    proxy.cut();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while ready_status(&app).await != 503 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "readiness never reported the outage"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = api
        .post(
            "/messages",
            serde_json::json!({"targetId": target, "deliveryTime": in_ms(0), "payload": "x"}),
        )
        .await;
    // Writes during the outage answer 503.
    common::problem::assert_problem(r, 503).await;
    // The outage lasts past the later messages' due time.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    proxy.restore();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while ready_status(&app).await != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the service did not recover by itself"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until_all_delivered(&api, 40, Duration::from_secs(40)).await;
    let seen = arrivals(&rx);
    assert!(
        now.iter().chain(&later).all(|id| seen.contains_key(id)),
        "every message reached the receiver"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn retention_purges_what_expired_and_keeps_the_rest() {
    let app = TestApp::spawn_postgres_with(|c| {
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

    // Retention ages (compressed to 200 ms) are measured on the wall clock
    // that purge_once reads: wait until they have passed (a lower bound only).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let store = app.store();
    let retention = app.running().state.config.retention.clone();
    // Two instances purging at once: SKIP LOCKED keeps them out of each other's way.
    let (p1, p2) = tokio::join!(
        dispatch::retention::purge_once(store.as_ref(), &retention),
        dispatch::retention::purge_once(store.as_ref(), &retention)
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
async fn a_message_whose_stored_target_is_unreadable_is_dead_lettered_and_the_rest_delivered() {
    let app = TestApp::spawn_postgres_with(|c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let good = api.webhook(&rx.url("/good")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let broken = api.webhook(&rx.url("/broken")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let ok = api.schedule(&good, &in_ms(-1), "fine").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let bad = api.schedule(&broken, &in_ms(-1), "lost?").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    // As after a manual edit or an incompatible upgrade: the config no longer parses.
    let store = common::open_store(&app.db.url).await;
    sqlx::query("UPDATE targets SET config = '{}'::jsonb WHERE id = $1")
        .bind(&broken)
        .execute(store.pool())
        .await
        .unwrap();
    app.running().sweeper.deliver_due_now().await;
    assert_eq!(
        api.message(&ok).await["state"],
        "Delivered",
        "the readable message is not held up"
    );
    let m = api.message(&bad).await;
    assert_eq!(m["state"], "DeadLetter", "{m}");
    assert!(m["lastError"].as_str().unwrap().contains("corrupt"), "{m}");
    let (kind, detail): (String, Option<String>) =
        sqlx::query_as("SELECT kind, detail FROM message_events WHERE message_id = $1::uuid")
            .bind(bad.trim_start_matches("DI-M-"))
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(kind, "DeadLettered", "its history says so");
    assert_eq!(detail.as_deref(), m["lastError"].as_str());
    assert_eq!(rx.count(), 1);
    app.shutdown().await;
}
