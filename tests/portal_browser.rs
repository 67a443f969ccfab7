//! The portal end to end, in headless Chromium: a person signs in, creates a
//! target, watches a test message arrive at a real receiver, cancels,
//! reschedules and redrives messages, and cannot see another account's.
//! Screenshots of every main page land in `target/portal-screenshots/`.
//!
//! Needs Chromium and ChromeDriver (`scripts/test` installs them); runs on
//! PostgreSQL (the default store of the test harness).

mod common;

#[path = "portal_browser/events.rs"]
mod events;
#[path = "portal_browser/lists_and_targets.rs"]
mod lists_and_targets;
#[path = "portal_browser/people.rs"]
mod people;
#[path = "portal_browser/pull.rs"]
mod pull;
#[path = "portal_browser/secrets.rs"]
mod secrets;
#[path = "portal_browser/told.rs"]
mod told;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::{
    browser::{screenshot_dir, Browser, BROWSER_ZONE},
    in_ms,
    receiver::{Receiver, Reply},
    Api, TestApp,
};
use serde_json::{json, Value};

const PASSWORD: &str = "a long password 123";
const WAIT: Duration = Duration::from_secs(10);
const FAR: i64 = 30 * 24 * 3_600_000;

/// An instant as the picker's UTC line shows it: to the second.
fn utc_shown(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn s(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

/// A portal user of `account`, created directly in the store.
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
    assert!(created, "the user {email} was not created");
}

/// A webhook target named `name` for `url`; returns its id.
async fn target(api: &Api, name: &str, url: &str) -> String {
    let r = api
        .post(
            "/targets",
            json!({"name": name, "type": "webhook", "config": {"url": url}}),
        )
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    s(&r.json::<Value>().await.unwrap()["targetId"]).to_string()
}

/// Schedules a message for `target` `ms` from now; returns its id.
async fn schedule(api: &Api, target: &str, ms: i64, payload: &str) -> String {
    s(&api.schedule(target, &in_ms(ms), payload).await["messageId"]).to_string()
}

/// A message that has already been dead-lettered (its receiver must answer
/// the attempt with a non-retryable status).
async fn dead_letter(api: &Api, target: &str, payload: &str) -> String {
    let id = schedule(api, target, 0, payload).await;
    api.wait_for_state(&id, "DeadLetter", WAIT).await;
    id
}

async fn state(api: &Api, id: &str) -> String {
    s(&api.message(id).await["state"]).to_string()
}

fn time(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s(v))
        .unwrap_or_else(|e| panic!("{v} is not an RFC 3339 time: {e}"))
        .with_timezone(&Utc)
}

/// The texts of every element `css` matches.
async fn texts(b: &Browser, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in b.find_all(css).await {
        out.push(e.text().await.unwrap().trim().to_string());
    }
    out
}

async fn has_session_cookie(b: &Browser) -> bool {
    b.client
        .get_all_cookies()
        .await
        .unwrap()
        .iter()
        .any(|c| c.name() == "dispatch_session")
}

/// Posts a form the page did not offer, with the session's own CSRF token
/// (taken from the sign-out form) and `fields` (`[[name, value], …]`).
async fn post_form(b: &Browser, action: &str, fields: Value) {
    b.mark_page().await;
    b.js_with(
        "const f = document.createElement('form');
         f.method = 'post'; f.action = arguments[0];
         const add = (n, v) => { const i = document.createElement('input');
           i.type = 'hidden'; i.name = n; i.value = v; f.appendChild(i); };
         add('csrf', document.querySelector('form[action=\"/portal/logout\"] input[name=csrf]').value);
         for (const [n, v] of arguments[1]) add(n, v);
         document.body.appendChild(f); f.submit();",
        vec![json!(action), fields],
    )
    .await;
    b.wait_for_new_page().await;
}

