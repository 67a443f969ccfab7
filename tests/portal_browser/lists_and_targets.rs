//! In Chromium: the messages list's total, a quick range and the bounded
//! payload search; the overview's charts; a test message with a typed
//! payload; deleting a target, refused with its reason while it has
//! messages to deliver, then done. Screenshots of the search, the charts
//! and the refused delete.

use super::*;

#[tokio::test]
async fn the_list_counts_narrows_by_quick_range_and_finds_text_in_payloads() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    user(&app, "acme", "ops@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", &rx.url("/hook")).await;
    let soon = schedule(
        &api,
        &t,
        20 * 60_000,
        r#"{"order": "A-17", "note": "soon"}"#,
    )
    .await;
    schedule(&api, &t, FAR, r#"{"order": "B-2"}"#).await;
    schedule(&api, &t, FAR, r#"{"order": "a-17"}"#).await;

    let b = Browser::start(&app.base).await;
    b.sign_in("ops@example.com", PASSWORD).await;
    b.goto("/portal/messages").await;
    assert_eq!(b.text("#total").await, "3 messages match");
    // "Next hour" keeps the other filters and selects the one due soon.
    b.click_and_wait("a[data-range='Next hour']").await;
    assert_eq!(b.text("#total").await, "1 message matches");
    assert_eq!(texts(&b, "tr[data-message] th a").await, [soon.as_str()]);

    b.goto("/portal/messages").await;
    b.fill("#f-text", "A-17").await;
    b.click_and_wait("form.filters button[type=submit]").await;
    assert_eq!(texts(&b, "tr[data-message] th a").await, [soon.as_str()]);
    let scope = b.text("#search-scope").await;
    assert_eq!(
        scope,
        "Payloads holding A-17, among every message the filters select."
    );
    assert!(
        !b.exists("#total").await,
        "no total is counted while searching"
    );
    assert_eq!(
        b.value("#f-text").await,
        "A-17",
        "the form keeps the search"
    );
    b.screenshot("messages-payload-search").await;
    b.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_typed_test_message_arrives_the_charts_show_it_and_a_busy_target_is_not_deleted() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    user(&app, "acme", "admin@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", &rx.url("/hook")).await;
    let waiting = schedule(&api, &t, FAR, "{}").await;

    let b = Browser::start(&app.base).await;
    b.sign_in("admin@example.com", PASSWORD).await;
    b.goto(&format!("/portal/targets/{t}")).await;
    b.fill("#test-payload", r#"{"typed": "in Chromium"}"#).await;
    b.click_and_wait("button#send-test").await;
    b.wait_text("dd#message-state", "Delivered").await;
    let got = rx.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].json()["payload"], r#"{"typed": "in Chromium"}"#);

    // The overview draws this hour's delivery.
    b.goto("/portal/overview").await;
    assert_eq!(b.text("#delivered-24h").await, "1");
    assert!(b.exists("#delivered-chart svg rect.bar.delivered").await);
    assert!(b.exists("#lateness-chart svg circle.p50").await);
    b.screenshot_full("overview-charts").await;

    // Delete: refused while a message waits, with what to do; then done.
    b.goto(&format!("/portal/targets/{t}")).await;
    b.mark_page().await;
    b.click("button#delete-target").await;
    b.client.accept_alert().await.unwrap();
    b.wait_for_new_page().await;
    assert_eq!(b.status().await, 409);
    assert!(b.body_text().await.contains("Cancel them first"));
    b.screenshot("target-delete-refused").await;
    api.post(&format!("/messages/{waiting}/cancel"), json!({}))
        .await;
    assert_eq!(state(&api, &waiting).await, "Cancelled");
    b.goto(&format!("/portal/targets/{t}")).await;
    b.mark_page().await;
    b.click("button#delete-target").await;
    b.client.accept_alert().await.unwrap();
    b.wait_for_new_page().await;
    assert_eq!(b.path().await, "/portal/targets?notice=target-deleted");
    assert_eq!(b.text("p.notice").await, "The target was deleted.");
    assert_eq!(api.get(&format!("/targets/{t}")).await.status(), 404);
    b.close().await;
    app.shutdown().await;
}
