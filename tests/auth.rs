//! Authentication and authorisation (docs/api.md#authentication): the client credentials
//! grant, bearer token checks, scopes, account isolation, an external issuer
//! with a JWKS, and hashed client secrets.

mod common;

#[path = "auth/jwks_outages.rs"]
mod jwks_outages;
#[path = "auth/own_keys.rs"]
mod own_keys;
#[path = "auth/rate_limit.rs"]
mod rate_limit;
#[path = "auth/token_abuse.rs"]
mod token_abuse;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, OnceLock, RwLock,
    },
    time::Duration,
};

use axum::{extract::State, routing::get, Json, Router};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use common::{in_ms, problem::assert_problem, Api, TestApp};
use dispatch::config::ExternalIssuerConfig;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use reqwest::{Method, Response, StatusCode};
use serde_json::{json, Value};

const ALL_SCOPES: [&str; 5] = [
    "messages:read",
    "messages:write",
    "targets:read",
    "targets:write",
    "messages:receive",
];

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// How a token request authenticates the client.
enum Creds<'a> {
    Basic(&'a str, &'a str),
    Form(&'a str, &'a str),
    Both(&'a str, &'a str),
    None,
}

async fn token_request(app: &TestApp, creds: Creds<'_>, form: &[(&str, &str)]) -> Response {
    let mut fields: Vec<(String, String)> = form
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut req = app.http.post(app.url("/oauth/token"));
    match creds {
        Creds::Basic(id, secret) => req = req.basic_auth(id, Some(secret)),
        Creds::Form(id, secret) => {
            fields.push(("client_id".into(), id.into()));
            fields.push(("client_secret".into(), secret.into()));
        }
        Creds::Both(id, secret) => {
            req = req.basic_auth(id, Some(secret));
            fields.push(("client_id".into(), id.into()));
            fields.push(("client_secret".into(), secret.into()));
        }
        Creds::None => {}
    }
    req.form(&fields).send().await.unwrap()
}

async fn status_and_json(r: Response) -> (StatusCode, Value) {
    let status = r.status();
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("a JSON body, got {text:?} ({e}) with status {status}"));
    (status, body)
}

fn scope_set(scope: &Value) -> Vec<String> {
    let mut s: Vec<String> = scope
        .as_str()
        .expect("scope is a string")
        .split_whitespace()
        .map(String::from)
        .collect();
    s.sort();
    s
}

fn sorted(scopes: &[&str]) -> Vec<String> {
    let mut s: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
    s.sort();
    s
}

fn api_with(app: &TestApp, token: &str) -> Api {
    Api {
        base: app.base.clone(),
        http: app.http.clone(),
        token: token.to_string(),
    }
}

fn www_authenticate(r: &Response) -> String {
    r.headers()
        .get("www-authenticate")
        .expect("a WWW-Authenticate header")
        .to_str()
        .unwrap()
        .to_string()
}