async fn sign_out(b: &Browser) {
    b.click_and_wait(r#"header form[action="/portal/logout"] button"#)
        .await;
    b.wait_path("/portal/login").await;
}

// ------------------------------------------------------------------ journeys

#[tokio::test]
async fn a_person_signs_in_creates_a_webhook_target_and_watches_a_test_message_delivered() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let b = Browser::start(&app.base).await;

    // Signed out, a page of the portal sends the person to sign in, and back.
    b.goto("/portal/overview").await;
    b.wait_path("/portal/login").await;
    assert_eq!(b.path().await, "/portal/login?next=%2Fportal%2Foverview");
    b.submit_sign_in("OPS@example.com ", PASSWORD).await;
    assert_eq!(b.path().await, "/portal/overview");
    let cookie = b
        .client
        .get_named_cookie("dispatch_session")
        .await
        .expect("a session cookie");
    assert_eq!(cookie.http_only(), Some(true), "{cookie:?}");
    assert_eq!(format!("{:?}", cookie.same_site()), "Some(Strict)");
    assert_eq!(cookie.path(), Some("/portal"));
    assert_eq!(
        texts(&b, "header nav a").await,
        [
            "Overview",
            "Targets",
            "Messages",
            "Schedules",
            "Events",
            "People"
        ]
    );
    assert_eq!(b.text("#delivered-24h").await, "0");

    // Targets → New target.
    b.click_and_wait(r#"header nav a[href="/portal/targets"]"#)
        .await;
    assert_eq!(b.path().await, "/portal/targets");
    assert!(
        !b.exists("table#targets").await,
        "a new account has targets"
    );
    b.follow_link("New target").await;
    assert_eq!(b.path().await, "/portal/targets/new");

    // The type radios show the fields of the chosen type.
    assert_eq!(
        b.find("input[name=type][value=webhook]")
            .await
            .prop("checked")
            .await
            .unwrap()
            .as_deref(),
        Some("true")
    );
    assert!(b.displayed("#f-url").await);
    assert!(
        !b.displayed("#f-queueUrl").await,
        "SQS fields show for a webhook"
    );
    b.click("input[name=type][value=sqs]").await;
    assert!(
        b.displayed("#f-queueUrl").await,
        "the SQS fields did not appear"
    );
    assert!(b.displayed("#f-region").await);
    assert!(!b.displayed("#f-url").await, "the webhook fields stayed");
    b.click("input[name=type][value=webhook]").await;
    assert!(b.displayed("#f-url").await);
    assert!(!b.displayed("#f-queueUrl").await);

    // A form with a bad URL comes back with the errors and what was typed.
    b.fill("#f-name", "Orders").await;
    b.fill("#f-url", "not a url").await;
    b.click_and_wait("form.target-form button[type=submit]")
        .await;
    assert_eq!(b.status().await, 400);
    assert!(b.exists("div.error-summary").await);
    assert_eq!(b.value("#f-name").await, "Orders");
    assert!(
        api.get("/targets").await.json::<Value>().await.unwrap()["items"]
            .as_array()
            .unwrap()
            .is_empty(),
        "an invalid form created a target"
    );

    // The real thing; the generated signing secret is shown once.
    let hook = rx.url("/hook");
    b.fill("#f-url", &hook).await;
    b.fill("#f-headers", "X-Team: core").await;
    assert_eq!(
        b.find("form.target-form button[type=submit]")
            .await
            .text()
            .await
            .unwrap(),
        "Create target"
    );
    b.click_and_wait("form.target-form button[type=submit]")
        .await;
    assert_eq!(b.status().await, 200);
    let secret = b.text("code#signing-secret").await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(b.text("p.notice").await, "The target was created.");
    b.follow_link("Go to the target").await;
    let id = b.text("code#target-id").await;
    assert!(id.starts_with("DI-T-"), "{id}");
    assert_eq!(b.path().await, format!("/portal/targets/{id}"));
    assert_eq!(b.text("dd#target-status").await, "Enabled");
    assert!(
        !b.exists("#signing-secret").await,
        "the secret is shown again"
    );
    assert!(!b.exists("#redrive-target").await);
    let t = api
        .get(&format!("/targets/{id}"))
        .await
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(t["name"], "Orders");
    assert_eq!(t["config"]["url"], hook.as_str());
    assert_eq!(t["enabled"], true);

    // Send a test message and watch its page until it is delivered.
    b.click_and_wait("button#send-test").await;
    let path = b.path().await;
    assert!(
        path.starts_with("/portal/messages/DI-M-") && path.contains("watch=1"),
        "{path}"
    );
    let message = path["/portal/messages/".len()..]
        .split('?')
        .next()
        .unwrap()
        .to_string();
    b.wait_text("dd#message-state", "Delivered").await;
    let got = rx.wait_for(1, WAIT).await;
    assert_eq!(got.len(), 1, "the receiver got {} requests", got.len());
    let req = &got[0];
    assert_eq!(req.path, "/hook");
    assert_eq!(req.header("x-team").as_deref(), Some("core"));
    assert_eq!(req.header("webhook-id").as_deref(), Some(message.as_str()));
    let body = req.json();
    assert_eq!(body["messageId"], message.as_str());
    assert_eq!(body["targetId"], id.as_str());
    assert!(
        s(&body["payload"]).contains("the Dispatch portal"),
        "{body}"
    );
    // The secret the page showed is the one the requests are signed with.
    let key = dispatch::domain::target::signing_key(&secret).expect("a whsec_ secret");
    let ts: i64 = req.header("webhook-timestamp").unwrap().parse().unwrap();
    let expected = dispatch::delivery::signing::sign(&key, &message, ts, &req.body);
    let sigs = req.header("webhook-signature").unwrap();
    assert!(
        sigs.split(' ').any(|sig| sig == expected),
        "{sigs} is not signed with {secret}"
    );

    assert!(
        !b.exists("[data-watch]").await,
        "a delivered message is still watched"
    );
    assert_eq!(b.find_all("table#attempts tbody tr").await.len(), 1);
    assert_eq!(
        b.find_all("table#attempts tr[data-outcome=Success]")
            .await
            .len(),
        1
    );
    assert!(b.text("ol#history").await.contains("Delivered"));
    assert!(b.text("pre#payload").await.contains("the Dispatch portal"));
    assert!(
        !b.exists("button#cancel").await,
        "a delivered message can be cancelled"
    );
    assert_eq!(state(&api, &message).await, "Delivered");

    // Signing out ends the session, in the browser and on the server.
    sign_out(&b).await;
    assert!(!has_session_cookie(&b).await, "the session cookie stayed");
    b.client.add_cookie(cookie.into_owned()).await.unwrap();
    assert!(
        has_session_cookie(&b).await,
        "the old cookie was not put back"
    );
    b.goto("/portal/overview").await;
    b.wait_path("/portal/login").await;
    assert!(b.exists("#password").await);

    b.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_scheduled_message_is_cancelled_from_its_page_after_a_confirmation() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", &rx.url("/hook")).await;
    let id = schedule(&api, &t, FAR, r#"{"order":42}"#).await;

    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto(&format!("/portal/messages/{id}")).await;
    assert_eq!(b.text("dd#message-state").await, "Scheduled");
    assert!(b.text("pre#payload").await.contains("\"order\": 42"));

    // Saying no to the confirmation changes nothing.
    b.click("button#cancel").await;
    let question = b.client.get_alert_text().await.expect("a confirmation");
    assert!(question.contains("Cancel this message?"), "{question}");
    b.client.dismiss_alert().await.unwrap();
    assert_eq!(b.text("dd#message-state").await, "Scheduled");
    assert_eq!(state(&api, &id).await, "Scheduled");

    // Saying yes cancels it.
    b.mark_page().await;
    b.click("button#cancel").await;
    b.client
        .accept_alert()
        .await
        .expect("a confirmation to accept");
    b.wait_for_new_page().await;
    b.wait_text("dd#message-state", "Cancelled").await;
    assert_eq!(b.text("p.notice").await, "The message was cancelled.");
    let history = texts(&b, "ol#history li").await;
    assert!(
        history
            .iter()
            .any(|h| h.contains("Cancelled (was Scheduled)")),
        "{history:?}"
    );
    assert!(!b.exists("button#cancel").await);
    assert!(!b.exists("button#reschedule").await);
    assert_eq!(state(&api, &id).await, "Cancelled");
    assert_eq!(rx.count(), 0);

    b.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_dead_letter_is_rescheduled_from_its_page_for_a_time_in_another_zone_and_delivered() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(400).body("no such order")]);
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", &rx.url("/hook")).await;
    let id = dead_letter(&api, &t, r#"{"order":7}"#).await;

    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto(&format!("/portal/messages/{id}")).await;
    assert_eq!(b.text("dd#message-state").await, "DeadLetter");
    assert_eq!(
        b.find_all("table#attempts tr[data-outcome=NonRetryableFailure]")
            .await
            .len(),
        1
    );
    assert!(b.text("ol#history").await.contains("Dead letter"));

    // The zone starts as the browser's, and the field at the message's
    // due time in that zone: it stands for the same instant.
    let zone = b
        .js("return Intl.DateTimeFormat().resolvedOptions().timeZone;")
        .await;
    assert_eq!(s(&zone), BROWSER_ZONE);
    assert_eq!(b.value("#reschedule-at-tz").await, BROWSER_ZONE);
    let was_due = time(&api.message(&id).await["deliveryTime"]);
    assert_eq!(b.text("output#reschedule-at-utc").await, utc_shown(was_due));

    // Three seconds from now, written as Tokyo's wall clock (UTC+9, no DST):
    // the page shows the UTC instant, and that is when the message is due.
    let due = Utc::now() + TimeDelta::seconds(3);
    let due = due - TimeDelta::nanoseconds(due.timestamp_subsec_nanos() as i64);
    let tokyo = (due + TimeDelta::hours(9))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    b.set_value("#reschedule-at-tz", "Asia/Tokyo").await;
    b.set_value("#reschedule-at", &tokyo).await;
    assert_eq!(
        b.text("output#reschedule-at-utc").await,
        due.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    );
    b.click_and_wait("button#reschedule").await;
    assert_eq!(b.text("p.notice").await, "The message was rescheduled.");
    let m = api.message(&id).await;
    assert_eq!(time(&m["deliveryTime"]), due, "{m}");

    b.wait_text("dd#message-state", "Delivered").await;
    assert_eq!(rx.count(), 2);
    assert!(
        rx.received()[1].at >= due,
        "delivered at {} before it was due at {due}",
        rx.received()[1].at
    );
    assert_eq!(
        b.find_all("table#attempts tr[data-outcome=Success]")
            .await
            .len(),
        1
    );
    assert_eq!(
        b.find_all("table#attempts tr[data-outcome=NonRetryableFailure]")
            .await
            .len(),
        1
    );
    let history = b.text("ol#history").await;
    assert!(
        history.contains("Rescheduled (was Dead letter)"),
        "{history}"
    );
    // Issue: a redrive cleared what happened before it. The history keeps
    // the dead letter with its reason, and the overview still counts it.
    assert!(
        history.contains("Dead letter: HTTP 400"),
        "a redriven message keeps its dead letter in its history: {history}"
    );
    assert_eq!(state(&api, &id).await, "Delivered");
    b.goto("/portal/overview").await;
    assert_eq!(b.text("#dead-lettered-24h").await, "1");
    assert_eq!(b.text("#dead-waiting").await, "0");

    b.close().await;
    app.shutdown().await;
}

/// Issue: after any reschedule the page reloaded every second until the
/// message was due, wiping what a person typed, and an empty field meant
/// "now". A reschedule far ahead is not watched; one due soon is, until a
/// field is touched; the field starts at the due time; empty is refused;
/// "Deliver now" is a button of its own.
#[tokio::test]
async fn a_reschedule_keeps_what_is_typed_and_an_empty_field_is_not_now() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", &rx.url("/hook")).await;
    let id = schedule(&api, &t, 3_600_000, r#"{"order":8}"#).await;
    let due = time(&api.message(&id).await["deliveryTime"]);

    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto(&format!("/portal/messages/{id}")).await;
    assert_eq!(b.value("#reschedule-at-tz").await, BROWSER_ZONE);
    assert_eq!(b.text("output#reschedule-at-utc").await, utc_shown(due));

    // A day later, written in Tokyo: not watched, nothing reloads.
    let later = due + TimeDelta::days(1);
    let later = later - TimeDelta::nanoseconds(later.timestamp_subsec_nanos() as i64);
    b.set_value("#reschedule-at-tz", "Asia/Tokyo").await;
    b.set_value(
        "#reschedule-at",
        &(later + TimeDelta::hours(9))
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string(),
    )
    .await;
    b.click_and_wait("button#reschedule").await;
    assert_eq!(b.text("p.notice").await, "The message was rescheduled.");
    assert_eq!(time(&api.message(&id).await["deliveryTime"]), later);
    assert!(
        !b.exists("[data-watch]").await,
        "a delivery a day ahead is not watched"
    );
    assert_eq!(b.text("output#reschedule-at-utc").await, utc_shown(later));

    // Emptied, the field is refused, and nothing changes.
    post_form(
        &b,
        &format!("/portal/messages/{id}/reschedule"),
        json!([["at", ""], ["tz", "UTC"]]),
    )
    .await;
    assert_eq!(b.status().await, 400);
    assert!(
        b.body_text().await.contains("Deliver now"),
        "{}",
        b.body_text().await
    );
    assert_eq!(time(&api.message(&id).await["deliveryTime"]), later);

    // Due in a minute: watched, until the person types into the form.
    b.goto(&format!("/portal/messages/{id}")).await;
    let soon = Utc::now() + TimeDelta::minutes(1);
    let soon = soon - TimeDelta::nanoseconds(soon.timestamp_subsec_nanos() as i64);
    b.set_value("#reschedule-at-tz", "UTC").await;
    b.set_value(
        "#reschedule-at",
        &soon.format("%Y-%m-%dT%H:%M:%S").to_string(),
    )
    .await;
    b.click_and_wait("button#reschedule").await;
    assert!(
        b.exists("[data-watch]").await,
        "a delivery a minute ahead is watched"
    );
    b.set_value("#reschedule-at-tz", "America/New_York").await;
    // Past the page's reload, one second after it loaded: a timer set now
    // for a second fires after the page's own (timers of one page fire in
    // the order they fall due), and the page it runs on is still this one
    // (a reload would end the script, and the mark with the page).
    b.mark_page().await;
    b.client
        .execute_async(
            "const done = arguments[arguments.length - 1]; setTimeout(() => done(true), 1000);",
            Vec::new(),
        )
        .await
        .expect("the page reloaded under the script");
    assert_eq!(
        b.js("return window.__dispatchOldPage === true;").await,
        json!(true),
        "the page reloaded"
    );
    assert_eq!(b.value("#reschedule-at-tz").await, "America/New_York");
    assert!(
        b.text("[data-watch]").await.contains("Refreshing stopped"),
        "{}",
        b.text("[data-watch]").await
    );

    // "Deliver now" says what it does.
    b.click_and_wait("button#reschedule-now").await;
    b.wait_text("dd#message-state", "Delivered").await;
    assert_eq!(rx.count(), 1);

    b.close().await;
    app.shutdown().await;
}

/// Issue: the page showing a new target's secret was the answer to the
/// POST, so reloading it created a second target. The answer is now a
/// redirect to a page that shows the secret once; reloaded, it shows it no
/// more and nothing is created.
#[tokio::test]
async fn reloading_the_new_secret_page_creates_nothing_and_shows_the_secret_no_more() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto("/portal/targets/new").await;
    b.fill("#f-name", "Orders").await;
    b.fill("#f-url", "https://orders.example.com/hook").await;
    b.click_and_wait("form.target-form button[type=submit]")
        .await;
    let secret = b.text("code#signing-secret").await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    let path = b.path().await;
    assert!(
        path.starts_with("/portal/targets/DI-T-") && path.contains("/secret?"),
        "{path}"
    );

    b.mark_page().await;
    b.js("window.location.reload();").await;
    b.wait_for_new_page().await;
    assert!(!b.exists("#signing-secret").await, "shown again");
    assert_eq!(
        b.text("p.notice").await,
        "The signing secret was shown once and is not shown again."
    );
    let list = api.get("/targets").await.json::<Value>().await.unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    b.close().await;
    app.shutdown().await;
}

