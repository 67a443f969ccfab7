//! `api.rate_limit` (docs/api.md#abuse-limits): requests a second per client, bursts of
//! twice that; beyond, 429 problem+json with Retry-After.

use super::*;

#[tokio::test]
async fn a_client_over_the_rate_limit_gets_429_with_retry_after_and_another_client_does_not() {
    let app = TestApp::spawn_with(|c| c.api.rate_limit = 1).await;
    let busy = app.api("acme").await;
    let calm = app.api("acme").await;
    // Eight at once: a burst of twice the rate (one a second) is let
    // through, and no more than one more for each whole second the eight
    // took to be answered (a busy machine may take a while).
    let started = std::time::Instant::now();
    let answers = futures::future::join_all((0..8).map(|_| busy.get("/targets"))).await;
    let took = started.elapsed().as_secs() as usize;
    let passed = answers.iter().filter(|r| r.status() == 200).count();
    assert!(passed < 8, "none of eight held back in {took} s");
    assert!(
        (2..=2 + took).contains(&passed),
        "{passed} of 8 let through in {took} whole seconds at 1/s with bursts of 2"
    );
    let refused: Vec<Response> = answers.into_iter().filter(|r| r.status() != 200).collect();
    assert_eq!(refused.len(), 8 - passed);
    for r in refused {
        let retry_after: u64 = r
            .headers()
            .get("retry-after")
            .expect("a Retry-After header")
            .to_str()
            .unwrap()
            .parse()
            .expect("whole seconds");
        assert!((1..=2).contains(&retry_after), "{retry_after}");
        let body = assert_problem(r, 429).await;
        assert!(body["detail"].is_string(), "{body}");
    }

    assert_eq!(calm.get("/targets").await.status(), 200);
    app.shutdown().await;
}

#[tokio::test]
async fn without_a_rate_limit_a_client_is_not_held_back() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for _ in 0..30 {
        assert_eq!(api.get("/targets").await.status(), 200);
    }
    app.shutdown().await;
}

#[tokio::test]
async fn the_openapi_document_lists_429_for_authenticated_operations_and_the_token_endpoint() {
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
    for (path, method) in [
        ("/targets", "get"),
        ("/messages", "post"),
        ("/oauth/token", "post"),
    ] {
        let response = &doc["paths"][path][method]["responses"]["429"];
        assert!(response.is_object(), "{method} {path}: {response}");
        assert!(
            response["headers"]["Retry-After"].is_object(),
            "{method} {path}: {response}"
        );
    }
    assert!(doc["paths"]["/health/live"]["get"]["responses"]["429"].is_null());
    app.shutdown().await;
}

/// What needs PostgreSQL itself: several instances on one database.
mod postgres {
    use sqlx::{Connection, PgConnection};

    use super::*;

    /// Two instances on one database each allow a client half the rate: a
    /// client spread over them by a balancer gets the rate, not twice it.
    #[tokio::test]
    async fn two_instances_share_the_rate_limit() {
        let rate = |c: &mut dispatch::config::Config| c.api.rate_limit = 1;
        let first = TestApp::spawn_postgres_with(rate).await;
        let second = TestApp::spawn_on(first.db.clone(), rate).await;
        // Each instance notes itself as it starts, and counts the others
        // each second: wait until the second counts both.
        let mut db = PgConnection::connect(&first.db.url).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM instances")
                .fetch_one(&mut db)
                .await
                .unwrap();
            if n == 2 && second.running().state.limits.instances() == 2 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{n} instances noted");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let api = second.api("acme").await;
        // Alone, a burst of two at one a second; its half here: one, then
        // one more for each two whole seconds the four took.
        let started = std::time::Instant::now();
        let answers = futures::future::join_all((0..4).map(|_| api.get("/targets"))).await;
        let took = started.elapsed().as_secs() as usize;
        let passed = answers.iter().filter(|r| r.status() == 200).count();
        assert!(
            (1..=1 + took / 2).contains(&passed),
            "{passed} of 4 let through in {took} whole seconds at half of 1/s"
        );
        assert!(answers
            .iter()
            .all(|r| [200, 429].contains(&r.status().as_u16())));
        first.shutdown().await;
        second.shutdown().await;
    }
}
