//! The portal over plain HTTP (the browser tests drive the same pages in
//! Chromium): sign-in, sessions and their cookies, CSRF, rate limiting,
//! account isolation, and every action a page offers. Runs on both stores.

mod common;

#[path = "portal/charts.rs"]
mod charts;
#[path = "portal/hostile_inputs.rs"]
mod hostile_inputs;
#[path = "portal/keys_and_ranges.rs"]
mod keys_and_ranges;
#[path = "portal/lists.rs"]
mod lists;
#[path = "portal/roles.rs"]
mod roles;
#[path = "portal/schedules.rs"]
mod schedules;
#[path = "portal/target_actions.rs"]
mod target_actions;

use std::collections::HashMap;

use common::{
    receiver::{Receiver, Reply},
    Api, TestApp,
};
use reqwest::{header, redirect, StatusCode};
use serde_json::{json, Value};

const WAIT: std::time::Duration = std::time::Duration::from_secs(5);
const PASSWORD: &str = "correct horse battery staple";

/// A browser in miniature: keeps cookies, follows no redirects.
struct Browser {
    http: reqwest::Client,
    base: String,
    cookies: HashMap<String, String>,
}

struct Page {
    status: StatusCode,
    headers: header::HeaderMap,
    body: String,
}

impl Page {
    fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The first hidden `csrf` field on the page.
    fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no csrf field in {}", self.body));
        let rest = &self.body[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_string()
    }

    /// Where the list's "Older messages" link leads.
    fn next_page(&self) -> String {
        let marker = "id=\"next-page\" href=\"";
        let at = self.body.find(marker).expect("a next page");
        let href = &self.body[at + marker.len()..];
        href[..href.find('"').unwrap()].replace("&amp;", "&")
    }

    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }
}

impl Browser {
    fn new(app: &TestApp) -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(redirect::Policy::none())
                .build()
                .unwrap(),
            base: app.base.clone(),
            cookies: HashMap::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn send(&mut self, req: reqwest::RequestBuilder) -> Page {
        let r = req
            .header(header::COOKIE, self.cookie_header())
            .send()
            .await
            .unwrap();
        let page = Page {
            status: r.status(),
            headers: r.headers().clone(),
            body: r.text().await.unwrap(),
        };
        for c in page.set_cookies() {
            let pair = c.split(';').next().unwrap();
            let (k, v) = pair.split_once('=').unwrap();
            if v.is_empty() || c.contains("Max-Age=0") {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_string(), v.to_string());
            }
        }
        page
    }

    async fn get(&mut self, path: &str) -> Page {
        let req = self.http.get(format!("{}{path}", self.base));
        self.send(req).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let req = self.http.post(format!("{}{path}", self.base)).form(form);
        self.send(req).await
    }

    async fn try_sign_in(&mut self, email: &str, password: &str) -> Page {
        let login = self.get("/portal/login").await;
        assert_eq!(login.status, 200);
        let csrf = login.csrf();
        self.post(
            "/portal/login",
            &[
                ("csrf", &csrf),
                ("email", email),
                ("password", password),
                ("next", "/portal/overview"),
            ],
        )
        .await
    }

    /// The session's CSRF token, read from a page.
    async fn csrf(&mut self) -> String {
        let p = self.get("/portal/overview").await;
        assert_eq!(p.status, 200, "signed in");
        p.csrf()
    }
}

async fn user(app: &TestApp, account: &str, email: &str) {
    let created = app
        .store()
        .create_user(&dispatch::portal::new_user(
            account,
            email,
            PASSWORD,
            app.now(),
        ))
        .await
        .unwrap();
    assert!(created);
}

async fn signed_in(app: &TestApp, account: &str, email: &str) -> Browser {
    user(app, account, email).await;
    let mut b = Browser::new(app);
    let p = b.try_sign_in(email, PASSWORD).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    b
}

async fn message_state(api: &Api, id: &str) -> String {
    api.message(id).await["state"].as_str().unwrap().to_string()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap()
}

/// Schedules `n` messages for a receiver that refuses them (400) and delivers
/// them: `n` dead letters.
async fn dead_letters(
    app: &TestApp,
    api: &Api,
    rx: &Receiver,
    target: &str,
    n: usize,
) -> Vec<String> {
    rx.always(Reply::status(400));
    let mut ids = Vec::new();
    for i in 0..n {
        let m = api
            .schedule(target, &common::in_ms(-1000), &format!("dead {i}"))
            .await;
        ids.push(s(&m["messageId"]).to_string());
    }
    // The background sweeper may have claimed them first; either way they settle.
    app.running().sweeper.deliver_due_now().await;
    for id in &ids {
        api.wait_for_state(id, "DeadLetter", WAIT).await;
    }
    ids
}