/// Issue, defect 5 in part: a Delivered message still showed the last
/// error of an earlier attempt; the state filter said "DeadLetter" where
/// badges say "Dead letter"; signing out showed no notice; `/favicon.ico`
/// answered 404.
#[tokio::test]
async fn a_delivered_message_shows_no_stale_error_and_sign_out_says_so() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(400).body("no such order")]);
    rx.always(Reply::status(200));
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", &rx.url("/hook")).await;
    let id = dead_letter(&api, &t, r#"{"order":9}"#).await;
    let r = api
        .post(
            &format!("/messages/{id}/reschedule"),
            json!({"deliveryTime": in_ms(0)}),
        )
        .await;
    assert_eq!(r.status(), 200);
    api.wait_for_state(&id, "Delivered", WAIT).await;

    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto(&format!("/portal/messages/{id}")).await;
    assert_eq!(b.text("dd#message-state").await, "Delivered");
    let facts = b.text("dl#message-facts").await;
    assert!(!facts.contains("Last error"), "{facts}");
    assert_eq!(
        b.find_all("table#attempts tr[data-outcome=NonRetryableFailure]")
            .await
            .len(),
        1,
        "the failure stays in the attempts"
    );

    b.goto("/portal/messages").await;
    let states = texts(&b, "select#f-state option").await;
    assert_eq!(
        states,
        ["Any", "Scheduled", "Delivered", "Cancelled", "Dead letter"],
        "{states:?}"
    );

    let icon = reqwest::get(format!("{}/favicon.ico", app.base))
        .await
        .unwrap();
    assert_eq!(icon.status(), 200);
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");

    sign_out(&b).await;
    assert_eq!(b.text("p.notice").await, "You are signed out.");
    b.close().await;
    app.shutdown().await;
}

