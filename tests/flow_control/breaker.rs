//! The circuit breaker (API.md §9): open after `failures` consecutive
//! retryable failures, messages waiting without consuming attempts, one probe
//! after the cooldown, the cooldown doubled by a failed probe, closed by a
//! success; `health` on the target.

use super::*;

fn millis_between(a: DateTime<Utc>, b: DateTime<Utc>) -> i64 {
    (b - a).num_milliseconds()
}

#[tokio::test]
async fn the_breaker_opens_waits_probes_doubles_and_closes() {
    let app = TestApp::spawn_with(|c| {
        c.retry.minute_delay = Duration::from_millis(100);
    })
    .await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(500));
    let t = api
        .webhook_with(
            &rx.url("/b"),
            // One at a time, so that no attempt is in flight when it opens
            // (those end as they may: an open breaker starts nothing new).
            json!({
                "circuitBreaker": {"failures": 3, "cooldown": "300ms"},
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
    // Three failures open it: nothing more is attempted until the probe.
    let first = rx.wait_for(4, WAIT).await;
    let third = first[2].at;
    let probe = first[3].at;
    assert!(
        millis_between(third, probe) >= 300,
        "the probe came {} ms after the third failure; the cooldown is 300 ms",
        millis_between(third, probe)
    );
    // The probe failed: open again, for twice as long.
    rx.always(Reply::status(200));
    let health = wait_for_health(&api, &target, |h| {
        h["state"] == "open" && h["consecutiveFailures"] == 4
    })
    .await;
    // openUntil is shown to the millisecond, cut: 1 ms of margin.
    let until = time(&health["openUntil"]);
    assert!(
        millis_between(probe, until) >= 599,
        "reopened until {} ms after the probe",
        millis_between(probe, until)
    );
    let second_probe = rx.wait_for(5, WAIT).await[4].at;
    assert!(millis_between(probe, second_probe) >= 600);
    // It succeeded: closed, and the waiting messages go.
    for id in &ids {
        api.wait_for_state(id, "Delivered", WAIT).await;
    }
    let health = wait_for_health(&api, &target, |h| h["state"] == "closed").await;
    assert_eq!(health["consecutiveFailures"], 0);
    // Waiting consumed no attempts: 3 failures, 2 probes, 2 deliveries.
    assert_eq!(rx.count(), 7);
    let attempts: usize = futures::future::join_all(ids.iter().map(|id| api.attempts(id)))
        .await
        .iter()
        .map(Vec::len)
        .sum();
    assert_eq!(attempts, 7);
    let metrics = app
        .http
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for state in ["open", "halfOpen", "closed"] {
        assert!(
            metrics.contains(&format!(
                "dispatch_circuit_breaker_transitions_total{{state=\"{state}\"}}"
            )),
            "{state} counted"
        );
    }
    app.shutdown().await;
}

#[tokio::test]
async fn final_answers_do_not_open_the_breaker_and_targets_without_one_show_no_health() {
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
