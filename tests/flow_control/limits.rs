//! `flowControl` (docs/api.md#per-target-limits): parallelism across every instance, a rate per
//! sliding period, held-back messages Scheduled and unattempted, leaving in
//! delivery-time order, and a PATCH that takes effect at once.

use super::*;

/// Schedules one message per delivery time, all due already; payload `i`.
async fn schedule_all(api: &Api, target: &str, offsets_ms: &[i64]) -> Vec<String> {
    let mut ids = Vec::new();
    for (i, at) in offsets_ms.iter().enumerate() {
        let m = api.schedule(target, &in_ms(*at), &i.to_string()).await;
        ids.push(m["messageId"].as_str().unwrap().to_string());
    }
    ids
}

/// `parallelism` holds across instances: a receiver that keeps each request
/// 200 ms never sees more than the limit at once, though every instance
/// could take 8 more.
async fn parallelism_caps_attempts_in_flight(instances: Vec<TestApp>) {
    let api = instances[0].api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200).delay(Duration::from_millis(200)));
    let t = api
        .webhook_with(&rx.url("/p"), json!({"flowControl": {"parallelism": 3}}))
        .await;
    assert_eq!(
        t["config"]["flowControl"],
        json!({"parallelism": 3, "period": "1s"})
    );
    let target = t["targetId"].as_str().unwrap();
    api.schedule_many(target, &in_ms(0), 24).await;
    rx.wait_for(24, WAIT).await;
    assert_eq!(rx.max_concurrent(), 3, "at most 3 in flight, and 3 used");
    for app in instances {
        app.shutdown().await;
    }
}

fn share_of_eight(c: &mut dispatch::config::Config) {
    c.sweeper.target_concurrency = 8;
}

#[tokio::test]
async fn parallelism_caps_the_attempts_in_flight_on_one_instance() {
    let _metrics = metrics_shared().await;
    parallelism_caps_attempts_in_flight(vec![TestApp::spawn_with(share_of_eight).await]).await;
}

/// What needs PostgreSQL itself: several instances on one database.
mod postgres {
    use super::*;

    /// Each instance may have two of the target's attempts in flight: the
    /// three the target allows, reached and not passed, show both instances
    /// sending at once and the cap holding across them.
    #[tokio::test]
    async fn parallelism_caps_the_attempts_in_flight_across_two_postgresql_instances() {
        let _metrics = metrics_shared().await;
        let share_of_two = |c: &mut dispatch::config::Config| c.sweeper.target_concurrency = 2;
        let first = TestApp::spawn_postgres_with(share_of_two).await;
        let second = TestApp::spawn_on(first.db.clone(), share_of_two).await;
        parallelism_caps_attempts_in_flight(vec![first, second]).await;
    }
}

#[tokio::test]
async fn held_back_messages_leave_in_delivery_time_order() {
    let _metrics = metrics_shared().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200).delay(Duration::from_millis(20)));
    let t = api
        .webhook_with(&rx.url("/o"), json!({"flowControl": {"parallelism": 1}}))
        .await;
    // Scheduled newest first while the target is disabled; enabled, all are
    // due, and the gate decides the order.
    let target = t["targetId"].as_str().unwrap();
    let r = api.post_empty(&format!("/targets/{target}/disable")).await;
    assert_eq!(r.status(), 200);
    let offsets: Vec<i64> = (0..8).map(|i| -100 * (i + 1)).collect();
    let mut expected: Vec<(i64, usize)> = offsets.iter().copied().zip(0..).collect();
    expected.sort();
    schedule_all(&api, target, &offsets).await;
    let r = api.post_empty(&format!("/targets/{target}/enable")).await;
    assert_eq!(r.status(), 200);
    let got: Vec<String> = rx
        .wait_for(8, WAIT)
        .await
        .iter()
        .map(|r| r.json()["payload"].as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = expected.iter().map(|(_, i)| i.to_string()).collect();
    assert_eq!(got, want, "one at a time, oldest delivery time first");
    app.shutdown().await;
}