#[tokio::test]
async fn pages_send_people_without_a_session_to_sign_in_and_back() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    for path in [
        "/portal/overview",
        "/portal/targets",
        "/portal/messages?state=DeadLetter",
    ] {
        let p = b.get(path).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{path}");
        assert!(
            p.location().starts_with("/portal/login?next="),
            "{path}: {}",
            p.location()
        );
    }
    assert_eq!(b.get("/portal").await.location(), "/portal/overview");
    // A forged or stale session cookie is no session.
    b.cookies.insert("dispatch_session".into(), "forged".into());
    assert_eq!(
        b.get("/portal/overview").await.status,
        StatusCode::SEE_OTHER
    );

    user(&app, "acme", "ops@example.com").await;
    let mut b = Browser::new(&app);
    let login = b
        .get("/portal/login?next=%2Fportal%2Fmessages%3Fstate%3DDeadLetter")
        .await;
    let csrf = login.csrf();
    let p = b
        .post(
            "/portal/login",
            &[
                ("csrf", &csrf),
                ("email", "OPS@example.com "),
                ("password", PASSWORD),
                ("next", "/portal/messages?state=DeadLetter"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(
        p.location(),
        "/portal/messages?state=DeadLetter",
        "back where they were going; email case ignored"
    );
}

#[tokio::test]
async fn sign_in_sets_a_strict_http_only_cookie_and_sign_out_ends_the_session() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "ops@example.com").await;
    let mut b = Browser::new(&app);
    let p = b.try_sign_in("ops@example.com", PASSWORD).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let cookie = p
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("dispatch_session="))
        .expect("a session cookie");
    for part in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/portal",
        "Max-Age=43200",
    ] {
        assert!(cookie.contains(part), "{part} in {cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain HTTP without a proxy: {cookie}"
    );
    let overview = b.get("/portal/overview").await;
    assert_eq!(overview.status, 200);
    assert!(overview.body.contains("ops@example.com") && overview.body.contains("acme"));

    let session = b.cookies["dispatch_session"].clone();
    let csrf = overview.csrf();
    let out = b.post("/portal/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(
        !b.cookies.contains_key("dispatch_session"),
        "the cookie is cleared"
    );
    // The old token is dead on the server too, not only forgotten by the browser.
    b.cookies.insert("dispatch_session".into(), session);
    assert_eq!(
        b.get("/portal/overview").await.status,
        StatusCode::SEE_OTHER
    );

    // Behind a proxy that terminates TLS, cookies are Secure.
    let mut b = Browser::new(&app);
    let login = b.get("/portal/login").await;
    let csrf = login.csrf();
    let req = b
        .http
        .post(format!("{}/portal/login", b.base))
        .header("x-forwarded-proto", "https")
        .form(&[
            ("csrf", csrf.as_str()),
            ("email", "ops@example.com"),
            ("password", PASSWORD),
            ("next", ""),
        ]);
    let p = b.send(req).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert!(p
        .set_cookies()
        .iter()
        .any(|c| c.starts_with("dispatch_session=") && c.contains("Secure")));
}

#[tokio::test]
async fn a_wrong_password_and_an_unknown_email_get_the_same_answer() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "ops@example.com").await;
    let mut b = Browser::new(&app);
    let wrong = b.try_sign_in("ops@example.com", "not the password").await;
    let unknown = b.try_sign_in("nobody@example.com", PASSWORD).await;
    for p in [&wrong, &unknown] {
        assert_eq!(p.status, StatusCode::UNAUTHORIZED);
        assert!(p.body.contains("The email or the password is wrong."));
        assert!(!p
            .set_cookies()
            .iter()
            .any(|c| c.starts_with("dispatch_session=")));
    }
}

#[tokio::test]
async fn sign_in_is_rate_limited_per_email_even_for_the_right_password() {
    let app = TestApp::spawn_with(|c| c.portal.login_attempts = 3).await;
    user(&app, "acme", "ops@example.com").await;
    user(&app, "acme", "dev@example.com").await;
    let mut b = Browser::new(&app);
    for _ in 0..3 {
        assert_eq!(
            b.try_sign_in("ops@example.com", "guess").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    let limited = b.try_sign_in("ops@example.com", PASSWORD).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.body.contains("Too many sign-in attempts"));
    // Another person at the same address is not locked out by it.
    assert_eq!(
        b.try_sign_in("dev@example.com", PASSWORD).await.status,
        StatusCode::SEE_OTHER
    );
}

#[tokio::test]
async fn sign_in_only_follows_paths_inside_the_portal() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "ops@example.com").await;
    for next in [
        "https://evil.example/",
        "//evil.example/portal",
        "/portal\\..\\x",
        "/metrics",
        // A control character would make the redirect's header invalid.
        "/portal/overview\n",
        "/portal/overview\r\nSet-Cookie: x=y",
        "/portal/\u{0}",
    ] {
        let mut b = Browser::new(&app);
        let csrf = b.get("/portal/login").await.csrf();
        let p = b
            .post(
                "/portal/login",
                &[
                    ("csrf", &csrf),
                    ("email", "ops@example.com"),
                    ("password", PASSWORD),
                    ("next", next),
                ],
            )
            .await;
        assert_eq!(p.location(), "/portal/overview", "{next}");
    }
}

