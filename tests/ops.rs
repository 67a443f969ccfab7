//! Operations (docs/operations.md#health-and-readiness): health probes, Prometheus metrics, the OpenAPI
//! document, and the answer to an unknown path.

mod common;
#[path = "ops/metrics.rs"]
mod prometheus;

use std::time::Duration;

use common::{
    in_ms,
    problem::assert_problem,
    receiver::{Receiver, Reply},
    TestApp,
};
use reqwest::Response;
use serde_json::{json, Value};

async fn get(app: &TestApp, path: &str) -> Response {
    app.http.get(app.url(path)).send().await.unwrap()
}

fn content_type(r: &Response) -> String {
    r.headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_liveness_probe_answers_200_without_a_token() {
    let app = TestApp::spawn().await;
    let r = get(&app, "/health/live").await;
    assert_eq!(r.status(), 200);
    app.shutdown().await;
}

#[tokio::test]
async fn the_readiness_probe_answers_200_without_a_token_when_the_database_answers() {
    let app = TestApp::spawn().await;
    let r = get(&app, "/health/ready").await;
    assert_eq!(r.status(), 200);
    app.shutdown().await;
}

/// What needs a PostgreSQL server itself (to break it).
mod postgres {
    use sqlx::{Connection, PgConnection};

    use super::*;

    async fn alter_connections(app: &TestApp, allow: bool) {
        let mut admin = PgConnection::connect(&common::pg_admin_url())
            .await
            .unwrap();
        let name = &app.db.name;
        sqlx::query(&format!(
            "ALTER DATABASE {name} WITH ALLOW_CONNECTIONS {allow}"
        ))
        .execute(&mut admin)
        .await
        .unwrap();
        if !allow {
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            )
            .bind(name)
            .execute(&mut admin)
            .await
            .unwrap();
        }
    }

    #[tokio::test]
    async fn the_readiness_probe_answers_503_while_the_database_is_unreachable_and_recovers() {
        let app = TestApp::spawn_postgres_with(|_| {}).await;
        assert_eq!(get(&app, "/health/ready").await.status(), 200);

        alter_connections(&app, false).await;
        let r = get(&app, "/health/ready").await;
        let body = assert_problem(r, 503).await;
        let text = body.to_string().to_lowercase();
        assert!(
            !text.contains("sqlx") && !text.contains("postgres://"),
            "{body}"
        );
        // The process is still alive.
        assert_eq!(get(&app, "/health/live").await.status(), 200);

        alter_connections(&app, true).await;
        let r = get(&app, "/health/ready").await;
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
        app.shutdown().await;
    }
}

