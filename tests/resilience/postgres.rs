//! What only PostgreSQL does: several instances on one database (sharing
//! the work, taking over from a killed one, waking each other with
//! `NOTIFY`), and a database server that becomes unreachable.

use super::*;

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
    // Each instance has 32 attempts in flight at most and claims nothing
    // ahead of its time, so it holds at most 64 messages (32 more waiting
    // for a slot): neither can take the whole burst. No attempt times out
    // while the test holds the answers (see below).
    let concurrency = 32;
    let a = TestApp::spawn_postgres_with(|c| {
        c.sweeper.concurrency = concurrency;
        c.sweeper.claim_ahead = Duration::ZERO;
        c.webhook.timeout = Duration::from_secs(60);
        c.sweeper.lease = Duration::from_secs(90);
    })
    .await;
    // The second instance is its own process: the metrics recorder is one per
    // process, so its /metrics counts its deliveries and nothing else.
    let (mut b, b_base) = serve_process(
        &a.db.url,
        &[
            ("DISPATCH_SWEEPER__CONCURRENCY", &concurrency.to_string()),
            ("DISPATCH_SWEEPER__CLAIM_AHEAD", "0s"),
            ("DISPATCH_SWEEPER__POLL_INTERVAL", "1s"),
            ("DISPATCH_WEBHOOK__TIMEOUT", "60s"),
            ("DISPATCH_SWEEPER__LEASE", "90s"),
        ],
    )
    .await;
    assert_eq!(delivered_total(&b_base).await, 0.0);

    // Every answer waits until more attempts are under way at once than one
    // instance may have: both instances are sending. (Within 30 s, far less
    // than the attempts' timeout: no retry of a timed-out attempt counts.)
    let rx = Receiver::start().await;
    let gate = Gate::new();
    rx.always(
        Reply::status(200)
            .delay(Duration::from_millis(50))
            .held_until(&gate),
    );
    let api = a.api("acme").await;
    let target = target_at(&api, &rx.url("/hook")).await;
    // Far enough ahead that scheduling finishes first; then all fall due together.
    let ids = schedule_many(&api, &target, &in_ms(4_000), 2_000).await;
    rx.wait_for(concurrency as usize + 1, Duration::from_secs(30))
        .await;
    assert!(rx.max_concurrent() > concurrency as usize);
    gate.open();
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
    let target = target_at(&api, &rx.url("/hook")).await;
    let ids = schedule_many(&api, &target, &in_ms(-1_000), 300).await;

    let (mut worker, _) = serve_process(
        &api_app.db.url,
        &[
            ("DISPATCH_WEBHOOK__TIMEOUT", "1s"),
            ("DISPATCH_SWEEPER__LEASE", "2s"),
            ("DISPATCH_SWEEPER__CONCURRENCY", "50"),
        ],
    )
    .await;
    // Kill it abruptly while attempts are under way.
    rx.wait_for(60, Duration::from_secs(30)).await;
    worker.start_kill().unwrap();
    worker.wait().await.unwrap();
    let killed = chrono::Utc::now();
    let before: HashMap<String, usize> = arrivals(&rx);
    assert!(
        before.len() < 300,
        "the crash came before everything was delivered ({})",
        before.len()
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
    // Twice only what was in flight at the kill: its answer may have come
    // and not been recorded.
    let twice: Vec<&String> = seen
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(
        twice.iter().all(|id| before.contains_key(*id)),
        "sent twice though not in flight at the kill: {twice:?}"
    );
    // The contract's bound: what the killed instance held but had not
    // attempted is attempted by another within 5 s of the kill.
    let bound = killed + chrono::TimeDelta::seconds(5);
    let late: Vec<String> = rx
        .received()
        .iter()
        .filter(|r| r.at > bound)
        .map(|r| r.json()["messageId"].as_str().unwrap().to_string())
        .filter(|id| !before.contains_key(id))
        .collect();
    assert!(late.is_empty(), "first attempted after {bound}: {late:?}");
    survivor.shutdown().await;
    api_app.shutdown().await;
}

