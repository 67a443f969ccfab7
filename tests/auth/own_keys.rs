//! Tokens naming a key id this server does not know (docs/api.md#tokens): they cost
//! at most one reload of the signing keys a second, for the whole server.

use super::*;

fn random_kid_token() -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(uuid::Uuid::new_v4().simple().to_string());
    let secret: [u8; 32] = rand::random();
    let claims = own_claims("acme", now(), now() + 600);
    encode(&header, &claims, &EncodingKey::from_secret(&secret)).unwrap()
}

#[tokio::test]
async fn a_flood_of_tokens_with_unknown_key_ids_reloads_the_keys_at_most_once_a_second() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let tokens = &app.running().state.tokens;
    assert_eq!(tokens.key_reloads(), 0);
    let started = std::time::Instant::now();
    for _round in 0..4 {
        let requests = (0..50).map(|_| {
            let api = api_with(&app, &random_kid_token());
            async move { api.get("/targets").await }
        });
        for r in futures::future::join_all(requests).await {
            assert_invalid_token(r).await;
        }
    }
    let elapsed = started.elapsed();
    let reloads = tokens.key_reloads();
    assert!(reloads >= 1, "an unknown key id is looked for");
    assert!(
        reloads <= 1 + elapsed.as_secs(),
        "200 unknown key ids in {elapsed:?} caused {reloads} reloads"
    );
    // The server's own tokens are unaffected.
    assert_eq!(api.get("/targets").await.status(), 200);
    app.shutdown().await;
}
