//! A target's actions in the portal beyond enable/disable: a test message
//! with a payload the person types, and deleting the target (refused with
//! the contract's 409, explained, while it has messages to deliver).

use super::*;

#[tokio::test]
async fn a_test_message_carries_the_typed_payload_and_a_bad_one_changes_nothing() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = s(&api.webhook(&rx.url("/hook")).await["targetId"]).to_string();
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;
    let page = b.get(&format!("/portal/targets/{t}")).await;
    assert!(page.body.contains("id=\"test-payload\""));

    let typed = r#"{"order": 42, "note": "typed in the portal"}"#;
    let p = b
        .post(
            &format!("/portal/targets/{t}/test"),
            &[("csrf", &csrf), ("payload", typed)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let id = p
        .location()
        .trim_start_matches("/portal/messages/")
        .split('?')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(api.message(&id).await["payload"], typed);
    api.wait_for_state(&id, "Delivered", WAIT).await;
    let envelope: Value = serde_json::from_slice(&rx.received()[0].body).unwrap();
    assert_eq!(envelope["payload"], typed, "the receiver gets it as typed");

    // Empty: the default test payload.
    let p = b
        .post(
            &format!("/portal/targets/{t}/test"),
            &[("csrf", &csrf), ("payload", "  ")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let id = p.location().trim_start_matches("/portal/messages/");
    let id = id.split('?').next().unwrap();
    assert!(s(&api.message(id).await["payload"]).contains("\"test\":true"));

    // Too large: refused, nothing scheduled.
    let before = api.get("/messages").await.json::<Value>().await.unwrap()["items"]
        .as_array()
        .unwrap()
        .len();
    let huge = "x".repeat(dispatch::domain::payload::MAX_PAYLOAD_CHARS + 1);
    let p = b
        .post(
            &format!("/portal/targets/{t}/test"),
            &[("csrf", &csrf), ("payload", &huge)],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(p.body.contains("payload"), "{}", p.body);
    let after = api.get("/messages").await.json::<Value>().await.unwrap()["items"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(after, before);
    app.shutdown().await;
}

#[tokio::test]
async fn a_target_with_messages_to_deliver_is_not_deleted_and_the_page_says_what_to_do() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = s(&api.webhook("http://127.0.0.1:9/never").await["targetId"]).to_string();
    let m = s(&api
        .schedule(
            &t,
            &format!("{}Z", common::calendar::new_year_ahead(5)),
            "{}",
        )
        .await["messageId"])
    .to_string();
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let csrf = b.csrf().await;
    assert!(b
        .get(&format!("/portal/targets/{t}"))
        .await
        .body
        .contains("id=\"delete-target\""));

    let p = b
        .post(&format!("/portal/targets/{t}/delete"), &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::CONFLICT);
    assert!(p.body.contains("Cancel them first"), "{}", p.body);
    assert_eq!(api.get(&format!("/targets/{t}")).await.status(), 200);

    assert_eq!(
        api.post_empty(&format!("/messages/{m}/cancel"))
            .await
            .status(),
        200
    );
    let p = b
        .post(&format!("/portal/targets/{t}/delete"), &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(p.location(), "/portal/targets?notice=target-deleted");
    assert!(b
        .get(p.location())
        .await
        .body
        .contains("The target was deleted."));
    assert_eq!(api.get(&format!("/targets/{t}")).await.status(), 404);
    app.shutdown().await;
}

/// The secret a page shows in `<code id="signing-secret">`.
fn shown_secret(body: &str) -> String {
    let at = body
        .find("id=\"signing-secret\">")
        .expect("the secret is shown");
    let rest = &body[at + "id=\"signing-secret\">".len()..];
    rest[..rest.find('<').unwrap()].to_string()
}

#[tokio::test]
async fn rotating_the_secret_shows_the_new_one_once_and_both_sign_during_the_overlap() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let target = api.webhook(&rx.url("/hook")).await;
    let t = s(&target["targetId"]).to_string();
    let old = s(&target["config"]["signingSecret"]).to_string();
    let mut b = signed_in(&app, "acme", "admin@example.com").await;
    let csrf = b.csrf().await;
    let page = b.get(&format!("/portal/targets/{t}")).await;
    assert!(page.body.contains("id=\"rotate-secret\""));
    assert!(page.body.contains("Deliveries carry one signature"));

    // A made-up overlap is refused and changes nothing.
    let before = api
        .get(&format!("/targets/{t}"))
        .await
        .text()
        .await
        .unwrap();
    for bad in ["5", "", "-3600", "604801"] {
        let p = b
            .post(
                &format!("/portal/targets/{t}/rotate-secret"),
                &[("csrf", &csrf), ("overlap", bad)],
            )
            .await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{bad}: {}", p.body);
        assert!(p.body.contains("keeps signing"), "{}", p.body);
    }
    let after = api
        .get(&format!("/targets/{t}"))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(after, before);

    let p = b
        .post(
            &format!("/portal/targets/{t}/rotate-secret"),
            &[("csrf", &csrf), ("overlap", "86400")],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let location = p.location().to_string();
    assert_eq!(
        location,
        format!("/portal/targets/{t}/secret?notice=rotated")
    );
    let shown = b.get(&location).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    let new = shown_secret(&shown.body);
    assert!(new.starts_with("whsec_") && new != old, "{new}");
    assert!(shown.body.contains("The signing secret was replaced."));
    assert!(
        shown.body.contains("id=\"overlap-until\""),
        "{}",
        shown.body
    );
    assert!(shown.body.contains("data-copy=\"signing-secret\""));
    assert!(!shown.body.contains(&old), "the old secret is not shown");
    // Once.
    let again = b.get(&location).await;
    assert_eq!(again.status, StatusCode::SEE_OTHER);
    assert!(!again.body.contains(&new));
    let page = b.get(&format!("/portal/targets/{t}")).await;
    assert!(page.body.contains("Deliveries carry two signatures"));
    assert!(!page.body.contains(&new) && !page.body.contains(&old));

    // A delivery now carries both signatures.
    let id = s(&api.schedule(&t, &common::in_ms(0), "{}").await["messageId"]).to_string();
    api.wait_for_state(&id, "Delivered", WAIT).await;
    let header = rx.received()[0]
        .header("webhook-signature")
        .expect("signed");
    assert_eq!(header.split(' ').count(), 2, "{header}");
    for secret in [&new, &old] {
        let key = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            secret.trim_start_matches("whsec_"),
        )
        .unwrap();
        let r = &rx.received()[0];
        let ts: i64 = r.header("webhook-timestamp").unwrap().parse().unwrap();
        assert!(
            dispatch::delivery::signing::verify(&key, &id, ts, &r.body, &header),
            "signed by {secret}"
        );
    }

    // An SQS target has no signing secret to rotate.
    let q = api
        .post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {
                "queueUrl": "https://sqs.eu-north-1.amazonaws.com/123456789012/q",
                "region": "eu-north-1",
                "credentials": {"accessKeyId": "AKIDEXAMPLE", "secretAccessKey": "s"}}}),
        )
        .await
        .json::<Value>()
        .await
        .unwrap();
    let q = s(&q["targetId"]).to_string();
    assert!(!b
        .get(&format!("/portal/targets/{q}"))
        .await
        .body
        .contains("rotate-secret"));
    let p = b
        .post(
            &format!("/portal/targets/{q}/rotate-secret"),
            &[("csrf", &csrf), ("overlap", "0")],
        )
        .await;
    assert_eq!(p.status, StatusCode::CONFLICT, "{}", p.body);
    assert!(p
        .body
        .contains("only a webhook target has a signing secret"));
    app.shutdown().await;
}
