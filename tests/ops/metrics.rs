//! Prometheus metrics: what `/metrics` serves and that each
//! counter moves by exactly what a test did.

use metrics_exporter_prometheus::PrometheusHandle;

use super::*;

/// The metrics recorder is process-wide and its series carry no account or
/// target: every test of this binary raises the same counters. A test that
/// asserts exact deltas holds `METRICS` alone; every other test of this
/// binary that could move a counter (it schedules, delivers or purges)
/// holds it shared.
static METRICS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn metrics_alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    METRICS.write().await
}

pub(super) async fn metrics_shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    METRICS.read().await
}

/// The sum of every sample of `name` (all label sets) in Prometheus text.
fn sample_sum(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        let value = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("a sample value in {line:?}"));
        *found.get_or_insert(0.0) += value;
    }
    found
}

async fn metrics_text(app: &TestApp) -> String {
    let r = get(app, "/metrics").await;
    assert_eq!(r.status(), 200);
    let ct = content_type(&r);
    assert!(ct.starts_with("text/plain"), "{ct}");
    r.text().await.unwrap()
}

/// The app's own recorder, to read after `shutdown` has let every task
/// finish what it was doing (an attempt's record, a retention pass, a
/// schedules pass), so that nothing still to be counted is missed. It
/// renders what `/metrics` serves.
fn recorder(app: &TestApp) -> PrometheusHandle {
    app.running().state.metrics.clone()
}

/// The change of every series named in `names` from `before` to `after`.
fn deltas(before: &str, after: &str, names: &[&str]) -> Vec<(String, f64)> {
    names
        .iter()
        .map(|n| {
            let count = |t: &str| sample_sum(t, n).unwrap_or(0.0);
            (n.to_string(), count(after) - count(before))
        })
        .collect()
}

#[tokio::test]
async fn metrics_are_prometheus_text_that_counts_deliveries_and_dead_letters() {
    let _metrics = metrics_alone().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let before = metrics_text(&app).await;

    let ok = Receiver::start().await;
    let t = api.webhook(&ok.url("/ok")).await;
    let m = api
        .schedule(t["targetId"].as_str().unwrap(), &in_ms(0), "hello")
        .await;
    api.wait_for_state(
        m["messageId"].as_str().unwrap(),
        "Delivered",
        Duration::from_secs(5),
    )
    .await;

    let refused = Receiver::start().await;
    refused.always(Reply::status(410));
    let t = api.webhook(&refused.url("/gone")).await;
    let m = api
        .schedule(t["targetId"].as_str().unwrap(), &in_ms(0), "bye")
        .await;
    api.wait_for_state(
        m["messageId"].as_str().unwrap(),
        "DeadLetter",
        Duration::from_secs(5),
    )
    .await;

    let served = metrics_text(&app).await;
    let recorder = recorder(&app);
    app.shutdown().await;
    let after = recorder.render();
    for (name, kind) in [
        ("dispatch_messages_scheduled_total", "counter"),
        ("dispatch_messages_delivered_total", "counter"),
        ("dispatch_messages_dead_lettered_total", "counter"),
        ("dispatch_attempts_failed_total", "counter"),
        ("dispatch_delivery_lateness_seconds", "histogram"),
        ("dispatch_delivery_duration_seconds", "histogram"),
        ("dispatch_claim_batch_size", "histogram"),
    ] {
        assert!(
            served.contains(&format!("# TYPE {name} {kind}")),
            "{name} is a {kind}:\n{served}"
        );
    }
    assert!(
        sample_sum(&served, "dispatch_delivery_lateness_seconds_bucket").is_some(),
        "{served}"
    );
    let moved = deltas(
        &before,
        &after,
        &[
            "dispatch_messages_scheduled_total",
            "dispatch_messages_delivered_total",
            "dispatch_messages_dead_lettered_total",
            "dispatch_attempts_failed_total{outcome=\"NonRetryableFailure\"}",
            "dispatch_attempts_failed_total{outcome=\"RetryableFailure\"}",
            // Each message's first attempt is late by something.
            "dispatch_delivery_lateness_seconds_count",
            // Both attempts were timed.
            "dispatch_delivery_duration_seconds_count",
            // Each message was claimed once: the claims' sizes add up to two.
            "dispatch_claim_batch_size_sum",
        ],
    );
    let expected = [2.0, 1.0, 1.0, 1.0, 0.0, 2.0, 2.0, 2.0];
    let wanted: Vec<(String, f64)> = moved
        .iter()
        .zip(expected)
        .map(|((name, _), e)| (name.clone(), e))
        .collect();
    assert_eq!(
        moved, wanted,
        "two scheduled, one delivered, one refused for good:\n{after}"
    );
}

