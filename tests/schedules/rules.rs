//! Rules, zones and the calendar: what is refused, and the run instants of
//! the contract's examples, each found from today.

use super::*;

#[tokio::test]
async fn invalid_rules_and_zones_answer_400_naming_the_field_and_create_nothing() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let other = app.api("globex").await;
    let rx = Receiver::start().await;
    let t = target(&api, &rx).await;
    let foreign = target(&other, &rx).await;
    let base = json!({"targetId": t, "payload": "x"});
    let new_year = calendar::next_new_year(Utc::now());
    let without_offset = new_year.naive_utc().format("%Y-%m-%dT%H:%M:%S").to_string();
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
            with(json!({"every": "1m", "startAt": without_offset})),
            "startAt",
        ),
        (
            with(
                json!({"every": "1m", "startAt": format(&(new_year + TimeDelta::days(1))),
                        "endAt": format(&new_year)}),
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
/// reads them: `nextRunAt` of a schedule starting in the future. Each
/// instant is found from today: the next Saturday, the next nights Berlin
/// springs forward and falls back (from the zone database), the next 29
/// February, the next 1 April.
#[tokio::test]
async fn daylight_saving_and_calendar_edges_run_at_the_instants_the_contract_states() {
    let app = TestApp::spawn().await;
    let api = app.api("acme").await;
    let rx = Receiver::start().await;
    let t = target(&api, &rx).await;
    let (tokyo, berlin) = (Tz::Asia__Tokyo, Tz::Europe__Berlin);
    // Two days on, so that every start below is in the future.
    let from = Utc::now() + TimeDelta::days(2);
    let day = |d: chrono::NaiveDate, n: i64| d + TimeDelta::days(n);

    // Weekdays 09:30 in Tokyo (UTC+9), from a Saturday: the Monday.
    let saturday = calendar::next_weekday(from, Weekday::Sat);
    let weekdays = (midnight(saturday), wall(tokyo, day(saturday, 2), 9, 30));
    // Berlin springs forward: 02:30 does not exist that night and runs at
    // the first instant after the gap, which is when the clocks jump.
    let spring = next_spring_forward(berlin, from);
    assert!(
        berlin
            .from_local_datetime(&spring.day.and_hms_opt(2, 30, 0).unwrap())
            .earliest()
            .is_none(),
        "02:30 falls in the gap on {}",
        spring.day
    );
    let gap = (calendar::utc(day(spring.day, -1), 12, 0), spring.at);
    // And falls back: 02:30 happens twice and runs once, at its first
    // occurrence (summer time, the earlier instant).
    let fall = next_fall_back(berlin, from);
    let twice = berlin.from_local_datetime(&fall.day.and_hms_opt(2, 30, 0).unwrap());
    let (first, second) = match twice {
        chrono::LocalResult::Ambiguous(a, b) => (a.with_timezone(&Utc), b.with_timezone(&Utc)),
        other => panic!("02:30 happens twice on {}: {other:?}", fall.day),
    };
    assert!(first < second);
    let repeated = (calendar::utc(day(fall.day, -1), 12, 0), first);
    // The next leap day, from the 1st of January of a year that has none.
    let plain_year = (from.year() + 1..)
        .find(|y| !calendar::is_leap(*y))
        .unwrap();
    let leap_year = (plain_year..).find(|y| calendar::is_leap(*y)).unwrap();
    let leap_day = (
        midnight(chrono::NaiveDate::from_ymd_opt(plain_year, 1, 1).unwrap()),
        calendar::utc(
            chrono::NaiveDate::from_ymd_opt(leap_year, 2, 29).unwrap(),
            0,
            0,
        ),
    );
    // The 31st of months that have one: from 1 April (30 days), 31 May.
    let april = calendar::next_date(from, 4, 1);
    let month_end = (
        midnight(april),
        calendar::utc(
            chrono::NaiveDate::from_ymd_opt(april.year(), 5, 31).unwrap(),
            12,
            0,
        ),
    );
    for (cron, zone, (start, next)) in [
        ("30 9 * * MON-FRI", tokyo, weekdays),
        ("30 2 * * *", berlin, gap),
        ("30 2 * * *", berlin, repeated),
        ("0 0 29 2 *", Tz::UTC, leap_day),
        ("0 12 31 * *", Tz::UTC, month_end),
    ] {
        let s = create(
            &api,
            json!({"targetId": t, "cron": cron, "timeZone": zone.name(),
                   "startAt": format(&start), "payload": "x"}),
        )
        .await;
        assert_eq!(
            ms(&s["nextRunAt"]),
            next.timestamp_millis(),
            "{cron} in {zone} from {start}: {s}"
        );
        assert_eq!(s["cron"], cron);
        assert_eq!(s["timeZone"], zone.name());
    }
    // The day after the repeated 02:30 runs once, at 02:30 winter time.
    let s = create(
        &api,
        json!({"targetId": t, "cron": "30 2 * * *", "timeZone": "Europe/Berlin",
               "startAt": format(&(first + TimeDelta::milliseconds(1))), "payload": "x"}),
    )
    .await;
    assert_eq!(
        ms(&s["nextRunAt"]),
        wall(berlin, day(fall.day, 1), 2, 30).timestamp_millis()
    );
    // After endAt: no run left.
    let new_year = calendar::next_new_year(from);
    let s = create(
        &api,
        json!({"targetId": t, "every": "1h", "startAt": format(&new_year),
               "endAt": format(&(new_year + TimeDelta::minutes(30))), "payload": "x"}),
    )
    .await;
    assert_eq!(ms(&s["nextRunAt"]), new_year.timestamp_millis());
    let s = create(
        &api,
        json!({"targetId": t, "every": "1h", "startAt": "2020-01-01T00:00:00Z",
               "endAt": "2020-01-02T00:00:00Z", "payload": "x"}),
    )
    .await;
    assert_eq!(s["nextRunAt"], Value::Null, "ended before it was created");
}
