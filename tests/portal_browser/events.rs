//! Subscriptions and events in Chromium: an admin subscribes a target on its
//! page, changes the patterns, disables and deletes a subscription; the
//! Events page shows each event with the targets it reached and their
//! states; an event's page shows its payload; a target that subscribed late
//! catches up by replaying a range. Screenshots of the target page with its
//! subscriptions, the Events page and an event's page.

use super::*;

/// The rows of the subscriptions table: `[name, types, status]`.
async fn subscription_rows(b: &Browser) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for row in b.find_all("#subscription-list tbody tr").await {
        let mut cells = Vec::new();
        for c in row
            .find_all(fantoccini::Locator::Css("th, td"))
            .await
            .unwrap()
            .into_iter()
            .take(3)
        {
            cells.push(c.text().await.unwrap().trim().to_string());
        }
        rows.push(cells);
    }
    rows
}

async fn publish(api: &Api, ty: &str, payload: &str) -> Value {
    let r = api
        .post("/events", json!({"type": ty, "payload": payload}))
        .await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    r.json().await.unwrap()
}

#[tokio::test]
async fn an_admin_subscribes_targets_watches_events_reach_them_and_replays_them_to_a_late_one() {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    user(&app, "acme", "admin@example.com").await;
    let api = app.api("acme").await;
    let orders = target(&api, "Orders", &rx.url("/orders")).await;
    let late = target(&api, "Late joiner", &rx.url("/late")).await;
    let b = Browser::start(&app.base).await;
    b.sign_in("admin@example.com", PASSWORD).await;

    // Subscribe Orders from its page.
    b.goto(&format!("/portal/targets/{orders}")).await;
    assert!(b.exists("#no-subscriptions").await);
    b.fill("#sub-types", "order.*, invoice.paid").await;
    b.fill("#sub-name", "orders and invoices").await;
    b.click_and_wait("#add-subscription button[type=submit]")
        .await;
    assert_eq!(
        b.text("p.notice").await,
        "The subscription was added: matching events now reach this target."
    );
    assert_eq!(
        subscription_rows(&b).await,
        [["orders and invoices", "order.* invoice.paid", "Enabled"]]
    );
    // A pattern that is not one is refused, naming it, and nothing is added.
    b.fill("#sub-types", "order.* bad..type").await;
    b.click_and_wait("#add-subscription button[type=submit]")
        .await;
    assert_eq!(b.status().await, 400);
    assert!(
        b.body_text().await.contains("types[1]"),
        "{}",
        b.body_text().await
    );
    let subs: Value = api.get("/subscriptions").await.json().await.unwrap();
    assert_eq!(subs["items"].as_array().unwrap().len(), 1, "{subs}");
    let sub = s(&subs["items"][0]["subscriptionId"]).to_string();

    // Change its patterns.
    b.goto(&format!("/portal/targets/{orders}")).await;
    b.click(&format!("tr[data-subscription='{sub}'] details summary"))
        .await;
    b.fill(&format!("#types-{sub}"), "order.created order.paid")
        .await;
    b.click_and_wait(&format!(
        "tr[data-subscription='{sub}'] details button[type=submit]"
    ))
    .await;
    assert_eq!(b.text("p.notice").await, "The subscription was saved.");
    assert_eq!(
        subscription_rows(&b).await,
        [["orders and invoices", "order.created order.paid", "Enabled"]]
    );
    b.screenshot_full("target-subscriptions").await;

    // Events reach it, and the Events page says where they went.
    let created = publish(&api, "order.created", "{\"order\": 1}").await;
    let message = s(&created["messages"][0]["messageId"]).to_string();
    api.wait_for_state(&message, "Delivered", WAIT).await;
    publish(&api, "audit.logged", "nobody listens").await;
    b.click_and_wait(r#"header nav a[href="/portal/events"]"#)
        .await;
    assert_eq!(
        texts(&b, "#events tbody tr td:nth-child(2)").await,
        ["audit.logged", "order.created"],
        "newest first"
    );
    let event = s(&created["eventId"]);
    let row = format!("#events tr[data-event='{event}']");
    assert_eq!(
        b.text(&format!("{row} ul.reached li")).await,
        "Orders Delivered"
    );
    assert!(b
        .text("#events tbody tr:first-child td:nth-child(3)")
        .await
        .contains("no subscribed target"));
    b.screenshot_full("events").await;
    // Filtered by type.
    b.fill("#event-type", "audit.logged").await;
    b.click_and_wait("#event-filters button[type=submit]").await;
    assert_eq!(
        texts(&b, "#events tbody tr td:nth-child(2)").await,
        ["audit.logged"]
    );

    // One event's page: its payload and the messages it made.
    b.goto(&format!("/portal/events/{event}")).await;
    assert_eq!(b.text("pre.payload").await, "{\"order\": 1}");
    assert_eq!(
        b.text(&format!("#reached li[data-message='{message}']"))
            .await,
        "Orders Delivered"
    );
    b.screenshot_full("event").await;

    // Disabled, the subscription takes nothing; enabled again, it does.
    b.goto(&format!("/portal/targets/{orders}")).await;
    b.click_and_wait(&format!(
        "tr[data-subscription='{sub}'] form[action$='/disable'] button"
    ))
    .await;
    assert_eq!(subscription_rows(&b).await[0][2], "Disabled");
    let skipped = publish(&api, "order.created", "while disabled").await;
    assert_eq!(skipped["messages"], json!([]));
    b.click_and_wait(&format!(
        "tr[data-subscription='{sub}'] form[action$='/enable'] button"
    ))
    .await;
    assert_eq!(subscription_rows(&b).await[0][2], "Enabled");

    // The late joiner catches up on order.created from the archive.
    b.goto(&format!("/portal/targets/{late}")).await;
    let from = utc_shown(Utc::now() - TimeDelta::hours(1));
    let to = utc_shown(Utc::now() + TimeDelta::minutes(1));
    b.set_value("#replay-events-from", from.trim_end_matches('Z'))
        .await;
    b.set_value("#replay-events-to", to.trim_end_matches('Z'))
        .await;
    b.set_value("#replay-events-tz", "UTC").await;
    b.fill("#replay-events-types", "order.created").await;
    b.click_and_wait("#replay-events button[type=submit]").await;
    assert!(
        b.text("#confirm-count")
            .await
            .starts_with("2 events published"),
        "{}",
        b.text("#confirm-count").await
    );
    b.click_and_wait("button#confirm").await;
    assert_eq!(
        b.text("p.notice").await,
        "2 events were made into messages to this target."
    );
    let replayed: Value = api
        .get(&format!("/messages?targetId={late}"))
        .await
        .json()
        .await
        .unwrap();
    let items = replayed["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{replayed}");
    assert!(
        items.iter().all(|m| m["type"] == "order.created"),
        "{replayed}"
    );
    for m in items {
        api.wait_for_state(s(&m["messageId"]), "Delivered", WAIT)
            .await;
    }

    // Deleting the subscription asks first, then removes it.
    b.goto(&format!("/portal/targets/{orders}")).await;
    b.mark_page().await;
    b.click(&format!(
        "tr[data-subscription='{sub}'] form[action$='/delete'] button"
    ))
    .await;
    b.client.accept_alert().await.unwrap();
    b.wait_for_new_page().await;
    assert_eq!(b.text("p.notice").await, "The subscription was deleted.");
    assert!(b.exists("#no-subscriptions").await);
    b.close().await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_viewer_sees_subscriptions_and_events_but_no_form_to_change_them() {
    let app = TestApp::spawn().await;
    let mut viewer = dispatch::portal::new_user("acme", "viewer@example.com", PASSWORD, app.now());
    viewer.role = dispatch::store::portal::Role::Viewer;
    assert!(app.store().create_user(&viewer).await.unwrap());
    let api = app.api("acme").await;
    let t = target(&api, "Orders", "https://orders.example.com/hook").await;
    let r = api
        .post(
            "/subscriptions",
            json!({"targetId": t, "types": ["order.*"]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    publish(&api, "order.created", "{}").await;
    let b = Browser::start(&app.base).await;
    b.sign_in("viewer@example.com", PASSWORD).await;
    b.goto(&format!("/portal/targets/{t}")).await;
    assert_eq!(
        subscription_rows(&b).await,
        [["(no name)", "order.*", "Enabled"]]
    );
    for hidden in [
        "#add-subscription",
        "details.edit-subscription",
        "#replay-events",
    ] {
        assert!(!b.exists(hidden).await, "a viewer sees {hidden}");
    }
    b.goto("/portal/events").await;
    assert_eq!(
        texts(&b, "#events tbody tr td:nth-child(2)").await,
        ["order.created"]
    );
    b.close().await;
    app.shutdown().await;
}
