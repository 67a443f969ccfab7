//! Recurring schedules (API.md §12) through the API, with a real receiver:
//! each run is one message with its scheduleId, delivered at the run's
//! instant; daylight saving and calendar edges as the contract states them
//! (the run instants are asserted through `nextRunAt`, from `startAt`s in
//! the future); pause, resume, patch and delete; another account's
//! schedules answer 404; two instances on one PostgreSQL database make one
//! message per run.

mod common;

use std::{collections::HashSet, sync::Arc, time::Duration};

use common::{
    problem::{assert_invalid, assert_problem},
    receiver::{Receiver, Reply},
    Api, TestApp,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

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

fn at(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_millis()
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
        let m = api.message(body["messageId"].as_str().unwrap()).await;
        assert_eq!(m["scheduleId"], id);
        let due = ms(&m["deliveryTime"]);
        assert_eq!(
            (due - created) % 1_000,
            0,
            "runs at creation + whole seconds"
        );
        assert!(r.at.timestamp_millis() >= due, "never before its run");
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
async fn invalid_rules_and_zones_answer_400_naming_the_field_and_create_nothing() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let other = app.api("globex").await;
    let rx = Receiver::start().await;
    let t = target(&api, &rx).await;
    let foreign = target(&other, &rx).await;
    let base = json!({"targetId": t, "payload": "x"});
    let with = |extra: Value| {
        let mut b = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    for (body, field) in [
        (with(json!({"cron": "61 * * * *"})), "cron"),
        (with(json!({"cron": "* * * *"})), "cron"),
        (with(json!({"cron": "* * * * * *"})), "cron"),
        (with(json!({"cron": "0 0 30 2 *"})), "cron"),
        (with(json!({"cron": "0 9 * * FUNDAY"})), "cron"),
        (with(json!({"every": "500ms"})), "every"),
        (with(json!({"every": "soon"})), "every"),
        (with(json!({"every": "1m", "cron": "* * * * *"})), "every"),
        (with(json!({})), "cron"),
        (
            with(json!({"every": "1m", "timeZone": "Europe/Atlantis"})),
            "timeZone",
        ),
        (
            with(json!({"every": "1m", "timeZone": "CEST+2"})),
            "timeZone",
        ),
        (
            with(json!({"every": "1m", "startAt": "2027-01-01T00:00:00"})),
            "startAt",
        ),
        (
            with(
                json!({"every": "1m", "startAt": "2027-01-02T00:00:00Z", "endAt": "2027-01-01T00:00:00Z"}),
            ),
            "endAt",
        ),
        (
            with(json!({"every": "1m", "targetId": foreign})),
            "targetId",
        ),
        (
            with(json!({"every": "1m", "targetId": "DI-T-0000000000"})),
            "targetId",
        ),
        (
            with(json!({"every": "1m", "orderingKey": ""})),
            "orderingKey",
        ),
        (with(json!({"every": "1m", "payload": 5})), "payload"),
    ] {
        assert_invalid(api.post("/schedules", body.clone()).await, field).await;
    }
    let list: Value = api.get("/schedules").await.json().await.unwrap();
    assert_eq!(list["items"], json!([]), "nothing was created");
}

/// The run instants of the contract's examples, asserted where a person
/// reads them: `nextRunAt` of a schedule starting in the future.
#[tokio::test]
async fn daylight_saving_and_calendar_edges_run_at_the_instants_the_contract_states() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = target(&api, &rx).await;
    for (cron, zone, start, next) in [
        // Weekdays 09:30 in Tokyo (UTC+9): 2027-03-06 is a Saturday.
        (
            "30 9 * * MON-FRI",
            "Asia/Tokyo",
            "2027-03-06T00:00:00Z",
            "2027-03-08T00:30:00.000Z",
        ),
        // Berlin springs forward on 2027-03-28 at 02:00 CET: 02:30 does not
        // exist and runs at the first instant after the gap, 03:00 CEST.
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2027-03-27T12:00:00Z",
            "2027-03-28T01:00:00.000Z",
        ),
        // And falls back on 2027-10-31 at 03:00 CEST: 02:30 happens twice
        // and runs once, at its first occurrence (CEST).
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2027-10-30T12:00:00Z",
            "2027-10-31T00:30:00.000Z",
        ),
        // The next leap day.
        (
            "0 0 29 2 *",
            "UTC",
            "2027-01-01T00:00:00Z",
            "2028-02-29T00:00:00.000Z",
        ),
        // The 31st of months that have one.
        (
            "0 12 31 * *",
            "UTC",
            "2027-04-01T00:00:00Z",
            "2027-05-31T12:00:00.000Z",
        ),
    ] {
        let s = create(
            &api,
            json!({"targetId": t, "cron": cron, "timeZone": zone, "startAt": start, "payload": "x"}),
        )
        .await;
        assert_eq!(
            ms(&s["nextRunAt"]),
            at(next),
            "{cron} in {zone} from {start}"
        );
        assert_eq!(s["cron"], cron);
        assert_eq!(s["timeZone"], zone);
    }
    // The day after the repeated 02:30 runs once, at 02:30 CET.
    let s = create(
        &api,
        json!({"targetId": t, "cron": "30 2 * * *", "timeZone": "Europe/Berlin",
               "startAt": "2027-10-31T00:30:00.001Z", "payload": "x"}),
    )
    .await;
    assert_eq!(ms(&s["nextRunAt"]), at("2027-11-01T01:30:00.000Z"));
    // After endAt: no run left.
    let s = create(
        &api,
        json!({"targetId": t, "every": "1h", "startAt": "2027-01-01T00:00:00Z",
               "endAt": "2027-01-01T00:30:00Z", "payload": "x"}),
    )
    .await;
    assert_eq!(ms(&s["nextRunAt"]), at("2027-01-01T00:00:00.000Z"));
    let s = create(
        &api,
        json!({"targetId": t, "every": "1h", "startAt": "2020-01-01T00:00:00Z",
               "endAt": "2020-01-02T00:00:00Z", "payload": "x"}),
    )
    .await;
    assert_eq!(s["nextRunAt"], Value::Null, "ended before it was created");
}