/// A 401 for a token that was sent but is not valid (RFC 6750 §3.1).
async fn assert_invalid_token(r: Response) {
    assert_eq!(r.status(), 401);
    let challenge = www_authenticate(&r);
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    assert!(
        challenge.contains(r#"error="invalid_token""#),
        "{challenge}"
    );
    assert_problem(r, 401).await;
}

async fn webhook(api: &Api) -> String {
    api.webhook("https://example.com/hook").await["targetId"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn scheduled_message(api: &Api, target_id: &str) -> Value {
    api.schedule(target_id, &in_ms(3_600_000), "hello").await
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Signs a token with this server's own HS256 key, as the server would.
async fn own_token(app: &TestApp, claims: Value) -> String {
    let keys = app.store().signing_keys().await.unwrap();
    let key = keys.first().expect("a signing key");
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(key.kid.clone());
    encode(&header, &claims, &EncodingKey::from_secret(&key.secret)).unwrap()
}

fn own_claims(account: &str, iat: i64, exp: i64) -> Value {
    json!({
        "iss": "dispatch", "aud": "dispatch", "sub": "dc_0000000000000000",
        "account": account, "scope": ALL_SCOPES.join(" "),
        "iat": iat, "nbf": iat, "exp": exp,
        "jti": uuid::Uuid::new_v4().to_string(),
    })
}

// ---------------------------------------------------------------------------
// POST /oauth/token
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_client_gets_a_bearer_token_with_http_basic_credentials() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &[]).await;
    let r = token_request(
        &app,
        Creds::Basic(&id, &secret),
        &[("grant_type", "client_credentials")],
    )
    .await;
    let cache = r
        .headers()
        .get("cache-control")
        .map(|v| v.to_str().unwrap().to_string());
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(cache.as_deref(), Some("no-store"));
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    assert_eq!(scope_set(&body["scope"]), sorted(&ALL_SCOPES));
    let token = body["access_token"].as_str().unwrap();
    let api = api_with(&app, token);
    assert_eq!(api.get("/targets").await.status(), 200);
    // The auth scheme is case-insensitive (RFC 9110 §11.1).
    let r = app
        .http
        .get(app.url("/targets"))
        .header("authorization", format!("bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    app.shutdown().await;
}

#[tokio::test]
async fn a_client_gets_a_bearer_token_with_form_credentials() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &[]).await;
    let r = token_request(
        &app,
        Creds::Form(&id, &secret),
        &[("grant_type", "client_credentials")],
    )
    .await;
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    let api = api_with(&app, body["access_token"].as_str().unwrap());
    assert_eq!(api.get("/messages").await.status(), 200);
    app.shutdown().await;
}

#[tokio::test]
async fn a_wrong_secret_is_refused_with_invalid_client() {
    let app = TestApp::spawn().await;
    let (id, _) = app.client("acme", &[]).await;
    for creds in [Creds::Basic(&id, "wrong"), Creds::Form(&id, "wrong")] {
        let r = token_request(&app, creds, &[("grant_type", "client_credentials")]).await;
        let (status, body) = status_and_json(r).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"], "invalid_client");
        assert!(body.get("access_token").is_none());
    }
    app.shutdown().await;
}

#[tokio::test]
async fn an_unknown_or_absent_client_is_refused_with_invalid_client() {
    let app = TestApp::spawn().await;
    let (_, secret) = app.client("acme", &[]).await;
    for creds in [
        Creds::Basic("dc_ffffffffffffffff", &secret),
        Creds::Form("dc_ffffffffffffffff", &secret),
        Creds::None,
    ] {
        let r = token_request(&app, creds, &[("grant_type", "client_credentials")]).await;
        let (status, body) = status_and_json(r).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"], "invalid_client");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_grant_type_other_than_client_credentials_is_unsupported() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &[]).await;
    for grant in ["password", "authorization_code", "refresh_token"] {
        let r = token_request(&app, Creds::Basic(&id, &secret), &[("grant_type", grant)]).await;
        let (status, body) = status_and_json(r).await;
        assert_eq!(status, 400, "{grant}: {body}");
        assert_eq!(body["error"], "unsupported_grant_type", "{grant}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_token_request_without_grant_type_is_an_invalid_request() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &[]).await;
    let r = token_request(
        &app,
        Creds::Basic(&id, &secret),
        &[("scope", "targets:read")],
    )
    .await;
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "invalid_request");
    // The grant is a form, not JSON (RFC 6749 §4.4.2).
    let r = app
        .http
        .post(app.url("/oauth/token"))
        .basic_auth(&id, Some(&secret))
        .json(&json!({"grant_type": "client_credentials"}))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "invalid_request");
    app.shutdown().await;
}

#[tokio::test]
async fn credentials_by_both_basic_and_form_fields_are_an_invalid_request() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &[]).await;
    let r = token_request(
        &app,
        Creds::Both(&id, &secret),
        &[("grant_type", "client_credentials")],
    )
    .await;
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "invalid_request");
    assert!(body.get("access_token").is_none());
    app.shutdown().await;
}

