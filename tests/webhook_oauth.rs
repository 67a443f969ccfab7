//! Webhook targets that authenticate to their receiver with OAuth 2 client credentials.

mod common;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
    Form, Json, Router,
};
use base64::{engine::general_purpose::STANDARD as B64, Engine};
use common::{in_ms, receiver::Receiver, receiver::Reply, Api, TestApp};
use serde_json::{json, Value};

/// A token the endpoint issued: the token, when, and its lifetime in seconds.
type Issued = (String, chrono::DateTime<chrono::Utc>, Option<u64>);

/// A token endpoint that counts requests and issues t1, t2, … .
#[derive(Clone)]
struct TokenServer {
    url: String,
    requests: Arc<AtomicUsize>,
    expires_in: Arc<Mutex<Option<u64>>>,
    /// Answer with this status and body instead of a token.
    fail: Arc<Mutex<Option<(u16, Value)>>>,
    scopes_seen: Arc<Mutex<Vec<String>>>,
    issued: Arc<Mutex<Vec<Issued>>>,
}

async fn issue(
    State(s): State<TokenServer>,
    headers: HeaderMap,
    Form(form): Form<std::collections::HashMap<String, String>>,
) -> Response {
    let n = s.requests.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some((status, body)) = s.fail.lock().unwrap().clone() {
        return (StatusCode::from_u16(status).unwrap(), Json(body)).into_response();
    }
    let basic = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let creds = B64
        .decode(basic.trim_start_matches("Basic "))
        .unwrap_or_default();
    if form.get("grant_type").map(String::as_str) != Some("client_credentials")
        || creds != b"rcv-client:rcv-secret"
    {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    s.scopes_seen
        .lock()
        .unwrap()
        .push(form.get("scope").cloned().unwrap_or_default());
    let mut body = json!({"access_token": format!("t{n}"), "token_type": "Bearer"});
    let expires_in = *s.expires_in.lock().unwrap();
    if let Some(e) = expires_in {
        body["expires_in"] = json!(e);
    }
    s.issued
        .lock()
        .unwrap()
        .push((format!("t{n}"), chrono::Utc::now(), expires_in));
    Json(body).into_response()
}

impl TokenServer {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s = TokenServer {
            url: format!("http://{}/token", listener.local_addr().unwrap()),
            requests: Arc::default(),
            expires_in: Arc::new(Mutex::new(Some(3600))),
            fail: Arc::default(),
            scopes_seen: Arc::default(),
            issued: Arc::default(),
        };
        let app = Router::new()
            .route("/token", post(issue))
            .with_state(s.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        s
    }

    fn count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn oauth_target(api: &Api, rx: &Receiver, token_url: &str, secret: &str) -> String {
    let r = api
        .post(
            "/targets",
            json!({"name": "oauth", "type": "webhook", "config": {"url": rx.url("/hook"), "auth": {
                "type": "oauth2ClientCredentials", "tokenUrl": token_url, "clientId": "rcv-client",
                "clientSecret": secret, "scopes": ["orders.write", "orders.read"]}}}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let t: Value = r.json().await.unwrap();
    assert_eq!(t["config"]["auth"]["clientSecret"], "***");
    t["targetId"].as_str().unwrap().to_string()
}

fn bearer(r: &common::receiver::Received) -> String {
    r.header("authorization").unwrap_or_default()
}

#[tokio::test]
async fn one_token_serves_a_hundred_concurrent_deliveries() {
    let app = TestApp::spawn().await;
    let tokens = TokenServer::start().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let t = oauth_target(&api, &rx, &tokens.url, "rcv-secret").await;
    let at = in_ms(1_500);
    for i in 0..100 {
        api.schedule(&t, &at, &format!("m{i}")).await;
    }
    let got = rx.wait_for(100, Duration::from_secs(20)).await;
    assert!(
        got.iter().all(|r| bearer(r) == "Bearer t1"),
        "every delivery carries the one token"
    );
    assert_eq!(tokens.count(), 1, "one token request for all of them");
    assert_eq!(
        tokens.scopes_seen.lock().unwrap()[0],
        "orders.write orders.read"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn an_expiring_token_is_refreshed_before_it_expires() {
    let app = TestApp::spawn().await;
    let tokens = TokenServer::start().await;
    // Tokens live 5 s; Dispatch refreshes a tenth of that (500 ms) early.
    *tokens.expires_in.lock().unwrap() = Some(5);
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let t = oauth_target(&api, &rx, &tokens.url, "rcv-secret").await;
    // A delivery every 100 ms or so for 6 s: several fall in the first
    // token's last 500 ms, and the last ones a second past its expiry.
    let n = 60;
    let first = 1_000;
    for i in 0..n {
        api.schedule(&t, &in_ms(first + 100 * i), &format!("m{i}"))
            .await;
    }
    let got = rx.wait_for(n as usize, Duration::from_secs(20)).await;
    let issued = tokens.issued.lock().unwrap().clone();
    let expiry = |token: &str| {
        let (_, at, lifetime) = issued
            .iter()
            .find(|(t, _, _)| t == token)
            .unwrap_or_else(|| panic!("{token} was issued by the token endpoint"));
        *at + chrono::TimeDelta::seconds(lifetime.unwrap() as i64)
    };
    // No request carried a token past its expiry (a receiver would refuse it).
    for r in &got {
        let token = bearer(r).trim_start_matches("Bearer ").to_string();
        assert!(
            r.at < expiry(&token),
            "a delivery at {} carried {token}, expired at {}",
            r.at,
            expiry(&token)
        );
    }
    // The second token was fetched while the first was still valid.
    assert!(issued.len() >= 2, "the token was refreshed: {issued:?}");
    let (_, second_at, _) = &issued[1];
    assert!(
        *second_at < expiry("t1"),
        "t2 was fetched at {second_at}, after t1 expired at {}",
        expiry("t1")
    );
    assert_eq!(bearer(&got[0]), "Bearer t1");
    assert!(
        got.iter().any(|r| bearer(r) == "Bearer t2"),
        "later deliveries use the new token"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_401_from_the_receiver_refreshes_the_token_once_within_the_attempt() {
    let app = TestApp::spawn().await;
    let tokens = TokenServer::start().await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(401)]);
    let api = app.api("acme").await;
    let t = oauth_target(&api, &rx, &tokens.url, "rcv-secret").await;
    let id = api.schedule(&t, &in_ms(0), "x").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let m = api
        .wait_for_state(&id, "Delivered", Duration::from_secs(10))
        .await;
    assert_eq!(
        m["attemptCount"], 1,
        "the refresh happened inside one attempt"
    );
    let got = rx.received();
    assert_eq!(got.len(), 2);
    assert_eq!(bearer(&got[0]), "Bearer t1");
    assert_eq!(bearer(&got[1]), "Bearer t2");
    assert_eq!(tokens.count(), 2);
    app.shutdown().await;
}

#[tokio::test]
async fn a_receiver_that_keeps_answering_401_fails_the_attempt_without_looping() {
    let app = TestApp::spawn().await;
    let tokens = TokenServer::start().await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(401));
    let api = app.api("acme").await;
    let t = oauth_target(&api, &rx, &tokens.url, "rcv-secret").await;
    let id = api.schedule(&t, &in_ms(0), "x").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let m = api
        .wait_for_state(&id, "DeadLetter", Duration::from_secs(10))
        .await;
    assert_eq!(m["attemptCount"], 1);
    assert_eq!(rx.count(), 2, "one refresh, then the 401 stands");
    let attempts = api.attempts(&id).await;
    assert_eq!(attempts[0]["statusCode"], 401);
    app.shutdown().await;
}

#[tokio::test]
async fn a_bad_client_at_the_token_endpoint_is_not_retried() {
    let app = TestApp::spawn().await;
    let tokens = TokenServer::start().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let t = oauth_target(&api, &rx, &tokens.url, "wrong-secret").await;
    let id = api.schedule(&t, &in_ms(0), "x").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let m = api
        .wait_for_state(&id, "DeadLetter", Duration::from_secs(10))
        .await;
    assert_eq!(m["attemptCount"], 1);
    let attempts = api.attempts(&id).await;
    assert_eq!(attempts[0]["outcome"], "NonRetryableFailure");
    assert!(
        attempts[0]["error"]
            .as_str()
            .unwrap()
            .contains("invalid_client"),
        "{}",
        attempts[0]
    );
    assert_eq!(
        rx.count(),
        0,
        "nothing reaches the receiver without a token"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_failing_token_endpoint_is_retried_through_the_ladder() {
    let app = TestApp::spawn_with(common::fast_ladder).await;
    let tokens = TokenServer::start().await;
    *tokens.fail.lock().unwrap() = Some((503, json!({"message": "down for maintenance"})));
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let t = oauth_target(&api, &rx, &tokens.url, "rcv-secret").await;
    let id = api.schedule(&t, &in_ms(0), "x").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    let attempts = common::eventually(Duration::from_secs(10), "two attempts", async || {
        let attempts = api.attempts(&id).await;
        if attempts.len() >= 2 {
            Ok(attempts)
        } else {
            Err(attempts)
        }
    })
    .await;
    assert_eq!(
        attempts[0]["outcome"], "RetryableFailure",
        "{}",
        attempts[0]
    );
    *tokens.fail.lock().unwrap() = None;
    api.wait_for_state(&id, "Delivered", Duration::from_secs(10))
        .await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_second_dispatch_instance_can_be_the_token_endpoint() {
    // Dispatch's own /oauth/token is a standard client credentials endpoint.
    let issuer = TestApp::spawn().await;
    let (client_id, client_secret) = issuer.client("receiver", &["messages:read"]).await;
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let r = api
        .post(
            "/targets",
            json!({"name": "oauth", "type": "webhook", "config": {"url": rx.url("/hook"), "auth": {
                "type": "oauth2ClientCredentials", "tokenUrl": issuer.url("/oauth/token"),
                "clientId": client_id, "clientSecret": client_secret, "scopes": ["messages:read"]}}}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let t = r.json::<Value>().await.unwrap()["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let id = api.schedule(&t, &in_ms(0), "x").await["messageId"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_for_state(&id, "Delivered", Duration::from_secs(10))
        .await;
    let token = bearer(&rx.received()[0])
        .trim_start_matches("Bearer ")
        .to_string();
    // The receiver can check the token with its issuer: it works there.
    let check = issuer
        .http
        .get(issuer.url("/messages"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(check.status(), 200);
    app.shutdown().await;
    issuer.shutdown().await;
}
