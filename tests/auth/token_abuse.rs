//! POST /oauth/token under abuse (docs/api.md#abuse-limits): failed attempts per client id
//! and per address answer 429 with Retry-After; an unknown client id and a
//! wrong secret answer alike; secrets stored as argon2 still verify.

use super::*;

async fn grant(app: &TestApp, id: &str, secret: &str) -> Response {
    token_request(
        app,
        Creds::Basic(id, secret),
        &[("grant_type", "client_credentials")],
    )
    .await
}

fn retry_after(r: &Response) -> u64 {
    r.headers()
        .get("retry-after")
        .expect("a Retry-After header")
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in whole seconds")
}

async fn assert_held_back(r: Response) {
    assert_eq!(r.status(), 429);
    let secs = retry_after(&r);
    assert!((1..=60).contains(&secs), "Retry-After: {secs}");
    let (_, body) = status_and_json(r).await;
    assert!(body["error"].is_string(), "an OAuth error body: {body}");
}

#[tokio::test]
async fn the_eleventh_failed_attempt_answers_429_and_then_even_the_right_secret_does() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &[]).await;
    for attempt in 1..=10 {
        let (status, body) = status_and_json(grant(&app, &id, "wrong").await).await;
        assert_eq!(status, 401, "attempt {attempt}: {body}");
        assert_eq!(body["error"], "invalid_client");
    }
    assert_held_back(grant(&app, &id, "wrong").await).await;
    assert_held_back(grant(&app, &id, &secret).await).await;
    // Form credentials are the same client id.
    let r = token_request(
        &app,
        Creds::Form(&id, &secret),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_held_back(r).await;
    app.shutdown().await;
}

#[tokio::test]
async fn another_client_id_from_the_same_address_is_unaffected_until_the_address_limit() {
    // Two failures per client id, so ten per address.
    let app = TestApp::spawn_with(|c| c.auth.token_attempts = 2).await;
    let (held, _) = app.client("acme", &[]).await;
    let (other, other_secret) = app.client("acme", &[]).await;
    for _ in 0..2 {
        assert_eq!(grant(&app, &held, "wrong").await.status(), 401);
    }
    assert_held_back(grant(&app, &held, "wrong").await).await;
    assert_eq!(grant(&app, &other, &other_secret).await.status(), 200);

    // Eight more failures, spread over client ids none of which is held back.
    for i in 0..4 {
        let (id, _) = app.client("acme", &[]).await;
        for _ in 0..2 {
            let r = grant(&app, &id, "wrong").await;
            assert_eq!(r.status(), 401, "client {i}");
        }
    }
    // The address has spent its ten: every client id is held back from it.
    assert_held_back(grant(&app, &other, &other_secret).await).await;
    let (fresh, fresh_secret) = app.client("acme", &[]).await;
    assert_held_back(grant(&app, &fresh, &fresh_secret).await).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_held_back_client_id_is_let_go_when_the_window_has_passed() {
    let app = TestApp::spawn_with(|c| {
        c.auth.token_attempts = 2;
        c.auth.token_window = Duration::from_millis(400);
    })
    .await;
    let (id, secret) = app.client("acme", &[]).await;
    for _ in 0..2 {
        assert_eq!(grant(&app, &id, "wrong").await.status(), 401);
    }
    assert_held_back(grant(&app, &id, &secret).await).await;
    // The window (compressed to 400 ms) runs on the wall clock: the right
    // secret is refused, 429 with Retry-After, until it has passed, and a
    // refusal is no failure that would hold the client id longer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = grant(&app, &id, &secret).await;
        if r.status() == 200 {
            break;
        }
        assert_held_back(r).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "still held back 10 s after a window of 400 ms"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.shutdown().await;
}

#[tokio::test]
async fn an_unknown_client_id_and_a_wrong_secret_answer_byte_for_byte_alike() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &[]).await;
    let (unknown, _) = dispatch::auth::secrets::generate_client_credentials();
    let mut answers = Vec::new();
    for (id, secret) in [(id.as_str(), "wrong"), (unknown.as_str(), secret.as_str())] {
        for creds in [Creds::Basic(id, secret), Creds::Form(id, secret)] {
            let r = token_request(&app, creds, &[("grant_type", "client_credentials")]).await;
            let status = r.status();
            let challenge = r.headers().get("www-authenticate").cloned();
            let body = r.bytes().await.unwrap();
            answers.push((status, challenge, body));
        }
    }
    assert_eq!(answers[0].0, 401);
    assert_eq!(answers[0], answers[2], "Basic: wrong secret vs unknown id");
    assert_eq!(answers[1], answers[3], "form: wrong secret vs unknown id");
    app.shutdown().await;
}

