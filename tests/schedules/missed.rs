//! Runs that fell due while no instance ran.

use super::*;

/// A run that fell due while no instance ran: made up on start when it is
/// younger than `schedules.catch_up`, skipped when older. The schedule is
/// made through the API; with its instance stopped, its first run is put
/// two seconds in the past through the store (the state a run falling due
/// while nothing ran leaves: a cursor behind now), rather than waiting with
/// no instance running, which a slow stop would have spoiled.
/// Also the instance started after, which must outlive the checks that
/// wait for its deliveries.
async fn restart_after_a_missed_run(catch_up: Duration) -> (Value, Vec<Value>, Receiver, TestApp) {
    let first = TestApp::spawn().await;
    let api = first.api("acme").await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200));
    let t = target(&api, &rx).await;
    let s = create(
        &api,
        json!({"targetId": t, "every": "1h", "payload": "x",
               "startAt": format(&(Utc::now() + TimeDelta::hours(1)))}),
    )
    .await;
    let id = s["scheduleId"].as_str().unwrap().to_string();
    let sid: dispatch::domain::ids::ScheduleId = id.parse().unwrap();
    let db = Arc::clone(&first.db);
    first.shutdown().await;
    let now = dispatch::domain::time::truncate_ms(Utc::now());
    let missed = now - TimeDelta::seconds(2);
    {
        let mut config = dispatch::config::Config::defaults();
        config.database.url = db.url.clone();
        let (store, ..) = dispatch::app::open_store_admin(&config)
            .await
            .unwrap()
            .into_parts();
        let mut behind = store
            .get_schedule(&common::account("acme"), &sid, now)
            .await
            .unwrap()
            .unwrap();
        behind.start_at = Some(missed);
        behind.next_run_at = Some(missed);
        behind.revision += 1;
        behind.updated_at = now;
        assert_eq!(
            store.save_schedule(&behind, true, now).await.unwrap(),
            dispatch::store::SaveSchedule::Saved
        );
    }
    let second = TestApp::spawn_on(db, |c| c.schedules.catch_up = catch_up).await;
    let api = second.api("acme").await;
    // Until the first pass has moved the schedule's cursor past the run.
    let (store, sid) = (second.store(), &sid);
    eventually("a pass moved the cursor past the missed run", || {
        let store = store.clone();
        async move {
            let s = store
                .get_schedule(&common::account("acme"), sid, Utc::now())
                .await
                .unwrap();
            s.unwrap().next_run_at.filter(|c| *c > missed)
        }
    })
    .await;
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
    assert_eq!(messages[0]["deliveryTime"], s["startAt"], "the missed run");
    rx.wait_for(1, WAIT).await;
}

#[tokio::test]
async fn a_run_missed_longer_ago_than_the_catch_up_window_is_skipped() {
    let (s, messages, rx, running) = restart_after_a_missed_run(Duration::from_millis(300)).await;
    assert_eq!(messages, Vec::<Value>::new(), "skipped");
    assert_eq!(s["lastRunAt"], Value::Null);
    // Nor is it made later: the next pass finds nothing due.
    assert_eq!(
        pass_at(&running, Utc::now(), Duration::from_secs(5))
            .await
            .created,
        0
    );
    assert_eq!(
        messages_of(
            &running.api("acme").await,
            s["scheduleId"].as_str().unwrap()
        )
        .await
        .len(),
        0
    );
    assert_eq!(rx.count(), 0);
}
