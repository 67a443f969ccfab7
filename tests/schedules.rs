//! Recurring schedules (docs/api.md#recurring-schedules) through the API, with a real receiver:
//! each run is one message with its scheduleId, delivered at the run's
//! instant; rules refused, and daylight saving and calendar edges as the
//! contract states them (`rules`: run instants asserted through `nextRunAt`
//! from `startAt`s in the future, each found from today); pause, resume,
//! patch and delete, and the runs they withdraw (`withdrawn`); runs missed
//! while no instance ran (`missed`); another account's schedules answer
//! 404; two instances on one PostgreSQL database make one message per run
//! (`postgres`, left out where there is no PostgreSQL).

mod common;

#[path = "schedules/missed.rs"]
mod missed;
#[path = "schedules/postgres.rs"]
mod postgres;
#[path = "schedules/rules.rs"]
mod rules;
#[path = "schedules/withdrawn.rs"]
mod withdrawn;

use std::{collections::HashSet, sync::Arc, time::Duration};

use chrono::{Datelike, TimeDelta, TimeZone, Utc, Weekday};
use chrono_tz::Tz;
use common::{
    calendar::{self, midnight, next_fall_back, next_spring_forward, wall},
    problem::{assert_invalid, assert_problem},
    receiver::{Receiver, Reply},
    Api, TestApp,
};
use dispatch::{
    config::SchedulesConfig, domain::time::format, schedules::materialise, store::Materialised,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

/// The bound on punctuality the service is held to: a message due now is
/// attempted within a second of its delivery time, however loaded the
/// instance, and a run is on time as a message is.
const ON_TIME_MS: i64 = 1_000;

/// Polls `check` (cheaply) until it answers, or fails naming `what` after
/// `WAIT`: the one wait for a state in this suite.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(done) = check().await {
            return done;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One materialiser pass run by the test itself, as an instance's would run
/// at `now` with `ahead` (the instance's own passes go on beside it; a run
/// already made is never made again).
async fn pass_at(app: &TestApp, now: chrono::DateTime<Utc>, ahead: Duration) -> Materialised {
    let config = SchedulesConfig {
        ahead,
        ..SchedulesConfig::default()
    };
    materialise(&*app.store(), now, &config).await.unwrap()
}

async fn create(api: &Api, body: Value) -> Value {
    let r = api.post("/schedules", body).await;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let s: Value = r.json().await.unwrap();
    assert_eq!(
        location,
        format!("/schedules/{}", s["scheduleId"].as_str().unwrap())
    );
    s
}

async fn target(api: &Api, rx: &Receiver) -> String {
    api.webhook(&rx.url("/hook")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn messages_of(api: &Api, schedule: &str) -> Vec<Value> {
    let r = api
        .get(&format!("/messages?scheduleId={schedule}&limit=1000"))
        .await;
    assert_eq!(r.status(), 200);
    let page: Value = r.json().await.unwrap();
    page["items"].as_array().unwrap().clone()
}

fn ms(s: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

#[tokio::test]
async fn a_schedule_every_second_makes_one_message_per_run_delivered_at_the_run() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = target(&api, &rx).await;
    let s = create(
        &api,
        json!({"targetId": t, "name": "tick", "every": "1s", "payload": "{\"tick\": true}"}),
    )
    .await;
    let id = s["scheduleId"].as_str().unwrap();
    assert!(id.starts_with("DI-S-") && id.len() == 15, "{id}");
    assert_eq!(s["every"], "1s");
    assert_eq!(s["cron"], Value::Null);
    assert_eq!(s["timeZone"], "UTC");
    assert_eq!(s["paused"], false);
    assert_eq!(s["lastRunAt"], Value::Null);
    assert_eq!(s["orderingKey"], Value::Null);
    // The first run is the creation instant itself.
    assert_eq!(s["nextRunAt"], s["createdAt"]);

    let received = rx.wait_for(3, WAIT).await;
    let created = ms(&s["createdAt"]);
    let mut runs = Vec::new();
    for r in &received[..3] {
        let body = r.json();
        assert_eq!(body["payload"], "{\"tick\": true}");
        let message_id = body["messageId"].as_str().unwrap();
        // Its answer is recorded just after it arrived.
        let m = api.wait_for_state(message_id, "Delivered", WAIT).await;
        assert_eq!(m["scheduleId"], id);
        let due = ms(&m["deliveryTime"]);
        assert_eq!(
            (due - created) % 1_000,
            0,
            "runs at creation + whole seconds"
        );
        // At the run: never before it, and within the contract's bound.
        let attempts = api.attempts(message_id).await;
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        let started = ms(&attempts[0]["startedAt"]);
        assert!(
            started >= due && r.at.timestamp_millis() >= due,
            "the run due at {due} was attempted at {started} and arrived at {}: before it",
            r.at.timestamp_millis()
        );
        assert!(
            started - due < ON_TIME_MS,
            "the run due at {due} was attempted {} ms after it; a run is on time as a \
             message is, within {ON_TIME_MS} ms",
            started - due
        );
        runs.push(due);
    }
    assert_eq!(runs, [created, created + 1_000, created + 2_000]);
    let listed = messages_of(&api, id).await;
    assert!(listed.len() >= 3);
    let distinct: HashSet<i64> = listed.iter().map(|m| ms(&m["deliveryTime"])).collect();
    assert_eq!(distinct.len(), listed.len(), "one message per run");

    let got: Value = api
        .get(&format!("/schedules/{id}"))
        .await
        .json()
        .await
        .unwrap();
    let last = ms(&got["lastRunAt"]);
    assert!(last >= created + 2_000, "{got}");
    assert!(
        last <= chrono::Utc::now().timestamp_millis(),
        "lastRunAt is never ahead of now"
    );
    assert!(ms(&got["nextRunAt"]) > last);
}

#[tokio::test]
async fn pause_stops_the_runs_and_resume_goes_on_from_now_without_making_up_missed_runs() {
    let ahead = Duration::from_millis(200);
    let app = TestApp::spawn_with(|c| c.schedules.ahead = ahead).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = target(&api, &rx).await;
    let s = create(&api, json!({"targetId": t, "every": "1s", "payload": "x"})).await;
    let id = s["scheduleId"].as_str().unwrap();
    let created = ms(&s["createdAt"]);
    rx.wait_for(1, WAIT).await;

    let r = api.post_empty(&format!("/schedules/{id}/pause")).await;
    assert_eq!(r.status(), 200);
    let paused: Value = r.json().await.unwrap();
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["nextRunAt"], Value::Null);
    let before = messages_of(&api, id).await;
    // Pausing again changes nothing.
    let again: Value = api
        .post_empty(&format!("/schedules/{id}/pause"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["updatedAt"], paused["updatedAt"]);
    // No pass makes a run of a paused schedule, however late it is.
    let later = pass_at(&app, Utc::now() + TimeDelta::seconds(10), ahead).await;
    assert_eq!(later.created, 0);
    assert_eq!(messages_of(&api, id).await.len(), before.len());
    // A run's instant passes while paused: a message due just after it is
    // delivered (so the instance has been past that instant).
    let paused_at = ms(&paused["updatedAt"]);
    let missed = created + ((paused_at - created) / 1_000 + 1) * 1_000;
    let after_missed = chrono::DateTime::from_timestamp_millis(missed + 100).unwrap();
    let marker = api.schedule(&t, &format(&after_missed), "marker").await;
    api.wait_for_state(marker["messageId"].as_str().unwrap(), "Delivered", WAIT)
        .await;

    let resumed_at = Utc::now().timestamp_millis();
    let r = api.post_empty(&format!("/schedules/{id}/resume")).await;
    assert_eq!(r.status(), 200);
    let resumed: Value = r.json().await.unwrap();
    assert_eq!(resumed["paused"], false);
    let next = ms(&resumed["nextRunAt"]);
    assert!(
        next >= resumed_at && next > missed,
        "the runs missed while paused are not made up"
    );
    assert_eq!((next - created) % 1_000, 0, "still on the schedule's grid");
    let n = rx.count();
    rx.wait_for(n + 1, WAIT).await;
    let live = |all: &[Value]| -> Vec<i64> {
        all.iter()
            .filter(|m| m["state"] != "Cancelled")
            .map(|m| ms(&m["deliveryTime"]))
            .collect()
    };
    let after = messages_of(&api, id).await;
    let made_after: Vec<i64> = live(&after)
        .into_iter()
        .filter(|&due| due >= resumed_at)
        .collect();
    assert_eq!(
        made_after.iter().min(),
        Some(&next),
        "the first run after the resume"
    );
    assert_eq!(
        live(&after).len(),
        live(&before).len() + made_after.len(),
        "nothing between the pause and the resume: {after:?}"
    );
}

#[tokio::test]
async fn a_merge_patch_changes_the_rule_and_giving_cron_replaces_every() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = target(&api, &rx).await;
    let new_year = calendar::next_new_year(Utc::now());
    let s = create(
        &api,
        json!({"targetId": t, "name": "report", "every": "1h", "startAt": format(&new_year),
               "payload": "x", "orderingKey": "reports"}),
    )
    .await;
    let id = s["scheduleId"].as_str().unwrap();
    let r = api
        .patch(
            &format!("/schedules/{id}"),
            json!({"cron": "0 9 * * *", "timeZone": "Asia/Tokyo", "orderingKey": null}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["cron"], "0 9 * * *");
    assert_eq!(p["every"], Value::Null);
    assert_eq!(p["orderingKey"], Value::Null);
    assert_eq!(p["name"], "report");
    assert_eq!(
        ms(&p["nextRunAt"]),
        wall(Tz::Asia__Tokyo, new_year.date_naive(), 9, 0).timestamp_millis(),
        "09:00 in Tokyo"
    );
    assert_eq!(p["createdAt"], s["createdAt"]);
    // A bad patch answers 400 naming the field and changes nothing.
    assert_invalid(
        api.patch(
            &format!("/schedules/{id}"),
            json!({"timeZone": "Nowhere/Else"}),
        )
        .await,
        "timeZone",
    )
    .await;
    assert_invalid(
        api.patch(&format!("/schedules/{id}"), json!({"cron": null}))
            .await,
        "cron",
    )
    .await;
    let got: Value = api
        .get(&format!("/schedules/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["timeZone"], "Asia/Tokyo");
    assert_eq!(got["cron"], "0 9 * * *");
    // Pausing through the patch, as /pause does.
    let p: Value = api
        .patch(&format!("/schedules/{id}"), json!({"paused": true}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(p["paused"], true);
    assert_eq!(p["nextRunAt"], Value::Null);
}

#[tokio::test]
async fn delete_stops_the_runs_and_keeps_the_messages_already_made() {
    let ahead = Duration::from_millis(200);
    let app = TestApp::spawn_with(|c| c.schedules.ahead = ahead).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = target(&api, &rx).await;
    let s = create(&api, json!({"targetId": t, "every": "1s", "payload": "x"})).await;
    let id = s["scheduleId"].as_str().unwrap();
    rx.wait_for(2, WAIT).await;
    assert_eq!(api.delete(&format!("/schedules/{id}")).await.status(), 204);
    assert_problem(api.get(&format!("/schedules/{id}")).await, 404).await;
    assert_problem(api.delete(&format!("/schedules/{id}")).await, 404).await;
    let kept = messages_of(&api, id).await;
    assert!(kept.len() >= 2);
    // No pass makes a run of it any more, however late it is.
    let later = pass_at(&app, Utc::now() + TimeDelta::seconds(10), ahead).await;
    assert_eq!(later.created, 0);
    assert_eq!(
        messages_of(&api, id).await.len(),
        kept.len(),
        "no further runs"
    );
}

#[tokio::test]
async fn another_accounts_schedules_answer_404_and_lists_page_and_filter_by_target() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let other = app.api("globex").await;
    let rx = Receiver::start().await;
    let (t1, t2) = (target(&api, &rx).await, target(&api, &rx).await);
    let mut ids = Vec::new();
    let start = format(&calendar::next_new_year(Utc::now()));
    for t in [&t1, &t2, &t2] {
        let s = create(
            &api,
            json!({"targetId": t, "every": "1h", "startAt": start, "payload": "x"}),
        )
        .await;
        ids.push(s["scheduleId"].as_str().unwrap().to_string());
    }
    let page: Value = api.get("/schedules?limit=2").await.json().await.unwrap();
    let first: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scheduleId"].as_str().unwrap())
        .collect();
    assert_eq!(first, [ids[2].as_str(), ids[1].as_str()], "newest first");
    let cursor = page["nextCursor"].as_str().unwrap();
    let rest: Value = api
        .get(&format!("/schedules?limit=2&cursor={cursor}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest["items"][0]["scheduleId"], ids[0].as_str());
    assert_eq!(rest["nextCursor"], Value::Null);
    let of_t2: Value = api
        .get(&format!("/schedules?targetId={t2}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(of_t2["items"].as_array().unwrap().len(), 2);
    assert_invalid(api.get("/schedules?targetId=nope").await, "targetId").await;
    assert_invalid(api.get("/schedules?cursor=nope").await, "cursor").await;
    assert_invalid(api.get("/messages?scheduleId=nope").await, "scheduleId").await;

    let id = &ids[0];
    assert_problem(other.get(&format!("/schedules/{id}")).await, 404).await;
    assert_problem(
        other
            .patch(&format!("/schedules/{id}"), json!({"name": "mine"}))
            .await,
        404,
    )
    .await;
    assert_problem(
        other.post_empty(&format!("/schedules/{id}/pause")).await,
        404,
    )
    .await;
    assert_problem(
        other.post_empty(&format!("/schedules/{id}/resume")).await,
        404,
    )
    .await;
    assert_problem(other.delete(&format!("/schedules/{id}")).await, 404).await;
    let theirs: Value = other.get("/schedules").await.json().await.unwrap();
    assert_eq!(theirs["items"], json!([]));
    let got: Value = api
        .get(&format!("/schedules/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["name"], "", "untouched");
    assert_eq!(got["paused"], false);
    // Messages scopes: a read-only token reads, and cannot create.
    let reader = common::Api {
        token: app.token("acme", &["messages:read"]).await,
        ..api.clone()
    };
    assert_eq!(reader.get(&format!("/schedules/{id}")).await.status(), 200);
    assert_problem(
        reader
            .post(
                "/schedules",
                json!({"targetId": t1, "every": "1h", "payload": "x"}),
            )
            .await,
        403,
    )
    .await;
}