#[tokio::test]
async fn a_secret_stored_as_argon2_still_verifies_and_is_then_stored_fast() {
    let app = TestApp::spawn().await;
    let (id, secret) = dispatch::auth::secrets::generate_client_credentials();
    let legacy = dispatch::auth::secrets::hash_secret(&secret);
    assert!(legacy.starts_with("$argon2"));
    app.store()
        .create_client(&dispatch::store::ClientRecord {
            client_id: id.clone(),
            account: dispatch::domain::ids::AccountId::parse("acme").unwrap(),
            name: "legacy".into(),
            secret_hash: legacy,
            scopes: dispatch::domain::scope::Scope::ALL.to_vec(),
        })
        .await
        .unwrap();
    assert_eq!(grant(&app, &id, "wrong").await.status(), 401);
    let stored = app.store().find_client(&id).await.unwrap().unwrap();
    assert!(
        stored.secret_hash.starts_with("$argon2"),
        "a wrong secret changes nothing"
    );

    let (status, body) = status_and_json(grant(&app, &id, &secret).await).await;
    assert_eq!(status, 200, "{body}");
    let stored = app.store().find_client(&id).await.unwrap().unwrap();
    assert!(
        stored.secret_hash.starts_with("sha256$"),
        "{}",
        stored.secret_hash
    );
    assert_eq!(grant(&app, &id, &secret).await.status(), 200);
    assert_eq!(grant(&app, &id, "wrong").await.status(), 401);
    app.shutdown().await;
}

/// A failed grant with the client id and secret in Basic auth, sent with
/// `X-Forwarded-For: forwarded`.
async fn grant_from(app: &TestApp, id: &str, forwarded: &str) -> Response {
    app.http
        .post(app.url("/oauth/token"))
        .basic_auth(id, Some("wrong"))
        .header("x-forwarded-for", forwarded)
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap()
}

/// Behind a trusted reverse proxy each client is counted under the address
/// the proxy forwards, so one client's failures hold back only that client;
/// from a peer that is not trusted the header is ignored and every request
/// counts under the peer's own address.
#[tokio::test]
async fn behind_a_trusted_proxy_the_address_limit_counts_each_forwarded_client() {
    async fn spend_one_address(app: &TestApp) {
        // Two failures per client id, ten per address: five client ids
        // from 203.0.113.7 spend that address.
        for _ in 0..5 {
            let (id, _) = app.client("acme", &[]).await;
            for _ in 0..2 {
                assert_eq!(grant_from(app, &id, "203.0.113.7").await.status(), 401);
            }
        }
    }
    let trusting = TestApp::spawn_with(|c| {
        c.auth.token_attempts = 2;
        c.server.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    })
    .await;
    spend_one_address(&trusting).await;
    let (id, _) = trusting.client("acme", &[]).await;
    assert_held_back(grant_from(&trusting, &id, "203.0.113.7").await).await;
    // Another client behind the same proxy is not held back.
    assert_eq!(
        grant_from(&trusting, &id, "198.51.100.2").await.status(),
        401
    );
    trusting.shutdown().await;

    // Not trusted: the header changes nothing, the peer's address is spent.
    let plain = TestApp::spawn_with(|c| c.auth.token_attempts = 2).await;
    spend_one_address(&plain).await;
    let (id, _) = plain.client("acme", &[]).await;
    assert_held_back(grant_from(&plain, &id, "198.51.100.2").await).await;
    plain.shutdown().await;
}

/// What needs PostgreSQL itself: several instances on one database.
mod postgres {
    use super::*;

    /// Failed attempts counted on one instance hold the client back on
    /// another, whose memory never saw them: two instances allow no more
    /// attempts than one.
    #[tokio::test]
    async fn failures_on_one_instance_hold_the_client_back_on_another() {
        let three = |c: &mut dispatch::config::Config| c.auth.token_attempts = 3;
        let first = TestApp::spawn_postgres_with(three).await;
        let second = TestApp::spawn_on(first.db.clone(), three).await;
        let (id, secret) = first.client("acme", &[]).await;
        for _ in 0..3 {
            assert_eq!(grant(&first, &id, "wrong").await.status(), 401);
        }
        assert_held_back(grant(&second, &id, &secret).await).await;
        assert_held_back(grant(&first, &id, &secret).await).await;
        // Another client is not held back on either.
        let (other, other_secret) = first.client("acme", &[]).await;
        assert_eq!(grant(&second, &other, &other_secret).await.status(), 200);
        first.shutdown().await;
        second.shutdown().await;
    }
}
