//! The messages list's total and quick ranges: the total counts what the
//! filters select (not just the page), and a quick range fills the due
//! time, keeping the other filters.

use super::*;

fn href_of(page: &Page, range: &str) -> String {
    let marker = format!("data-range=\"{range}\"");
    let at = page.body.find(&marker).expect("the range link");
    let start = page.body[..at].rfind("href=\"").unwrap() + "href=\"".len();
    let href = &page.body[start..];
    href[..href.find('"').unwrap()].replace("&amp;", "&")
}

fn total(page: &Page) -> u64 {
    let marker = "id=\"total\" data-total=\"";
    let at = page.body.find(marker).expect("a total") + marker.len();
    let rest = &page.body[at..];
    rest[..rest.find('"').unwrap()].parse().unwrap()
}

#[tokio::test]
async fn the_list_counts_what_matches_and_quick_ranges_fill_the_due_time() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = s(&api.webhook("http://127.0.0.1:9/never").await["targetId"]).to_string();
    let other = s(&api.webhook("http://127.0.0.1:9/other").await["targetId"]).to_string();
    let soon = (chrono::Utc::now() + chrono::TimeDelta::minutes(30)).to_rfc3339();
    let later = (chrono::Utc::now() + chrono::TimeDelta::hours(3)).to_rfc3339();
    let first = s(&api.schedule(&t, &soon, "{}").await["messageId"]).to_string();
    api.schedule(&t, &later, "{}").await;
    api.schedule(&other, &soon, "{}").await;
    // More than a page (50) of the first target's, far ahead.
    api.schedule_many(&t, &format!("{}Z", common::calendar::new_year_ahead(5)), 60)
        .await;

    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let all = b.get("/portal/messages").await;
    assert_eq!(total(&all), 63);
    assert!(all.body.contains("63 messages match"));
    let page = b.get(&format!("/portal/messages?target={t}")).await;
    assert_eq!(total(&page), 62, "the filters' total, not the page's 50");

    let next_hour = href_of(&page, "Next hour");
    assert!(next_hour.contains(&format!("target={t}")), "{next_hour}");
    let page = b.get(&next_hour).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(total(&page), 1, "{next_hour}");
    assert!(page.body.contains(&first));
    let last_hour = b.get(&href_of(&page, "Last hour")).await;
    assert_eq!(total(&last_hour), 0);
    assert!(last_hour.body.contains("0 messages match"));
    app.shutdown().await;
}

/// The ids of the messages a list page shows, in its order.
fn listed(page: &Page) -> Vec<String> {
    page.body
        .match_indices("data-message=\"")
        .map(|(at, m)| {
            let rest = &page.body[at + m.len()..];
            rest[..rest.find('"').unwrap()].to_string()
        })
        .collect()
}

fn next_href(page: &Page) -> Option<String> {
    let at = page.body.find("id=\"next-page\" href=\"")? + "id=\"next-page\" href=\"".len();
    let rest = &page.body[at..];
    Some(rest[..rest.find('"').unwrap()].replace("&amp;", "&"))
}

#[tokio::test]
async fn a_payload_search_is_exact_keeps_the_filters_and_scans_a_bounded_number_per_page() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let t = s(&api.webhook("http://127.0.0.1:9/never").await["targetId"]).to_string();
    let other = s(&api.webhook("http://127.0.0.1:9/other").await["targetId"]).to_string();
    let far = &format!("{}Z", common::calendar::new_year_ahead(5));
    let old_hit =
        s(&api.schedule(&t, far, r#"{"order": "A-17", "v": 1}"#).await["messageId"]).to_string();
    // More than one scan (10,000) of messages above it.
    api.schedule_many(&t, far, 10_050).await;
    let new_hit =
        s(&api.schedule(&t, far, r#"{"order": "A-17", "v": 2}"#).await["messageId"]).to_string();
    api.schedule(&t, far, r#"{"order": "a-17"}"#).await;
    let elsewhere =
        s(&api.schedule(&other, far, r#"{"order": "A-17"}"#).await["messageId"]).to_string();
    // Another account's payload is never found.
    let theirs = app.api("globex").await;
    let tt = s(&theirs.webhook("http://127.0.0.1:9/x").await["targetId"]).to_string();
    theirs.schedule(&tt, far, r#"{"order": "A-17"}"#).await;

    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    // Without a search the total stops counting at 10,000.
    let page = b.get(&format!("/portal/messages?target={t}")).await;
    assert!(
        page.body.contains("More than 10,000 messages match"),
        "{}",
        page.body
    );

    let page = b
        .get(&format!("/portal/messages?target={t}&text=A-17"))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        listed(&page),
        [new_hit.as_str()],
        "exact, case and all; only {t}"
    );
    let scope = page
        .body
        .contains("among the newest 10,000 messages the filters select.");
    assert!(scope, "{}", page.body);
    assert!(page.body.contains("Search older messages"));
    let next = next_href(&page).expect("a link to search older messages");
    assert!(
        next.contains("text=A-17") && next.contains(&format!("target={t}")),
        "{next}"
    );
    let older = b.get(&next).await;
    assert_eq!(listed(&older), [old_hit], "{}", older.body);
    assert!(older
        .body
        .contains("among every older message the filters select."));
    assert!(next_href(&older).is_none());

    // Without the target filter: the other target's too, newest first.
    let page = b.get("/portal/messages?text=A-17").await;
    assert_eq!(listed(&page), [elsewhere, new_hit]);
    let none = b.get("/portal/messages?text=orca").await;
    assert!(none.body.contains("No payload holds"), "{}", none.body);
    assert!(none.body.contains("No messages match."));
    // Too long a text is refused in words, not searched.
    let long = "x".repeat(201);
    let page = b.get(&format!("/portal/messages?text={long}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("Search for at most 200 characters"),
        "{}",
        page.body
    );
    app.shutdown().await;
}
