//! The portal's schedules (docs/api.md#recurring-schedules): a form that previews the next five
//! runs without saving, creates and edits through the API's rules (errors
//! named at their field), the list with each next run, pause, resume and
//! delete, and a run's message linking to its schedule. Another account's
//! schedule answers 404.

use super::*;

async fn post(b: &mut Browser, path: String, f: Vec<(&'static str, String)>) -> Page {
    let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    b.post(&path, &pairs).await
}

fn schedule_id_of(location: &str) -> String {
    location
        .trim_start_matches("/portal/schedules/")
        .split('?')
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_schedule_is_previewed_created_listed_paused_resumed_edited_and_deleted() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = s(&api.webhook(&rx.url("/hook")).await["targetId"]).to_string();
    let mut b = signed_in(&app, "acme", "ops@example.com").await;

    let form = b.get("/portal/schedules/new").await;
    assert_eq!(form.status, 200);
    assert!(form.body.contains("id=\"f-cron\""));
    assert!(form.body.contains("Next 5 runs"));
    let csrf = form.csrf();
    // The preview button shows the runs and saves nothing: from the eve of
    // Berlin's next spring-forward night, 02:30 (which does not exist that
    // night) runs at the instant the clocks jump, 03:00 summer time.
    let berlin = chrono_tz::Tz::Europe__Berlin;
    let from = chrono::Utc::now() + chrono::TimeDelta::days(2);
    let spring = common::calendar::next_spring_forward(berlin, from);
    let eve = spring.day - chrono::TimeDelta::days(1);
    let start_local = format!("{eve}T12:00:00");
    let start = common::calendar::wall(berlin, eve, 12, 0);
    let first_run = spring.at.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let first_run_shown = format!(
        "{} Europe/Berlin",
        spring.at.with_timezone(&berlin).format("%Y-%m-%d %H:%M:%S")
    );
    let fields = |extra: &[(&'static str, &'static str)]| {
        let mut f: Vec<(&str, String)> = vec![
            ("csrf", csrf.clone()),
            ("name", "nightly".into()),
            ("targetId", t.clone()),
            ("kind", "cron".into()),
            ("cron", "30 2 * * *".into()),
            ("every", "1h".into()),
            ("timeZone", "Europe/Berlin".into()),
            ("startAt", start_local.clone()),
            ("endAt", "".into()),
            ("payload", "{\"job\": \"nightly\"}".into()),
            ("orderingKey", "".into()),
        ];
        for (k, v) in extra {
            f.retain(|(name, _)| name != k);
            f.push((k, v.to_string()));
        }
        f
    };
    let as_refs = |f: &[(&'static str, String)]| -> Vec<(&'static str, String)> { f.to_vec() };
    let p = post(
        &mut b,
        "/portal/schedules".into(),
        as_refs(&fields(&[("preview", "1")])),
    )
    .await;
    assert_eq!(p.status, 200);
    assert!(
        p.body.contains(&format!("datetime=\"{first_run}\"")),
        "{first_run}: {}",
        p.body
    );
    assert!(p.body.contains(&first_run_shown), "{first_run_shown}");
    let list: Value = api.get("/schedules").await.json().await.unwrap();
    assert_eq!(list["items"], json!([]), "a preview saves nothing");

    // The preview fragment the script fetches says what is wrong, by field.
    let frag = b
        .get("/portal/schedules/preview?kind=cron&cron=61+*+*+*+*&timeZone=UTC")
        .await;
    assert_eq!(frag.status, 200);
    assert!(frag.body.contains("<code>cron</code>"), "{}", frag.body);

    // An invalid zone: 400, named at its field, nothing saved.
    let p = post(
        &mut b,
        "/portal/schedules".into(),
        as_refs(&fields(&[("timeZone", "Europe/Atlantis")])),
    )
    .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(p.body.contains("id=\"f-timeZone-error\""), "{}", p.body);

    let p = post(&mut b, "/portal/schedules".into(), as_refs(&fields(&[]))).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let id = schedule_id_of(p.location());
    let got: Value = api
        .get(&format!("/schedules/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["cron"], "30 2 * * *");
    assert_eq!(got["timeZone"], "Europe/Berlin");
    assert_eq!(
        got["startAt"],
        dispatch::domain::time::format(&start),
        "read in the schedule's zone"
    );
    assert_eq!(got["payload"], "{\"job\": \"nightly\"}");

    let list = b.get("/portal/schedules").await;
    assert!(list.body.contains(&format!("data-schedule=\"{id}\"")));
    assert!(list.body.contains(&first_run_shown));
    let csrf = list.csrf();
    let p = b
        .post(&format!("/portal/schedules/{id}/pause"), &[("csrf", &csrf)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let page = b.get(p.location()).await;
    assert!(page.body.contains("The schedule is paused"));
    let got: Value = api
        .get(&format!("/schedules/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["paused"], true);
    b.post(
        &format!("/portal/schedules/{id}/resume"),
        &[("csrf", &csrf)],
    )
    .await;
    let got: Value = api
        .get(&format!("/schedules/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["paused"], false);

    // Edit: every 15 minutes now, the show page's form prefilled.
    let page = b.get(&format!("/portal/schedules/{id}")).await;
    assert!(page.body.contains("value=\"30 2 * * *\""));
    assert!(
        page.body.contains(&format!("value=\"{start_local}\"")),
        "start shown in its zone"
    );
    let p = post(
        &mut b,
        format!("/portal/schedules/{id}"),
        as_refs(&fields(&[("kind", "every"), ("every", "15m")])),
    )
    .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let got: Value = api
        .get(&format!("/schedules/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["every"], "15m");
    assert_eq!(got["cron"], Value::Null);

    // Another account sees none of it.
    let mut other = signed_in(&app, "globex", "ops@globex.example").await;
    assert_eq!(
        other.get(&format!("/portal/schedules/{id}")).await.status,
        404
    );
    let their_csrf = other.csrf().await;
    let p = other
        .post(
            &format!("/portal/schedules/{id}/delete"),
            &[("csrf", &their_csrf)],
        )
        .await;
    assert_eq!(p.status, 404);

    let p = b
        .post(
            &format!("/portal/schedules/{id}/delete"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(api.get(&format!("/schedules/{id}")).await.status(), 404);
}

#[tokio::test]
async fn a_runs_message_links_to_its_schedule_and_the_list_filters_by_schedule() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = s(&api.webhook(&rx.url("/hook")).await["targetId"]).to_string();
    let r = api
        .post(
            "/schedules",
            json!({"targetId": t, "every": "1h", "payload": "x"}),
        )
        .await;
    let sched: Value = r.json().await.unwrap();
    let sid = s(&sched["scheduleId"]).to_string();
    let plain =
        s(&api.schedule(&t, &common::in_ms(3_600_000), "plain").await["messageId"]).to_string();
    // The first run is at the creation instant.
    let received = rx.wait_for(1, WAIT).await;
    let run = s(&received[0].json()["messageId"]).to_string();
    let mut b = signed_in(&app, "acme", "ops@example.com").await;
    let page = b.get(&format!("/portal/messages/{run}")).await;
    assert!(
        page.body.contains(&format!(
            "<a href=\"/portal/schedules/{sid}\"><code>{sid}</code></a>"
        )),
        "{}",
        page.body
    );
    let page = b.get(&format!("/portal/messages/{plain}")).await;
    assert!(!page.body.contains("id=\"schedule\""));
    let list = b.get(&format!("/portal/messages?schedule={sid}")).await;
    assert!(list.body.contains(&format!("data-message=\"{run}\"")));
    assert!(!list.body.contains(&format!("data-message=\"{plain}\"")));
}