#[tokio::test]
async fn pause_stops_the_runs_and_resume_goes_on_from_now_without_making_up_missed_runs() {
    let app = TestApp::spawn_with(|c| c.schedules.ahead = Duration::from_millis(200)).await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = target(&api, &rx).await;
    let s = create(&api, json!({"targetId": t, "every": "1s", "payload": "x"})).await;
    let id = s["scheduleId"].as_str().unwrap();
    rx.wait_for(1, WAIT).await;

    let r = api.post_empty(&format!("/schedules/{id}/pause")).await;
    assert_eq!(r.status(), 200);
    let paused: Value = r.json().await.unwrap();
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["nextRunAt"], Value::Null);
    let before = messages_of(&api, id).await.len();
    // Pausing again changes nothing.
    let again: Value = api
        .post_empty(&format!("/schedules/{id}/pause"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["updatedAt"], paused["updatedAt"]);
    // Two runs' worth of time: none is made while paused.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(messages_of(&api, id).await.len(), before);

    let resumed_at = chrono::Utc::now().timestamp_millis();
    let r = api.post_empty(&format!("/schedules/{id}/resume")).await;
    assert_eq!(r.status(), 200);
    let resumed: Value = r.json().await.unwrap();
    assert_eq!(resumed["paused"], false);
    let next = ms(&resumed["nextRunAt"]);
    assert!(
        next >= resumed_at,
        "the runs missed while paused are not made up"
    );
    assert_eq!(
        (next - ms(&s["createdAt"])) % 1_000,
        0,
        "still on the schedule's grid"
    );
    let n = rx.count();
    rx.wait_for(n + 1, WAIT).await;
    let after: Vec<i64> = messages_of(&api, id)
        .await
        .iter()
        .map(|m| ms(&m["deliveryTime"]))
        .filter(|&due| due >= resumed_at)
        .collect();
    assert_eq!(
        after.iter().min(),
        Some(&next),
        "the first run after the resume"
    );
    assert_eq!(
        messages_of(&api, id).await.len(),
        before + after.len(),
        "nothing between the pause and the resume"
    );
}

