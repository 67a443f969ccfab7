//! Tenant safety on the outbound side (docs/api.md#private-networks): a secret travels only
//! with its address, every address an account controls passes the
//! private-network guard at creation, at change and at every connection,
//! no target acts with the server's own AWS identity, and headers and
//! strings are bounded. Each test plays a hostile or careless account.

mod common;

use std::{net::IpAddr, time::Duration};

use common::{in_ms, receiver::Receiver, Api, TestApp};
use dispatch::delivery::resolver::Resolver;
use reqwest::Response;
use serde_json::{json, Value};

async fn status_and_body(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A 400 problem naming exactly `fields`, in order.
async fn assert_fields(r: Response, fields: &[&str]) -> Value {
    let (status, body) = status_and_body(r).await;
    assert_eq!(status, 400, "{body}");
    let named: Vec<&str> = body["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["field"].as_str())
        .collect();
    assert_eq!(named, fields, "{body}");
    body
}

async fn created(r: Response) -> Value {
    let (status, body) = status_and_body(r).await;
    assert_eq!(status, 201, "{body}");
    body
}

fn id(v: &Value) -> String {
    v["targetId"].as_str().unwrap().to_string()
}

/// Schedules a message due now and waits until it settles in `state`.
async fn deliver(api: &Api, target_id: &str, state: &str) -> Value {
    let m = api.schedule(target_id, &in_ms(0), "ping").await;
    let id = m["messageId"].as_str().unwrap();
    api.wait_for_state(id, state, Duration::from_secs(10)).await
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The names these tests write, answered by a resolver the test controls
/// (the machine's own DNS plays no part): `inside.test` answers loopback,
/// where the tests' receivers listen, so a connection the guard let through
/// would be seen; `private.test` a private address, `mixed.test` a public
/// and a private one, `public.test` only public ones (never connected to).
fn names() -> Resolver {
    Resolver::fixed([
        ("inside.test", vec![ip("127.0.0.1")]),
        ("private.test", vec![ip("10.0.0.5")]),
        ("mixed.test", vec![ip("93.184.216.34"), ip("192.168.1.20")]),
        (
            "public.test",
            vec![ip("93.184.216.34"), ip("2606:4700::1111")],
        ),
    ])
}

/// The addresses `names()` answers that must never appear in an error.
const ANSWERS: [&str; 5] = ["127.0.0.1", "10.0.0.5", "192.168", "93.184", "2606:"];

/// Stores a target as it is, past the checks of the API: what a target
/// whose name resolved to a public address at creation looks like once its
/// DNS answer has changed.
async fn stored_directly(app: &TestApp, account: &str, kind: &str, config: Value) -> String {
    let spec =
        dispatch::wire::target::parse(&json!({"name": "stored", "type": kind, "config": config}))
            .expect("a well-formed target");
    let account = common::account(account);
    app.store().ensure_account(&account).await.unwrap();
    let t = dispatch::store::insert_new_target(
        app.store().as_ref(),
        &account,
        &spec,
        dispatch::clock::Clock::now(&dispatch::clock::SystemClock),
    )
    .await
    .unwrap()
    .unwrap();
    t.id.to_string()
}

// ---------------------------------------------------------------------------
// A secret travels with its address
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_new_url_without_the_header_values_is_refused_and_the_key_never_leaves() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let owner = Receiver::start().await;
    let attacker = Receiver::start().await;
    let t = created(
        api.post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {
                "url": owner.url("/hook"), "headers": {"X-Api-Key": "owner-key"}}}),
        )
        .await,
    )
    .await;
    let one = format!("/targets/{}", id(&t));
    // Left out, or echoed back masked: both refused, naming the header.
    for patch in [
        json!({"config": {"url": attacker.url("/steal")}}),
        json!({"config": {"url": attacker.url("/steal"), "headers": {"X-Api-Key": "***"}}}),
    ] {
        assert_fields(api.patch(&one, patch).await, &["config.headers.X-Api-Key"]).await;
    }
    let shown: Value = api.get(&one).await.json().await.unwrap();
    assert_eq!(shown["config"]["url"], owner.url("/hook"));
    let got = deliver(&api, &id(&t), "Delivered").await;
    assert_eq!(got["state"], "Delivered");
    assert_eq!(attacker.count(), 0);
    assert_eq!(
        owner.received()[0].header("x-api-key").as_deref(),
        Some("owner-key")
    );

    // Another path on the same origin keeps the key; a new origin with the
    // header sent again in full takes the new value.
    let p = api
        .patch(&one, json!({"config": {"url": owner.url("/other")}}))
        .await;
    assert_eq!(p.status(), 200);
    deliver(&api, &id(&t), "Delivered").await;
    let last = owner.received().pop().unwrap();
    assert_eq!(last.path, "/other");
    assert_eq!(last.header("x-api-key").as_deref(), Some("owner-key"));
    let p = api
        .patch(
            &one,
            json!({"config": {"url": attacker.url("/new"), "headers": {"X-Api-Key": "own-key"}}}),
        )
        .await;
    assert_eq!(p.status(), 200);
    deliver(&api, &id(&t), "Delivered").await;
    assert_eq!(
        attacker.received()[0].header("x-api-key").as_deref(),
        Some("own-key")
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_new_token_url_or_aws_address_needs_its_secret_sent_again() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let hook = created(
        api.post(
            "/targets",
            json!({"name": "h", "type": "webhook", "config": {
                "url": "https://example.com/",
                "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example.com/token",
                         "clientId": "cid", "clientSecret": "oauth-secret"}}}),
        )
        .await,
    )
    .await;
    let one = format!("/targets/{}", id(&hook));
    for patch in [
        json!({"config": {"auth": {"tokenUrl": "https://evil.example.com/token"}}}),
        json!({"config": {"auth": {"tokenUrl": "https://evil.example.com/token", "clientSecret": "***"}}}),
        json!({"config": {"auth": {"tokenUrl": "http://id.example.com/token"}}}),
        json!({"config": {"auth": {"tokenUrl": "https://id.example.com:8443/token"}}}),
    ] {
        assert_fields(api.patch(&one, patch).await, &["config.auth.clientSecret"]).await;
    }
    // Only the path changed: the secret is kept.
    let p = api
        .patch(
            &one,
            json!({"config": {"auth": {"tokenUrl": "https://id.example.com/oauth2/token"}}}),
        )
        .await;
    assert_eq!(p.status(), 200);

    let queue = created(
        api.post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {
                "queueUrl": "https://sqs.eu-north-1.amazonaws.com/123456789012/orders", "region": "eu-north-1",
                "credentials": {"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "aws-secret"}}}),
        )
        .await,
    )
    .await;
    let q = format!("/targets/{}", id(&queue));
    for patch in [
        json!({"config": {"endpointUrl": "https://evil.example.com/"}}),
        json!({"config": {"region": "us-east-1"}}),
        json!({"config": {"region": "us-east-1", "credentials": {"secretAccessKey": "***"}}}),
    ] {
        assert_fields(
            api.patch(&q, patch).await,
            &["config.credentials.secretAccessKey"],
        )
        .await;
    }
    let stored = app
        .store()
        .get_target(&common::account("acme"), &id(&queue).parse().unwrap())
        .await
        .unwrap()
        .unwrap()
        .config
        .to_stored_json();
    assert_eq!(stored["region"], "eu-north-1");
    assert_eq!(stored["endpointUrl"], Value::Null);
    assert_eq!(stored["credentials"]["secretAccessKey"], "aws-secret");
    let p = api
        .patch(
            &q,
            json!({"config": {"region": "us-east-1", "credentials": {"secretAccessKey": "new-secret"}}}),
        )
        .await;
    assert_eq!(p.status(), 200);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// The private-network guard, for every address
// ---------------------------------------------------------------------------

/// Private networks refused (the default outside the tests), names
/// resolved by `names`.
fn guarded(names: &Resolver) -> impl FnOnce(&mut dispatch::config::Config) + '_ {
    |c| {
        c.webhook.allow_private_networks = false;
        c.resolver = names.clone();
    }
}

