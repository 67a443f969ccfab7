//! The overview's charts over HTTP: what was delivered, failed and
//! dead-lettered this hour shows in the current hour's bars, the lateness
//! of first attempts as points, and each target's success rate.

use super::*;

/// The `data-value` of the current hour's mark in the chart `id`.
fn current_hour(page: &Page, id: &str, mark: &str) -> Option<u64> {
    let chart_at = page.body.find(&format!("id=\"{id}\""))?;
    let chart = &page.body[chart_at..];
    let chart = &chart[..chart.find("</figure>").unwrap()];
    let hour = chrono::Utc::now().format("%H").to_string();
    let marker = format!("data-hour=\"{hour}\" data-value=\"");
    chart
        .match_indices(&marker)
        .find(|(at, _)| {
            chart[..*at]
                .rfind('<')
                .is_some_and(|o| chart[o + 1..].starts_with(mark))
        })
        .map(|(at, m)| {
            let rest = &chart[at + m.len()..];
            rest[..rest.find('"').unwrap()].parse().unwrap()
        })
}

#[tokio::test]
async fn the_overview_charts_this_hours_deliveries_failures_dead_letters_and_lateness() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    // The first attempt fails (retryable), then everything is accepted.
    rx.then([Reply::status(503)]);
    rx.always(Reply::status(200));
    let dead_rx = Receiver::start().await;
    dead_rx.always(Reply::status(400));
    let ok = s(&api.webhook(&rx.url("/ok")).await["targetId"]).to_string();
    let dead = s(&api.webhook(&dead_rx.url("/dead")).await["targetId"]).to_string();

    let retried = s(&api.schedule(&ok, &common::in_ms(0), "{}").await["messageId"]).to_string();
    api.wait_for_state(&retried, "Delivered", WAIT).await;
    let mut delivered = vec![retried];
    for _ in 0..3 {
        let id = s(&api.schedule(&ok, &common::in_ms(0), "{}").await["messageId"]).to_string();
        api.wait_for_state(&id, "Delivered", WAIT).await;
        delivered.push(id);
    }
    for _ in 0..2 {
        let id = s(&api.schedule(&dead, &common::in_ms(0), "{}").await["messageId"]).to_string();
        api.wait_for_state(&id, "DeadLetter", WAIT).await;
    }

    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let page = b.get("/portal/overview").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(current_hour(&page, "delivered-chart", "rect"), Some(4));
    // The 503 of the first message, and the two dead letters' 400s.
    assert_eq!(current_hour(&page, "failed-chart", "rect"), Some(3));
    assert_eq!(current_hour(&page, "dead-chart", "rect"), Some(2));
    assert!(page
        .body
        .contains("id=\"delivered-chart\" data-total=\"4\""));
    // Three were delivered at their first attempt: their lateness is drawn.
    let p50 = current_hour(&page, "lateness-chart", "circle class=\"p50\"").expect("a p50 point");
    let p99 = current_hour(&page, "lateness-chart", "circle class=\"p99\"").expect("a p99 point");
    assert!(p50 <= p99 && p99 < 5_000, "p50 {p50} ms, p99 {p99} ms");
    // Success rates over the attempts that ended: 4 of 5, and 0 of 2.
    assert!(
        page.body
            .contains(&format!("data-success-rate=\"{ok}\">80.0 %")),
        "{}",
        page.body
    );
    assert!(page
        .body
        .contains(&format!("data-success-rate=\"{dead}\">0.0 %")));
    // Each chart says in words what it shows.
    assert!(page.body.contains("4 delivered in the last 24 hours"));

    // Redriving the dead letters does not unmake them.
    let r = api
        .post(
            "/messages/redrive",
            json!({"targetId": dead, "deliveryTime": format!("{}Z", common::calendar::new_year_ahead(5))}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let page = b.get("/portal/overview").await;
    assert_eq!(current_hour(&page, "dead-chart", "rect"), Some(2));
    app.shutdown().await;
}

/// A message scheduled for an hour before now is due when it is scheduled:
/// delivered at once, its lateness is what the delivery took, not the hour
/// (the rule of `dispatch_delivery_lateness_seconds` too).
#[tokio::test]
async fn a_message_scheduled_for_the_past_is_late_only_from_when_it_was_scheduled() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let target = s(&api.webhook(&rx.url("/late")).await["targetId"]).to_string();
    let an_hour_ago = common::in_ms(-3_600_000);
    let m = api.schedule(&target, &an_hour_ago, "{}").await;
    assert_eq!(m["deliveryTime"].as_str().unwrap(), an_hour_ago);
    let id = s(&m["messageId"]).to_string();
    api.wait_for_state(&id, "Delivered", WAIT).await;

    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let page = b.get("/portal/overview").await;
    assert_eq!(page.status, StatusCode::OK);
    let p99 = current_hour(&page, "lateness-chart", "circle class=\"p99\"").expect("a p99 point");
    assert!(
        p99 < 60_000,
        "delivered at once: {p99} ms late, not the hour before it was scheduled"
    );
    app.shutdown().await;
}
