//! Messages claimed ahead of their due time and held until their instant
//! (`sweeper.claim_ahead`): a cancel, reschedule or bulk cancel on the
//! instance that holds them wins; another instance meets the lease (409);
//! a shutdown gives them back, and a crash, a restart or a stalled process
//! loses none and sends none twice.

use super::*;

/// A horizon long enough that whatever a test schedules is claimed ahead
/// at once.
const HORIZON: Duration = Duration::from_secs(30);

/// How far ahead the messages a test holds fall due: the few requests it
/// makes before then (taking back, patching, cancelling what is held) must
/// come first, on however loaded a machine. Nothing waits for this long
/// but the messages' own instants.
const LEAD: i64 = 4_000;

/// Waits for what falls due `LEAD` after it was scheduled.
const HELD_WAIT: Duration = Duration::from_millis(LEAD as u64 + 10_000);

fn ahead(c: &mut dispatch::config::Config) {
    c.sweeper.claim_ahead = HORIZON;
}

/// Waits until every scheduled message due by `latest` is claimed ahead:
/// nothing claimable falls due by then (a held message's claim time is its
/// due time plus the lease).
async fn wait_until_held(app: &TestApp, latest: DateTime<Utc>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match app.store().next_due().await.unwrap() {
            Some(next) if next <= latest => {}
            _ => return,
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the messages were not claimed ahead within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn at(ms_from_now: i64) -> (String, DateTime<Utc>) {
    let s = in_ms(ms_from_now);
    let t = time(&Value::String(s.clone()));
    (s, t)
}

fn payloads(rx: &Receiver) -> Vec<String> {
    rx.received()
        .iter()
        .map(|r| s(&r.json()["payload"]).to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_message_is_cancelled_or_rescheduled_on_its_instance_and_the_cancel_wins() {
    let app = TestApp::spawn_with(ahead).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let globex = app.api("globex").await;
    let target = api.webhook(&rx.url("/hook")).await;
    let tid = s(&target["targetId"]);
    let (soon, soon_t) = at(LEAD);
    let cancelled = api.schedule(tid, &soon, "cancelled").await;
    let moved = api.schedule(tid, &soon, "moved").await;
    let kept = api.schedule(tid, &soon, "kept").await;
    let (later, later_t) = at(LEAD + 300);
    api.schedule(tid, &later, "sentinel").await;
    wait_until_held(&app, later_t).await;

    // Another account's cancel or reschedule of a held message finds
    // nothing, and the message still goes at its time.
    let kept_id = s(&kept["messageId"]);
    let r = globex
        .post_empty(&format!("/messages/{kept_id}/cancel"))
        .await;
    assert_eq!(r.status(), 404);
    let r = globex
        .post(
            &format!("/messages/{kept_id}/reschedule"),
            json!({"deliveryTime": in_ms(60_000)}),
        )
        .await;
    assert_eq!(r.status(), 404);

    let r = api
        .post_empty(&format!("/messages/{}/cancel", s(&cancelled["messageId"])))
        .await;
    assert_eq!(r.status(), 200, "the cancel of a held message wins");
    let (moved_to, _) = at(LEAD + 600);
    let r = api
        .post(
            &format!("/messages/{}/reschedule", s(&moved["messageId"])),
            json!({"deliveryTime": moved_to}),
        )
        .await;
    assert_eq!(r.status(), 200, "so does a reschedule");
    assert!(
        Utc::now() < soon_t,
        "both came before the messages fell due ({LEAD} ms after they were scheduled)"
    );

    // The sentinel falls due after the cancelled message would have; the
    // rescheduled one arrives at its new time.
    let got = rx.wait_for(3, HELD_WAIT).await;
    assert_eq!(payloads(&rx), vec!["kept", "sentinel", "moved"]);
    assert!(got[0].at >= soon_t, "the kept one never before its time");
    let moved_arrival = got[2].at;
    assert!(moved_arrival >= time(&Value::String(moved_to)));
    assert_eq!(
        api.message(s(&cancelled["messageId"])).await["state"],
        "Cancelled"
    );
    assert!(api.attempts(s(&cancelled["messageId"])).await.is_empty());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_changed_or_disabled_takes_back_what_is_held_for_it() {
    let app = TestApp::spawn_with(ahead).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let moved = api.webhook(&rx.url("/old")).await;
    let disabled = api.webhook(&rx.url("/disabled")).await;
    let sentinel = api.webhook(&rx.url("/sentinel")).await;
    let (soon, soon_t) = at(LEAD);
    api.schedule(s(&moved["targetId"]), &soon, "moved").await;
    api.schedule(s(&disabled["targetId"]), &soon, "disabled")
        .await;
    let (later, later_t) = at(LEAD + 300);
    api.schedule(s(&sentinel["targetId"]), &later, "sentinel")
        .await;
    wait_until_held(&app, later_t).await;

    let r = api
        .patch(
            &format!("/targets/{}", s(&moved["targetId"])),
            json!({"config": {"url": rx.url("/new")}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = api
        .patch(
            &format!("/targets/{}", s(&disabled["targetId"])),
            json!({"enabled": false}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(
        Utc::now() < soon_t,
        "both changes came before the messages fell due"
    );

    // The held message goes to the address its target has now; the
    // disabled target's waits.
    rx.wait_for(2, HELD_WAIT).await;
    let mut paths: Vec<String> = rx.received().iter().map(|r| r.path.clone()).collect();
    paths.sort();
    assert_eq!(paths, vec!["/new", "/sentinel"]);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_cancel_takes_back_what_its_instance_holds() {
    let app = TestApp::spawn_with(ahead).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let doomed = api.webhook(&rx.url("/doomed")).await;
    let kept = api.webhook(&rx.url("/kept")).await;
    let (soon, soon_t) = at(LEAD);
    api.schedule_many(s(&doomed["targetId"]), &soon, 20).await;
    let (later, later_t) = at(LEAD + 300);
    api.schedule(s(&kept["targetId"]), &later, "sentinel").await;
    wait_until_held(&app, later_t).await;

    let r = api
        .post(
            "/messages/cancel",
            json!({"targetId": s(&doomed["targetId"])}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["count"], 20);
    assert!(
        Utc::now() < soon_t,
        "the cancel came before the messages fell due"
    );

    // The other target's message, held too, is given back and still goes.
    rx.wait_for(1, HELD_WAIT).await;
    let paths: Vec<String> = rx.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, vec!["/kept"], "nothing cancelled was sent");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_messages_go_back_at_shutdown() {
    let app = TestApp::spawn_with(ahead).await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await;
    let (first, first_t) = at(20_000);
    api.schedule_many(s(&target["targetId"]), &first, 10).await;
    wait_until_held(&app, first_t).await;
    // The database outlives the instance.
    let db = app.db.clone();
    app.shutdown().await;
    let store = crate::common::open_any_store(&db.url).await;
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(first_t),
        "due as before, for any instance, at once"
    );
}

/// A lone instance killed (SIGKILL) while it holds messages ahead, then
/// started again alone on the same store (the embedded store's next
/// process, or one instance on PostgreSQL): the new process takes its
/// predecessor for dead once that has been silent for three seconds, and
/// sends what it held, each once, within seconds rather than a lease (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_started_again_alone_after_a_kill_sends_what_its_predecessor_held() {
    let db = crate::common::TestDb::new().await;
    let client = crate::common::dispatch_json(
        &db.url,
        [
            "clients",
            "create",
            "--account",
            "acme",
            "--name",
            "restart",
        ],
    )
    .await;
    let env = [
        ("DISPATCH_SWEEPER__CLAIM_AHEAD", "30s"),
        ("DISPATCH_SWEEPER__POLL_INTERVAL", "500ms"),
    ];
    let (mut first, url) = crate::common::serve_process(&db.url, &env).await;
    let api = Api::for_client(
        url,
        reqwest::Client::new(),
        s(&client["clientId"]),
        s(&client["clientSecret"]),
    )
    .await;
    let rx = Receiver::start().await;
    let target = api.webhook(&rx.url("/hook")).await;
    let (soon, soon_t) = at(LEAD);
    let ids = api.schedule_many(s(&target["targetId"]), &soon, 20).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while leased(&db.url).await < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the messages were not claimed ahead within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let killed = Utc::now();
    assert_eq!(rx.count(), 0, "killed before anything fell due");

    let (mut again, _) = crate::common::serve_process(&db.url, &env).await;
    let got = rx.wait_for(20, HELD_WAIT).await;
    each_arrived_once_in_time(&got, &ids, soon_t, killed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.count(), 20, "and no more than once each");
    again.start_kill().unwrap();
    again.wait().await.unwrap();
}

/// Messages with a lease, read from the store itself.
async fn leased(db_url: &str) -> i64 {
    use sqlx::Connection;
    let sql = "SELECT count(*) FROM messages WHERE lease_token IS NOT NULL";
    if db_url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(db_url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
    } else {
        let mut conn = sqlx::PgConnection::connect(db_url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
    }
}

/// Each of `ids` arrived once, none before `due`, and the last within
/// the contract's bound for what a killed instance held but had not
/// attempted: 5 s after the kill, or after their instant if that came
/// later.
fn each_arrived_once_in_time(
    got: &[crate::common::receiver::Received],
    ids: &[String],
    due: DateTime<Utc>,
    killed: DateTime<Utc>,
) {
    let mut arrived: Vec<String> = got
        .iter()
        .map(|r| s(&r.json()["messageId"]).to_string())
        .collect();
    arrived.sort();
    let mut expected = ids.to_vec();
    expected.sort();
    assert_eq!(arrived, expected, "each held message arrived once");
    assert!(got.iter().all(|r| r.at >= due));
    let bound = killed.max(due) + chrono::TimeDelta::seconds(5);
    let last = got.iter().map(|r| r.at).max().unwrap();
    assert!(last <= bound, "the last arrived at {last}, after {bound}");
}

/// Several instances on one database: PostgreSQL only.
mod postgres {
    use super::*;
    use crate::common::receiver::Gate;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_instance_meets_a_held_message_as_an_attempt_under_way() {
        let app = TestApp::spawn_postgres_with(ahead).await;
        let other = TestApp::spawn_on(app.db.clone(), |c| c.sweeper.enabled = false).await;
        let rx = Receiver::start().await;
        let api = app.api("acme").await;
        let elsewhere = other.api("acme").await;
        let target = api.webhook(&rx.url("/hook")).await;
        let (soon, soon_t) = at(LEAD);
        let m = api.schedule(s(&target["targetId"]), &soon, "held").await;
        wait_until_held(&app, soon_t).await;

        let id = s(&m["messageId"]);
        let r = elsewhere
            .post_empty(&format!("/messages/{id}/cancel"))
            .await;
        assert_eq!(r.status(), 409, "the lease of the instance that holds it");
        let r = elsewhere
            .post(
                &format!("/messages/{id}/reschedule"),
                json!({"deliveryTime": in_ms(60_000)}),
            )
            .await;
        assert_eq!(r.status(), 409);
        // Held, not delivered (a delivered message answers 409 too).
        assert_eq!(rx.count(), 0, "the answers came before its time");
        assert_eq!(elsewhere.message(id).await["state"], "Scheduled");
        // Only the first instance delivers; the second answered.
        let got = rx.wait_for(1, HELD_WAIT).await;
        assert!(got[0].at >= soon_t, "never before its time");
        api.wait_for_state(id, "Delivered", WAIT).await;
        other.shutdown().await;
        app.shutdown().await;
    }

    /// What a killed worker held: `n` messages scheduled `LEAD` ahead,
    /// claimed ahead by a worker process (its `env`), which is killed
    /// before they fall due, beside an API instance that does not deliver
    /// and a survivor (`survivor`) that claims nothing ahead. Answers the
    /// instances, the receiver, the ids, their due time and the kill's.
    async fn killed_holding(
        n: usize,
        survivor: impl FnOnce(&mut dispatch::config::Config),
        env: &[(&str, &str)],
    ) -> (
        TestApp,
        TestApp,
        Receiver,
        Vec<String>,
        DateTime<Utc>,
        DateTime<Utc>,
    ) {
        // Neither claims ahead: the leases the worker took 30 s ahead reach
        // further than theirs, and are given back all the same.
        let api_app = TestApp::spawn_postgres_with(|c| {
            c.sweeper.enabled = false;
            c.sweeper.claim_ahead = Duration::ZERO;
        })
        .await;
        let survivor = TestApp::spawn_on(api_app.db.clone(), |c| {
            c.sweeper.claim_ahead = Duration::ZERO;
            survivor(c);
        })
        .await;
        let mut env = env.to_vec();
        env.push(("DISPATCH_SWEEPER__CLAIM_AHEAD", "30s"));
        // A wake the worker misses (one sent before its LISTEN is up) is
        // made good by its next look, well inside LEAD: not the 5 s
        // backstop, after the survivor took the messages.
        env.push(("DISPATCH_SWEEPER__POLL_INTERVAL", "500ms"));
        let (mut worker, _) = crate::common::serve_process(&api_app.db.url, &env).await;
        let rx = Receiver::start().await;
        let api = api_app.api("acme").await;
        let target = api.webhook(&rx.url("/hook")).await;
        let (soon, soon_t) = at(LEAD);
        let ids = api.schedule_many(s(&target["targetId"]), &soon, n).await;
        wait_until_held(&api_app, soon_t).await;
        worker.start_kill().unwrap();
        worker.wait().await.unwrap();
        let killed = Utc::now();
        assert_eq!(rx.count(), 0, "killed before anything fell due");
        (api_app, survivor, rx, ids, soon_t, killed)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crash_loses_no_held_message() {
        // Leases of two seconds: the survivor may take them when they end.
        let (api_app, survivor, rx, ids, soon_t, killed) = killed_holding(
            10,
            |c| {
                c.sweeper.lease = Duration::from_secs(2);
                c.webhook.timeout = Duration::from_secs(1);
            },
            &[
                ("DISPATCH_WEBHOOK__TIMEOUT", "1s"),
                ("DISPATCH_SWEEPER__LEASE", "2s"),
            ],
        )
        .await;
        let got = rx.wait_for(10, HELD_WAIT).await;
        each_arrived_once_in_time(&got, &ids, soon_t, killed);
        survivor.shutdown().await;
        api_app.shutdown().await;
    }

    /// With the default lease (30 s): the survivor does not wait for the
    /// killed worker's leases to end. It finds the worker no longer noted
    /// as serving (three seconds) and gives back what it held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_instances_held_messages_go_to_another_within_seconds_not_a_lease() {
        let (api_app, survivor, rx, ids, soon_t, killed) = killed_holding(20, |_| {}, &[]).await;
        let got = rx.wait_for(20, HELD_WAIT).await;
        each_arrived_once_in_time(&got, &ids, soon_t, killed);
        // And no more than once each, a little later still.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rx.count(), 20);
        survivor.shutdown().await;
        api_app.shutdown().await;
    }

    /// A worker process stopped (SIGSTOP), not killed, while one attempt is
    /// under way and more messages are held ahead: after three seconds the
    /// survivor takes it for dead and sends both. When the worker goes on,
    /// it attempts none of what it held (its last note is old, and its next
    /// finds it forgotten), and the result of the attempt it had under way
    /// is not written over the survivor's: it is counted as stale.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_instance_taken_for_dead_attempts_nothing_it_held_when_it_goes_on() {
        let api_app = TestApp::spawn_postgres_with(|c| c.sweeper.enabled = false).await;
        let survivor = TestApp::spawn_on(api_app.db.clone(), |c| {
            c.sweeper.claim_ahead = Duration::ZERO;
        })
        .await;
        let (mut worker, worker_url) = crate::common::serve_process(
            &api_app.db.url,
            &[
                ("DISPATCH_SWEEPER__CLAIM_AHEAD", "30s"),
                ("DISPATCH_SWEEPER__POLL_INTERVAL", "500ms"),
                // Longer than the worker is stopped: its attempt under way
                // gets its answer.
                ("DISPATCH_WEBHOOK__TIMEOUT", "20s"),
            ],
        )
        .await;
        let rx = Receiver::start().await;
        let gate = Gate::new();
        // The first request, the worker's attempt of `first`, is answered
        // only when the gate opens; every other one at once.
        rx.then([Reply::status(200).held_until(&gate)]);
        let api = api_app.api("acme").await;
        let target = api.webhook(&rx.url("/hook")).await;
        let target = s(&target["targetId"]);
        let (first_at, first_t) = at(LEAD);
        let first = api.schedule(target, &first_at, "first").await;
        let first = s(&first["messageId"]).to_string();
        let (later, later_t) = at(LEAD + 2_000);
        let ids = api.schedule_many(target, &later, 10).await;
        wait_until_held(&api_app, later_t).await;

        rx.wait_for(1, HELD_WAIT).await;
        let pid = worker.id().expect("running").to_string();
        let signal = |sig: &str| {
            let status = std::process::Command::new("kill")
                .args([sig, &pid])
                .status()
                .expect("kill runs");
            assert!(status.success(), "kill {sig} {pid}");
        };
        signal("-STOP");
        let stopped = Utc::now();

        // The survivor sends `first` again (its attempt was under way on an
        // instance taken for dead) and the ten held ones.
        let got = rx.wait_for(12, HELD_WAIT).await;
        let (again, rest): (Vec<_>, Vec<_>) = got[1..]
            .iter()
            .cloned()
            .partition(|r| s(&r.json()["messageId"]) == first);
        assert_eq!(again.len(), 1, "the attempt under way was made again, once");
        assert!(again[0].at <= stopped.max(first_t) + chrono::TimeDelta::seconds(5));
        each_arrived_once_in_time(&rest, &ids, later_t, stopped);
        api.wait_for_state(&first, "Delivered", WAIT).await;

        // The worker goes on and gets its answer.
        gate.open();
        signal("-CONT");
        let http = reqwest::Client::new();
        crate::common::eventually(WAIT, "the worker counts one stale result", async || {
            let metrics = http
                .get(format!("{worker_url}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            if metrics.contains("dispatch_results_stale_total 1") {
                Ok(())
            } else {
                Err(metrics)
            }
        })
        .await;
        // Its timers of the held messages ran when it went on, before its
        // answer was read; a little more for any send they would start.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rx.count(), 12, "the worker sent nothing it had held");
        let attempts = api.attempts(&first).await;
        assert_eq!(
            attempts.len(),
            1,
            "the survivor's attempt is recorded, not the stale one: {attempts:?}"
        );
        worker.start_kill().unwrap();
        survivor.shutdown().await;
        api_app.shutdown().await;
    }

    /// A rolling upgrade: an instance of an earlier version leases with
    /// random tokens (UUID version 4) and notes itself nowhere. An instance
    /// giving back the leases of instances no longer serving leaves those
    /// alone (they end with their leases), and gives back a token that names
    /// an instance (version 8) no longer serving.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn leases_of_an_earlier_version_are_left_to_end_and_a_vanished_instances_go_back() {
        use sqlx::Connection;
        let app = TestApp::spawn_postgres_with(|c| c.sweeper.enabled = false).await;
        let rx = Receiver::start().await;
        let api = app.api("acme").await;
        let target = api.webhook(&rx.url("/hook")).await;
        let ids: Vec<String> = api
            .schedule_many(s(&target["targetId"]), &in_ms(0), 2)
            .await
            .iter()
            .map(|id| id.trim_start_matches("DI-M-").to_string())
            .collect();
        let earlier = uuid::Uuid::new_v4();
        let vanished =
            uuid::Builder::from_custom_bytes(*uuid::Uuid::new_v4().as_bytes()).into_uuid();
        let mut conn = sqlx::PgConnection::connect(&app.db.url).await.unwrap();
        for (id, token) in ids.iter().zip([earlier, vanished]) {
            let n = sqlx::query(
                "UPDATE messages SET lease_token = $2, claim_at = now() + interval '20 seconds' \
                 WHERE id = $1::uuid",
            )
            .bind(id)
            .bind(token)
            .execute(&mut conn)
            .await
            .unwrap()
            .rows_affected();
            assert_eq!(n, 1);
        }
        // A new instance's first note gives back what no serving instance
        // holds.
        let other = TestApp::spawn_on(app.db.clone(), |c| c.sweeper.enabled = false).await;
        let leases: Vec<(String, Option<uuid::Uuid>)> =
            sqlx::query_as("SELECT id::text, lease_token FROM messages")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        let lease_of = |id: &str| leases.iter().find(|(i, _)| i == id).unwrap().1;
        assert_eq!(
            lease_of(&ids[0]),
            Some(earlier),
            "an earlier version's lease stays"
        );
        assert_eq!(
            lease_of(&ids[1]),
            None,
            "a vanished instance's lease went back"
        );
        other.shutdown().await;
        app.shutdown().await;
    }

    /// A crash sends again what was answered but not yet written, so an
    /// instance lets no more than `UNRECORDED` attempts be in flight or
    /// unwritten: while the database cannot write results (the attempts
    /// table locked), it sends that many and waits; once it can, the rest
    /// go, each once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sends_wait_while_results_cannot_be_written() {
        use sqlx::Connection;
        let places = dispatch::sweeper::UNRECORDED;
        let n = places + 500;
        let app = TestApp::spawn_postgres_with(|_| {}).await;
        let rx = Receiver::start().await;
        let api = app.api("acme").await;
        let target = api.webhook(&rx.url("/hook")).await;
        let mut lock = sqlx::PgConnection::connect(&app.db.url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut lock).await.unwrap();
        sqlx::query("LOCK TABLE attempts IN EXCLUSIVE MODE")
            .execute(&mut lock)
            .await
            .unwrap();
        let ids = api
            .schedule_many(s(&target["targetId"]), &in_ms(0), n)
            .await;
        rx.wait_for(places, WAIT).await;
        // Answered, not written: nothing more goes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(rx.count(), places, "sent while nothing could be written");
        sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
        let got = rx.wait_for(n, WAIT).await;
        let mut arrived: Vec<String> = got
            .iter()
            .map(|r| s(&r.json()["messageId"]).to_string())
            .collect();
        arrived.sort();
        arrived.dedup();
        assert_eq!(arrived.len(), n, "each once");
        assert_eq!(rx.count(), n);
        api.wait_for_state(&ids[n - 1], "Delivered", WAIT).await;
        app.shutdown().await;
    }
}