#[tokio::test]
async fn a_sign_in_form_without_its_token_is_refused() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "ops@example.com").await;
    let mut b = Browser::new(&app);
    b.get("/portal/login").await;
    let p = b
        .post(
            "/portal/login",
            &[
                ("csrf", "made-up"),
                ("email", "ops@example.com"),
                ("password", PASSWORD),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert!(!b.cookies.contains_key("dispatch_session"));
    // A token with no cookie to match (posted from another site) fails too.
    let mut other = Browser::new(&app);
    let csrf = b.get("/portal/login").await.csrf();
    let p = other
        .post(
            "/portal/login",
            &[
                ("csrf", &csrf),
                ("email", "ops@example.com"),
                ("password", PASSWORD),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn forms_without_the_session_token_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let far = format!("{}-01-01T00:00", common::calendar::years_ahead(4));
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let target = api.webhook(&rx.url("/hook")).await;
    let tid = s(&target["targetId"]);
    let m = api.schedule(tid, "2099-01-01T00:00:00Z", "later").await;
    let mid = s(&m["messageId"]);
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;

    let attempts: Vec<(String, Vec<(&str, &str)>)> = vec![
        (format!("/portal/messages/{mid}/cancel"), vec![]),
        (
            format!("/portal/messages/{mid}/cancel"),
            vec![("csrf", "wrong")],
        ),
        (
            format!("/portal/messages/{mid}/reschedule"),
            vec![("at", far.as_str()), ("tz", "UTC")],
        ),
        (
            "/portal/messages/bulk".to_string(),
            vec![("action", "cancel"), ("ids", mid), ("confirmed", "yes")],
        ),
        (format!("/portal/targets/{tid}/disable"), vec![]),
        (format!("/portal/targets/{tid}/test"), vec![]),
        (
            "/portal/targets".to_string(),
            vec![
                ("name", "x"),
                ("type", "webhook"),
                ("url", "http://127.0.0.1:9/"),
            ],
        ),
        ("/portal/logout".to_string(), vec![]),
    ];
    for (path, form) in &attempts {
        let p = b.post(path, form).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{path} {form:?}");
        assert!(p.body.contains("The form has expired"));
    }
    assert_eq!(message_state(&api, mid).await, "Scheduled");
    assert_eq!(
        api.get(&format!("/targets/{tid}"))
            .await
            .json::<Value>()
            .await
            .unwrap()["enabled"],
        true
    );
    let listed = api.get("/targets").await.json::<Value>().await.unwrap();
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        1,
        "no target was created"
    );
    assert_eq!(
        b.get("/portal/overview").await.status,
        200,
        "still signed in"
    );

    // With the token, the same form works.
    let p = b
        .post(
            &format!("/portal/messages/{mid}/cancel"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(message_state(&api, mid).await, "Cancelled");
}

#[tokio::test]
async fn another_accounts_targets_and_messages_are_not_found_and_not_listed() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let target = api.webhook(&rx.url("/hook")).await;
    let tid = s(&target["targetId"]);
    let m = api
        .schedule(tid, "2099-01-01T00:00:00Z", "acme's secret payload")
        .await;
    let mid = s(&m["messageId"]);

    let mut b = signed_in(&app, "globex", "eve@globex.example").await;
    let csrf = b.csrf().await;
    for path in [
        format!("/portal/messages/{mid}"),
        format!("/portal/targets/{tid}"),
        format!("/portal/targets/{tid}/edit"),
    ] {
        let p = b.get(&path).await;
        assert_eq!(p.status, StatusCode::NOT_FOUND, "{path}");
        assert!(!p.body.contains("secret payload"));
    }
    for (path, form) in [
        (
            format!("/portal/messages/{mid}/cancel"),
            vec![("csrf", csrf.as_str())],
        ),
        (
            format!("/portal/messages/{mid}/reschedule"),
            vec![("csrf", csrf.as_str()), ("at", "")],
        ),
        (
            format!("/portal/targets/{tid}/disable"),
            vec![("csrf", csrf.as_str())],
        ),
        (
            format!("/portal/targets/{tid}/test"),
            vec![("csrf", csrf.as_str())],
        ),
        (
            format!("/portal/targets/{tid}/reset-breaker"),
            vec![("csrf", csrf.as_str())],
        ),
    ] {
        assert_eq!(
            b.post(&path, &form).await.status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    let bulk = b
        .post(
            "/portal/messages/bulk",
            &[
                ("csrf", &csrf),
                ("action", "cancel"),
                ("ids", mid),
                ("confirmed", "yes"),
            ],
        )
        .await;
    assert_eq!(
        bulk.location(),
        "/portal/messages?notice=bulk-cancelled&n=0"
    );
    let list = b.get("/portal/messages").await;
    assert!(list.body.contains("id=\"no-messages\"") && !list.body.contains(mid));
    let targets = b.get("/portal/targets").await;
    assert!(!targets.body.contains(tid));
    let overview = b.get("/portal/overview").await;
    assert!(!overview.body.contains(tid) && overview.body.contains("No targets yet"));
    assert_eq!(
        b.get(&format!("/portal/messages?q={mid}")).await.location(),
        format!("/portal/messages/{mid}")
    );
    assert_eq!(message_state(&api, mid).await, "Scheduled", "untouched");
    assert_eq!(
        api.get(&format!("/targets/{tid}"))
            .await
            .json::<Value>()
            .await
            .unwrap()["enabled"],
        true
    );
}

#[tokio::test]
async fn a_webhook_target_made_with_the_form_shows_its_secret_once_and_an_edit_keeps_secrets() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;
    let url = rx.url("/hook");
    let p = b
        .post(
            "/portal/targets",
            &[
                ("csrf", &csrf),
                ("name", "orders"),
                ("type", "webhook"),
                ("enabled", "on"),
                ("url", &url),
                ("timeoutMs", "3000"),
                ("headers", "X-Api-Key: k-123\nX-Team: core"),
            ],
        )
        .await;
    // Post/redirect/get: the secret rides in a cookie sent only to the page
    // that shows it, once.
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let location = p.location().to_string();
    assert!(location.ends_with("/secret?notice=created"), "{location}");
    let cookie = p
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("dispatch_secret_once="))
        .expect("the secret's cookie");
    let secret_page = location.split('?').next().unwrap().to_string();
    for part in [
        format!("Path={secret_page}"),
        "HttpOnly".into(),
        "SameSite=Strict".into(),
        "Max-Age=300".into(),
    ] {
        assert!(cookie.contains(&part), "{part} in {cookie}");
    }
    let p = b.get(&location).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(p.headers[header::CACHE_CONTROL], "no-store");
    let again = b.get(&location).await;
    assert_eq!(again.status, StatusCode::SEE_OTHER);
    assert!(
        again.location().ends_with("?notice=secret-shown"),
        "{}",
        again.location()
    );
    assert!(!again.body.contains("whsec_"));
    let secret_at = p
        .body
        .find("id=\"signing-secret\">")
        .expect("the secret is shown");
    let shown = &p.body[secret_at + "id=\"signing-secret\">".len()..];
    let shown = &shown[..shown.find('<').unwrap()];
    assert!(shown.starts_with("whsec_"), "{shown}");

    let api = app.api("acme").await;
    let list = api.get("/targets").await.json::<Value>().await.unwrap();
    let t = &list["items"][0];
    let tid = s(&t["targetId"]).to_string();
    assert_eq!(t["name"], "orders");
    assert_eq!(t["config"]["timeoutMs"], 3000);
    assert_eq!(t["config"]["headers"]["X-Api-Key"], "***");
    let page = b.get(&format!("/portal/targets/{tid}")).await;
    assert!(
        !page.body.contains(shown) && !page.body.contains("k-123"),
        "never shown again"
    );
    let edit = b.get(&format!("/portal/targets/{tid}/edit")).await;
    assert!(!edit.body.contains(shown) && !edit.body.contains("k-123"));

    // An edit that leaves the secrets alone keeps them, and delivery proves it.
    let p = b
        .post(
            &format!("/portal/targets/{tid}"),
            &[
                ("csrf", &csrf),
                ("name", "orders v2"),
                ("enabled", "on"),
                ("url", &url),
                ("timeoutMs", "3000"),
                ("headers", "X-Api-Key: ***\nX-Team: core"),
                ("signingSecret", ""),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(p.location(), format!("/portal/targets/{tid}?notice=saved"));
    rx.always(Reply::status(200));
    let m = api.schedule(&tid, &common::in_ms(-10), "hello").await;
    app.running().sweeper.deliver_due_now().await;
    let got = rx.wait_for(1, WAIT).await;
    assert_eq!(got[0].header("x-api-key").as_deref(), Some("k-123"));
    api.wait_for_state(s(&m["messageId"]), "Delivered", WAIT)
        .await;
    let stored = app
        .store()
        .get_target(&common::account("acme"), &tid.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.name, "orders v2");
    let dispatch::domain::target::TargetConfig::Webhook(w) = stored.config else {
        panic!()
    };
    assert_eq!(w.signing_secret, shown);

    // Unticking "enabled" disables it.
    let p = b
        .post(
            &format!("/portal/targets/{tid}"),
            &[
                ("csrf", &csrf),
                ("name", "orders v2"),
                ("url", &url),
                ("headers", "X-Api-Key: ***"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(
        api.get(&format!("/targets/{tid}"))
            .await
            .json::<Value>()
            .await
            .unwrap()["enabled"],
        false
    );
}

#[tokio::test]
async fn sqs_and_sns_targets_made_with_the_form_keep_their_secret_access_key_write_only() {
    let app = TestApp::spawn().await;
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;
    let p = b
        .post(
            "/portal/targets",
            &[
                ("csrf", csrf.as_str()),
                ("name", "queue"),
                ("type", "sqs"),
                ("enabled", "on"),
                (
                    "queueUrl",
                    "https://sqs.eu-north-1.amazonaws.com/123456789012/orders.fifo",
                ),
                ("region", "eu-north-1"),
                ("accessKeyId", "AKIAEXAMPLE"),
                ("secretAccessKey", "s3cr3t-key"),
                ("messageGroupId", "orders"),
                // Fields of other types are ignored.
                ("url", "https://example.com/"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let tid = p
        .location()
        .trim_start_matches("/portal/targets/")
        .split('?')
        .next()
        .unwrap()
        .to_string();
    let api = app.api("acme").await;
    let t: Value = api
        .get(&format!("/targets/{tid}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(t["type"], "sqs");
    assert_eq!(
        t["config"]["queueUrl"],
        "https://sqs.eu-north-1.amazonaws.com/123456789012/orders.fifo"
    );
    assert_eq!(t["config"]["messageGroupId"], "orders");
    assert_eq!(t["config"]["credentials"]["accessKeyId"], "AKIAEXAMPLE");
    assert_eq!(t["config"]["credentials"]["secretAccessKey"], "***");
    assert!(!b
        .get(&format!("/portal/targets/{tid}/edit"))
        .await
        .body
        .contains("s3cr3t-key"));

    // Saved again with the secret left empty, the key is kept.
    let p = b
        .post(
            &format!("/portal/targets/{tid}"),
            &[
                ("csrf", csrf.as_str()),
                ("name", "queue"),
                ("enabled", "on"),
                (
                    "queueUrl",
                    "https://sqs.eu-north-1.amazonaws.com/123456789012/orders.fifo",
                ),
                ("region", "eu-north-1"),
                ("accessKeyId", "AKIAEXAMPLE"),
                ("secretAccessKey", ""),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    // A new region is a new address: the key left empty is not kept.
    let moved = b
        .post(
            &format!("/portal/targets/{tid}"),
            &[
                ("csrf", csrf.as_str()),
                ("name", "queue"),
                ("enabled", "on"),
                (
                    "queueUrl",
                    "https://sqs.eu-north-1.amazonaws.com/123456789012/orders.fifo",
                ),
                ("region", "eu-west-1"),
                ("accessKeyId", "AKIAEXAMPLE"),
                ("secretAccessKey", ""),
            ],
        )
        .await;
    assert_eq!(moved.status, StatusCode::BAD_REQUEST, "{}", moved.body);
    assert!(
        moved.body.contains("config.credentials.secretAccessKey"),
        "{}",
        moved.body
    );
    let p = b
        .post(
            &format!("/portal/targets/{tid}"),
            &[
                ("csrf", csrf.as_str()),
                ("name", "queue"),
                ("enabled", "on"),
                (
                    "queueUrl",
                    "https://sqs.eu-north-1.amazonaws.com/123456789012/orders.fifo",
                ),
                ("region", "eu-west-1"),
                ("accessKeyId", "AKIAEXAMPLE"),
                ("secretAccessKey", "s3cr3t-key"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let stored = app
        .store()
        .get_target(&common::account("acme"), &tid.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let dispatch::domain::target::TargetConfig::Sqs(q) = stored.config else {
        panic!()
    };
    assert_eq!(q.region, "eu-west-1");
    assert_eq!(q.credentials.unwrap().secret_access_key, "s3cr3t-key");
    assert_eq!(q.message_group_id, None, "emptied");

    let p = b
        .post(
            "/portal/targets",
            &[
                ("csrf", csrf.as_str()),
                ("name", "topic"),
                ("type", "sns"),
                ("enabled", "on"),
                ("topicArn", "arn:aws:sns:eu-north-1:123456789012:events"),
                ("region", "eu-north-1"),
            ],
        )
        .await;
    // Without credentials the target would act with the server's own AWS identity.
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert!(p.body.contains("config.credentials"), "{}", p.body);
    let p = b
        .post(
            "/portal/targets",
            &[
                ("csrf", csrf.as_str()),
                ("name", "topic"),
                ("type", "sns"),
                ("enabled", "on"),
                ("topicArn", "arn:aws:sns:eu-north-1:123456789012:events"),
                ("region", "eu-north-1"),
                ("accessKeyId", "AKIATOPIC"),
                ("secretAccessKey", "topic-key"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let list: Value = api.get("/targets").await.json().await.unwrap();
    let sns = &list["items"][0];
    assert_eq!(sns["type"], "sns");
    assert_eq!(sns["config"]["credentials"]["accessKeyId"], "AKIATOPIC");
    assert_eq!(sns["config"]["credentials"]["secretAccessKey"], "***");
}

#[tokio::test]
async fn invalid_target_forms_answer_400_naming_the_fields_and_create_nothing() {
    let app = TestApp::spawn().await;
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (
            vec![
                ("name", "x"),
                ("type", "webhook"),
                ("url", "ftp://example.com/"),
            ],
            "config.url",
        ),
        (
            vec![
                ("name", "x"),
                ("type", "webhook"),
                ("url", "https://user:pass@example.com/"),
            ],
            "config.url",
        ),
        (
            vec![
                ("name", "x"),
                ("type", "webhook"),
                ("url", "https://example.com/"),
                ("timeoutMs", "soon"),
            ],
            "config.timeoutMs",
        ),
        (
            vec![
                ("name", "x"),
                ("type", "webhook"),
                ("url", "https://example.com/"),
                ("headers", "no colon"),
            ],
            "config.headers",
        ),
        (
            vec![
                ("name", "x"),
                ("type", "sqs"),
                ("queueUrl", "not a url"),
                ("region", "eu-north-1"),
            ],
            "config.queueUrl",
        ),
        (
            vec![
                ("name", "x"),
                ("type", "sns"),
                ("topicArn", "arn:nope"),
                ("region", "eu-north-1"),
            ],
            "config.topicArn",
        ),
        (
            vec![
                ("name", ""),
                ("type", "webhook"),
                ("url", "https://example.com/"),
            ],
            "name",
        ),
        (vec![("name", "x"), ("type", "fax")], "type"),
    ];
    for (mut form, field) in cases {
        form.push(("csrf", &csrf));
        let p = b.post("/portal/targets", &form).await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{form:?}");
        assert!(
            p.body.contains("error-summary") && p.body.contains(&format!("<code>{field}</code>")),
            "{field}: {}",
            p.body
        );
    }
    let api = app.api("acme").await;
    assert_eq!(
        api.get("/targets").await.json::<Value>().await.unwrap()["items"],
        serde_json::json!([])
    );

    // The private-network rule applies to the portal as to the API.
    let strict = TestApp::spawn_with(|c| c.webhook.allow_private_networks = false).await;
    let mut b = signed_in(&strict, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;
    let p = b
        .post(
            "/portal/targets",
            &[
                ("csrf", &csrf),
                ("name", "x"),
                ("type", "webhook"),
                ("url", "http://127.0.0.1:8080/"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(p.body.contains("is not a public address"), "{}", p.body);
}

#[tokio::test]
async fn cancel_and_reschedule_from_the_message_page_show_in_its_history() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let target = api.webhook(&rx.url("/hook")).await;
    let tid = s(&target["targetId"]);
    let a = s(&api
        .schedule(tid, "2099-01-01T00:00:00Z", "{\"order\": 42}")
        .await["messageId"])
    .to_string();
    let c =
        s(&api.schedule(tid, "2099-01-01T00:00:00Z", "to cancel").await["messageId"]).to_string();
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;

    let page = b.get(&format!("/portal/messages/{a}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("{\n  &quot;order&quot;: 42\n}"),
        "the JSON payload is shown indented"
    );
    assert!(page.body.contains("id=\"reschedule\"") && page.body.contains("id=\"cancel\""));

    // 10:00 in Berlin in winter is 09:00 UTC.
    let y = common::calendar::years_ahead(4);
    let p = b
        .post(
            &format!("/portal/messages/{a}/reschedule"),
            &[
                ("csrf", &csrf),
                ("at", &format!("{y}-01-15T10:00")),
                ("tz", "Europe/Berlin"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let m = api.message(&a).await;
    assert_eq!(m["deliveryTime"], format!("{y}-01-15T09:00:00Z"));
    let page = b.get(&format!("/portal/messages/{a}")).await;
    assert!(
        page.body.contains(&format!(
            "Rescheduled (was Scheduled) for <time datetime=\"{y}-01-15T09:00:00Z\" data-local>"
        )),
        "{}",
        page.body
    );

    // 02:30 on Berlin's next spring-forward night does not exist.
    let spring_forward =
        common::calendar::next_spring_forward(chrono_tz::Europe::Berlin, chrono::Utc::now());
    let bad = b
        .post(
            &format!("/portal/messages/{a}/reschedule"),
            &[
                ("csrf", &csrf),
                ("at", &format!("{}T02:30", spring_forward.day)),
                ("tz", "Europe/Berlin"),
            ],
        )
        .await;
    assert_eq!(
        bad.status,
        StatusCode::BAD_REQUEST,
        "a time the clocks skip"
    );
    let bad = b
        .post(
            &format!("/portal/messages/{a}/reschedule"),
            &[
                ("csrf", &csrf),
                ("at", &format!("{y}-01-15T10:00")),
                ("tz", "Mars/Base"),
            ],
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        api.message(&a).await["deliveryTime"],
        format!("{y}-01-15T09:00:00Z"),
        "unchanged by bad input"
    );

    let p = b
        .post(&format!("/portal/messages/{c}/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!(
        p.location(),
        format!("/portal/messages/{c}?notice=cancelled")
    );
    assert_eq!(message_state(&api, &c).await, "Cancelled");
    let page = b.get(p.location()).await;
    assert!(
        page.body.contains("The message was cancelled.")
            && page.body.contains("Cancelled (was Scheduled)")
    );
    assert!(
        !page.body.contains("id=\"cancel\""),
        "no actions on a cancelled message"
    );
    let again = b
        .post(&format!("/portal/messages/{c}/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(again.body.contains("The message is Cancelled"));
}

#[tokio::test]
async fn a_test_message_from_the_target_page_is_delivered_and_shown_with_its_attempt() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200).body("thanks"));
    let target = api.webhook(&rx.url("/hook")).await;
    let tid = s(&target["targetId"]);
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;
    let p = b
        .post(&format!("/portal/targets/{tid}/test"), &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let path = p.location().to_string();
    assert!(path.ends_with("?notice=test&watch=1"), "{path}");
    let watching = b.get(&path).await;
    app.running().sweeper.deliver_due_now().await;
    let got = rx.wait_for(1, WAIT).await;
    assert!(s(&got[0].json()["payload"]).contains("\"test\":true"));
    let id = path
        .trim_start_matches("/portal/messages/")
        .split('?')
        .next()
        .unwrap();
    api.wait_for_state(id, "Delivered", WAIT).await;
    let page = b.get(&path).await;
    assert!(
        page.body.contains("id=\"message-state\">Delivered<"),
        "{}",
        page.body
    );
    assert!(page.body.contains("data-outcome=\"Success\""));
    assert!(page.body.contains("thanks"), "the response excerpt");
    assert!(
        !page.body.contains("data-watch"),
        "a settled message is not watched"
    );
    // Before delivery it was being watched (or already delivered by the sweeper).
    assert!(watching.body.contains("data-watch") || watching.body.contains(">Delivered<"));
}

#[tokio::test]
async fn an_attempt_answered_with_retry_after_shows_the_wait_it_imposed() {
    let app =
        TestApp::spawn_with(|c| c.retry.max_retry_after = std::time::Duration::from_millis(300))
            .await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(429).header("Retry-After", "60")]);
    rx.always(Reply::status(200));
    let target = api.webhook(&rx.url("/hook")).await;
    let m = api
        .schedule(s(&target["targetId"]), &common::in_ms(0), "wait for me")
        .await;
    let id = s(&m["messageId"]);
    api.wait_for_state(id, "Delivered", WAIT).await;
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let page = b.get(&format!("/portal/messages/{id}")).await;
    assert!(
        page.body.contains("data-retry-after-ms=\"300\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("the next attempt waited 300 ms"));
}

#[tokio::test]
async fn a_targets_limits_are_set_with_the_form_and_an_open_breaker_is_closed_by_hand() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(500));
    let url = rx.url("/hook");
    let t = api
        .webhook_with(
            &url,
            json!({"circuitBreaker": {"failures": 1, "cooldown": "1h"}}),
        )
        .await;
    let tid = s(&t["targetId"]).to_string();
    let m = api.schedule(&tid, &common::in_ms(0), "x").await;
    rx.wait_for(1, WAIT).await;
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let page = common::eventually(WAIT, "the page shows the breaker open", async || {
        let page = b.get(&format!("/portal/targets/{tid}")).await;
        if page.body.contains("data-breaker=\"open\"") {
            Ok(page)
        } else {
            Err(page.body)
        }
    })
    .await;
    assert!(page.body.contains("id=\"reset-breaker\""), "{}", page.body);
    assert_eq!(message_state(&api, s(&m["messageId"])).await, "Scheduled");

    // Closed by hand: the waiting message goes at once.
    rx.always(Reply::status(200));
    let csrf = page.csrf();
    let p = b
        .post(
            &format!("/portal/targets/{tid}/reset-breaker"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    api.wait_for_state(s(&m["messageId"]), "Delivered", WAIT)
        .await;
    let read: Value = api
        .get(&format!("/targets/{tid}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read["health"]["state"], "closed", "{read}");

    // The edit form sets the limits, and the page states them.
    let edit = b.get(&format!("/portal/targets/{tid}/edit")).await;
    assert!(edit
        .body
        .contains("name=\"cooldown\" type=\"text\" value=\"1h\""));
    let p = b
        .post(
            &format!("/portal/targets/{tid}"),
            &[
                ("csrf", &csrf),
                ("name", "limited"),
                ("enabled", "on"),
                ("url", &url),
                ("signingSecret", ""),
                ("parallelism", "2"),
                ("rate", "10"),
                ("period", "1s"),
                ("failures", ""),
                ("cooldown", ""),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let read: Value = api
        .get(&format!("/targets/{tid}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        read["config"]["flowControl"],
        json!({"parallelism": 2, "rate": 10, "period": "1s"})
    );
    assert!(read["config"]["circuitBreaker"].is_null() && read["health"].is_null());
    let page = b.get(&format!("/portal/targets/{tid}")).await;
    assert!(
        page.body
            .contains("at most 2 in flight · at most 10 started per 1s"),
        "{}",
        page.body
    );
    let bad = b
        .post(
            &format!("/portal/targets/{tid}"),
            &[
                ("csrf", &csrf),
                ("name", "limited"),
                ("url", &url),
                ("parallelism", "0"),
            ],
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("config.flowControl.parallelism"));
}

#[tokio::test]
async fn redrive_shows_the_count_then_reschedules_every_matching_dead_letter() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let other_rx = Receiver::start().await;
    let t1 = s(&api.webhook(&rx.url("/hook")).await["targetId"]).to_string();
    let t2 = s(&api.webhook(&other_rx.url("/hook")).await["targetId"]).to_string();
    let dead = dead_letters(&app, &api, &rx, &t1, 3).await;
    let other = dead_letters(&app, &api, &other_rx, &t2, 1).await;
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;

    // The list of dead letters offers to redrive what its filters select,
    // but not from a payload search (the redrive would take them all).
    let list = b
        .get(&format!("/portal/messages?state=DeadLetter&target={t1}"))
        .await;
    assert!(list.body.contains("id=\"redrive-filtered\""));
    let searched = b
        .get(&format!(
            "/portal/messages?state=DeadLetter&target={t1}&text=dead"
        ))
        .await;
    assert!(searched.body.contains("data-message="), "{}", searched.body);
    assert!(!searched.body.contains("id=\"redrive-filtered\""));

    let target_page = b.get(&format!("/portal/targets/{t1}")).await;
    assert!(
        target_page.body.contains("3 dead letters")
            && target_page.body.contains("id=\"redrive-target\"")
    );
    let confirm = b
        .get(&format!("/portal/messages/redrive?target={t1}"))
        .await;
    assert_eq!(confirm.status, 200);
    assert_eq!(
        confirm.body.matches("name=\"tz\"").count(),
        1,
        "one zone field for the new time; the filter's zone travels as filterTz"
    );
    assert!(confirm.body.contains("name=\"filterTz\""));
    assert!(
        confirm.body.contains("<strong>3</strong> dead letters"),
        "{}",
        confirm.body
    );
    let overview = b.get("/portal/overview").await;
    assert!(
        overview
            .body
            .contains("id=\"dead-waiting\" href=\"/portal/messages?state=DeadLetter\">4<"),
        "{}",
        overview.body
    );

    rx.always(Reply::status(200));
    let p = b
        .post(
            "/portal/messages/redrive",
            &[("csrf", &csrf), ("target", &t1), ("at", ""), ("tz", "UTC")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(
        p.location(),
        format!("/portal/messages?notice=redriven&n=3&target={t1}")
    );
    assert!(b
        .get(p.location())
        .await
        .body
        .contains("3 dead letters were rescheduled."));
    app.running().sweeper.deliver_due_now().await;
    for id in &dead {
        api.wait_for_state(id, "Delivered", WAIT).await;
    }
    assert_eq!(
        message_state(&api, &other[0]).await,
        "DeadLetter",
        "another target's dead letter stays"
    );
    let page = b.get(&format!("/portal/messages/{}", dead[0])).await;
    assert!(page.body.contains("Rescheduled (was Dead letter)"));
}

#[tokio::test]
async fn bulk_actions_confirm_a_count_and_act_only_on_what_the_selection_allows() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let tid = s(&api.webhook(&rx.url("/hook")).await["targetId"]).to_string();
    let dead = dead_letters(&app, &api, &rx, &tid, 2).await;
    let later: Vec<String> = futures::future::join_all((0..3).map(|i| {
        let api = api.clone();
        let tid = tid.clone();
        async move {
            s(&api
                .schedule(&tid, "2099-01-01T00:00:00Z", &format!("later {i}"))
                .await["messageId"])
            .to_string()
        }
    }))
    .await;
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;

    let list = b.get("/portal/messages?state=Scheduled").await;
    for id in &later {
        assert!(list.body.contains(&format!("value=\"{id}\"")));
    }
    for id in &dead {
        assert!(!list.body.contains(id.as_str()), "filtered by state");
    }
    // Cancel two Scheduled messages and a dead letter; only eligible ones count.
    let form = [
        ("csrf", csrf.as_str()),
        ("action", "cancel"),
        ("ids", &later[0]),
        ("ids", &later[1]),
        ("ids", &dead[0]),
    ];
    let confirm = b.post("/portal/messages/bulk", &form).await;
    assert_eq!(confirm.status, 200);
    assert!(
        confirm
            .body
            .contains("You selected 3 messages; <strong>3</strong> can be cancelled."),
        "{}",
        confirm.body
    );
    assert_eq!(
        message_state(&api, &later[0]).await,
        "Scheduled",
        "nothing happens before confirming"
    );
    let done = b
        .post(
            "/portal/messages/bulk",
            &[form.as_slice(), &[("confirmed", "yes")]].concat(),
        )
        .await;
    assert_eq!(
        done.location(),
        "/portal/messages?notice=bulk-cancelled&n=3"
    );
    assert_eq!(message_state(&api, &later[0]).await, "Cancelled");
    assert_eq!(message_state(&api, &later[1]).await, "Cancelled");
    assert_eq!(message_state(&api, &dead[0]).await, "Cancelled");
    assert_eq!(
        message_state(&api, &later[2]).await,
        "Scheduled",
        "not selected"
    );

    // Rescheduling a selection moves only its dead letters.
    let form = [
        ("csrf", csrf.as_str()),
        ("action", "redrive"),
        ("ids", &dead[1]),
        ("ids", &later[2]),
    ];
    let confirm = b.post("/portal/messages/bulk", &form).await;
    assert!(
        confirm
            .body
            .contains("<strong>1</strong> can be rescheduled"),
        "{}",
        confirm.body
    );
    rx.always(Reply::status(200));
    let done = b
        .post(
            "/portal/messages/bulk",
            &[
                form.as_slice(),
                &[("confirmed", "yes"), ("at", ""), ("tz", "UTC")],
            ]
            .concat(),
        )
        .await;
    assert_eq!(done.location(), "/portal/messages?notice=redriven&n=1");
    app.running().sweeper.deliver_due_now().await;
    api.wait_for_state(&dead[1], "Delivered", WAIT).await;
    assert_eq!(
        api.message(&later[2]).await["deliveryTime"],
        "2099-01-01T00:00:00Z"
    );

    let garbled = b
        .post(
            "/portal/messages/bulk",
            &[
                ("csrf", csrf.as_str()),
                ("csrf", csrf.as_str()),
                ("action", "cancel"),
            ],
        )
        .await;
    assert_eq!(garbled.status, StatusCode::BAD_REQUEST);
    assert!(garbled.body.contains("The form could not be read") && garbled.body.contains("<html"));
    let empty = b
        .post(
            "/portal/messages/bulk",
            &[("csrf", csrf.as_str()), ("action", "cancel")],
        )
        .await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_message_list_filters_by_state_target_and_due_time_pages_and_finds_by_id() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t1 = s(&api.webhook(&rx.url("/a")).await["targetId"]).to_string();
    let t2 = s(&api.webhook(&rx.url("/b")).await["targetId"]).to_string();
    let y = common::calendar::years_ahead(4);
    let jan10 = format!("{y}-01-10T12:00:00Z");
    let jan = s(&api.schedule(&t1, &jan10, "jan").await["messageId"]).to_string();
    let feb10 = format!("{y}-02-10T12:00:00Z");
    let feb = s(&api.schedule(&t1, &feb10, "feb").await["messageId"]).to_string();
    let other = s(&api.schedule(&t2, &jan10, "other").await["messageId"]).to_string();
    let later = format!("{}-01-01T00:00:00Z", y + 1);
    for i in 0..55 {
        api.schedule(&t2, &later, &format!("bulk {i}")).await;
    }
    let mut b = signed_in(&app, "acme", "ops@example.com").await;

    let by_target = b.get(&format!("/portal/messages?target={t1}")).await;
    assert!(
        by_target.body.contains(&jan)
            && by_target.body.contains(&feb)
            && !by_target.body.contains(&other)
    );
    // January in Berlin time.
    let january = b
        .get(&format!("/portal/messages?target={t1}&from={y}-01-01T00%3A00&to={y}-02-01T00%3A00&tz=Europe%2FBerlin"))
        .await;
    assert!(
        january.body.contains(&jan) && !january.body.contains(&feb),
        "{}",
        january.body
    );

    // 58 messages: a first page of 50 and a link to the rest.
    let first = b.get("/portal/messages").await;
    assert_eq!(first.body.matches("name=\"ids\"").count(), 50);
    let second = b.get(&first.next_page()).await;
    assert_eq!(second.body.matches("name=\"ids\"").count(), 8);
    assert!(second.body.contains(&jan) && !second.body.contains("id=\"next-page\""));
    // The second page leads back to the newest (issue: it had no way back).
    assert!(!first.body.contains("id=\"newest-page\""));
    assert!(
        second
            .body
            .contains("id=\"newest-page\" href=\"/portal/messages\""),
        "{}",
        second.body
    );
    let by_t2 = b.get(&format!("/portal/messages?target={t2}")).await;
    let older = b.get(&by_t2.next_page()).await;
    assert!(
        older.body.contains(&format!(
            "id=\"newest-page\" href=\"/portal/messages?target={t2}\""
        )),
        "the way back keeps the filter: {}",
        older.body
    );

    let found = b.get(&format!("/portal/messages?q={feb}")).await;
    assert_eq!(found.location(), format!("/portal/messages/{feb}"));
    let nonsense = b.get("/portal/messages?q=hello").await;
    assert_eq!(nonsense.status, 200);
    assert!(nonsense.body.contains("is not a message id"));
    let bad_state = b.get("/portal/messages?state=Lost").await;
    assert!(bad_state.body.contains("`Lost` is not a state"));
}

#[tokio::test]
async fn pages_carry_security_headers_and_work_without_any_external_asset() {
    let app = TestApp::spawn().await;
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    for path in [
        "/portal/login",
        "/portal/overview",
        "/portal/targets",
        "/portal/targets/new",
        "/portal/messages",
    ] {
        let p = b.get(path).await;
        assert_eq!(p.status, 200, "{path}");
        let csp = p
            .headers
            .get("content-security-policy")
            .unwrap()
            .to_str()
            .unwrap();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
            "{csp}"
        );
        assert_eq!(p.headers.get("cache-control").unwrap(), "no-store");
        assert_eq!(p.headers.get("x-frame-options").unwrap(), "DENY");
        for attr in ["src=\"", "href=\""] {
            for scheme in ["http:", "https:", "//"] {
                assert!(
                    !p.body.contains(&format!("{attr}{scheme}")),
                    "{path} loads nothing from elsewhere"
                );
            }
        }
        assert!(p.body.contains("<html lang=\"en\">") && p.body.contains("name=\"viewport\""));
    }
    for asset in ["/portal/static/portal.css", "/portal/static/portal.js"] {
        assert_eq!(b.get(asset).await.status, 200);
    }
    let missing = b
        .get("/portal/messages/DI-M-00000000-0000-0000-0000-000000000000")
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_target_made_with_the_form_past_the_accounts_limit_is_refused_in_words_and_not_made() {
    let app = TestApp::spawn_with(|c| c.limits.targets = 1).await;
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;
    let form = |name: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("name", name.to_string()),
            ("type", "webhook".to_string()),
            ("enabled", "on".to_string()),
            ("url", "https://example.com/hook".to_string()),
        ]
    };
    let first = form("first");
    let first: Vec<(&str, &str)> = first.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        b.post("/portal/targets", &first).await.status,
        StatusCode::SEE_OTHER
    );
    let second = form("second");
    let second: Vec<(&str, &str)> = second.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let p = b.post("/portal/targets", &second).await;
    assert_eq!(p.status, StatusCode::CONFLICT, "{}", p.body);
    assert!(
        p.body.contains("limit of 1 targets") && p.body.contains("limits.targets"),
        "{}",
        p.body
    );
    let api = app.api("acme").await;
    let listed = api.get("/targets").await.json::<Value>().await.unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    app.shutdown().await;
}