#[tokio::test]
async fn a_merge_patch_changes_the_rule_and_giving_cron_replaces_every() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = target(&api, &rx).await;
    let s = create(
        &api,
        json!({"targetId": t, "name": "report", "every": "1h", "startAt": "2027-01-01T00:00:00Z",
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
        at("2027-01-01T00:00:00.000Z"),
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
    let app = TestApp::spawn_with(|c| c.schedules.ahead = Duration::from_millis(200)).await;
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
    tokio::time::sleep(Duration::from_millis(1_500)).await;
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
    for t in [&t1, &t2, &t2] {
        let s = create(
            &api,
            json!({"targetId": t, "every": "1h", "startAt": "2027-01-01T00:00:00Z", "payload": "x"}),
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

/// Two instances on one PostgreSQL database, each with its materialiser
/// and sweeper: every run arrives once.
#[tokio::test]
async fn two_instances_make_exactly_one_message_per_run() {
    let first = TestApp::spawn_postgres_with(|_| {}).await;
    let second = TestApp::spawn_on(Arc::clone(&first.db), |_| {}).await;
    let api = first.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = target(&api, &rx).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        let s = create(&api, json!({"targetId": t, "every": "1s", "payload": "x"})).await;
        ids.push(s["scheduleId"].as_str().unwrap().to_string());
    }
    // Three runs each, at least.
    let received = rx.wait_for(60, WAIT).await;
    let mut seen = HashSet::new();
    for r in &received {
        assert!(
            seen.insert(r.header("webhook-id").unwrap()),
            "a message arrived twice"
        );
    }
    for id in &ids {
        let runs: Vec<i64> = messages_of(&api, id)
            .await
            .iter()
            .map(|m| ms(&m["deliveryTime"]))
            .collect();
        let distinct: HashSet<&i64> = runs.iter().collect();
        assert_eq!(distinct.len(), runs.len(), "one message per run of {id}");
    }
    second.shutdown().await;
    first.shutdown().await;
}

/// A run that fell due while no instance ran: made up on start when it is
/// younger than `schedules.catch_up`, skipped when older.
/// Also the instance started after the run, which must outlive the checks
/// that wait for its deliveries.
async fn restart_after_a_missed_run(catch_up: Duration) -> (Value, Vec<Value>, Receiver, TestApp) {
    let first = TestApp::spawn_with(|c| c.schedules.ahead = Duration::from_millis(50)).await;
    let api = first.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = target(&api, &rx).await;
    let at = chrono::Utc::now() + chrono::TimeDelta::milliseconds(800);
    let s = create(
        &api,
        json!({"targetId": t, "every": "1h", "payload": "x",
               "startAt": dispatch::domain::time::format(&at)}),
    )
    .await;
    let id = s["scheduleId"].as_str().unwrap().to_string();
    let db = Arc::clone(&first.db);
    first.shutdown().await;
    // Down over the run, and a while after it.
    let wait = (at - chrono::Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(700);
    tokio::time::sleep(wait).await;
    let second = TestApp::spawn_on(db, |c| c.schedules.catch_up = catch_up).await;
    let api = second.api("acme").await;
    // Until the first pass has moved the schedule's cursor past the run.
    let sid: dispatch::domain::ids::ScheduleId = id.parse().unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let cursor = second
            .store()
            .get_schedule("acme", &sid, chrono::Utc::now())
            .await
            .unwrap()
            .unwrap()
            .next_run_at;
        if cursor.is_some_and(|c| c.timestamp_millis() > ms(&s["nextRunAt"])) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pass moved the cursor"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got: Value = api
        .get(&format!("/schedules/{id}"))
        .await
        .json()
        .await
        .unwrap();
    let messages = messages_of(&api, &id).await;
    (got, messages, rx, second)
}

#[tokio::test]
async fn a_run_missed_while_no_instance_ran_is_made_up_on_start_within_the_catch_up_window() {
    let (s, messages, rx, _running) = restart_after_a_missed_run(Duration::from_secs(3600)).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["deliveryTime"], s["lastRunAt"]);
    rx.wait_for(1, WAIT).await;
}

#[tokio::test]
async fn a_run_missed_longer_ago_than_the_catch_up_window_is_skipped() {
    let (s, messages, rx, _running) = restart_after_a_missed_run(Duration::from_millis(300)).await;
    assert_eq!(messages, Vec::<Value>::new(), "skipped");
    assert_eq!(s["lastRunAt"], Value::Null);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.count(), 0);
}