#[tokio::test]
async fn every_address_an_account_controls_is_refused_on_private_networks() {
    let names = names();
    let app = TestApp::spawn_with(guarded(&names)).await;
    let api = app.api("acme").await;
    let creds = json!({"accessKeyId": "AK", "secretAccessKey": "SK"});
    let cases = [
        (
            json!({"name": "h", "type": "webhook", "config": {"url": "http://localhost:9/hook"}}),
            "config.url",
        ),
        (
            json!({"name": "h", "type": "webhook", "config": {"url": "https://public.test/",
                "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "http://10.0.0.5/token",
                         "clientId": "c", "clientSecret": "s"}}}),
            "config.auth.tokenUrl",
        ),
        // Names, judged by what they resolve to.
        (
            json!({"name": "h", "type": "webhook", "config": {"url": "https://private.test/hook"}}),
            "config.url",
        ),
        (
            json!({"name": "h", "type": "webhook", "config": {"url": "https://public.test/",
                "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://inside.test/token",
                         "clientId": "c", "clientSecret": "s"}}}),
            "config.auth.tokenUrl",
        ),
        (
            json!({"name": "q", "type": "sqs", "config": {"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
                "region": "us-east-1", "endpointUrl": "https://mixed.test/", "credentials": creds}}),
            "config.endpointUrl",
        ),
        (
            json!({"name": "q", "type": "sqs", "config": {"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
                "region": "us-east-1", "endpointUrl": "http://10.0.0.5:9200/", "credentials": creds}}),
            "config.endpointUrl",
        ),
        (
            json!({"name": "t", "type": "sns", "config": {"topicArn": "arn:aws:sns:us-east-1:123456789012:t",
                "region": "us-east-1", "endpointUrl": "http://[::ffff:169.254.169.254]/", "credentials": creds}}),
            "config.endpointUrl",
        ),
        (
            json!({"name": "t", "type": "sns", "config": {"topicArn": "arn:aws:sns:us-east-1:123456789012:t",
                "region": "us-east-1", "endpointUrl": "http://[64:ff9b::a00:5]/", "credentials": creds}}),
            "config.endpointUrl",
        ),
        (
            json!({"name": "h", "type": "webhook", "config": {"url": "http://[2002:7f00:1::1]/"}}),
            "config.url",
        ),
    ];
    for (body, field) in cases {
        let problem = assert_fields(api.post("/targets", body.clone()).await, &[field]).await;
        // The answer names the field, never an address a name resolved to.
        let text = problem.to_string();
        for answer in ANSWERS.iter().chain(&["::1"]) {
            assert!(!text.contains(answer), "{text}");
        }
    }
    let list: Value = api.get("/targets").await.json().await.unwrap();
    assert_eq!(list["items"], json!([]));

    // Public addresses, written or resolved, are accepted; a change onto a
    // private address is refused the same way, and changes nothing.
    let t = created(
        api.post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
                "region": "us-east-1", "endpointUrl": "https://93.184.216.34/", "credentials": creds}}),
        )
        .await,
    )
    .await;
    let one = format!("/targets/{}", id(&t));
    for endpoint in ["http://127.0.0.1:4566/", "https://private.test/"] {
        assert_fields(
            api.patch(
                &one,
                json!({"config": {"endpointUrl": endpoint, "credentials": creds}}),
            )
            .await,
            &["config.endpointUrl"],
        )
        .await;
    }
    let shown: Value = api.get(&one).await.json().await.unwrap();
    assert_eq!(shown["config"]["endpointUrl"], "https://93.184.216.34/");
    let p = api
        .patch(
            &one,
            json!({"config": {"endpointUrl": "https://public.test/", "credentials": creds}}),
        )
        .await;
    assert_eq!(p.status(), 200, "{:?}", p.text().await);
    let hook = created(
        api.post(
            "/targets",
            json!({"name": "h", "type": "webhook", "config": {"url": "https://public.test/hook"}}),
        )
        .await,
    )
    .await;
    assert_eq!(hook["config"]["url"], "https://public.test/hook");
    app.shutdown().await;
}

