//! Schedules (`ScheduleStore`): the materialiser's passes make each run's
//! message once and move the cursor; catch-up skips runs older than its
//! window; a save over a stale revision changes nothing; racing passes make
//! one message per run; keyed runs keep their key's order; another account's
//! schedules are invisible. What a change does to the runs made ahead of
//! their time is in `schedule_changes`.

use dispatch::{
    config::SchedulesConfig,
    domain::{
        ids::ScheduleId,
        schedule::{Recurrence, Schedule},
    },
    schedules::materialise,
};

use crate::support::*;

checks!(
    a_pass_makes_each_due_run_once_and_moves_the_cursor,
    runs_older_than_the_catch_up_window_are_skipped_younger_ones_made_up,
    a_save_over_a_stale_revision_or_for_an_unknown_target_changes_nothing,
    racing_passes_make_one_message_per_run,
    passes_on_clocks_that_disagree_make_one_message_per_run,
    a_keyed_schedules_runs_go_one_at_a_time,
    another_accounts_schedules_are_invisible,
);

pub(crate) fn every(target: &Target, period: &str, created: DateTime<Utc>) -> Schedule {
    let mut s = Schedule {
        id: ScheduleId::new(),
        account: target.account.clone(),
        target_id: target.id.clone(),
        name: "tick".into(),
        recurrence: Recurrence::Every(period.parse().unwrap()),
        zone: chrono_tz::Tz::UTC,
        payload: Payload::parse("{\"tick\": 1}".into()).unwrap(),
        ordering_key: None,
        start_at: None,
        end_at: None,
        paused: false,
        next_run_at: None,
        last_run_at: None,
        revision: 0,
        created_at: created,
        updated_at: created,
    };
    s.restart_at(created);
    s
}

pub(crate) fn config(ahead: Duration, catch_up: Duration) -> SchedulesConfig {
    SchedulesConfig {
        catch_up,
        ahead,
        batch_size: 7,
    }
}

/// Whole milliseconds, as the stores keep them.
pub(crate) fn t0() -> DateTime<Utc> {
    dispatch::domain::time::truncate_ms(time::now())
}

/// The schedule's messages, oldest run first.
pub(crate) async fn messages_of(store: &dyn Store, s: &Schedule) -> Vec<Message> {
    let filter = MessageFilter {
        schedule_id: Some(s.id.clone()),
        ..MessageFilter::default()
    };
    let mut all = store
        .list_messages(&s.account, &filter, None, 1000)
        .await
        .unwrap();
    for m in &all {
        assert_eq!(m.schedule_id.as_ref(), Some(&s.id));
    }
    all.sort_by_key(|m| (m.delivery_time, m.state == State::Cancelled));
    all
}

/// The instants of the schedule's live runs (its messages not Cancelled,
/// all Scheduled here), oldest first.
pub(crate) async fn runs_of(store: &dyn Store, s: &Schedule) -> Vec<DateTime<Utc>> {
    messages_of(store, s)
        .await
        .into_iter()
        .filter(|m| m.state != State::Cancelled)
        .inspect(|m| {
            assert_eq!(m.payload.as_str(), s.payload.as_str());
            assert_eq!(m.state, State::Scheduled);
        })
        .map(|m| m.delivery_time)
        .collect()
}

pub(crate) async fn insert(store: &dyn Store, s: &Schedule) {
    assert!(store.insert_schedule(s).await.unwrap());
}

async fn a_pass_makes_each_due_run_once_and_moves_the_cursor(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let start = t0();
    let s = every(&t, "1s", start);
    insert(&*store, &s).await;
    let c = config(Duration::from_secs(2), Duration::from_secs(3600));
    let done = materialise(&*store, start + ms(500), &c).await.unwrap();
    assert_eq!(done.created, 3, "the runs up to now + ahead: +0, +1, +2 s");
    assert_eq!(done.earliest, Some(start));
    assert_eq!(
        runs_of(&*store, &s).await,
        [start, start + secs(1), start + secs(2)]
    );
    let again = materialise(&*store, start + ms(500), &c).await.unwrap();
    assert_eq!(again.created, 0, "a run already made is never made again");
    let got = store
        .get_schedule(&ACME, &s.id, start + ms(500))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.next_run_at, Some(start + secs(3)));
    assert_eq!(
        got.last_run_at,
        Some(start),
        "the latest run at or before now"
    );
    let later = store
        .get_schedule(&ACME, &s.id, start + secs(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(later.last_run_at, Some(start + secs(2)));
    // A second later, one more.
    let next = materialise(&*store, start + ms(1_500), &c).await.unwrap();
    assert_eq!(next.created, 1);
    assert_eq!(runs_of(&*store, &s).await.len(), 4);
}

async fn runs_older_than_the_catch_up_window_are_skipped_younger_ones_made_up(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let start = t0() - hours(3);
    let s = every(&t, "10m", start);
    insert(&*store, &s).await;
    // Nothing ran for three hours; the window is one.
    let now = start + hours(3);
    let c = config(Duration::ZERO, Duration::from_secs(3600));
    let done = materialise(&*store, now, &c).await.unwrap();
    let runs = runs_of(&*store, &s).await;
    assert_eq!(done.created, 7);
    assert_eq!(runs.first(), Some(&(start + hours(2))));
    assert_eq!(runs.last(), Some(&now));
    let got = store
        .get_schedule(&ACME, &s.id, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.next_run_at, Some(now + TimeDelta::minutes(10)));
}

async fn a_save_over_a_stale_revision_or_for_an_unknown_target_changes_nothing(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let start = t0();
    let s = every(&t, "1h", start);
    insert(&*store, &s).await;
    let mut changed = s.clone();
    changed.name = "renamed".into();
    changed.revision = s.revision + 2;
    assert_eq!(
        store.save_schedule(&changed, true, start).await.unwrap(),
        SaveSchedule::Stale
    );
    changed.revision = s.revision + 1;
    changed.target_id = theirs.id.clone();
    assert_eq!(
        store.save_schedule(&changed, true, start).await.unwrap(),
        SaveSchedule::UnknownTarget
    );
    let got = store
        .get_schedule(&ACME, &s.id, start)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.name, "tick");
    assert_eq!(got.target_id, t.id);
    assert_eq!(got.revision, s.revision);
    changed.target_id = t.id.clone();
    assert_eq!(
        store.save_schedule(&changed, true, start).await.unwrap(),
        SaveSchedule::Saved
    );
    let got = store
        .get_schedule(&ACME, &s.id, start)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.name.as_str(), got.revision),
        ("renamed", s.revision + 1)
    );
}