/// Issue, defect 5, the rest: not-found and error pages had no header or
/// navigation, and the filter bar's date-time inputs cut off their seconds.
#[tokio::test]
async fn error_pages_keep_the_navigation_and_filter_times_show_their_seconds() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "ops@example.com").await;
    let b = Browser::start(&app.base).await;
    b.goto("/portal/no-such-page").await;
    assert_eq!(b.status().await, 404);
    assert!(
        !b.exists("nav[aria-label=Main]").await,
        "signed out, an error page offers no navigation"
    );
    b.sign_in("ops@example.com", PASSWORD).await;
    for path in [
        "/portal/messages/DI-M-0190a5c4-8a1e-7000-8000-000000000000",
        "/portal/targets/DI-T-0000000000",
        "/portal/no-such-page",
    ] {
        b.goto(path).await;
        assert_eq!(b.status().await, 404, "{path}");
        assert_eq!(b.text("h1").await, "Not found", "{path}");
        assert_eq!(
            b.find_all("nav[aria-label=Main] a").await.len(),
            6,
            "the signed-in header and navigation (an admin's, with Events and People): {path}"
        );
        assert!(b.exists("form[action='/portal/logout']").await, "{path}");
    }

    // At a desktop's width and a phone's, every date-time of the filter
    // bar shows its whole value, seconds included.
    b.goto("/portal/messages?from=2026-12-01T09%3A15%3A45&to=2026-12-02T23%3A59%3A59&tz=UTC")
        .await;
    for (w, h) in [(1280, 900), (390, 844)] {
        b.set_viewport(w, h).await;
        for css in ["#f-from", "#f-to"] {
            // What the field shows, as wide as its font draws it, beside
            // the room it has for text (its width less padding and the
            // picker's icon).
            let fits = b
                .js_with(
                    "const e = document.querySelector(arguments[0]); \
                     const st = getComputedStyle(e); \
                     const shown = new Date(e.value + 'Z').toLocaleString(navigator.language, \
                       {timeZone: 'UTC', year: 'numeric', month: '2-digit', day: '2-digit', \
                        hour: '2-digit', minute: '2-digit', second: '2-digit'}); \
                     const ctx = document.createElement('canvas').getContext('2d'); \
                     ctx.font = st.font; \
                     const room = e.clientWidth - parseFloat(st.paddingLeft) \
                       - parseFloat(st.paddingRight) - 24; \
                     return [shown, Math.ceil(ctx.measureText(shown).width), room];",
                    vec![json!(css)],
                )
                .await;
            let (needed, room) = (fits[1].as_i64().unwrap(), fits[2].as_i64().unwrap());
            assert!(
                needed <= room,
                "{css} at {w}px is cut off: {} needs {needed}px, has {room}px",
                fits[0]
            );
        }
    }
    b.close().await;
    app.shutdown().await;
}

