//! A pull target in Chromium: an admin makes one from the new-target form
//! (its own fields, no body format or limits), and its page shows the
//! queue: receivable, hidden, waiting and dead messages, the age of the
//! oldest receivable one and the receives; a message's page lists each
//! receive as an attempt. Screenshot of the pull target's page.

use super::*;

#[tokio::test]
async fn an_admin_makes_a_pull_target_and_its_page_shows_the_queue() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "admin@example.com").await;
    let api = app.api("acme").await;
    let b = Browser::start(&app.base).await;
    b.sign_in("admin@example.com", PASSWORD).await;

    b.goto("/portal/targets/new?type=pull").await;
    assert!(b.displayed("#f-visibilityTimeout").await);
    assert!(!b.displayed("#f-url").await, "a pull target has no URL");
    assert!(!b.displayed("#f-parallelism").await, "nor limits");
    b.fill("#f-name", "Reports queue").await;
    b.fill("#f-visibilityTimeout", "2m").await;
    b.fill("#f-maxReceiveCount", "3").await;
    b.click_and_wait("form.target-form button[type=submit]")
        .await;
    let path = b.path().await;
    let id = path
        .strip_prefix("/portal/targets/")
        .unwrap_or_else(|| panic!("{path}"))
        .split(['?', '/'])
        .next()
        .unwrap()
        .to_string();
    let t: Value = api
        .get(&format!("/targets/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        t["config"],
        json!({"visibilityTimeout": "2m", "maxReceiveCount": 3, "retention": "14d"})
    );

    // Three due, one for later; one received and hidden.
    for _ in 0..3 {
        api.schedule(&id, &in_ms(-90_000), "due").await;
    }
    api.schedule(&id, &in_ms(FAR), "later").await;
    let r = api
        .post(&format!("/targets/{id}/receive"), json!({"max": 1}))
        .await;
    let got: Value = r.json().await.unwrap();
    let received = got["items"][0]["messageId"].as_str().unwrap().to_string();

    b.goto(&format!("/portal/targets/{id}")).await;
    assert_eq!(b.text("#queue-due").await, "2");
    assert_eq!(b.text("#queue-hidden").await, "1");
    assert_eq!(b.text("#queue-later").await, "1");
    assert_eq!(b.text("#queue-dead").await, "0");
    // Due 90 s ago.
    let oldest = b.text("#queue-oldest").await;
    assert!(
        ["90 s old", "91 s old", "92 s old"]
            .iter()
            .any(|s| oldest.starts_with(s)),
        "{oldest}"
    );
    assert!(b.text("#queue-receives").await.starts_with("1 "));
    b.screenshot_full("pull-target").await;

    b.goto(&format!("/portal/messages/{received}")).await;
    assert!(b.body_text().await.contains("Received by a consumer"));
    b.close().await;
    app.shutdown().await;
}
