//! People and roles in Chromium: an admin invites a person, whose sign-up
//! link is shown once; the person joins with it in a browser of their own,
//! as the role the admin chose, and changes their password; the last admin
//! cannot demote themselves. Screenshots of the people, invitation, join
//! and account pages.

use super::*;

const NEW_PASSWORD: &str = "another long password 456";

#[tokio::test]
async fn an_invited_person_joins_with_the_link_shown_once_and_changes_their_password() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "admin@example.com").await;
    let b = Browser::start(&app.base).await;
    b.sign_in("admin@example.com", PASSWORD).await;
    assert_eq!(b.text("#my-role").await, "admin");
    b.click_and_wait("nav a[href='/portal/people']").await;
    assert_eq!(b.path().await, "/portal/people");
    b.fill("#invite-email", "New@Example.com").await;
    b.set_value("#invite-role", "operator").await;
    b.screenshot_full("people").await;
    b.click_and_wait("#invite button[type=submit]").await;
    assert_eq!(b.path().await, "/portal/people/invited");
    let link = b.text("#invite-link").await;
    let prefix = format!("{}/portal/invite/", app.base);
    assert!(link.starts_with(&prefix), "{link}");
    b.screenshot("invitation-link").await;

    // Shown once: reloading says so, and the invitation waits, listed.
    b.goto("/portal/people/invited").await;
    assert_eq!(b.path().await, "/portal/people?notice=link-shown");
    assert_eq!(
        b.text("p.notice").await,
        "The invitation's link was shown once and is not shown again."
    );
    assert!(
        b.exists("#invitations tr[data-email='new@example.com']")
            .await
    );

    // The person opens it in a browser of their own.
    let p = Browser::start(&app.base).await;
    p.goto(&link[app.base.len()..]).await;
    assert_eq!(p.text("#join-email").await, "new@example.com");
    assert_eq!(p.text("#join-role").await, "operator");
    p.screenshot("join").await;
    p.fill("#join-password", NEW_PASSWORD).await;
    p.fill("#join-confirm", "not the same password").await;
    p.click_and_wait("#join button[type=submit]").await;
    assert_eq!(p.text("#join-error").await, "The two passwords differ.");
    p.fill("#join-password", PASSWORD).await;
    p.fill("#join-confirm", PASSWORD).await;
    p.click_and_wait("#join button[type=submit]").await;
    assert_eq!(p.path().await, "/portal/overview?notice=joined");
    assert_eq!(
        p.text("p.notice").await,
        "Welcome: you have joined the account."
    );
    assert_eq!(p.text("#my-role").await, "operator");
    assert!(
        !p.exists("nav a[href='/portal/people']").await,
        "people are for admins"
    );
    // The link worked once.
    let again = Browser::start(&app.base).await;
    again.goto(&link[app.base.len()..]).await;
    assert_eq!(again.status().await, 404);
    again.close().await;

    b.goto("/portal/people").await;
    assert!(b.exists("#people tr[data-email='new@example.com']").await);
    assert!(!b.exists("#invitations").await, "no invitation is pending");

    // Their own password: the other session ends, the new password works.
    let other = Browser::start(&app.base).await;
    other.sign_in("new@example.com", PASSWORD).await;
    p.click_and_wait("#account-link").await;
    assert_eq!(p.text("#account-role").await, "operator");
    p.fill("#pw-current", "not my password at all").await;
    p.fill("#pw-new", NEW_PASSWORD).await;
    p.fill("#pw-confirm", NEW_PASSWORD).await;
    p.click_and_wait("#change-password button[type=submit]")
        .await;
    assert_eq!(
        p.text("#password-error").await,
        "The current password is wrong."
    );
    p.fill("#pw-current", PASSWORD).await;
    p.fill("#pw-new", NEW_PASSWORD).await;
    p.fill("#pw-confirm", NEW_PASSWORD).await;
    p.screenshot("account").await;
    p.click_and_wait("#change-password button[type=submit]")
        .await;
    assert_eq!(
        p.text("p.notice").await,
        "Your password was changed; your other sessions have ended."
    );
    other.goto("/portal/overview").await;
    assert!(
        other.path().await.starts_with("/portal/login"),
        "the other session ended"
    );
    other.submit_sign_in("new@example.com", PASSWORD).await;
    assert!(
        other.path().await.starts_with("/portal/login"),
        "old password"
    );
    other.sign_in("new@example.com", NEW_PASSWORD).await;
    other.close().await;
    p.close().await;

    // The only admin cannot demote themselves: the page says why.
    b.goto("/portal/people").await;
    let me = b
        .js("return document.querySelector(\"#people tr[data-email='admin@example.com'] select\").id;")
        .await;
    b.set_value(&format!("#{}", s(&me)), "viewer").await;
    b.click_and_wait("#people tr[data-email='admin@example.com'] form[action$='/role'] button")
        .await;
    assert_eq!(b.status().await, 409);
    assert!(
        b.text("#error-detail").await.contains("without an admin"),
        "{}",
        b.body_text().await
    );
    assert!(b.exists("nav[aria-label=Main]").await);
    b.close().await;
    app.shutdown().await;
}

