//! The portal's views of ordering keys and its range actions (docs/api.md#ordering-keys,
//! #bulk-redrive-cancel-and-replay): a keyed message shows its key and the message it waits for, the
//! list filters by key, and a target's deliveries are replayed, or its
//! messages cancelled, over a time range, counted first.

use super::*;

/// An instant `ms` from now as a `datetime-local` field holds it (UTC).
fn local_in(ms: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::milliseconds(ms))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

async fn keyed(api: &Api, target: &str, at: &str, key: &str) -> String {
    let r = api
        .post(
            "/messages",
            json!({"targetId": target, "deliveryTime": at, "payload": "x", "orderingKey": key}),
        )
        .await;
    assert_eq!(r.status(), 201);
    s(&r.json::<Value>().await.unwrap()["messageId"]).to_string()
}

#[tokio::test]
async fn a_keyed_message_shows_its_key_and_what_it_waits_for_and_the_list_filters_by_key() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = s(&api.webhook(&rx.url("/hook")).await["targetId"]).to_string();
    let head = keyed(&api, &t, &common::in_ms(3_600_000), "order-7").await;
    let next = keyed(&api, &t, &common::in_ms(7_200_000), "order-7").await;
    let other = keyed(&api, &t, &common::in_ms(7_200_000), "order-8").await;
    let plain =
        s(&api.schedule(&t, &common::in_ms(3_600_000), "plain").await["messageId"]).to_string();
    let mut b = signed_in(&app, "acme", "ops@example.com").await;

    let page = b.get(&format!("/portal/messages/{next}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<code>order-7</code>"), "{}", page.body);
    assert!(
        page.body.contains(&format!(
            "Waiting for <a href=\"/portal/messages/{head}\"><code>{head}</code></a> of the same key"
        )),
        "{}",
        page.body
    );
    let page = b.get(&format!("/portal/messages/{head}")).await;
    assert!(page.body.contains("id=\"ordering-key\""));
    assert!(
        !page.body.contains("Waiting for"),
        "the head waits for nothing"
    );
    let page = b.get(&format!("/portal/messages/{other}")).await;
    assert!(
        !page.body.contains("Waiting for"),
        "keys never wait for each other"
    );
    let page = b.get(&format!("/portal/messages/{plain}")).await;
    assert!(!page.body.contains("id=\"ordering-key\""));

    // Cancelling the head makes the next one the head at once.
    let csrf = b.csrf().await;
    let p = b
        .post(
            &format!("/portal/messages/{head}/cancel"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let page = b.get(&format!("/portal/messages/{next}")).await;
    assert!(!page.body.contains("Waiting for"), "{}", page.body);

    let list = b.get("/portal/messages?key=order-7").await;
    assert!(list.body.contains("id=\"f-key\""));
    assert!(list.body.contains(&format!("data-message=\"{next}\"")));
    assert!(list.body.contains(&format!("data-message=\"{head}\"")));
    assert!(!list.body.contains(&format!("data-message=\"{other}\"")));
    assert!(!list.body.contains(&format!("data-message=\"{plain}\"")));

    // Another account's browser sees none of it.
    let mut intruder = signed_in(&app, "globex", "intruder@example.com").await;
    let list = intruder.get("/portal/messages?key=order-7").await;
    assert!(!list.body.contains("data-message="), "{}", list.body);
    app.shutdown().await;
}

#[tokio::test]
async fn replay_by_range_shows_the_count_then_delivers_the_targets_messages_again() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let other_rx = Receiver::start().await;
    let t = s(&api.webhook(&rx.url("/hook")).await["targetId"]).to_string();
    let t2 = s(&api.webhook(&other_rx.url("/hook")).await["targetId"]).to_string();
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            s(&api.schedule(&t, &common::in_ms(0), &format!("{i}")).await["messageId"]).to_string(),
        );
    }
    let elsewhere = s(&api.schedule(&t2, &common::in_ms(0), "t2").await["messageId"]).to_string();
    app.running().sweeper.deliver_due_now().await;
    for id in ids.iter().chain([&elsewhere]) {
        api.wait_for_state(id, "Delivered", WAIT).await;
    }
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let target_page = b.get(&format!("/portal/targets/{t}")).await;
    assert!(target_page.body.contains("id=\"replay-range\""));
    assert!(target_page.body.contains("id=\"cancel-range\""));

    let (from, to) = (local_in(-3_600_000), local_in(3_600_000));
    let query = format!("from={from}&to={to}&rangeTz=UTC");
    let confirm = b.get(&format!("/portal/targets/{t}/replay?{query}")).await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(
        confirm
            .body
            .contains("<strong>3</strong> delivered messages"),
        "{}",
        confirm.body
    );
    assert_eq!(rx.count(), 3, "counting changes nothing");

    // Both ends are needed, and the range must not be empty.
    let half = b
        .get(&format!(
            "/portal/targets/{t}/replay?from={from}&rangeTz=UTC"
        ))
        .await;
    assert_eq!(half.status, 400);
    let empty = b
        .get(&format!("/portal/targets/{t}/replay?from={to}&to={from}"))
        .await;
    assert_eq!(empty.status, 400);

    let csrf = confirm.csrf();
    let form = [
        ("from", from.as_str()),
        ("to", &to),
        ("rangeTz", "UTC"),
        ("at", ""),
        ("tz", "UTC"),
    ];
    let refused = b.post(&format!("/portal/targets/{t}/replay"), &form).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "no session token");
    let mut with_csrf = form.to_vec();
    with_csrf.push(("csrf", &csrf));
    let p = b
        .post(&format!("/portal/targets/{t}/replay"), &with_csrf)
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(
        p.location(),
        format!("/portal/targets/{t}?notice=replayed&n=3")
    );
    assert!(b
        .get(p.location())
        .await
        .body
        .contains("3 messages were scheduled to be delivered again."));
    app.running().sweeper.deliver_due_now().await;
    rx.wait_for(6, WAIT).await;
    for id in &ids {
        api.wait_for_state(id, "Delivered", WAIT).await;
        assert_eq!(
            api.attempts(id).await.len(),
            2,
            "the earlier attempt is kept"
        );
    }
    assert_eq!(other_rx.count(), 1, "another target's deliveries stay");

    // Another account cannot even count.
    let mut intruder = signed_in(&app, "globex", "intruder@example.com").await;
    let p = intruder
        .get(&format!("/portal/targets/{t}/replay?{query}"))
        .await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    app.shutdown().await;
}