#[tokio::test]
async fn rate_caps_the_attempts_started_in_any_period_and_held_messages_consume_no_attempt() {
    let _metrics = metrics_shared().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = api
        .webhook_with(
            &rx.url("/r"),
            json!({"flowControl": {"rate": 3, "period": "500ms"}}),
        )
        .await;
    let ids = schedule_all(&api, t["targetId"].as_str().unwrap(), &[0; 9]).await;
    rx.wait_for(3, WAIT).await;
    // The rest wait, Scheduled, unattempted, while the period runs.
    let held = api.message(&ids[8]).await;
    assert_eq!(held["state"], "Scheduled", "{held}");
    assert_eq!(held["attemptCount"], 0, "{held}");
    rx.wait_for(9, WAIT).await;
    let mut started = Vec::new();
    for id in &ids {
        api.wait_for_state(id, "Delivered", WAIT).await;
        let attempts = api.attempts(id).await;
        assert_eq!(attempts.len(), 1, "one attempt each");
        let at = attempts[0]["startedAt"].as_str().unwrap();
        started.push(chrono::DateTime::parse_from_rfc3339(at).unwrap());
    }
    started.sort();
    // The gate spaces the claims: the (i+3)-th is claimed at least 500 ms
    // after the i-th. An attempt starts a moment after its claim (the
    // service's own clock, with no connection set-up in between, unlike
    // the receiver's arrival times, where the first request also opens the
    // connection): 100 ms of margin for a loaded machine.
    for i in 0..6 {
        let gap = (started[i + 3] - started[i]).num_milliseconds();
        assert!(
            gap >= 400,
            "attempt {} started {gap} ms after attempt {i}",
            i + 3
        );
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_patch_changes_the_limits_at_once() {
    let _metrics = metrics_shared().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = api
        .webhook_with(
            &rx.url("/x"),
            json!({"flowControl": {"rate": 1, "period": "1h"}}),
        )
        .await;
    let target = t["targetId"].as_str().unwrap();
    let ids = schedule_all(&api, target, &[0; 4]).await;
    rx.wait_for(1, WAIT).await;
    // One an hour: the others wait.
    let held = api.message(&ids[3]).await;
    assert_eq!(
        (held["state"].as_str(), held["attemptCount"].as_u64()),
        (Some("Scheduled"), Some(0))
    );

    // Two an hour: one more goes now, at once.
    let r = api
        .patch(
            &format!("/targets/{target}"),
            json!({"config": {"flowControl": {"rate": 2}}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["config"]["flowControl"],
        json!({"rate": 2, "period": "1h"})
    );
    rx.wait_for(2, WAIT).await;
    // No limits: the rest go at once.
    let r = api
        .patch(
            &format!("/targets/{target}"),
            json!({"config": {"flowControl": null}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    rx.wait_for(4, WAIT).await;
    for id in &ids {
        api.wait_for_state(id, "Delivered", WAIT).await;
    }

    // And limits added to a target with a backlog hold it from then on.
    let gate = common::receiver::Gate::new();
    let slow = Receiver::start().await;
    slow.always(Reply::status(200).held_until(&gate));
    let s = api.webhook(&slow.url("/s")).await;
    let s_id = s["targetId"].as_str().unwrap();
    let r = api
        .patch(
            &format!("/targets/{s_id}"),
            json!({"config": {"flowControl": {"parallelism": 2}}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    api.schedule_many(s_id, &in_ms(0), 10).await;
    slow.wait_for(2, WAIT).await;
    // Nothing more starts while two are held: a message scheduled after
    // them for another target is claimed and delivered, in a pass that
    // claimed for the gated target too.
    let marker_rx = Receiver::start().await;
    let marker = api.webhook(&marker_rx.url("/marker")).await;
    let m = api
        .schedule(marker["targetId"].as_str().unwrap(), &in_ms(0), "after")
        .await;
    api.wait_for_state(m["messageId"].as_str().unwrap(), "Delivered", WAIT)
        .await;
    assert_eq!(slow.count(), 2, "parallelism 2 holds");
    gate.open();
    slow.wait_for(10, WAIT).await;
    assert!(slow.max_concurrent() <= 2);
    app.shutdown().await;
}

#[tokio::test]
async fn limits_out_of_range_answer_400_naming_the_field() {
    let _metrics = metrics_shared().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for (config, field) in [
        (
            json!({"flowControl": {"parallelism": 0}}),
            "config.flowControl.parallelism",
        ),
        (
            json!({"flowControl": {"rate": 1.5}}),
            "config.flowControl.rate",
        ),
        (
            json!({"flowControl": {"period": "1d"}}),
            "config.flowControl.period",
        ),
        (json!({"flowControl": "fast"}), "config.flowControl"),
        (
            json!({"circuitBreaker": {"failures": 0}}),
            "config.circuitBreaker.failures",
        ),
        (
            json!({"circuitBreaker": {"cooldown": "soon"}}),
            "config.circuitBreaker.cooldown",
        ),
    ] {
        let mut c = config.clone();
        c["url"] = json!("https://example.com/hook");
        let r = api
            .post(
                "/targets",
                json!({"name": "t", "type": "webhook", "config": c}),
            )
            .await;
        assert_eq!(r.status(), 400, "{config}");
        let body: Value = r.json().await.unwrap();
        assert!(body.to_string().contains(field), "{config}: {body}");
    }
    let r = api.get("/targets").await;
    let list: Value = r.json().await.unwrap();
    assert_eq!(
        list["items"].as_array().unwrap().len(),
        0,
        "nothing created"
    );
    app.shutdown().await;
}
