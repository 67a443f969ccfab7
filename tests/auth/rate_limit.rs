//! `api.rate_limit` (API.md §2): requests a second per client, bursts of
//! twice that; beyond, 429 problem+json with Retry-After.

use super::*;

#[tokio::test]
async fn a_client_over_the_rate_limit_gets_429_with_retry_after_and_another_client_does_not() {
    let app = TestApp::spawn_with(|c| c.api.rate_limit = 1).await;
    let busy = app.api("acme").await;
    let calm = app.api("acme").await;
    // A burst of twice the rate is let through.
    for _ in 0..2 {
        assert_eq!(busy.get("/targets").await.status(), 200);
    }
    let r = busy.get("/messages").await;
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