async fn racing_passes_make_one_message_per_run(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let start = t0();
    let mut all = Vec::new();
    for _ in 0..30 {
        let s = every(&t, "1s", start);
        insert(&*store, &s).await;
        all.push(s);
    }
    let c = config(Duration::from_secs(2), Duration::from_secs(3600));
    let passes = (0..4).map(|_| {
        let store = store.clone();
        let c = c.clone();
        tokio::spawn(async move { materialise(&*store, start, &c).await.unwrap() })
    });
    let mut created = 0;
    for p in passes {
        created += p.await.unwrap().created;
    }
    assert_eq!(created, 30 * 3, "each run made by exactly one pass");
    for s in &all {
        assert_eq!(
            runs_of(&*store, s).await,
            [start, start + secs(1), start + secs(2)]
        );
    }
}

async fn passes_on_clocks_that_disagree_make_one_message_per_run(store: Arc<dyn Store>) {
    // Two instances whose clocks are 3 s apart: the one ahead makes runs
    // earlier, the one behind finds them made.
    let t = add_target(&*store, &ACME).await;
    let start = t0();
    let s = every(&t, "1s", start);
    insert(&*store, &s).await;
    let c = config(Duration::from_secs(2), Duration::from_secs(3600));
    let ahead = materialise(&*store, start + secs(3), &c).await.unwrap();
    assert_eq!(ahead.created, 6, "runs +0 to +5 s");
    let behind = materialise(&*store, start, &c).await.unwrap();
    assert_eq!(behind.created, 0);
    let behind = materialise(&*store, start + secs(4), &c).await.unwrap();
    assert_eq!(behind.created, 1, "only the run at +6 s is new");
    let runs = runs_of(&*store, &s).await;
    assert_eq!(runs.len(), 7);
    assert_eq!(runs.last(), Some(&(start + secs(6))));
}

async fn a_keyed_schedules_runs_go_one_at_a_time(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let start = t0() - secs(10);
    let mut s = every(&t, "1s", start);
    s.ordering_key = Some(ordering_key("report"));
    insert(&*store, &s).await;
    let now = start + secs(10);
    materialise(
        &*store,
        now,
        &config(Duration::ZERO, Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    assert_eq!(runs_of(&*store, &s).await.len(), 11);
    // All are due; only the key's head, the first run, may be claimed.
    let claimed = store.claim_due(now, 100, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].delivery_time, start);
    assert_eq!(claimed[0].ordering_key.as_deref(), Some("report"));
}

async fn another_accounts_schedules_are_invisible(store: Arc<dyn Store>) {
    let t = add_target(&*store, &ACME).await;
    let theirs = add_target(&*store, &GLOBEX).await;
    let start = t0();
    let s = every(&t, "1h", start);
    insert(&*store, &s).await;
    // A schedule for another account's target is refused.
    let mut foreign = every(&theirs, "1h", start);
    foreign.account = ACME.clone();
    assert!(!store.insert_schedule(&foreign).await.unwrap());
    assert!(store
        .get_schedule(&GLOBEX, &s.id, start)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .list_schedules(&GLOBEX, None, None, 10, start)
        .await
        .unwrap()
        .is_empty());
    assert!(!store.delete_schedule(&GLOBEX, &s.id, start).await.unwrap());
    let mut stolen = s.clone();
    stolen.account = GLOBEX.clone();
    stolen.target_id = theirs.id.clone();
    stolen.revision += 1;
    assert_eq!(
        store.save_schedule(&stolen, true, start).await.unwrap(),
        SaveSchedule::NotFound
    );
    let listed = store
        .list_schedules(&ACME, Some(&t.id), None, 10, start)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, s.id);
}