/// Delivers one message to `target_id` and checks it was refused by the
/// guard at once, naming `host` and, when it is a name, none of the
/// addresses it resolved to.
async fn refused_at_connection(api: &Api, target_id: &str, host: &str, by_name: bool) {
    let m = deliver(api, target_id, "DeadLetter").await;
    let attempts = api.attempts(m["messageId"].as_str().unwrap()).await;
    assert_eq!(
        attempts.len(),
        1,
        "refused at once, not retried: {attempts:?}"
    );
    assert_eq!(attempts[0]["outcome"], "NonRetryableFailure");
    let error = attempts[0]["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("{host} is not a public address")),
        "{host}: {error}"
    );
    if by_name {
        for answer in ANSWERS.iter().chain(&["::1"]) {
            assert!(!error.contains(answer), "{error}");
        }
    }
}

#[tokio::test]
async fn a_name_that_resolves_inside_at_connection_time_is_refused_and_not_reported() {
    let names = names();
    let app = TestApp::spawn_with(guarded(&names)).await;
    let api = app.api("acme").await;
    // The receiver listens on loopback, where `inside.test` and `localhost`
    // lead: had the guard let a connection through, it would count it.
    let rx = Receiver::start().await;
    let port = rx.addr.port();
    let creds = json!({"accessKeyId": "AK", "secretAccessKey": "SK"});
    // (kind, config as stored past the API's check, the host refused, whether it is a name)
    let cases = [
        (
            "webhook",
            json!({"url": format!("http://inside.test:{port}/hook")}),
            "inside.test",
            true,
        ),
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
            "region": "us-east-1", "endpointUrl": format!("http://inside.test:{port}/"), "credentials": creds}),
            "inside.test",
            true,
        ),
        (
            "sns",
            json!({"topicArn": "arn:aws:sns:us-east-1:123456789012:t",
            "region": "us-east-1", "endpointUrl": format!("http://inside.test:{port}/"), "credentials": creds}),
            "inside.test",
            true,
        ),
        (
            "webhook",
            json!({"url": format!("http://localhost:{port}/hook")}),
            "localhost",
            true,
        ),
        (
            "webhook",
            json!({"url": format!("http://inside.test:{port}/hook"),
            "auth": {"type": "oauth2ClientCredentials", "tokenUrl": format!("http://localhost:{port}/token"),
                     "clientId": "c", "clientSecret": "s"}}),
            "localhost",
            true,
        ),
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
            "region": "us-east-1", "endpointUrl": format!("http://localhost:{port}/"), "credentials": creds}),
            "localhost",
            true,
        ),
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
            "region": "us-east-1", "endpointUrl": format!("http://127.0.0.1:{port}/"), "credentials": creds}),
            "127.0.0.1",
            false,
        ),
    ];
    for (kind, config, host, by_name) in cases {
        let target_id = stored_directly(&app, "acme", kind, config.clone()).await;
        refused_at_connection(&api, &target_id, host, by_name).await;
    }
    assert_eq!(rx.count(), 0, "nothing reached the private address");
    app.shutdown().await;
}