/// Issue: a list filtered in UTC came back showing the browser's zone, so
/// the form misstated the filter just applied.
#[tokio::test]
async fn a_messages_filter_in_utc_keeps_utc() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "ops@example.com").await;
    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto("/portal/messages").await;
    assert_eq!(
        b.value("#f-tz").await,
        BROWSER_ZONE,
        "unset, the reader's zone"
    );
    b.goto("/portal/messages?from=2026-12-01T09%3A00%3A00&tz=UTC")
        .await;
    assert_eq!(b.value("#f-tz").await, "UTC");
    b.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn every_dead_letter_of_a_target_is_redriven_from_the_target_page() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(400));
    let other_rx = Receiver::start().await;
    other_rx.always(Reply::status(400));
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let orders = target(&api, "Orders", &rx.url("/hook")).await;
    let billing = target(&api, "Billing", &other_rx.url("/hook")).await;
    let mut dead = Vec::new();
    for n in 0..3 {
        dead.push(schedule(&api, &orders, 0, &format!(r#"{{"n":{n}}}"#)).await);
    }
    let other = schedule(&api, &billing, 0, "{}").await;
    for id in dead.iter().chain([&other]) {
        api.wait_for_state(id, "DeadLetter", WAIT).await;
    }
    rx.always(Reply::status(200));

    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;

    // The list of dead letters offers to reschedule all four.
    b.goto("/portal/messages?state=DeadLetter").await;
    assert_eq!(
        b.find_all("table#messages tr[data-state=DeadLetter]")
            .await
            .len(),
        4
    );
    b.click_and_wait("a#redrive-filtered").await;
    assert!(b.path().await.starts_with("/portal/messages/redrive?"));
    let count = b.text("p#confirm-count").await;
    assert!(count.starts_with("4 dead letters"), "{count}");

    // From the target page: only that target's three.
    b.goto(&format!("/portal/targets/{orders}")).await;
    b.click_and_wait("a#redrive-target").await;
    assert_eq!(
        b.path().await,
        format!("/portal/messages/redrive?target={orders}")
    );
    let count = b.text("p#confirm-count").await;
    assert!(count.starts_with("3 dead letters of Orders"), "{count}");
    assert_eq!(b.text("button#confirm").await, "Yes, reschedule 3");
    b.click_and_wait("button#confirm").await;
    let path = b.path().await;
    assert!(
        path.starts_with("/portal/messages?"),
        "confirming led to {path} ({}): {}",
        b.status().await,
        b.body_text().await
    );
    assert_eq!(b.text("p.notice").await, "3 dead letters were rescheduled.");

    for id in &dead {
        api.wait_for_state(id, "Delivered", WAIT).await;
    }
    assert_eq!(state(&api, &other).await, "DeadLetter");
    assert_eq!(
        other_rx.count(),
        1,
        "the other target's dead letter was sent again"
    );
    assert_eq!(rx.count(), 6);

    b.goto(&format!("/portal/targets/{orders}")).await;
    assert!(!b.exists("a#redrive-target").await);
    b.goto(&format!("/portal/targets/{billing}")).await;
    assert!(b.exists("a#redrive-target").await);

    b.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn two_of_three_scheduled_messages_are_cancelled_from_the_list() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", &rx.url("/hook")).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(schedule(&api, &t, FAR + n * 1000, "{}").await);
    }

    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.click_and_wait(r#"header nav a[href="/portal/messages"]"#)
        .await;
    assert_eq!(
        b.find_all("table#messages tr[data-state=Scheduled]")
            .await
            .len(),
        3
    );
    for id in &ids[..2] {
        b.click(&format!("input[name=ids][value={id}]")).await;
    }
    b.click_and_wait("button[name=action][value=cancel]").await;
    let count = b.text("p#confirm-count").await;
    assert_eq!(count, "You selected 2 messages; 2 can be cancelled.");
    b.click_and_wait("button#confirm").await;
    assert!(b.path().await.starts_with("/portal/messages?"));
    assert_eq!(b.text("p.notice").await, "2 messages were cancelled.");
    for id in &ids[..2] {
        assert!(
            b.exists(&format!("tr[data-message={id}][data-state=Cancelled]"))
                .await
        );
        assert_eq!(state(&api, id).await, "Cancelled");
    }
    assert!(
        b.exists(&format!(
            "tr[data-message={}][data-state=Scheduled]",
            ids[2]
        ))
        .await
    );
    assert_eq!(state(&api, &ids[2]).await, "Scheduled");

    b.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_person_of_another_account_sees_and_changes_none_of_it() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.then([Reply::status(400)]);
    user(&app, "acme", "ops@example.com").await;
    user(&app, "globex", "ops@globex.example").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", &rx.url("/hook")).await;
    let dead = dead_letter(&api, &t, "{}").await;
    let delivered = schedule(&api, &t, 0, "{}").await;
    api.wait_for_state(&delivered, "Delivered", WAIT).await;
    let scheduled = schedule(&api, &t, FAR, "{}").await;

    let b = Browser::start(&app.base).await;
    // The owner sees it all (so that the checks below are not empty ones).
    b.sign_in("ops@example.com", PASSWORD).await;
    assert_eq!(b.text("#delivered-24h").await, "1");
    assert_eq!(b.text("#dead-waiting").await, "1");
    b.goto(&format!("/portal/messages/{scheduled}")).await;
    assert_eq!(b.status().await, 200);
    assert_eq!(b.text("dd#message-state").await, "Scheduled");
    sign_out(&b).await;

    b.sign_in("ops@globex.example", PASSWORD).await;
    assert_eq!(b.text("#delivered-24h").await, "0");
    assert_eq!(b.text("#dead-lettered-24h").await, "0");
    assert_eq!(b.text("#dead-waiting").await, "0");
    assert_eq!(b.text("#lag").await, "none due");
    assert!(b.body_text().await.contains("No targets yet"));
    b.goto("/portal/targets").await;
    assert!(!b.exists("table#targets").await);
    b.goto("/portal/messages").await;
    assert!(b.exists("p#no-messages").await);
    assert!(!b.exists("table#messages").await);
    b.goto("/portal/messages?state=DeadLetter").await;
    assert!(b.exists("p#no-messages").await);
    assert!(!b.exists("a#redrive-filtered").await);

    for path in [
        format!("/portal/messages/{scheduled}"),
        format!("/portal/messages/{dead}"),
        format!("/portal/messages?q={delivered}"),
        format!("/portal/targets/{t}"),
        format!("/portal/targets/{t}/edit"),
        format!("/portal/messages/redrive?target={t}"),
    ] {
        b.goto(&path).await;
        assert_eq!(b.status().await, 404, "{path} answered another account");
        assert!(b.title().await.starts_with("Not found"), "{path}");
    }

    // Posting the first account's ids with this session's own token does nothing.
    b.goto("/portal/messages").await;
    post_form(
        &b,
        "/portal/messages/bulk",
        json!([
            ["action", "cancel"],
            ["confirmed", "yes"],
            ["ids", scheduled]
        ]),
    )
    .await;
    assert_eq!(b.text("p.notice").await, "0 messages were cancelled.");
    post_form(
        &b,
        &format!("/portal/messages/{scheduled}/cancel"),
        json!([]),
    )
    .await;
    assert_eq!(b.status().await, 404);
    b.goto("/portal/messages").await;
    post_form(&b, "/portal/messages/redrive", json!([["target", t]])).await;
    assert_eq!(
        b.status().await,
        404,
        "a redrive naming another account's target"
    );
    assert_eq!(state(&api, &scheduled).await, "Scheduled");
    assert_eq!(state(&api, &dead).await, "DeadLetter");

    b.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn forms_without_their_token_and_wrong_or_too_many_sign_ins_are_refused() {
    let app = TestApp::spawn_with(|c| c.portal.login_attempts = 3).await;
    let rx = Receiver::start().await;
    user(&app, "acme", "ops@example.com").await;
    user(&app, "acme", "night@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", &rx.url("/hook")).await;
    let id = schedule(&api, &t, FAR, "{}").await;
    let due = api.message(&id).await["deliveryTime"].clone();
    let b = Browser::start(&app.base).await;

    // The sign-in form's token is tied to a cookie: without it, no sign-in.
    b.goto("/portal/login").await;
    b.client.delete_cookie("dispatch_login").await.unwrap();
    b.submit_sign_in("ops@example.com", PASSWORD).await;
    assert_eq!(b.status().await, 403);
    assert!(b.title().await.starts_with("The form has expired"));
    assert!(!has_session_cookie(&b).await);

    // A wrong password is named, and lets no one in.
    b.goto("/portal/login").await;
    b.submit_sign_in("ops@example.com", "not the password")
        .await;
    assert_eq!(b.status().await, 401);
    assert_eq!(
        b.text("p#signin-error").await,
        "The email or the password is wrong."
    );
    assert_eq!(b.value("#email").await, "ops@example.com");
    assert!(!has_session_cookie(&b).await);

    // Forms of a session carry its token; one posted without is refused.
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto(&format!("/portal/messages/{id}")).await;
    b.js(r#"document.querySelector('form[action$="/cancel"] input[name=csrf]').remove();"#)
        .await;
    b.mark_page().await;
    b.click("button#cancel").await;
    b.client.accept_alert().await.expect("a confirmation");
    b.wait_for_new_page().await;
    assert_eq!(b.status().await, 403);
    assert!(b.title().await.starts_with("The form has expired"));
    assert_eq!(state(&api, &id).await, "Scheduled");

    // And so is one with a wrong token.
    b.goto(&format!("/portal/messages/{id}")).await;
    b.js(r#"document.querySelector('form[action$="/reschedule"] input[name=csrf]').value = 'forged';"#)
        .await;
    b.click_and_wait("button#reschedule").await;
    assert_eq!(b.status().await, 403);
    let m = api.message(&id).await;
    assert_eq!(m["state"], "Scheduled");
    assert_eq!(
        m["deliveryTime"], due,
        "a forged form rescheduled the message"
    );
    b.goto("/portal/overview").await;
    sign_out(&b).await;

    // Three tries per address and window; the fourth is refused, even the right password.
    for n in 1..=3 {
        b.goto("/portal/login").await;
        b.submit_sign_in("night@example.com", "guess").await;
        assert_eq!(b.status().await, 401, "attempt {n}");
    }
    b.goto("/portal/login").await;
    b.submit_sign_in("night@example.com", "guess").await;
    assert_eq!(b.status().await, 429);
    assert!(b
        .text("p#signin-error")
        .await
        .starts_with("Too many sign-in attempts"));
    b.goto("/portal/login").await;
    b.submit_sign_in("night@example.com", PASSWORD).await;
    assert_eq!(b.status().await, 429);
    assert!(!has_session_cookie(&b).await);

    b.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn screenshots_of_every_main_page_are_saved() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let bad_rx = Receiver::start().await;
    bad_rx.always(
        Reply::status(400)
            .body(r#"{"error":"unknown customer","detail":"customer 1234 was deleted"}"#),
    );
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let orders = target(&api, "Orders", &rx.url("/hooks/orders")).await;
    let billing = target(&api, "Billing", &bad_rx.url("/hooks/billing")).await;
    let delivered = schedule(
        &api,
        &orders,
        0,
        r#"{"order":{"id":"o-1001","lines":[{"sku":"A-1","qty":2}],"total":"49.90"}}"#,
    )
    .await;
    api.wait_for_state(&delivered, "Delivered", WAIT).await;
    let dead = dead_letter(&api, &billing, r#"{"invoice":"inv-77"}"#).await;
    for n in 0..2 {
        schedule(&api, &orders, FAR + n * 60_000, r#"{"reminder":true}"#).await;
    }

    let b = Browser::start(&app.base).await;
    b.goto("/portal/login").await;
    b.screenshot("login").await;
    b.submit_sign_in("ops@example.com", "wrong password").await;
    b.screenshot("login-error").await;
    b.sign_in("ops@example.com", PASSWORD).await;
    assert_eq!(b.text("#delivered-24h").await, "1");
    assert_eq!(b.text("#failed-24h").await, "1");
    assert_eq!(b.text("#dead-lettered-24h").await, "1");
    assert_eq!(b.text("#dead-waiting").await, "1");
    b.screenshot_full("overview").await;
    b.goto("/portal/targets").await;
    assert_eq!(b.find_all("table#targets tr[data-target]").await.len(), 2);
    b.screenshot("targets").await;
    b.goto("/portal/targets/new").await;
    b.screenshot_full("target-new").await;
    b.goto(&format!("/portal/targets/{billing}")).await;
    b.screenshot_full("target").await;
    b.goto("/portal/messages").await;
    assert_eq!(b.find_all("table#messages tr[data-message]").await.len(), 4);
    b.screenshot_full("messages").await;
    b.goto(&format!("/portal/messages/{delivered}")).await;
    assert_eq!(b.find_all("table#attempts tr[data-outcome]").await.len(), 1);
    b.screenshot_full("message-delivered").await;
    b.goto(&format!("/portal/messages/{dead}")).await;
    b.screenshot_full("message-dead-letter").await;
    b.goto("/portal/messages?state=DeadLetter").await;
    b.click_and_wait("a#redrive-filtered").await;
    assert!(b.exists("button#confirm").await);
    b.screenshot("redrive-confirm").await;

    // A phone: the page fits the width, nothing scrolls sideways.
    b.set_viewport(390, 844).await;
    b.goto(&format!("/portal/messages/{dead}")).await;
    let widths = b
        .js("return [window.innerWidth, document.documentElement.scrollWidth];")
        .await;
    b.screenshot_full("message-phone").await;
    assert_eq!(widths[0], 390, "the viewport is not phone-sized: {widths}");
    assert!(
        widths[1].as_u64() <= widths[0].as_u64(),
        "the message page is wider than a phone: {widths}"
    );

    println!("screenshots are in {}", screenshot_dir().display());
    b.close().await;
    app.shutdown().await;
}

/// A schedule made in the portal: its preview follows what is typed (by
/// script), it is saved, listed with its next run, paused and resumed, and a
/// run's message links back to it.
#[tokio::test]
async fn a_schedule_is_made_with_a_live_preview_of_its_runs_and_its_runs_link_back() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    target(&api, "Reports", &rx.url("/hook")).await;

    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto("/portal/schedules").await;
    assert!(b.body_text().await.contains("No schedules yet"));
    b.follow_link("New schedule").await;
    b.fill("#f-name", "Berlin nightly").await;
    b.fill("#f-cron", "30 2 * * *").await;
    b.fill("#f-timeZone", "Europe/Berlin").await;
    // From the eve of Berlin's next spring-forward night.
    let berlin = chrono_tz::Tz::Europe__Berlin;
    let spring = common::calendar::next_spring_forward(berlin, Utc::now() + TimeDelta::days(2));
    let eve = spring.day - TimeDelta::days(1);
    b.set_value("#f-startAt", &format!("{eve}T12:00:00")).await;
    // No button pressed: the preview follows, and shows that night's run
    // (02:30 does not exist) at the instant the clocks jump, 03:00 CEST.
    let first_run = format!(
        "{} Europe/Berlin",
        spring.at.with_timezone(&berlin).format("%Y-%m-%d %H:%M:%S")
    );
    b.wait_text("#preview ol.runs li:nth-child(1) time", &first_run)
        .await;
    b.screenshot_full("schedule-form").await;
    b.fill("#f-cron", "61 2 * * *").await;
    b.wait_text("#preview ul.error li code", "cron").await;
    b.fill("#f-cron", "30 2 * * *").await;
    b.fill("#f-payload", "{\"job\": \"nightly\"}").await;
    b.click_and_wait("button#save-schedule").await;
    assert_eq!(b.text("p.notice").await, "The schedule was created.");
    assert_eq!(b.text("h1").await, "Berlin nightly");
    b.goto("/portal/schedules").await;
    assert_eq!(texts(&b, "table#schedules tbody tr").await.len(), 1);
    assert!(b
        .text("table#schedules tbody tr")
        .await
        .contains(&first_run));
    b.screenshot_full("schedules").await;
    b.click_and_wait("table#schedules button").await;
    assert!(b
        .text("p.notice")
        .await
        .starts_with("The schedule is paused"));
    let listed: Value = api.get("/schedules").await.json().await.unwrap();
    assert_eq!(listed["items"][0]["paused"], true);

    // A schedule running now: its run's message links to it.
    let t = s(&listed["items"][0]["targetId"]).to_string();
    let every = api
        .post(
            "/schedules",
            json!({"targetId": t, "every": "1h", "payload": "{}"}),
        )
        .await
        .json::<Value>()
        .await
        .unwrap();
    let received = rx.wait_for(1, WAIT).await;
    let run = s(&received[0].json()["messageId"]).to_string();
    b.goto(&format!("/portal/messages/{run}")).await;
    b.click_and_wait("dd#schedule a").await;
    assert_eq!(
        b.path().await,
        format!("/portal/schedules/{}", s(&every["scheduleId"]))
    );

    b.close().await;
    app.shutdown().await;
}