#[tokio::test]
async fn cancel_by_range_counts_first_and_cancels_only_what_is_due_in_the_range() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = s(&api.webhook(&rx.url("/hook")).await["targetId"]).to_string();
    let mut inside = Vec::new();
    for _ in 0..2 {
        inside.push(
            s(&api.schedule(&t, &common::in_ms(3_600_000), "in").await["messageId"]).to_string(),
        );
    }
    let outside =
        s(&api.schedule(&t, &common::in_ms(3 * 3_600_000), "out").await["messageId"]).to_string();
    let mut b = signed_in(&app, "acme", "ops@example.com").await;

    let (from, to) = (local_in(0), local_in(2 * 3_600_000));
    let confirm = b
        .get(&format!(
            "/portal/targets/{t}/cancel-range?from={from}&to={to}&rangeTz=UTC&state=Scheduled"
        ))
        .await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(
        confirm.body.contains("<strong>2</strong> messages"),
        "{}",
        confirm.body
    );
    let bad = b
        .get(&format!("/portal/targets/{t}/cancel-range?state=Delivered"))
        .await;
    assert_eq!(bad.status, 400, "Delivered messages cannot be cancelled");

    let csrf = confirm.csrf();
    let p = b
        .post(
            &format!("/portal/targets/{t}/cancel-range"),
            &[
                ("csrf", &csrf),
                ("from", &from),
                ("to", &to),
                ("rangeTz", "UTC"),
                ("state", "Scheduled"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(
        p.location(),
        format!("/portal/targets/{t}?notice=bulk-cancelled&n=2")
    );
    for id in &inside {
        assert_eq!(message_state(&api, id).await, "Cancelled");
    }
    assert_eq!(message_state(&api, &outside).await, "Scheduled");
    app.shutdown().await;
}
