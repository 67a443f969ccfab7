//! What a hostile client sends the portal: control characters in a query,
//! a form field, an email at sign-in (before any session) and an
//! invitation. Each answers a 4xx (a form re-rendered with its error) on
//! both stores, and changes nothing.

use super::*;

#[tokio::test]
async fn control_characters_in_queries_and_forms_answer_400_and_change_nothing() {
    let app = TestApp::spawn().await;
    let mut admin = signed_in(&app, "acme", "admin@acme.test").await;

    // A query parameter: 400 naming it, as in the API.
    for path in [
        "/portal/messages?key=a%00b",
        "/portal/messages?state=%0A",
        "/portal/targets/DI-T-%00",
    ] {
        let p = admin.get(path).await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{path}: {}", p.body);
    }

    // Sign-in with a NUL in the email, before any session: the same answer
    // as an unknown email, and no session.
    let mut stranger = Browser::new(&app);
    let p = stranger.try_sign_in("a\u{0}@x", PASSWORD).await;
    assert!(
        p.status.is_client_error() || p.status == 200,
        "{}",
        p.status
    );
    assert!(
        p.body.contains("The email or the password is wrong."),
        "{}",
        p.body
    );
    assert_eq!(
        stranger.get("/portal/overview").await.status,
        StatusCode::SEE_OTHER
    );

    // An invitation to an email with a NUL: the form again, with its error.
    let csrf = admin.csrf().await;
    let p = admin
        .post(
            "/portal/people/invite",
            &[
                ("csrf", &csrf),
                ("email", "new\u{0}@acme.test"),
                ("role", "viewer"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert!(p.body.contains("email"), "{}", p.body);
    assert_nobody_invited(&app).await;

    // A target's name with a NUL, through the form: refused, none made.
    let p = admin
        .post(
            "/portal/targets",
            &[
                ("csrf", &csrf),
                ("name", "a\u{0}b"),
                ("type", "webhook"),
                ("url", "https://example.com/hook"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    let api = app.api("acme").await;
    let listed: Value = api.get("/targets").await.json().await.unwrap();
    assert_eq!(listed["items"], json!([]), "{listed}");
    app.shutdown().await;
}

/// Form bodies no browser sends: bytes that are not UTF-8 (decoded as
/// U+FFFD, which no email holds), a field twice, a role that is none,
/// a body of megabytes, another content type, nothing but broken escapes.
/// Each answers a 4xx, never a 5xx, and invites nobody. (A broken escape
/// inside a value stays as written, as the URL standard decodes it.)
#[tokio::test]
async fn malformed_form_bodies_answer_4xx_and_change_nothing() {
    let app = TestApp::spawn().await;
    let mut admin = signed_in(&app, "acme", "admin@acme.test").await;
    let csrf = admin.csrf().await;
    let big = format!(
        "csrf={csrf}&email={}%40acme.test&role=viewer",
        "a".repeat(3 << 20)
    );
    for (content_type, body) in [
        (
            "application/x-www-form-urlencoded",
            format!("csrf={csrf}&email=%FF%FE%40acme.test&role=viewer"),
        ),
        (
            "application/x-www-form-urlencoded",
            format!("csrf={csrf}&email=x%40acme.test&role=viewer&role=admin"),
        ),
        (
            "application/x-www-form-urlencoded",
            format!("csrf={csrf}&email=x%40acme.test&role=owner"),
        ),
        ("application/x-www-form-urlencoded", big),
        (
            "text/plain",
            format!("csrf={csrf}&email=x%40acme.test&role=viewer"),
        ),
        ("application/x-www-form-urlencoded", "%".repeat(100)),
    ] {
        let req = admin
            .http
            .post(format!("{}/portal/people/invite", admin.base))
            .header(header::CONTENT_TYPE, content_type)
            .body(body.clone());
        let p = admin.send(req).await;
        assert!(
            p.status.is_client_error(),
            "{content_type} {}…: {} {}",
            &body[..body.len().min(80)],
            p.status,
            &p.body[..p.body.len().min(300)]
        );
    }
    assert_nobody_invited(&app).await;
    app.shutdown().await;
}

/// The account `acme` has no invitation.
async fn assert_nobody_invited(app: &TestApp) {
    assert!(app
        .store()
        .list_invitations(&common::account("acme"), app.now())
        .await
        .unwrap()
        .is_empty());
}