#[tokio::test]
async fn a_message_scheduled_for_the_past_is_late_from_when_it_was_scheduled_not_from_then() {
    let _metrics = metrics_alone().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = api.webhook(&rx.url("/hook")).await;
    let lateness = "dispatch_delivery_lateness_seconds";
    let before = metrics_text(&app).await;
    // A backfill: due in 2020, scheduled now.
    let m = api
        .schedule(
            t["targetId"].as_str().unwrap(),
            "2020-07-01T12:34:00Z",
            "late",
        )
        .await;
    api.wait_for_state(
        m["messageId"].as_str().unwrap(),
        "Delivered",
        Duration::from_secs(5),
    )
    .await;
    let recorder = recorder(&app);
    app.shutdown().await;
    let after = recorder.render();
    let moved = deltas(
        &before,
        &after,
        &[&format!("{lateness}_count"), &format!("{lateness}_sum")],
    );
    assert_eq!(moved[0].1, 1.0, "one first attempt observed: {after}");
    // Counted from 2020 it would be six years (about 1.9e8 s); counted from
    // its scheduling, what the test took to deliver it.
    let added = moved[1].1;
    assert!(
        (0.0..60.0).contains(&added),
        "{added} s of lateness for a message delivered at once"
    );
}

#[tokio::test]
async fn the_rows_retention_purges_are_counted_in_metrics() {
    let _metrics = metrics_alone().await;
    let app = TestApp::spawn_with(|c| {
        c.retention.interval = Duration::from_millis(100);
        c.retention.delivered = Duration::from_millis(100);
    })
    .await;
    let api = app.api("acme").await;
    let purged = "dispatch_retention_purged_total{kind=\"messages\"}";
    let before = metrics_text(&app).await;

    let ok = Receiver::start().await;
    let t = api.webhook(&ok.url("/ok")).await;
    let m = api
        .schedule(t["targetId"].as_str().unwrap(), &in_ms(0), "brief")
        .await;
    let id = m["messageId"].as_str().unwrap();
    api.wait_for_state(id, "Delivered", Duration::from_secs(5))
        .await;
    // The purge is the event: the message answers 404 once a retention
    // pass has deleted it. The pass counts what it deleted as it ends; the
    // shutdown below waits for the pass under way.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = api.get(&format!("/messages/{id}")).await;
        if r.status() == 404 {
            assert_problem(r, 404).await;
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the delivered message was not purged"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recorder = recorder(&app);
    app.shutdown().await;
    let after = recorder.render();
    assert!(
        after.contains("# TYPE dispatch_retention_purged_total counter"),
        "{after}"
    );
    assert_eq!(
        deltas(&before, &after, &[purged])[0].1,
        1.0,
        "one message purged, counted once:\n{after}"
    );
}

#[tokio::test]
async fn the_runs_a_schedule_makes_are_counted_in_metrics() {
    let _metrics = metrics_alone().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = api.webhook(&rx.url("/tick")).await;
    let runs = "dispatch_schedule_runs_total";
    let before = metrics_text(&app).await;
    // Three runs and no more: at start, start + 1 s and start + 2 s (the
    // end falls between two runs). Runs are made 5 s ahead of their
    // instant: a fourth, past the end, would be listed already.
    let start = chrono::Utc::now() + chrono::TimeDelta::milliseconds(500);
    let end = start + chrono::TimeDelta::milliseconds(2_500);
    let fmt = |t| dispatch::domain::time::format(&t);
    let r = api
        .post(
            "/schedules",
            json!({"targetId": t["targetId"], "name": "tick", "every": "1s", "payload": "tick",
                   "startAt": fmt(start), "endAt": fmt(end)}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let s: Value = r.json().await.unwrap();
    let schedule = s["scheduleId"].as_str().unwrap().to_string();
    rx.wait_for(3, Duration::from_secs(15)).await;
    let listed: Value = api
        .get(&format!("/messages?scheduleId={schedule}&limit=100"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 3, "{listed}");
    let recorder = recorder(&app);
    app.shutdown().await;
    let after = recorder.render();
    assert!(
        after.contains(&format!("# TYPE {runs} counter")),
        "{runs} is a counter:\n{after}"
    );
    assert_eq!(
        deltas(&before, &after, &[runs])[0].1,
        3.0,
        "three runs made, each counted once:\n{after}"
    );
}