#[tokio::test]
async fn a_name_public_at_creation_that_later_resolves_inside_is_refused_at_connection() {
    let names = Resolver::fixed([("rebind.test", vec![ip("93.184.216.34")])]);
    let app = TestApp::spawn_with(guarded(&names)).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let port = rx.addr.port();
    let creds = json!({"accessKeyId": "AK", "secretAccessKey": "SK"});
    let mut targets = Vec::new();
    for (kind, config) in [
        (
            "webhook",
            json!({"url": format!("http://rebind.test:{port}/hook")}),
        ),
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
                "region": "us-east-1", "endpointUrl": format!("http://rebind.test:{port}/"), "credentials": creds}),
        ),
        (
            "webhook",
            json!({"url": "https://rebind.test/hook",
                "auth": {"type": "oauth2ClientCredentials", "tokenUrl": format!("http://rebind.test:{port}/token"),
                         "clientId": "c", "clientSecret": "s"}}),
        ),
    ] {
        // Public when the target is created: accepted.
        let t = created(
            api.post(
                "/targets",
                json!({"name": "r", "type": kind, "config": config}),
            )
            .await,
        )
        .await;
        targets.push(id(&t));
    }
    // The record now points inside, where the receiver listens.
    names.answer("rebind.test", vec![ip("127.0.0.1")]);
    for target_id in &targets {
        refused_at_connection(&api, target_id, "rebind.test", true).await;
    }
    assert_eq!(rx.count(), 0, "nothing reached the address inside");
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// The operator's AWS identity
// ---------------------------------------------------------------------------