#[tokio::test]
async fn an_unknown_scope_is_refused_with_invalid_scope() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &[]).await;
    for scope in ["admin", "messages:read admin", "messages:delete"] {
        let r = token_request(
            &app,
            Creds::Basic(&id, &secret),
            &[("grant_type", "client_credentials"), ("scope", scope)],
        )
        .await;
        let (status, body) = status_and_json(r).await;
        assert_eq!(status, 400, "{scope}: {body}");
        assert_eq!(body["error"], "invalid_scope", "{scope}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_scope_the_client_was_not_granted_is_refused_with_invalid_scope() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &["messages:read"]).await;
    for scope in ["messages:write", "messages:read targets:read"] {
        let r = token_request(
            &app,
            Creds::Basic(&id, &secret),
            &[("grant_type", "client_credentials"), ("scope", scope)],
        )
        .await;
        let (status, body) = status_and_json(r).await;
        assert_eq!(status, 400, "{scope}: {body}");
        assert_eq!(body["error"], "invalid_scope", "{scope}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_client_asking_for_no_scope_gets_all_the_scopes_it_was_created_with() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.client("acme", &["messages:read", "targets:read"]).await;
    let r = token_request(
        &app,
        Creds::Basic(&id, &secret),
        &[("grant_type", "client_credentials")],
    )
    .await;
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        scope_set(&body["scope"]),
        sorted(&["messages:read", "targets:read"])
    );
    let api = api_with(&app, body["access_token"].as_str().unwrap());
    assert_eq!(api.get("/messages").await.status(), 200);
    assert_eq!(api.get("/targets").await.status(), 200);
    let r = api
        .post(
            "/targets",
            json!({"name": "t", "type": "webhook", "config": {"url": "https://example.com/"}}),
        )
        .await;
    assert_problem(r, 403).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_narrower_requested_scope_is_honoured_in_the_token() {
    let app = TestApp::spawn().await;
    let owner = app.api("acme").await;
    let target_id = webhook(&owner).await;
    let (id, secret) = app.client("acme", &[]).await;
    let r = token_request(
        &app,
        Creds::Basic(&id, &secret),
        &[
            ("grant_type", "client_credentials"),
            ("scope", "messages:write"),
        ],
    )
    .await;
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["scope"], "messages:write");
    let api = api_with(&app, body["access_token"].as_str().unwrap());
    assert_problem(api.get("/messages").await, 403).await;
    assert_problem(api.get("/targets").await, 403).await;
    let r = api
        .post(
            "/messages",
            json!({"targetId": target_id, "deliveryTime": in_ms(3_600_000), "payload": "x"}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Bearer token checks
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_request_without_a_token_is_refused_with_a_bare_bearer_challenge() {
    let app = TestApp::spawn().await;
    for (method, path) in [
        (Method::GET, "/targets"),
        (Method::POST, "/targets"),
        (Method::GET, "/messages"),
        (Method::POST, "/messages"),
        (Method::GET, "/targets/DI-T-aabbcc1122"),
        (
            Method::GET,
            "/messages/DI-M-11111111-2222-7333-8444-555555555555",
        ),
    ] {
        let r = app
            .http
            .request(method.clone(), app.url(path))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{method} {path}");
        let challenge = www_authenticate(&r);
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        assert!(!challenge.contains("error="), "{challenge}");
        assert_problem(r, 401).await;
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_garbage_token_is_refused_with_invalid_token() {
    let app = TestApp::spawn().await;
    for token in [
        "garbage",
        "a.b.c",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl",
    ] {
        let api = api_with(&app, token);
        assert_invalid_token(api.get("/targets").await).await;
    }
    // An unsigned token (alg none) carrying valid-looking claims.
    let claims = own_claims("acme", now(), now() + 600);
    let unsigned = format!(
        "{}.{}.",
        B64URL.encode(br#"{"alg":"none","typ":"JWT"}"#),
        B64URL.encode(claims.to_string())
    );
    for token in [unsigned.as_str(), &format!("{unsigned}c2ln")] {
        let api = api_with(&app, token);
        assert_invalid_token(api.get("/targets").await).await;
    }
    app.shutdown().await;
}

#[tokio::test]
async fn an_expired_token_is_refused_with_invalid_token() {
    let app = TestApp::spawn().await;
    // The same signing, in date: accepted, so the refusal below is the expiry.
    let valid = own_token(&app, own_claims("acme", now(), now() + 600)).await;
    assert_eq!(api_with(&app, &valid).get("/targets").await.status(), 200);

    let expired = own_token(&app, own_claims("acme", now() - 7200, now() - 3600)).await;
    assert_invalid_token(api_with(&app, &expired).get("/targets").await).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_token_with_a_forged_signature_or_foreign_audience_is_refused() {
    let app = TestApp::spawn().await;
    let keys = app.store().signing_keys().await.unwrap();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(keys[0].kid.clone());
    let forged = encode(
        &header,
        &own_claims("acme", now(), now() + 600),
        &EncodingKey::from_secret(b"not the server's key, but long enough"),
    )
    .unwrap();
    assert_invalid_token(api_with(&app, &forged).get("/targets").await).await;

    let mut claims = own_claims("acme", now(), now() + 600);
    claims["aud"] = json!("someone-else");
    let wrong_aud = own_token(&app, claims).await;
    assert_invalid_token(api_with(&app, &wrong_aud).get("/targets").await).await;

    let mut claims = own_claims("acme", now(), now() + 600);
    claims["iss"] = json!("someone-else");
    let wrong_iss = own_token(&app, claims).await;
    assert_invalid_token(api_with(&app, &wrong_iss).get("/targets").await).await;
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Scopes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn targets_need_targets_read_to_get_and_targets_write_for_every_other_method() {
    let app = TestApp::spawn().await;
    let owner = app.api("acme").await;
    let target_id = webhook(&owner).await;
    let one = format!("/targets/{target_id}");

    let read = api_with(&app, &app.token("acme", &["targets:read"]).await);
    assert_eq!(read.get("/targets").await.status(), 200);
    assert_eq!(read.get(&one).await.status(), 200);
    let create = json!({"name": "t", "type": "webhook", "config": {"url": "https://example.com/"}});
    assert_problem(read.post("/targets", create.clone()).await, 403).await;
    assert_problem(read.patch(&one, json!({"name": "renamed"})).await, 403).await;
    assert_problem(read.post_empty(&format!("{one}/disable")).await, 403).await;
    assert_problem(read.post_empty(&format!("{one}/enable")).await, 403).await;
    assert_problem(read.delete(&one).await, 403).await;

    let write = api_with(&app, &app.token("acme", &["targets:write"]).await);
    assert_problem(write.get("/targets").await, 403).await;
    assert_problem(write.get(&one).await, 403).await;
    assert_eq!(write.post("/targets", create).await.status(), 201);
    assert_eq!(
        write.patch(&one, json!({"name": "renamed"})).await.status(),
        200
    );

    // Scopes of the other resource do not help.
    let messages = api_with(
        &app,
        &app.token("acme", &["messages:read", "messages:write"])
            .await,
    );
    assert_problem(messages.get("/targets").await, 403).await;

    // Nothing the refused requests asked for happened.
    let t: Value = owner.get(&one).await.json().await.unwrap();
    assert_eq!(t["name"], "renamed");
    assert_eq!(t["enabled"], true);
    app.shutdown().await;
}

#[tokio::test]
async fn messages_need_messages_read_to_get_and_messages_write_for_every_other_method() {
    let app = TestApp::spawn().await;
    let owner = app.api("acme").await;
    let target_id = webhook(&owner).await;
    let m = scheduled_message(&owner, &target_id).await;
    let one = format!("/messages/{}", m["messageId"].as_str().unwrap());
    let body = json!({"targetId": target_id, "deliveryTime": in_ms(3_600_000), "payload": "x"});

    let read = api_with(&app, &app.token("acme", &["messages:read"]).await);
    assert_eq!(read.get("/messages").await.status(), 200);
    assert_eq!(read.get(&one).await.status(), 200);
    assert_eq!(read.get(&format!("{one}/attempts")).await.status(), 200);
    assert_problem(read.post("/messages", body.clone()).await, 403).await;
    assert_problem(read.post_empty(&format!("{one}/cancel")).await, 403).await;
    let reschedule = json!({"deliveryTime": in_ms(7_200_000)});
    assert_problem(
        read.post(&format!("{one}/reschedule"), reschedule.clone())
            .await,
        403,
    )
    .await;

    let write = api_with(&app, &app.token("acme", &["messages:write"]).await);
    assert_problem(write.get("/messages").await, 403).await;
    assert_problem(write.get(&one).await, 403).await;
    assert_problem(write.get(&format!("{one}/attempts")).await, 403).await;
    assert_eq!(write.post("/messages", body).await.status(), 201);

    let targets = api_with(
        &app,
        &app.token("acme", &["targets:read", "targets:write"]).await,
    );
    assert_problem(targets.get("/messages").await, 403).await;

    let now = owner.message(m["messageId"].as_str().unwrap()).await;
    assert_eq!(now["state"], "Scheduled");
    assert_eq!(now["deliveryTime"], m["deliveryTime"]);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Accounts
// ---------------------------------------------------------------------------

#[tokio::test]
async fn another_accounts_target_answers_404_and_is_left_alone() {
    let app = TestApp::spawn().await;
    let acme = app.api("acme").await;
    let globex = app.api("globex").await;
    let target_id = webhook(&acme).await;
    let one = format!("/targets/{target_id}");

    assert_problem(globex.get(&one).await, 404).await;
    assert_problem(globex.patch(&one, json!({"name": "stolen"})).await, 404).await;
    assert_problem(globex.post_empty(&format!("{one}/disable")).await, 404).await;
    assert_problem(globex.post_empty(&format!("{one}/enable")).await, 404).await;
    assert_problem(globex.delete(&one).await, 404).await;
    let list: Value = globex.get("/targets").await.json().await.unwrap();
    assert_eq!(list["items"], json!([]), "{list}");

    let t: Value = acme.get(&one).await.json().await.unwrap();
    assert_eq!(t["name"], "hook");
    assert_eq!(t["enabled"], true);
    app.shutdown().await;
}

#[tokio::test]
async fn another_accounts_message_answers_404_and_is_left_alone() {
    let app = TestApp::spawn().await;
    let acme = app.api("acme").await;
    let globex = app.api("globex").await;
    let target_id = webhook(&acme).await;
    let m = scheduled_message(&acme, &target_id).await;
    let id = m["messageId"].as_str().unwrap();
    let one = format!("/messages/{id}");

    let body = assert_problem(globex.get(&one).await, 404).await;
    assert!(body.get("payload").is_none(), "{body}");
    assert_problem(globex.get(&format!("{one}/attempts")).await, 404).await;
    assert_problem(globex.post_empty(&format!("{one}/cancel")).await, 404).await;
    assert_problem(
        globex
            .post(
                &format!("{one}/reschedule"),
                json!({"deliveryTime": in_ms(-1000)}),
            )
            .await,
        404,
    )
    .await;
    let list: Value = globex.get("/messages").await.json().await.unwrap();
    assert_eq!(list["items"], json!([]), "{list}");

    let now = acme.message(id).await;
    assert_eq!(now["state"], "Scheduled");
    assert_eq!(now["deliveryTime"], m["deliveryTime"]);
    assert_eq!(now["cancelledAt"], Value::Null);
    app.shutdown().await;
}

#[tokio::test]
async fn scheduling_onto_another_accounts_target_is_refused_on_target_id() {
    let app = TestApp::spawn().await;
    let acme = app.api("acme").await;
    let globex = app.api("globex").await;
    let target_id = webhook(&acme).await;
    let r = globex
        .post(
            "/messages",
            json!({"targetId": target_id, "deliveryTime": in_ms(1000), "payload": "x"}),
        )
        .await;
    let body = assert_problem(r, 400).await;
    assert_eq!(body["errors"][0]["field"], "targetId", "{body}");
    let list: Value = acme.get("/messages").await.json().await.unwrap();
    assert_eq!(list["items"], json!([]), "{list}");
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// An external issuer
// ---------------------------------------------------------------------------

const EXT_ISSUER: &str = "https://id.example.test/";
const EXT_AUDIENCE: &str = "https://dispatch.example.test";

struct SigningKeyPair {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

/// RSA key generation is slow unoptimised: one key per test binary.
fn rsa_key() -> &'static SigningKeyPair {
    static KEY: OnceLock<SigningKeyPair> = OnceLock::new();
    KEY.get_or_init(|| {
        use rsa::{pkcs1::EncodeRsaPrivateKey, traits::PublicKeyParts, RsaPrivateKey};
        let private = RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
        let pem = private
            .to_pkcs1_pem(rsa::pkcs1::LineEnding::LF)
            .unwrap()
            .to_string();
        let kid = "rsa-1".to_string();
        SigningKeyPair {
            jwk: json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": B64URL.encode(private.n().to_bytes_be()),
                "e": B64URL.encode(private.e().to_bytes_be()),
            }),
            kid,
            alg: Algorithm::RS256,
            encoding: EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
        }
    })
}

fn ec_key(kid: &str) -> SigningKeyPair {
    use p256::{elliptic_curve::sec1::ToEncodedPoint, pkcs8::EncodePrivateKey, SecretKey};
    let secret = SecretKey::random(&mut rsa::rand_core::OsRng);
    let pem = secret
        .to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
        .unwrap()
        .to_string();
    let point = secret.public_key().to_encoded_point(false);
    SigningKeyPair {
        jwk: json!({
            "kty": "EC", "use": "sig", "alg": "ES256", "crv": "P-256", "kid": kid,
            "x": B64URL.encode(point.x().unwrap()),
            "y": B64URL.encode(point.y().unwrap()),
        }),
        kid: kid.to_string(),
        alg: Algorithm::ES256,
        encoding: EncodingKey::from_ec_pem(pem.as_bytes()).unwrap(),
    }
}

/// A JWKS endpoint the test controls, counting its fetches.
#[derive(Clone)]
struct Jwks {
    keys: Arc<RwLock<Vec<Value>>>,
    fetches: Arc<AtomicUsize>,
    /// When each fetch arrived.
    fetched_at: Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
    /// While set, the endpoint answers 503.
    down: Arc<std::sync::atomic::AtomicBool>,
    /// Characters of an extra member that pads the document.
    padding: Arc<AtomicUsize>,
    url: String,
}

impl Jwks {
    async fn serve(keys: Vec<Value>) -> Self {
        async fn jwks(State(jwks): State<Jwks>) -> Result<Json<Value>, StatusCode> {
            jwks.fetched_at
                .lock()
                .unwrap()
                .push(std::time::Instant::now());
            jwks.fetches.fetch_add(1, Ordering::SeqCst);
            if jwks.down.load(Ordering::SeqCst) {
                return Err(StatusCode::SERVICE_UNAVAILABLE);
            }
            let padding = "x".repeat(jwks.padding.load(Ordering::SeqCst));
            Ok(Json(
                json!({"keys": *jwks.keys.read().unwrap(), "padding": padding}),
            ))
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let this = Self {
            keys: Arc::new(RwLock::new(keys)),
            fetches: Arc::new(AtomicUsize::new(0)),
            fetched_at: Arc::default(),
            down: Arc::default(),
            padding: Arc::default(),
            url: format!("http://{addr}/.well-known/jwks.json"),
        };
        let router = Router::new()
            .route("/.well-known/jwks.json", get(jwks))
            .with_state(this.clone());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        this
    }

    fn add(&self, jwk: Value) {
        self.keys.write().unwrap().push(jwk);
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// The time from each fetch to the next, as the issuer sees them
    /// arrive, plus `ARRIVAL_SLACK`: the server paces its fetches from when
    /// it sends them, and its first fetch also waited for a connection (the
    /// next one reuses it), so the issuer may see the second arrive a few
    /// milliseconds less than the pace after the first (998.9 ms for 1 s, seen
    /// on a loaded machine). The pace asserted is the server's.
    fn gaps(&self) -> Vec<Duration> {
        self.fetched_at
            .lock()
            .unwrap()
            .windows(2)
            .map(|w| w[1] - w[0] + ARRIVAL_SLACK)
            .collect()
    }
}

/// How much earlier than the server's pace the issuer may see a fetch
/// arrive (see `Jwks::gaps`): far less than any pace asserted.
const ARRIVAL_SLACK: Duration = Duration::from_millis(50);

async fn spawn_trusting(jwks: &Jwks) -> TestApp {
    spawn_trusting_for(jwks, Duration::from_secs(300)).await
}

/// Trusting `jwks`, whose set is fetched again after `ttl`.
async fn spawn_trusting_for(jwks: &Jwks, ttl: Duration) -> TestApp {
    let url = jwks.url.clone();
    TestApp::spawn_with(move |c| {
        c.auth.external = Some(ExternalIssuerConfig {
            issuer: EXT_ISSUER.into(),
            audience: EXT_AUDIENCE.into(),
            jwks_url: url,
            account_claim: "account".into(),
            jwks_ttl: ttl,
        });
    })
    .await
}

fn ext_claims(account: &str) -> Value {
    let now = now();
    json!({
        "iss": EXT_ISSUER, "aud": EXT_AUDIENCE, "sub": "user-42", "account": account,
        "scope": ALL_SCOPES.join(" "), "iat": now, "nbf": now, "exp": now + 600,
    })
}

fn ext_token(key: &SigningKeyPair, claims: &Value) -> String {
    let mut header = Header::new(key.alg);
    header.kid = Some(key.kid.clone());
    encode(&header, claims, &key.encoding).unwrap()
}

/// Checks that `token` acts for `account`: it sees the account's target,
/// another account's target answers 404, and what it creates is the account's.
async fn assert_acts_for(app: &TestApp, token: &str, account_target: &str, foreign_target: &str) {
    let api = api_with(app, token);
    let r = api.get(&format!("/targets/{account_target}")).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    assert_problem(api.get(&format!("/targets/{foreign_target}")).await, 404).await;
    let created = api.webhook("https://example.com/ext").await;
    let list: Value = api.get("/targets").await.json().await.unwrap();
    let ids: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["targetId"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&account_target), "{list}");
    assert!(
        ids.contains(&created["targetId"].as_str().unwrap()),
        "{list}"
    );
    assert!(!ids.contains(&foreign_target), "{list}");
}

#[tokio::test]
async fn an_external_rs256_token_is_accepted_for_the_account_it_names() {
    let key = rsa_key();
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let acme = webhook(&app.api("acme").await).await;
    let globex = webhook(&app.api("globex").await).await;
    let token = ext_token(key, &ext_claims("acme"));
    assert_acts_for(&app, &token, &acme, &globex).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_external_es256_token_is_accepted_for_the_account_it_names() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let acme = webhook(&app.api("acme").await).await;
    let globex = webhook(&app.api("globex").await).await;
    let token = ext_token(&key, &ext_claims("globex"));
    assert_acts_for(&app, &token, &globex, &acme).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_external_token_keeps_to_its_scopes() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let mut claims = ext_claims("acme");
    claims["scope"] = json!("targets:read");
    let api = api_with(&app, &ext_token(&key, &claims));
    assert_eq!(api.get("/targets").await.status(), 200);
    assert_problem(api.get("/messages").await, 403).await;
    let create = json!({"name": "t", "type": "webhook", "config": {"url": "https://example.com/"}});
    assert_problem(api.post("/targets", create).await, 403).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_external_token_from_another_issuer_is_refused() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let good = ext_token(&key, &ext_claims("acme"));
    assert_eq!(api_with(&app, &good).get("/targets").await.status(), 200);
    let mut claims = ext_claims("acme");
    claims["iss"] = json!("https://evil.example.test/");
    let api = api_with(&app, &ext_token(&key, &claims));
    assert_invalid_token(api.get("/targets").await).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_external_token_for_another_audience_is_refused() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let mut claims = ext_claims("acme");
    claims["aud"] = json!("https://another-api.example.test");
    let api = api_with(&app, &ext_token(&key, &claims));
    assert_invalid_token(api.get("/targets").await).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_expired_external_token_is_refused() {
    let key = rsa_key();
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let mut claims = ext_claims("acme");
    claims["iat"] = json!(now() - 7200);
    claims["nbf"] = json!(now() - 7200);
    claims["exp"] = json!(now() - 600);
    let api = api_with(&app, &ext_token(key, &claims));
    assert_invalid_token(api.get("/targets").await).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_external_token_not_yet_valid_is_refused() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let mut claims = ext_claims("acme");
    claims["nbf"] = json!(now() + 600);
    claims["exp"] = json!(now() + 1200);
    let api = api_with(&app, &ext_token(&key, &claims));
    assert_invalid_token(api.get("/targets").await).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_external_token_signed_with_an_unknown_key_is_refused() {
    let known = ec_key("ec-1");
    let jwks = Jwks::serve(vec![known.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    // A key id the JWKS does not hold.
    let stranger = ec_key("ec-unknown");
    let api = api_with(&app, &ext_token(&stranger, &ext_claims("acme")));
    assert_invalid_token(api.get("/targets").await).await;
    // A known key id on a token some other key signed.
    let impostor = SigningKeyPair {
        kid: known.kid.clone(),
        ..ec_key("ignored")
    };
    let api = api_with(&app, &ext_token(&impostor, &ext_claims("acme")));
    assert_invalid_token(api.get("/targets").await).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_external_token_without_the_account_claim_is_refused() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let mut claims = ext_claims("acme");
    claims.as_object_mut().unwrap().remove("account");
    let api = api_with(&app, &ext_token(&key, &claims));
    assert_invalid_token(api.get("/targets").await).await;
    app.shutdown().await;
}

#[tokio::test]
async fn the_jwks_is_cached_and_fetched_again_when_a_token_names_a_new_key() {
    let old = ec_key("2026-01");
    let jwks = Jwks::serve(vec![old.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let old_token = ext_token(&old, &ext_claims("acme"));
    assert_eq!(
        api_with(&app, &old_token).get("/targets").await.status(),
        200
    );
    assert_eq!(
        api_with(&app, &old_token).get("/targets").await.status(),
        200
    );
    assert_eq!(jwks.fetches(), 1, "a known key is served from the cache");

    // The issuer rotates: a new key appears in its JWKS.
    let new = ec_key("2026-02");
    jwks.add(new.jwk.clone());
    // The set is fetched again for a token naming the new key, though not
    // more than once a second (a flood of unknown kids must not become a
    // flood of JWKS requests): until then the new key is refused.
    let new_token = ext_token(&new, &ext_claims("acme"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = api_with(&app, &new_token).get("/targets").await;
        if r.status() == 200 {
            break;
        }
        assert_invalid_token(r).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new key was not fetched"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(jwks.fetches(), 2, "one fetch for the new key");
    let gap = jwks.gaps()[0];
    assert!(gap >= Duration::from_secs(1), "fetched again after {gap:?}");
    // The old key is still in the set and still works.
    assert_eq!(
        api_with(&app, &old_token).get("/targets").await.status(),
        200
    );
    app.shutdown().await;
}

#[tokio::test]
async fn tokens_naming_unknown_keys_do_not_flood_the_jwks_endpoint() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let strangers: Vec<String> = (0..10)
        .map(|i| ext_token(&ec_key(&format!("unknown-{i}")), &ext_claims("acme")))
        .collect();
    let good = ext_token(&key, &ext_claims("acme"));
    assert_eq!(api_with(&app, &good).get("/targets").await.status(), 200);
    let started = std::time::Instant::now();
    for token in &strangers {
        assert_invalid_token(api_with(&app, token).get("/targets").await).await;
    }
    // At most one refetch per second of unknown key ids.
    let allowed = 1 + started.elapsed().as_secs() as usize + 1;
    assert!(
        jwks.fetches() <= allowed,
        "10 unknown key ids caused {} JWKS fetches in {:?}",
        jwks.fetches(),
        started.elapsed()
    );
    assert_eq!(api_with(&app, &good).get("/targets").await.status(), 200);
    app.shutdown().await;
}

#[tokio::test]
async fn own_tokens_still_work_when_an_external_issuer_is_trusted() {
    let key = ec_key("ec-1");
    let jwks = Jwks::serve(vec![key.jwk.clone()]).await;
    let app = spawn_trusting(&jwks).await;
    let api = app.api("acme").await;
    assert_eq!(api.get("/targets").await.status(), 200);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Client secrets
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_client_created_on_the_command_line_has_only_its_secret_hash_stored() {
    // The command runs before the server: the embedded store serves one process.
    let db = std::sync::Arc::new(common::TestDb::new().await);
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .args([
            "clients",
            "create",
            "--account",
            "acme",
            "--name",
            "ci",
            "--scope",
            "messages:write",
            "--scope",
            "targets:read",
        ])
        .env("DISPATCH_DATABASE__URL", &db.url)
        .env("DATABASE_URL", &db.url)
        .env("DISPATCH_LOG__FORMAT", "pretty")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "clients create prints JSON: {e}: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    let client_id = printed["clientId"].as_str().unwrap();
    let secret = printed["clientSecret"].as_str().unwrap();
    assert_eq!(printed["account"], "acme");
    assert_eq!(printed["scopes"], json!(["messages:write", "targets:read"]));
    assert!(secret.len() >= 32, "a secret of some strength: {secret}");

    let app = TestApp::spawn_on(db, |_| {}).await;
    let stored = app
        .store()
        .find_client(client_id)
        .await
        .unwrap()
        .expect("the client is stored");
    assert!(
        !format!("{stored:?}").contains(secret),
        "the secret is stored: {stored:?}"
    );
    let hash = stored.secret_hash;
    assert!(hash.starts_with("sha256$"), "a hash of the secret: {hash}");

    // The printed secret is the one that works.
    let r = token_request(
        &app,
        Creds::Basic(client_id, secret),
        &[("grant_type", "client_credentials")],
    )
    .await;
    let (status, body) = status_and_json(r).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        scope_set(&body["scope"]),
        sorted(&["messages:write", "targets:read"])
    );
    app.shutdown().await;
}