/// The small text the script puts beside the `<time>` of `at`.
async fn beside(b: &Browser, at: DateTime<Utc>) -> String {
    let v = b
        .js_with(
            "const want = Date.parse(arguments[0]); \
             const t = [...document.querySelectorAll('time[datetime]')] \
               .find(t => Date.parse(t.getAttribute('datetime')) === want); \
             return t && t.nextElementSibling ? t.nextElementSibling.textContent : null;",
            vec![json!(at.to_rfc3339())],
        )
        .await;
    s(&v).to_string()
}

#[tokio::test]
async fn times_show_in_the_zone_a_person_chose_and_how_far_ahead_they_are() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", "http://127.0.0.1:9/never").await;
    let due = Utc::now() + TimeDelta::minutes(120);
    let due = due - TimeDelta::nanoseconds(due.timestamp_subsec_nanos() as i64);
    let id = s(&api.schedule(&t, &due.to_rfc3339(), "{}").await["messageId"]).to_string();

    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto(&format!("/portal/messages/{id}")).await;
    let shown = beside(&b, due).await;
    assert!(
        shown.contains("GMT+1") && shown.ends_with("in 2 hours"),
        "the browser's zone (Berlin) by default: {shown}"
    );

    b.click_and_wait("#account-link").await;
    b.fill("#zone", "Mars/Olympus").await;
    b.click_and_wait("#time-zone button[type=submit]").await;
    assert_eq!(b.status().await, 400);
    assert!(b.exists("#zone-error").await);
    b.fill("#zone", "Asia/Tokyo").await;
    b.click_and_wait("#time-zone button[type=submit]").await;
    assert_eq!(
        b.text("p.notice").await,
        "Times are shown in the zone you chose."
    );
    assert_eq!(b.value("#zone").await, "Asia/Tokyo");

    b.goto(&format!("/portal/messages/{id}")).await;
    let shown = beside(&b, due).await;
    assert!(
        shown.contains("GMT+9") && shown.ends_with("in 2 hours"),
        "the chosen zone: {shown}"
    );
    assert_eq!(
        b.value("#reschedule-at-tz").await,
        "Asia/Tokyo",
        "the picker starts in the chosen zone"
    );
    b.screenshot("message-in-chosen-zone").await;

    // UTC: shown already, so only how far ahead.
    b.goto("/portal/account").await;
    b.fill("#zone", "UTC").await;
    b.click_and_wait("#time-zone button[type=submit]").await;
    b.goto(&format!("/portal/messages/{id}")).await;
    assert_eq!(beside(&b, due).await, " · in 2 hours");
    b.close().await;
    app.shutdown().await;
}
