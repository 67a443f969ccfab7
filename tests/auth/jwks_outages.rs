//! An external issuer's JWKS endpoint failing or misbehaving: cached keys
//! keep working while it is down, fetches back off, and an oversized
//! document is refused.

use super::*;

#[tokio::test]
async fn tokens_still_validate_with_cached_keys_while_the_issuer_is_down_and_fetches_back_off() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting_for(&jwks, Duration::from_millis(100)).await;
    let api = api_with(&app, &ext_token(&key, &ext_claims("acme")));
    assert_eq!(api.get("/targets").await.status(), 200);
    assert_eq!(jwks.fetches(), 1);

    jwks.down.store(true, Ordering::SeqCst);
    // The set is stale after 100 ms: requests keep coming, each served by
    // the cached key, until two fetches have failed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while jwks.fetches() < 3 {
        let r = api.get("/targets").await;
        assert_eq!(
            r.status(),
            200,
            "a cached key serves while the issuer is down"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} fetches in 20 s",
            jwks.fetches()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Fetched again no sooner than a second after the last success, and
    // after a failure no sooner than twice that: the fetches back off.
    let gaps = jwks.gaps();
    assert!(gaps[0] >= Duration::from_secs(1), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_secs(2), "{gaps:?}");
    // A key the cache does not know waits for no fetch during the back-off.
    let stranger = ec_key("ec-2");
    jwks.add(stranger.jwk.clone());
    let r = api_with(&app, &ext_token(&stranger, &ext_claims("acme")))
        .get("/targets")
        .await;
    assert_invalid_token(r).await;
    assert_eq!(jwks.fetches(), 3, "no fetch during the back-off");
    app.shutdown().await;
}

#[tokio::test]
async fn a_jwks_over_256_kib_is_refused() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    jwks.padding.store(300 * 1024, Ordering::SeqCst);
    let app = spawn_trusting(&jwks).await;
    let api = api_with(&app, &ext_token(&key, &ext_claims("acme")));
    assert_invalid_token(api.get("/targets").await).await;
    assert_eq!(jwks.fetches(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn a_jwks_just_under_the_limit_is_accepted() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    jwks.padding.store(250 * 1024, Ordering::SeqCst);
    let app = spawn_trusting(&jwks).await;
    let api = api_with(&app, &ext_token(&key, &ext_claims("acme")));
    assert_eq!(api.get("/targets").await.status(), 200);
    app.shutdown().await;
}
