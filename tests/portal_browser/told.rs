//! "Notify me of dead letters" in Chromium: from a target's page, an admin
//! subscribes a chosen target to the account's dead letters in one click;
//! the page then says where they are told, and a dead letter reaches that
//! target as a `dispatch.message.dead_lettered` event. Screenshot of the
//! section once set.

use super::*;

#[tokio::test]
async fn an_admin_has_dead_letters_told_to_a_chosen_target_in_one_click() {
    let app = TestApp::spawn().await;
    user(&app, "acme", "admin@example.com").await;
    let api = app.api("acme").await;
    let gone = Receiver::start().await;
    gone.always(Reply::status(410));
    let alerts_rx = Receiver::start().await;
    let work = target(&api, "Billing hooks", &gone.url("/hook")).await;
    let alerts = target(&api, "Alerts", &alerts_rx.url("/alerts")).await;
    let b = Browser::start(&app.base).await;
    b.sign_in("admin@example.com", PASSWORD).await;

    b.goto(&format!("/portal/targets/{work}")).await;
    assert!(b.displayed("#dead-letters-untold").await);
    b.set_value("#notify-to", &alerts).await;
    b.click_and_wait("#notify-dead-letters-button").await;
    assert!(b
        .path()
        .await
        .starts_with(&format!("/portal/targets/{work}")));
    assert!(!b.exists("#dead-letters-untold").await);
    let told = b.text("#dead-letters-told").await;
    assert!(told.contains("Alerts"), "{told}");
    assert!(
        b.exists(&format!("#dead-letters-told a[data-told-to='{alerts}']"))
            .await
    );
    b.screenshot_full("dead-letter-notifications").await;

    let subs: Value = api
        .get(&format!("/subscriptions?targetId={alerts}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        subs["items"][0]["types"],
        json!(["dispatch.message.dead_lettered"])
    );
    // Shown on every target's page of the account; a second click there
    // makes no second subscription.
    b.goto(&format!("/portal/targets/{alerts}")).await;
    assert!(b.text("#dead-letters-told").await.contains("Alerts"));
    b.set_value("#notify-to", &alerts).await;
    b.click_and_wait("#notify-dead-letters-button").await;
    let subs: Value = api
        .get(&format!("/subscriptions?targetId={alerts}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(subs["items"].as_array().unwrap().len(), 1, "{subs}");

    let dead = dead_letter(&api, &work, "invoice").await;
    let got = alerts_rx.wait_for(1, WAIT).await;
    let e = got[0].json();
    assert_eq!(e["type"], "dispatch.message.dead_lettered");
    let p: Value = serde_json::from_str(s(&e["payload"])).unwrap();
    assert_eq!(p["messageId"], dead.as_str());
    b.close().await;
    app.shutdown().await;
}