#[tokio::test]
async fn the_openapi_document_is_3_1_and_describes_the_api_without_a_token() {
    let app = TestApp::spawn().await;
    let r = get(&app, "/openapi.json").await;
    assert_eq!(r.status(), 200);
    let ct = content_type(&r);
    assert!(ct.starts_with("application/json"), "{ct}");
    let doc: Value = r.json().await.unwrap();
    let version = doc["openapi"].as_str().unwrap();
    assert!(version.starts_with("3.1"), "{version}");
    assert!(doc["info"]["title"].is_string());
    let paths = doc["paths"].as_object().expect("paths");
    let expect = [
        ("/messages", &["get", "post"][..]),
        ("/messages/{messageId}", &["get"][..]),
        ("/messages/{messageId}/attempts", &["get"][..]),
        ("/messages/{messageId}/cancel", &["post"][..]),
        ("/messages/{messageId}/reschedule", &["post"][..]),
        ("/targets", &["get", "post"][..]),
        ("/targets/{targetId}", &["get", "patch", "delete"][..]),
        ("/targets/{targetId}/enable", &["post"][..]),
        ("/targets/{targetId}/disable", &["post"][..]),
        ("/oauth/token", &["post"][..]),
        ("/health/live", &["get"][..]),
        ("/health/ready", &["get"][..]),
    ];
    for (path, methods) in expect {
        let item = paths
            .get(path)
            .unwrap_or_else(|| panic!("{path} is missing from {:?}", paths.keys()));
        for m in methods {
            assert!(item.get(*m).is_some(), "{m} {path} is missing: {item}");
        }
    }
    let schemes = &doc["components"]["securitySchemes"];
    assert!(
        schemes
            .as_object()
            .is_some_and(|s| s.values().any(|v| v["scheme"] == "bearer")),
        "a bearer security scheme: {schemes}"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn an_unknown_path_answers_404_problem_json() {
    let app = TestApp::spawn().await;
    for path in ["/nope", "/targets/DI-T-aabbcc1122/explode", "/health"] {
        let body = assert_problem(get(&app, path).await, 404).await;
        assert_eq!(body["status"], 404);
    }
    let api = app.api("acme").await;
    assert_problem(api.get("/no/such/thing").await, 404).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_method_a_path_does_not_support_answers_405_problem_json_with_allow() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for (method, path) in [
        (reqwest::Method::PUT, "/targets"),
        (reqwest::Method::DELETE, "/messages"),
        (reqwest::Method::POST, "/health/live"),
        (reqwest::Method::GET, "/oauth/token"),
    ] {
        let r = api.req(method.clone(), path).send().await.unwrap();
        let allow = r
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_string());
        assert_problem(r, 405).await;
        let allow = allow.unwrap_or_else(|| panic!("{method} {path}: 405 without Allow"));
        assert!(
            !allow.contains(method.as_str()),
            "{method} {path}: Allow: {allow}"
        );
    }
    app.shutdown().await;
}

#[tokio::test]
async fn the_operational_endpoints_answer_without_a_token() {
    let app = TestApp::spawn().await;
    for path in ["/health/live", "/health/ready", "/metrics", "/openapi.json"] {
        let r = get(&app, path).await;
        assert_eq!(r.status(), 200, "{path}");
        assert!(r.headers().get("www-authenticate").is_none(), "{path}");
    }
    // The API itself does need one.
    assert_problem(get(&app, "/targets").await, 401).await;
    app.shutdown().await;
}

/// Purges, until nothing more is expired, what retention would purge
/// `later` from now: the app's own periods, the store's own purge.
async fn purge_as_of(app: &TestApp, later: Duration) -> dispatch::store::Purged {
    let config = app.running().state.config.retention.clone();
    let at = chrono::Utc::now() + chrono::TimeDelta::from_std(later).unwrap();
    let cutoffs = dispatch::retention::cutoffs(&config, at);
    let store = app.store();
    let mut total = dispatch::store::Purged::default();
    loop {
        let p = store
            .purge_expired(&cutoffs, config.batch_size)
            .await
            .unwrap();
        if p == dispatch::store::Purged::default() {
            return total;
        }
        total.messages += p.messages;
        total.attempts += p.attempts;
        total.idempotency_keys += p.idempotency_keys;
    }
}

#[tokio::test]
async fn each_kind_of_row_is_purged_after_its_own_retention_period_and_not_before() {
    let _metrics = prometheus::metrics_shared().await;
    const HOUR: u64 = 3600;
    // Four different periods, in an order unlike that of the config or the purge.
    let app = TestApp::spawn_with(|c| {
        c.sweeper.enabled = false;
        c.retention.interval = Duration::from_secs(HOUR); // driven by hand below
        c.retention.cancelled = Duration::from_secs(HOUR);
        c.retention.dead_letters = Duration::from_secs(2 * HOUR);
        c.retention.delivered = Duration::from_secs(3 * HOUR);
        c.retention.failed_attempts = Duration::from_secs(4 * HOUR);
        c.retention.batch_size = 1; // several batches per kind
    })
    .await;
    let ok = Receiver::start().await;
    let gone = Receiver::start().await;
    gone.always(Reply::status(404));
    let flaky = Receiver::start().await;
    flaky.always(Reply::status(500));
    let api = app.api("acme").await;
    let target = |v: Value| v["targetId"].as_str().unwrap().to_string();
    let ok_t = target(api.webhook(&ok.url("/")).await);
    let gone_t = target(api.webhook(&gone.url("/")).await);
    let flaky_t = target(api.webhook(&flaky.url("/")).await);
    let id = |v: Value| v["messageId"].as_str().unwrap().to_string();

    let delivered = id(api.schedule(&ok_t, &in_ms(-1), "d").await);
    let dead = id(api.schedule(&gone_t, &in_ms(-1), "x").await);
    let retrying = id(api.schedule(&flaky_t, &in_ms(-1), "r").await);
    let cancelled = id(api.schedule(&ok_t, &in_ms(3_600_000), "c").await);
    let future = id(api.schedule(&ok_t, &in_ms(30 * 86_400_000), "f").await);
    assert_eq!(
        api.post_empty(&format!("/messages/{cancelled}/cancel"))
            .await
            .status(),
        200
    );
    app.running().sweeper.deliver_due_now().await;
    assert_eq!(api.message(&delivered).await["state"], "Delivered");
    assert_eq!(api.message(&dead).await["state"], "DeadLetter");
    // A round of two failed attempts; the next waits a minute (the default ladder).
    assert_eq!(api.message(&retrying).await["state"], "Scheduled");
    let failed = api.attempts(&retrying).await.len();
    assert!(failed >= 1, "the retrying message has failed attempts");

    let present = |id: String| {
        let api = api.clone();
        async move { api.get(&format!("/messages/{id}")).await.status() == 200 }
    };
    // (hours from now, [cancelled, dead letter, delivered] still there, failed attempts still there)
    let stages: [(f64, [bool; 3], bool, u64); 5] = [
        (0.5, [true, true, true], true, 0),
        (1.5, [false, true, true], true, 1),
        (2.5, [false, false, true], true, 1),
        (3.5, [false, false, false], true, 1),
        (4.5, [false, false, false], false, 0),
    ];
    for (hours, kept, attempts_kept, purged) in stages {
        let p = purge_as_of(&app, Duration::from_secs_f64(hours * HOUR as f64)).await;
        assert_eq!(p.messages, purged, "messages purged {hours} h from now");
        for (what, id, kept) in [
            ("the cancelled message (1 h)", &cancelled, kept[0]),
            ("the dead letter (2 h)", &dead, kept[1]),
            ("the delivered message (3 h)", &delivered, kept[2]),
        ] {
            assert_eq!(
                present(id.clone()).await,
                kept,
                "{what} {} {hours} h from now",
                if kept { "is kept" } else { "is purged" }
            );
        }
        assert_eq!(
            api.attempts(&retrying).await.len(),
            if attempts_kept { failed } else { 0 },
            "the failed attempts (4 h) {} {hours} h from now",
            if attempts_kept {
                "are kept"
            } else {
                "are purged"
            }
        );
        assert_eq!(
            api.message(&retrying).await["state"],
            "Scheduled",
            "a message still to be delivered is never purged"
        );
        assert_eq!(api.message(&future).await["state"], "Scheduled");
    }
    app.shutdown().await;
}
