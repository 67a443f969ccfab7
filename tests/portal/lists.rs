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
    api.schedule_many(&t, "2031-01-01T00:00:00Z", 60).await;

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
