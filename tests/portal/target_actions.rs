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
    let m = s(&api.schedule(&t, "2031-01-01T00:00:00Z", "{}").await["messageId"]).to_string();
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
