mod common;

use std::time::Duration;

use common::{in_ms, receiver::Receiver, TestApp};

#[tokio::test]
async fn a_scheduled_webhook_message_is_delivered_and_recorded() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await;
    let m = api
        .schedule(target["targetId"].as_str().unwrap(), &in_ms(200), "hello")
        .await;
    let id = m["messageId"].as_str().unwrap();
    let got = rx.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(got[0].json()["payload"], "hello");
    let m = api
        .wait_for_state(id, "Delivered", Duration::from_secs(5))
        .await;
    assert_eq!(m["attemptCount"], 1);
    let attempts = api.attempts(id).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "Success");
    app.shutdown().await;
}