#[tokio::test]
async fn no_target_acts_with_the_servers_aws_identity_by_default() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    for (kind, config) in [
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "region": "us-east-1"}),
        ),
        (
            "sns",
            json!({"topicArn": "arn:aws:sns:us-east-1:123456789012:t", "region": "us-east-1"}),
        ),
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "region": "us-east-1",
                        "credentials": null}),
        ),
    ] {
        assert_fields(
            api.post(
                "/targets",
                json!({"name": "x", "type": kind, "config": config}),
            )
            .await,
            &["config.credentials"],
        )
        .await;
    }
    // Dropping the credentials of an existing target is refused too.
    let t = created(
        api.post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {"queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
                "region": "us-east-1", "credentials": {"accessKeyId": "AK", "secretAccessKey": "SK"}}}),
        )
        .await,
    )
    .await;
    assert_fields(
        api.patch(
            &format!("/targets/{}", id(&t)),
            json!({"config": {"credentials": null}}),
        )
        .await,
        &["config.credentials"],
    )
    .await;

    // A target stored without credentials (before the rule) is not sent at all.
    let rx = Receiver::start().await;
    let stored = stored_directly(
        &app,
        "acme",
        "sqs",
        json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "region": "us-east-1",
               "endpointUrl": rx.url("/")}),
    )
    .await;
    let m = deliver(&api, &stored, "DeadLetter").await;
    assert!(
        m["lastError"].as_str().unwrap().contains("credentials"),
        "{m}"
    );
    assert_eq!(rx.count(), 0);
    app.shutdown().await;
}

/// The access key id the server's own AWS identity has in the test below.
const SERVERS_KEY_ID: &str = "AKIASERVERSIDENTITY1";

#[tokio::test]
async fn the_operator_can_lend_the_servers_identity_on_purpose() {
    // The server's identity comes from its environment, where the AWS SDK
    // looks first: a `dispatch serve` process of its own has one.
    let db = common::TestDb::new().await;
    let (client_id, secret) = {
        let store = common::open_any_store(&db.url).await;
        let acme = dispatch::domain::ids::AccountId::parse("acme").unwrap();
        store.ensure_account(&acme).await.unwrap();
        let (id, secret) = dispatch::auth::secrets::generate_client_credentials();
        store
            .create_client(&dispatch::store::ClientRecord {
                client_id: id.clone(),
                account: acme,
                name: "test".into(),
                secret_hash: dispatch::auth::secrets::hash_client_secret(&secret),
                scopes: dispatch::domain::scope::Scope::ALL.to_vec(),
            })
            .await
            .unwrap();
        (id, secret)
    };
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("serve")
        .env("DATABASE_URL", &db.url)
        .env("DISPATCH_SERVER__LISTEN", "127.0.0.1:0")
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .env("DISPATCH_AWS__ALLOW_DEFAULT_CREDENTIALS", "true")
        .env("DISPATCH_LOG__FORMAT", "json")
        .env("RUST_LOG", "info")
        .env("AWS_ACCESS_KEY_ID", SERVERS_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", "the-servers-secret")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        // Never the instance metadata service, whatever else fails.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = serving_at(&mut server).await;
    let http = reqwest::Client::new();
    let api = Api::for_client(base, http, &client_id, &secret).await;

    // A queue on a receiver that records what the SDK sends it.
    let rx = Receiver::start().await;
    let t = created(
        api.post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {
                "queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "region": "us-east-1",
                "endpointUrl": rx.url("/")}}),
        )
        .await,
    )
    .await;
    assert!(
        t["config"].get("credentials").is_none_or(Value::is_null),
        "{t}"
    );
    api.schedule(&id(&t), &in_ms(0), "ping").await;
    let sent = rx.wait_for(1, Duration::from_secs(20)).await;
    let authorization = sent[0].header("authorization").unwrap_or_default();
    assert!(
        authorization.contains(&format!("Credential={SERVERS_KEY_ID}/")),
        "signed with the server's identity: {authorization:?}"
    );
    server.start_kill().unwrap();
    server.wait().await.unwrap();
}