/// A count the database gives.
async fn count(db: &sqlx::PgPool, sql: &str, target: &str) -> i64 {
    sqlx::query_scalar(sql)
        .bind(target)
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_mid_burst_neither_loses_nor_doubles_what_is_told() {
    // As above, with the account subscribed to Dispatch's own events: each
    // message's delivery is told once, whoever recorded it.
    let api_app = TestApp::spawn_postgres_with(|c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200).delay(Duration::from_millis(400)));
    // Each message's first attempt fails: failures are told too.
    rx.fail_once_each();
    let listener = Receiver::start().await;
    let api = api_app.api("acme").await;
    let target = target_at(&api, &rx.url("/hook")).await;
    let hears = listening_to(&api, &listener, &["dispatch.*"]).await;
    let n = 300;
    let ids = schedule_many(&api, &target, &in_ms(-1_000), n).await;

    let (mut worker, _) = serve_process(
        &api_app.db.url,
        &[
            ("DISPATCH_WEBHOOK__TIMEOUT", "1s"),
            ("DISPATCH_SWEEPER__LEASE", "2s"),
            ("DISPATCH_SWEEPER__CONCURRENCY", "50"),
            ("DISPATCH_RETRY__MINUTE_DELAY", "50ms"),
            ("DISPATCH_RETRY__HOUR_DELAY", "150ms"),
        ],
    )
    .await;
    rx.wait_for(n + 60, Duration::from_secs(30)).await;
    worker.start_kill().unwrap();
    worker.wait().await.unwrap();
    let db = sqlx::PgPool::connect(&api_app.db.url).await.unwrap();
    let delivered = "SELECT count(*) FROM messages WHERE target_id = $1 AND state = 'Delivered'";
    let before = count(&db, delivered, &target).await;
    assert!(
        before < n as i64,
        "the crash came mid-burst ({before} delivered)"
    );

    let survivor = TestApp::spawn_on(api_app.db.clone(), |c| {
        c.sweeper.lease = Duration::from_secs(2);
        c.webhook.timeout = Duration::from_secs(1);
        common::fast_ladder(c);
    })
    .await;
    poll_until(Duration::from_secs(60), || async {
        match count(&db, delivered, &target).await {
            d if d == n as i64 => Ok(()),
            d => Err(format!("{d} of {n} delivered")),
        }
    })
    .await;
    // Transitions against events: one delivered event per message, each once.
    let told: Vec<(String, i64)> = sqlx::query_as(
        "SELECT convert_from(payload, 'UTF8')::json->>'messageId', count(*) FROM events \
         WHERE type = 'dispatch.message.delivered' GROUP BY 1",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    let told: HashMap<String, i64> = told.into_iter().collect();
    assert_eq!(told.len(), n, "one event per delivered message");
    assert!(
        ids.iter().all(|id| told.get(id) == Some(&1)),
        "each told once"
    );
    // Every failed attempt recorded is told once too (an attempt cut by the
    // kill was never recorded, and is not told).
    let failed = count(
        &db,
        "SELECT count(*) FROM attempts WHERE target_id = $1 AND outcome <> 'Success'",
        &target,
    )
    .await;
    let failed_told: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE type = 'dispatch.message.attempt_failed'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    // Each message's first attempt failed; where that attempt was in flight
    // at the kill (at most the worker's 50), its answer was never recorded
    // and the retry met a receiver that no longer fails it.
    assert!(
        failed >= n as i64 - 50,
        "each message failed once, but for those cut by the kill ({failed})"
    );
    assert_eq!(failed_told, failed);
    // Each event made one message to the listener, and those told nothing.
    let made = count(
        &db,
        "SELECT count(*) FROM messages WHERE target_id = $1",
        &hears,
    )
    .await;
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(made, events);
    assert_eq!(events, n as i64 + failed);
    db.close().await;
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

/// Waits until `/health/ready` answers `status`.
async fn ready_becomes(app: &TestApp, status: u16, within: Duration) {
    poll_until(within, || async {
        let now = app
            .http
            .get(app.url("/health/ready"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        match now {
            s if s == status => Ok(()),
            s => Err(format!("readiness answers {s}, not {status}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_outage_makes_the_service_unready_and_loses_nothing() {
    let (db, proxy, proxied_url) = proxied_db().await;
    let app = TestApp::spawn_on(db, |c| c.database.url = proxied_url).await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200).delay(Duration::from_millis(300)));
    let api = app.api("acme").await;
    let target = target_at(&api, &rx.url("/hook")).await;
    let now = schedule_many(&api, &target, &in_ms(-10), 20).await;
    let later_due = chrono::Utc::now() + chrono::TimeDelta::milliseconds(1_500);
    let later = schedule_many(
        &api,
        &target,
        &dispatch::domain::time::format(&later_due),
        20,
    )
    .await;
    ready_becomes(&app, 200, Duration::ZERO).await;

    // Cut while the first attempts are in flight: their results cannot be recorded yet.
    rx.wait_for(1, Duration::from_secs(10)).await;
    proxy.cut();
    ready_becomes(&app, 503, Duration::from_secs(10)).await;
    let r = api
        .post(
            "/messages",
            serde_json::json!({"targetId": target, "deliveryTime": in_ms(0), "payload": "x"}),
        )
        .await;
    // Writes during the outage answer 503.
    common::problem::assert_problem(r, 503).await;
    // The outage lasts past the later messages' due time: a wait for an
    // instant of the clock, which only a sleep does.
    if let Ok(left) = (later_due - chrono::Utc::now()).to_std() {
        tokio::time::sleep(left + Duration::from_millis(100)).await;
    }
    proxy.restore();

    ready_becomes(&app, 200, Duration::from_secs(15)).await;
    wait_until_all_delivered(&api, 40, Duration::from_secs(40)).await;
    let seen = arrivals(&rx);
    assert!(
        now.iter().chain(&later).all(|id| seen.contains_key(id)),
        "every message reached the receiver"
    );
    app.shutdown().await;
}

/// Waits until an instance on `db` LISTENs for wake-ups: a session of that
/// database whose last statement was the LISTEN.
async fn listening(db: &TestDb) -> usize {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN %'",
    )
    .bind(&db.name)
    .fetch_one(&mut c)
    .await
    .unwrap();
    n as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_scheduled_on_one_instance_wakes_the_sweeper_of_another() {
    // Far beyond the window in which delivery is expected below: only a
    // wake-up from the other instance can make it in time.
    const POLL: Duration = Duration::from_secs(60);
    const WINDOW: Duration = Duration::from_secs(5);
    let db = Arc::new(TestDb::postgres().await);
    let b = TestApp::spawn_on(db.clone(), |c| c.sweeper.poll_interval = POLL).await;
    poll_until(Duration::from_secs(10), || async {
        match listening(&db).await {
            1 => Ok(()),
            n => Err(format!("{n} sessions listening")),
        }
    })
    .await;
    // The instance that takes the requests delivers nothing (it listens
    // too, for the consumers of pull targets that may wait on it).
    let a = TestApp::spawn_on(db.clone(), |c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    let api = a.api("acme").await;
    let target = target_at(&api, &rx.url("/hook")).await;
    poll_until(Duration::from_secs(10), || async {
        match listening(&db).await {
            2 => Ok(()),
            n => Err(format!("{n} sessions listening")),
        }
    })
    .await;

    // Due now.
    let now = api.schedule(&target, &in_ms(0), "now").await;
    let got = rx.wait_for(1, WINDOW).await;
    assert_eq!(got[0].json()["messageId"], now["messageId"]);

    // Due a few hundred milliseconds ahead: woken, it holds the message for
    // its instant.
    let soon_at = chrono::Utc::now() + chrono::TimeDelta::milliseconds(400);
    let soon = api
        .schedule(&target, &dispatch::domain::time::format(&soon_at), "soon")
        .await;
    let got = rx.wait_for(2, WINDOW).await;
    assert_eq!(got[1].json()["messageId"], soon["messageId"]);
    assert!(got[1].at >= soon_at, "not before its time");
    let bound = soon_at + chrono::TimeDelta::from_std(WINDOW).unwrap();
    assert!(got[1].at <= bound, "arrived {}, after {bound}", got[1].at);
    b.shutdown().await;
    a.shutdown().await;
}

/// Schedules `n` messages due `at` for `target` with `/messages/batch`.
async fn batch_many(api: &Api, target: &str, at: &str, n: usize) {
    let mut left = n;
    while left > 0 {
        let k = left.min(1000);
        let items: Vec<Value> = (0..k)
            .map(|i| serde_json::json!({"targetId": target, "deliveryTime": at, "payload": format!("m{i}")}))
            .collect();
        let r = api
            .post("/messages/batch", serde_json::json!({ "messages": items }))
            .await;
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
        left -= k;
    }
}

#[tokio::test]
async fn a_target_flipped_by_an_instance_that_stopped_before_its_messages_followed_is_finished() {
    let app = TestApp::spawn_postgres_with(|c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let off = target_at(&api, &rx.url("/off")).await;
    let on = target_at(&api, &rx.url("/on")).await;
    // More than a claim's batch (500) and than an alignment batch (1000).
    let n = 2500;
    batch_many(&api, &off, &in_ms(-2_000), n).await;
    // Another account's message falls due after all of them.
    let other = app.api("globex").await;
    let theirs = target_at(&other, &rx.url("/theirs")).await;
    other.schedule(&theirs, &in_ms(-1_000), "theirs").await;
    let db = sqlx::PgPool::connect(&app.db.url).await.unwrap();
    let unpaused =
        "SELECT count(*) FROM messages WHERE target_id = $1 AND state = 'Scheduled' AND NOT paused";
    let pending = "SELECT count(*) FROM targets WHERE id = $1 AND align_seq > aligned_seq";

    // As if the instance that disabled `off` stopped right after the flip
    // committed: the target is off, none of its messages paused yet.
    sqlx::query("UPDATE targets SET enabled = false, align_seq = align_seq + 1 WHERE id = $1")
        .bind(&off)
        .execute(&db)
        .await
        .unwrap();
    assert_eq!(count(&db, unpaused, &off).await, n as i64);
    // Each claim pauses what it picked of the disabled target rather than
    // sending it, so the claims after it reach the other account's message.
    let mut sweeps = 0;
    while rx.count() == 0 {
        sweeps += 1;
        assert!(sweeps <= n / 500 + 2, "the other message was never claimed");
        app.running().sweeper.deliver_due_now().await;
    }
    let got = rx.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(got[0].path, "/theirs");
    assert_eq!(
        count(&db, unpaused, &off).await,
        0,
        "the claims paused them"
    );
    // The janitor marks the flip done; nothing was sent to the target.
    assert_eq!(count(&db, pending, &off).await, 1);
    assert_eq!(app.store().align_targets(app.now()).await.unwrap(), 1);
    assert_eq!(count(&db, pending, &off).await, 0);
    assert_eq!(app.store().align_targets(app.now()).await.unwrap(), 0);

    // The same after an enable: the janitor resumes the paused messages.
    sqlx::query("UPDATE targets SET enabled = true, align_seq = align_seq + 1 WHERE id = $1")
        .bind(&off)
        .execute(&db)
        .await
        .unwrap();
    app.running().sweeper.deliver_due_now().await;
    assert_eq!(rx.count(), 1, "paused messages wait for the janitor");
    assert_eq!(app.store().align_targets(app.now()).await.unwrap(), 1);
    assert_eq!(count(&db, unpaused, &off).await, n as i64);
    assert_eq!(count(&db, pending, &off).await, 0);
    while app.running().sweeper.deliver_due_now().await > 0 {}
    assert_eq!(rx.count(), n + 1);

    // Through the API, a disable and an enable of a target with more
    // messages than a batch move every one of them.
    batch_many(&api, &on, &in_ms(60_000), n).await;
    let r = api.post_empty(&format!("/targets/{on}/disable")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(count(&db, unpaused, &on).await, 0);
    assert_eq!(count(&db, pending, &on).await, 0);
    let r = api.post_empty(&format!("/targets/{on}/enable")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(count(&db, unpaused, &on).await, n as i64);
    assert_eq!(count(&db, pending, &on).await, 0);

    // A gate given by a change whose batches did not run: the claim that
    // picks the target's messages gates them rather than send them past it.
    let gated =
        "SELECT count(*) FROM messages WHERE target_id = $1 AND state = 'Scheduled' AND gated";
    sqlx::query(
        "UPDATE targets SET gated = true, align_seq = align_seq + 1, \
           config = jsonb_set(config, '{flowControl}', '{\"parallelism\": 1}') WHERE id = $1",
    )
    .bind(&theirs)
    .execute(&db)
    .await
    .unwrap();
    other.schedule(&theirs, &in_ms(-1_000), "gated now").await;
    sqlx::query("UPDATE messages SET gated = false WHERE target_id = $1")
        .bind(&theirs)
        .execute(&db)
        .await
        .unwrap();
    let claimed = app
        .store()
        .claim_due(app.now(), 500, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(claimed.is_empty(), "nothing past the gate");
    assert_eq!(count(&db, gated, &theirs).await, 1);
    assert_eq!(app.store().align_targets(app.now()).await.unwrap(), 1);
    app.shutdown().await;
}
