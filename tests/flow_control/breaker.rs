//! The circuit breaker (docs/api.md#circuit-breaker): open after `failures` consecutive
//! retryable failures, messages waiting without consuming attempts, one probe
//! after the cooldown, the cooldown doubled by a failed probe, closed by a
//! success; `health` on the target.

use super::*;

fn millis_between(a: DateTime<Utc>, b: DateTime<Utc>) -> i64 {
    (b - a).num_milliseconds()
}

/// What the messages of `ids` have been attempted, in all.
async fn attempts_of(api: &Api, ids: &[String]) -> u64 {
    let mut n = 0;
    for id in ids {
        n += api.message(id).await["attemptCount"].as_u64().unwrap();
    }
    n
}

fn transitions(meter: &Meter) -> [f64; 3] {
    ["open", "halfOpen", "closed"]
        .map(|state| meter.read(&format!("{BREAKER}{{state=\"{state}\"}}")))
}

const BREAKER: &str = "dispatch_circuit_breaker_transitions_total";

#[tokio::test]
async fn the_breaker_opens_waits_probes_doubles_and_closes() {
    let _metrics = metrics_alone().await;
    let app = TestApp::spawn_with(|c| {
        c.retry.minute_delay = Duration::from_millis(100);
    })
    .await;
    let meter = Meter::of(&app);
    let counted_before = transitions(&meter);
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    // Each probe is held until the test has seen the breaker half open.
    let (first_probe, second_probe) =
        (common::receiver::Gate::new(), common::receiver::Gate::new());
    rx.then([
        Reply::status(500),
        Reply::status(500),
        Reply::status(500),
        Reply::status(500).held_until(&first_probe),
        Reply::status(200).held_until(&second_probe),
    ]);
    rx.always(Reply::status(200));
    let t = api
        .webhook_with(
            &rx.url("/b"),
            // One at a time, so that no attempt is in flight when it opens
            // (those end as they may: an open breaker starts nothing new).
            json!({
                "circuitBreaker": {"failures": 3, "cooldown": "1s"},
                "flowControl": {"parallelism": 1}
            }),
        )
        .await;
    assert_eq!(
        t["health"],
        json!({"state": "closed", "consecutiveFailures": 0, "openUntil": null})
    );
    let target = t["targetId"].as_str().unwrap().to_string();
    let mut ids = Vec::new();
    for i in 0..3 {
        let m = api.schedule(&target, &in_ms(0), &i.to_string()).await;
        ids.push(m["messageId"].as_str().unwrap().to_string());
    }
    // Opens: three failures in a row, open for the cooldown from the third.
    let third = rx.wait_for(3, WAIT).await[2].at;
    let health = wait_for_health(&api, &target, |h| h["state"] != "closed").await;
    assert_eq!(health["state"], "open", "{health}");
    assert_eq!(health["consecutiveFailures"], 3, "{health}");
    // openUntil is shown to the millisecond, cut: 1 ms of margin.
    let until = time(&health["openUntil"]);
    assert!(
        millis_between(third, until) >= 999,
        "open until {} ms after the third failure; the cooldown is 1 s",
        millis_between(third, until)
    );
    // Waits, then probes: one attempt, after the cooldown, half open while
    // it runs, and nothing else attempted meanwhile.
    let probe = rx.wait_for(4, WAIT).await[3].at;
    assert!(
        millis_between(third, probe) >= 1000,
        "the probe came {} ms after the third failure; the cooldown is 1 s",
        millis_between(third, probe)
    );
    wait_for_health(&api, &target, |h| h["state"] == "halfOpen").await;
    assert_eq!(rx.count(), 4, "one probe at a time");
    assert_eq!(attempts_of(&api, &ids).await, 3, "waiting costs no attempt");
    // Doubles: the probe failed, open again for twice the cooldown.
    first_probe.open();
    let health = wait_for_health(&api, &target, |h| {
        h["state"] == "open" && h["consecutiveFailures"] == 4
    })
    .await;
    let until = time(&health["openUntil"]);
    assert!(
        millis_between(probe, until) >= 1999,
        "reopened until {} ms after the probe",
        millis_between(probe, until)
    );
    let probe_again = rx.wait_for(5, WAIT).await[4].at;
    assert!(
        millis_between(probe, probe_again) >= 2000,
        "probed again {} ms after the first probe",
        millis_between(probe, probe_again)
    );
    wait_for_health(&api, &target, |h| h["state"] == "halfOpen").await;
    assert_eq!(rx.count(), 5, "one probe at a time");
    assert_eq!(attempts_of(&api, &ids).await, 4);
    // Closes: the probe succeeded, and the waiting messages go.
    second_probe.open();
    for id in &ids {
        api.wait_for_state(id, "Delivered", WAIT).await;
    }
    let health = wait_for_health(&api, &target, |h| h["state"] == "closed").await;
    assert_eq!(health["consecutiveFailures"], 0);
    // Waiting consumed no attempts: 3 failures, 2 probes, 2 deliveries.
    assert_eq!(rx.count(), 7);
    assert_eq!(attempts_of(&api, &ids).await, 7);
    app.shutdown().await;
    let counted = transitions(&meter);
    let moved: Vec<f64> = counted
        .iter()
        .zip(counted_before)
        .map(|(after, before)| after - before)
        .collect();
    assert_eq!(
        moved,
        [2.0, 2.0, 1.0],
        "opened twice, half open twice, closed once (open, halfOpen, closed)"
    );
}

#[tokio::test]
async fn final_answers_do_not_open_the_breaker_and_targets_without_one_show_no_health() {
    let _metrics = metrics_shared().await;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.then([
        Reply::status(500),
        Reply::status(400),
        Reply::status(500),
        Reply::status(200),
    ]);
    let t = api
        .webhook_with(&rx.url("/c"), json!({"circuitBreaker": {"failures": 2}}))
        .await;
    assert_eq!(
        t["config"]["circuitBreaker"],
        json!({"failures": 2, "cooldown": "1m"})
    );
    let target = t["targetId"].as_str().unwrap();
    // The first message: 500, then 400 (final: a dead letter).
    let m = api.schedule(target, &in_ms(0), "x").await;
    api.wait_for_state(m["messageId"].as_str().unwrap(), "DeadLetter", WAIT)
        .await;
    // The second: 500, then 200. Had the 400 not started the count over,
    // this 500 would be the second in a row and the retry would wait a minute.
    let m = api.schedule(target, &in_ms(0), "y").await;
    api.wait_for_state(m["messageId"].as_str().unwrap(), "Delivered", WAIT)
        .await;
    assert_eq!(rx.count(), 4);
    let h: Value = api
        .get(&format!("/targets/{target}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(h["health"]["state"], "closed", "{h}");

    let plain = api.webhook(&rx.url("/d")).await;
    assert!(plain["health"].is_null(), "{plain}");
    app.shutdown().await;
}

async fn wait_for_health(api: &Api, target: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let t: Value = api
            .get(&format!("/targets/{target}"))
            .await
            .json()
            .await
            .unwrap();
        if pred(&t["health"]) {
            return t["health"].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "health never matched: {t}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
