//! Rotating a webhook's signing secret in Chromium, and the copy buttons:
//! the admin chooses an overlap, confirms, sees the new secret once with
//! the end of the overlap, and copies it with one click (pasted back here
//! to prove the clipboard holds it). Screenshots of the rotation form and
//! the new secret.

use fantoccini::key::Key;

use super::*;

/// Pastes the clipboard into a fresh text area and reads it back.
async fn paste(b: &Browser) -> String {
    b.js("const t = document.createElement('textarea'); t.id = 'pasted'; document.body.append(t);")
        .await;
    b.click("#pasted").await;
    let active = b.client.active_element().await.unwrap();
    active
        .send_keys(&format!("{}v", char::from(Key::Control)))
        .await
        .unwrap();
    b.value("#pasted").await
}

#[tokio::test]
async fn an_admin_rotates_the_secret_with_an_overlap_and_copies_the_new_one() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "admin@example.com").await;
    let api = app.api("acme").await;
    let t = target(&api, "Orders", "https://orders.example.com/hook").await;
    let b = Browser::start(&app.base).await;
    b.sign_in("admin@example.com", PASSWORD).await;
    b.goto(&format!("/portal/targets/{t}")).await;
    assert_eq!(
        b.text("#secret-overlap").await,
        "Deliveries carry one signature, by the current secret."
    );
    // The copy button shows where script runs, and copies the id.
    assert!(b.displayed("button[data-copy='target-id']").await);
    b.click("button[data-copy='target-id']").await;
    b.wait_text("dd.copyable .copy-status", "Copied").await;
    assert_eq!(paste(&b).await, t);

    b.goto(&format!("/portal/targets/{t}")).await;
    b.set_value("#rotate-overlap", "3600").await;
    b.screenshot_full("target-rotate-secret").await;
    // Saying no changes nothing.
    b.click("button#rotate-secret").await;
    let question = b.client.get_alert_text().await.expect("a confirmation");
    assert!(
        question.contains("Replace the signing secret of Orders?"),
        "{question}"
    );
    b.client.dismiss_alert().await.unwrap();
    assert_eq!(b.path().await, format!("/portal/targets/{t}"));

    b.mark_page().await;
    b.click("button#rotate-secret").await;
    b.client.accept_alert().await.unwrap();
    b.wait_for_new_page().await;
    assert_eq!(b.text("p.notice").await, "The signing secret was replaced.");
    let secret = b.text("code#signing-secret").await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    // The overlap's end, an hour ahead, in the person's zone.
    let until = b.text("#overlap-until").await;
    assert!(until.contains("keeps signing beside it until"), "{until}");
    assert!(
        until.contains("in 59 min") || until.contains("in 1 h"),
        "{until}"
    );
    b.click("button[data-copy='signing-secret']").await;
    b.wait_text(".secret-once .copy-status", "Copied").await;
    b.screenshot("rotated-secret").await;
    assert_eq!(paste(&b).await, secret);

    b.goto(&format!("/portal/targets/{t}")).await;
    let overlap = b.text("#secret-overlap").await;
    assert!(
        overlap.starts_with("Deliveries carry two signatures"),
        "{overlap}"
    );
    b.close().await;
    app.shutdown().await;
}
