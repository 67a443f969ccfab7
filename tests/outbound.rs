//! Tenant safety on the outbound side (API.md §3): a secret travels only
//! with its address, every address an account controls passes the
//! private-network guard at creation, at change and at every connection,
//! no target acts with the server's own AWS identity, and headers and
//! strings are bounded. Each test plays a hostile or careless account.

mod common;

use std::time::Duration;

use common::{in_ms, receiver::Receiver, Api, TestApp};
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

/// This machine's host name and what its resolver answers for it: a
/// loopback or private address (from /etc/hosts on Linux machines), so a
/// name the guard can only refuse by its DNS answer.
async fn private_name() -> (String, Vec<std::net::IpAddr>) {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .expect("this test reads the machine's host name from /proc/sys/kernel/hostname")
        .trim()
        .to_string();
    let answer: Vec<std::net::IpAddr> = tokio::net::lookup_host((name.as_str(), 0))
        .await
        .unwrap_or_else(|e| {
            panic!("the host name {name} does not resolve ({e}): add it to /etc/hosts")
        })
        .map(|a| a.ip())
        .collect();
    assert!(
        !answer.is_empty()
            && answer
                .iter()
                .all(|ip| !dispatch::delivery::guard::is_public(*ip)),
        "this test needs the host name {name} to resolve to a non-public address, not {answer:?}"
    );
    (name, answer)
}

/// Stores a target as it is, past the checks of the API: what a target
/// whose name resolved to a public address at creation looks like once its
/// DNS answer has changed.
async fn stored_directly(app: &TestApp, account: &str, kind: &str, config: Value) -> String {
    let spec =
        dispatch::wire::target::parse(&json!({"name": "stored", "type": kind, "config": config}))
            .expect("a well-formed target");
    app.store().ensure_account(account).await.unwrap();
    let t = dispatch::store::insert_new_target(
        app.store().as_ref(),
        account,
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
        .get_target("acme", &id(&queue).parse().unwrap())
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

fn guarded(c: &mut dispatch::config::Config) {
    c.webhook.allow_private_networks = false;
}

#[tokio::test]
async fn every_address_an_account_controls_is_refused_on_private_networks() {
    let app = TestApp::spawn_with(guarded).await;
    let api = app.api("acme").await;
    let creds = json!({"accessKeyId": "AK", "secretAccessKey": "SK"});
    let cases = [
        (
            json!({"name": "h", "type": "webhook", "config": {"url": "http://localhost:9/hook"}}),
            "config.url",
        ),
        (
            json!({"name": "h", "type": "webhook", "config": {"url": "https://example.com/",
                "auth": {"type": "oauth2ClientCredentials", "tokenUrl": "http://10.0.0.5/token",
                         "clientId": "c", "clientSecret": "s"}}}),
            "config.auth.tokenUrl",
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
        assert!(
            !text.contains("127.0.0.1") && !text.contains("::1"),
            "{text}"
        );
    }
    let list: Value = api.get("/targets").await.json().await.unwrap();
    assert_eq!(list["items"], json!([]));

    // A change onto a private address is refused the same way, and changes nothing.
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
    assert_fields(
        api.patch(
            &one,
            json!({"config": {"endpointUrl": "http://127.0.0.1:4566/", "credentials": creds}}),
        )
        .await,
        &["config.endpointUrl"],
    )
    .await;
    let shown: Value = api.get(&one).await.json().await.unwrap();
    assert_eq!(shown["config"]["endpointUrl"], "https://93.184.216.34/");
    app.shutdown().await;
}

#[tokio::test]
async fn a_name_that_resolves_inside_at_connection_time_is_refused_and_not_reported() {
    let app = TestApp::spawn_with(guarded).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let port = rx
        .url("/")
        .split(':')
        .nth(2)
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    // The receiver listens on loopback; the stored targets name it by a
    // name (judged from its DNS answer) and by an IP literal.
    let creds = json!({"accessKeyId": "AK", "secretAccessKey": "SK"});
    // This machine's own name resolves inside too, by its DNS answer rather
    // than its spelling: the resolvers must judge the answer.
    let (host, answer) = private_name().await;
    // (kind, config, whether the address is a name whose answer must stay unsaid)
    let cases = [
        (
            "webhook",
            json!({"url": format!("http://{host}:{port}/hook")}),
            true,
        ),
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
            "region": "us-east-1", "endpointUrl": format!("http://{host}:{port}/"), "credentials": creds}),
            true,
        ),
        (
            "webhook",
            json!({"url": format!("http://localhost:{port}/hook")}),
            true,
        ),
        (
            "webhook",
            json!({"url": "https://example.com/",
            "auth": {"type": "oauth2ClientCredentials", "tokenUrl": format!("http://localhost:{port}/token"),
                     "clientId": "c", "clientSecret": "s"}}),
            true,
        ),
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
            "region": "us-east-1", "endpointUrl": format!("http://localhost:{port}/"), "credentials": creds}),
            true,
        ),
        (
            "sqs",
            json!({"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
            "region": "us-east-1", "endpointUrl": format!("http://127.0.0.1:{port}/"), "credentials": creds}),
            false,
        ),
        (
            "sns",
            json!({"topicArn": "arn:aws:sns:us-east-1:123456789012:t",
            "region": "us-east-1", "endpointUrl": format!("http://localhost:{port}/"), "credentials": creds}),
            true,
        ),
    ];
    for (kind, config, by_name) in cases {
        let target_id = stored_directly(&app, "acme", kind, config.clone()).await;
        let m = deliver(&api, &target_id, "DeadLetter").await;
        let attempts = api.attempts(m["messageId"].as_str().unwrap()).await;
        assert_eq!(
            attempts.len(),
            1,
            "refused at once, not retried: {attempts:?}"
        );
        assert_eq!(attempts[0]["outcome"], "NonRetryableFailure");
        let error = attempts[0]["error"].as_str().unwrap();
        assert!(error.contains("not a public address"), "{config}: {error}");
        if by_name {
            assert!(
                !error.contains("127.0.0.1") && !error.contains("::1"),
                "{error}"
            );
            for ip in &answer {
                assert!(!error.contains(&ip.to_string()), "{error}");
            }
        }
    }
    assert_eq!(rx.count(), 0, "nothing reached the private address");
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

#[tokio::test]
async fn the_operator_can_lend_the_servers_identity_on_purpose() {
    let app = TestApp::spawn_with(|c| c.aws.allow_default_credentials = true).await;
    let api = app.api("acme").await;
    created(
        api.post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {
                "queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "region": "us-east-1"}}),
        )
        .await,
    )
    .await;
    app.shutdown().await;
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let attempts = loop {
        let attempts = api.attempts(mid).await;
        if !attempts.is_empty() {
            break attempts;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no attempt was made"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let error = attempts[0]["error"].as_str().unwrap();
    assert!(error.contains("more than 65536 bytes"), "{error}");
    assert!(tokens.count() >= 1);
    assert_eq!(hook.count(), 0, "no token, no delivery");
    app.shutdown().await;
}
