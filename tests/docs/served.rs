//! The docs against a running service, on the store under test: the
//! metrics it exposes and the operations its OpenAPI document serves.

use std::{collections::BTreeSet, time::Duration};

use serde_json::{json, Value};

use super::{
    common::{
        fast_ladder, in_ms,
        receiver::{Receiver, Reply},
        TestApp,
    },
    markdown::{read, section},
};

/// The metric names a `/metrics` text declares (`# TYPE name kind`).
fn declared(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every metric name the running service exposes is documented in
/// docs/operations.md. Before looking, the service schedules, delivers,
/// retries, dead-letters, opens a breaker, makes a schedule's run and
/// purges a cancelled message, so that the metrics of each appear; the
/// test waits until each has.
#[tokio::test]
async fn every_metric_the_service_exposes_is_documented() {
    let app = TestApp::spawn_with(|c| {
        fast_ladder(c);
        c.retention.cancelled = Duration::ZERO;
        c.retention.interval = Duration::from_millis(100);
    })
    .await;
    let api = app.api("acme").await;
    let ok = Receiver::start().await;
    let failing = Receiver::start().await;
    failing.always(Reply::status(500));
    let refusing = Receiver::start().await;
    refusing.always(Reply::status(400));
    let id = |v: &Value, key: &str| v[key].as_str().unwrap().to_string();

    let delivered = id(&api.webhook(&ok.url("/ok")).await, "targetId");
    let m = api.schedule(&delivered, &in_ms(-1), "x").await;
    api.wait_for_state(&id(&m, "messageId"), "Delivered", Duration::from_secs(30))
        .await;
    let dead = id(&api.webhook(&refusing.url("/no")).await, "targetId");
    let m = api.schedule(&dead, &in_ms(-1), "x").await;
    api.wait_for_state(&id(&m, "messageId"), "DeadLetter", Duration::from_secs(30))
        .await;
    let breaker = json!({"circuitBreaker": {"failures": 1, "cooldown": "1h"}});
    let broken = id(
        &api.webhook_with(&failing.url("/fail"), breaker).await,
        "targetId",
    );
    api.schedule(&broken, &in_ms(-1), "x").await;
    let r = api
        .post(
            "/schedules",
            json!({"targetId": delivered, "every": "1h", "payload": "run"}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let later = api.schedule(&delivered, &in_ms(3_600_000), "x").await;
    let r = api
        .post_empty(&format!("/messages/{}/cancel", id(&later, "messageId")))
        .await;
    assert_eq!(r.status(), 200);

    let expected = [
        "dispatch_messages_scheduled_total",
        "dispatch_messages_delivered_total",
        "dispatch_messages_dead_lettered_total",
        "dispatch_attempts_failed_total",
        "dispatch_circuit_breaker_transitions_total",
        "dispatch_schedule_runs_total",
        "dispatch_retention_purged_total",
        "dispatch_delivery_duration_seconds",
        "dispatch_delivery_lateness_seconds",
        "dispatch_claim_batch_size",
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let names = loop {
        let text = app
            .http
            .get(app.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let names = declared(&text);
        if expected.iter().all(|e| names.contains(*e)) {
            break names;
        }
        let missing: Vec<_> = expected.iter().filter(|e| !names.contains(**e)).collect();
        assert!(
            tokio::time::Instant::now() < deadline,
            "metrics never appeared: {missing:?}\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let metrics = section(&read("docs/operations.md"), "Metrics");
    for name in &names {
        assert!(
            metrics.contains(&format!("| `{name}` |")),
            "the service exposes {name}, which the Metrics section of docs/operations.md does not list"
        );
    }
    // And every metric the code defines, whether or not it has counted yet.
    let source = read("src/metrics.rs");
    let defined = regex::Regex::new(r#"pub const [A-Z_]+: &str = "([a-z_]+)";"#).unwrap();
    let mut n = 0;
    for cap in defined.captures_iter(&source) {
        assert!(
            metrics.contains(&format!("| `{}` |", &cap[1])),
            "src/metrics.rs defines {}, which docs/operations.md does not list",
            &cap[1]
        );
        n += 1;
    }
    assert!(n >= expected.len(), "src/metrics.rs defines its metrics");
    app.shutdown().await;
}

/// Every operation of the served OpenAPI document is in the endpoint index
/// of docs/api.md, and the index lists nothing the server does not serve.
#[tokio::test]
async fn every_operation_served_is_in_the_api_reference() {
    let app = TestApp::spawn().await;
    let doc: Value = app
        .http
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut served = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "put", "post", "patch", "delete"] {
            if item.get(method).is_some() {
                served.insert(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    assert!(served.len() >= 30, "the document's operations: {served:?}");
    let index = section(&read("docs/api.md"), "Endpoint index");
    let listed: BTreeSet<String> = index
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(op, _)| op.to_string())
        .collect();
    let missing: Vec<_> = served.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "served but not in the endpoint index of docs/api.md: {missing:?}"
    );
    let extra: Vec<_> = listed.difference(&served).collect();
    assert!(
        extra.is_empty(),
        "in the endpoint index of docs/api.md but not served: {extra:?}"
    );
    app.shutdown().await;
}