/// Reads a `dispatch serve` process's JSON log until it says where it
/// serves; returns its base URL. Keeps draining the log afterwards.
async fn serving_at(server: &mut tokio::process::Child) -> String {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let addr = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let entry: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if let Some(addr) = entry["fields"]["addr"].as_str() {
                return addr.to_string();
            }
            seen.push(line);
        }
        panic!("dispatch serve ended: {seen:?}");
    })
    .await
    .expect("dispatch serve says where it serves within 30 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    format!("http://{addr}")
}

// ---------------------------------------------------------------------------
// Headers and strings
// ---------------------------------------------------------------------------

#[tokio::test]
async fn headers_are_bounded_and_dispatchs_own_cannot_be_overridden() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let hook = |headers: Value| json!({"name": "h", "type": "webhook", "config": {"url": "https://example.com/", "headers": headers}});
    let many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("X-H{i}"), json!("v"))).collect();
    assert_fields(
        api.post("/targets", hook(Value::Object(many))).await,
        &["config.headers"],
    )
    .await;
    assert_fields(
        api.post("/targets", hook(json!({"X-Big": "b".repeat(8 * 1024)})))
            .await,
        &["config.headers"],
    )
    .await;
    for name in [
        "Host",
        "content-length",
        "Webhook-Signature",
        "transfer-encoding",
    ] {
        let field = format!("config.headers.{name}");
        assert_fields(
            api.post("/targets", hook(json!({name: "x"}))).await,
            &[&field],
        )
        .await;
    }
    let oauth = json!({"name": "h", "type": "webhook", "config": {"url": "https://example.com/",
        "headers": {"Authorization": "Bearer mine"},
        "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "https://id.example.com/token",
                 "clientId": "c", "clientSecret": "s"}}});
    assert_fields(
        api.post("/targets", oauth).await,
        &["config.headers.Authorization"],
    )
    .await;
    let list: Value = api.get("/targets").await.json().await.unwrap();
    assert_eq!(list["items"], json!([]));
    app.shutdown().await;
}

#[tokio::test]
async fn u0000_in_any_string_of_a_target_answers_400_on_every_store() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    assert_fields(
        api.post(
            "/targets",
            json!({"name": "a\u{0}b", "type": "webhook", "config": {"url": "https://example.com/"}}),
        )
        .await,
        &["name"],
    )
    .await;
    assert_fields(
        api.post(
            "/targets",
            json!({"name": "n", "type": "webhook", "config": {"url": "https://example.com/",
                   "headers": {"X-A": "v\u{0}"}}}),
        )
        .await,
        &["config.headers.X-A"],
    )
    .await;
    let t = api.webhook("https://example.com/").await;
    assert_fields(
        api.patch(&format!("/targets/{}", id(&t)), json!({"name": "x\u{0}"}))
            .await,
        &["name"],
    )
    .await;
    let shown: Value = api
        .get(&format!("/targets/{}", id(&t)))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(shown["name"], "hook");
    app.shutdown().await;
}

#[tokio::test]
async fn a_receivers_token_endpoint_cannot_make_dispatch_read_more_than_64_kib() {
    use common::receiver::Reply;
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let tokens = Receiver::start().await;
    let big =
        json!({"access_token": "t", "token_type": "bearer", "padding": "p".repeat(70 * 1024)});
    tokens.always(
        Reply::status(200)
            .header("content-type", "application/json")
            .body(big.to_string()),
    );
    let hook = Receiver::start().await;
    let t = created(
        api.post(
            "/targets",
            json!({"name": "h", "type": "webhook", "config": {"url": hook.url("/hook"),
                "auth": {"type": "oauth2ClientCredentials", "tokenUrl": tokens.url("/token"),
                         "clientId": "c", "clientSecret": "s"}}}),
        )
        .await,
    )
    .await;
    let m = api.schedule(&id(&t), &in_ms(0), "ping").await;
    let mid = m["messageId"].as_str().unwrap();
    let attempts = common::eventually(Duration::from_secs(10), "an attempt", async || {
        let attempts = api.attempts(mid).await;
        if attempts.is_empty() {
            Err(attempts)
        } else {
            Ok(attempts)
        }
    })
    .await;
    let error = attempts[0]["error"].as_str().unwrap();
    assert!(error.contains("more than 65536 bytes"), "{error}");
    assert!(tokens.count() >= 1);
    assert_eq!(hook.count(), 0, "no token, no delivery");
    app.shutdown().await;
}
