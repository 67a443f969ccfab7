//! What a person's change does to a schedule's runs made ahead of their
//! time (`ScheduleStore::save_schedule`, `delete_schedule`): a pause, a
//! change of the runs or a delete cancels those not yet due, as a cancel
//! does (`cancelled_at`, an entry in their history, their key's order
//! settled), and they stay listed under the schedule; the schedule as saved
//! makes its own message for each of its instants, so a resume before a
//! cancelled run's instant runs it; a change that keeps the runs keeps them
//! and the cursor; a run held under another instance's lease is left to it
//! and not made twice.

use dispatch::{domain::schedule::Schedule, schedules::materialise};

use crate::{
    schedules::{config, every, insert as insert_schedule, messages_of, runs_of, t0},
    support::*,
};

checks!(
    pausing_cancels_the_runs_made_ahead_and_a_paused_schedule_makes_none,
    a_resume_before_the_instant_of_a_cancelled_run_makes_it_again,
    a_change_that_keeps_the_runs_keeps_them_and_the_cursor,
    deleting_a_schedule_cancels_the_runs_ahead_and_keeps_those_that_fell_due,
    a_run_held_under_another_lease_is_left_to_it_and_not_made_twice,
    cancelled_runs_let_the_next_message_of_their_key_go,
);

/// A schedule every second made at `start`, with its runs made up to
/// `start + 5 s` (`schedules.ahead`).
async fn every_second_made_ahead(store: &dyn Store, start: DateTime<Utc>) -> (Target, Schedule) {
    let t = add_target(store, &ACME).await;
    let s = every(&t, "1s", start);
    insert_schedule(store, &s).await;
    let c = config(Duration::from_secs(5), Duration::from_secs(3600));
    materialise(store, start, &c).await.unwrap();
    assert_eq!(
        runs_of(store, &s).await,
        (0..=5).map(|n| start + secs(n)).collect::<Vec<_>>()
    );
    (t, s)
}

/// `s` as read at `now`, changed by `change` and saved at `now` as the
/// service saves a change of the runs (a new revision, the cursor from now).
async fn save_restarted(
    store: &dyn Store,
    s: &Schedule,
    now: DateTime<Utc>,
    change: impl FnOnce(&mut Schedule),
) -> Schedule {
    let mut changed = store
        .get_schedule(&ACME, &s.id, now)
        .await
        .unwrap()
        .unwrap();
    change(&mut changed);
    changed.revision += 1;
    changed.updated_at = now;
    changed.restart_at(now);
    assert_eq!(
        store.save_schedule(&changed, true, now).await.unwrap(),
        SaveSchedule::Saved
    );
    changed
}

/// The schedule's Cancelled messages, oldest run first.
async fn cancelled_of(store: &dyn Store, s: &Schedule) -> Vec<Message> {
    messages_of(store, s)
        .await
        .into_iter()
        .filter(|m| m.state == State::Cancelled)
        .collect()
}

/// Each of `messages` was cancelled at `at` as a cancel does it, recorded in
/// its history, and never attempted.
async fn assert_cancelled_at(store: &dyn Store, messages: &[Message], at: DateTime<Utc>) {
    for m in messages {
        assert_eq!(m.state, State::Cancelled, "{}", m.id);
        assert_eq!(m.cancelled_at, Some(at), "{}", m.id);
        assert_eq!(m.updated_at, at);
        assert_eq!(m.next_attempt_at, None);
        assert_eq!(m.attempt_count, 0);
        assert_eq!(
            events_of(store, m).await,
            [event(at, EventKind::Cancelled, State::Scheduled, None)]
        );
        assert_eq!(get(store, m).await.state, State::Cancelled);
    }
}

fn instants(messages: &[Message]) -> Vec<DateTime<Utc>> {
    messages.iter().map(|m| m.delivery_time).collect()
}

async fn pausing_cancels_the_runs_made_ahead_and_a_paused_schedule_makes_none(
    store: Arc<dyn Store>,
) {
    let start = t0();
    let (_, s) = every_second_made_ahead(&*store, start).await;
    let made = messages_of(&*store, &s).await;
    let now = start + ms(500);
    let paused = save_restarted(&*store, &s, now, |p| p.paused = true).await;
    assert_eq!(paused.next_run_at, None);
    assert_eq!(
        runs_of(&*store, &s).await,
        [start],
        "the run that fell due stays"
    );
    let cancelled = cancelled_of(&*store, &s).await;
    assert_eq!(
        instants(&cancelled),
        (1..=5).map(|n| start + secs(n)).collect::<Vec<_>>(),
        "those ahead of now are cancelled, and still listed"
    );
    assert_eq!(
        message_ids(&cancelled),
        message_ids(&made[1..]),
        "the same messages"
    );
    assert_cancelled_at(&*store, &cancelled, now).await;
    // A withdrawn run is no run: the last run stays the one that fell due,
    // at the withdrawn runs' instants and after them.
    for at in [start + secs(3), start + secs(9)] {
        let later = store.get_schedule(&ACME, &s.id, at).await.unwrap().unwrap();
        assert_eq!(later.last_run_at, Some(start), "at {at}");
    }
    let c = config(Duration::from_secs(5), Duration::from_secs(3600));
    let none = materialise(&*store, start + secs(10), &c).await.unwrap();
    assert_eq!(none.created, 0);
    // Resumed later: from then on, nothing made up.
    let now = start + ms(10_500);
    let resumed = save_restarted(&*store, &s, now, |r| r.paused = false).await;
    assert_eq!(resumed.next_run_at, Some(start + secs(11)));
    materialise(
        &*store,
        now,
        &config(Duration::ZERO, Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    assert_eq!(runs_of(&*store, &s).await, [start]);
    materialise(&*store, start + secs(11), &c).await.unwrap();
    assert_eq!(runs_of(&*store, &s).await[1], start + secs(11));
    assert_eq!(cancelled_of(&*store, &s).await.len(), 5, "untouched");
}

async fn a_resume_before_the_instant_of_a_cancelled_run_makes_it_again(store: Arc<dyn Store>) {
    let start = t0();
    let (_, s) = every_second_made_ahead(&*store, start).await;
    // A person cancelled the last run's message before the pause.
    let last = messages_of(&*store, &s).await.pop().unwrap();
    done(
        store
            .cancel_held(&ACME, &last.id, start + ms(100), None)
            .await
            .unwrap(),
    );
    save_restarted(&*store, &s, start + ms(500), |p| p.paused = true).await;
    let now = start + ms(600);
    let resumed = save_restarted(&*store, &s, now, |r| r.paused = false).await;
    assert_eq!(resumed.next_run_at, Some(start + secs(1)));
    let c = config(Duration::from_secs(5), Duration::from_secs(3600));
    let made = materialise(&*store, now, &c).await.unwrap();
    assert_eq!(made.created, 5, "each cancelled instant is run again");
    let runs: Vec<_> = (0..=5).map(|n| start + secs(n)).collect();
    assert_eq!(runs_of(&*store, &s).await, runs, "one live message per run");
    assert_eq!(instants(&cancelled_of(&*store, &s).await), runs[1..]);
    assert_eq!(
        materialise(&*store, now, &c).await.unwrap().created,
        0,
        "and never a second"
    );
}

async fn a_change_that_keeps_the_runs_keeps_them_and_the_cursor(store: Arc<dyn Store>) {
    let start = t0();
    let (_, s) = every_second_made_ahead(&*store, start).await;
    let made = messages_of(&*store, &s).await;
    let now = start + ms(500);
    let mut renamed = store
        .get_schedule(&ACME, &s.id, now)
        .await
        .unwrap()
        .unwrap();
    renamed.name = "renamed".into();
    renamed.revision += 1;
    renamed.updated_at = now;
    // What the service passes for a change that keeps the runs; the store
    // keeps its own cursor, whatever this one says.
    renamed.next_run_at = Some(start);
    assert_eq!(
        store.save_schedule(&renamed, false, now).await.unwrap(),
        SaveSchedule::Saved
    );
    let now_made: Vec<_> = messages_of(&*store, &s)
        .await
        .into_iter()
        .map(|m| (m.id, m.state, m.delivery_time, m.updated_at))
        .collect();
    let before: Vec<_> = made
        .into_iter()
        .map(|m| (m.id, m.state, m.delivery_time, m.updated_at))
        .collect();
    assert_eq!(now_made, before, "every run made stays as it was");
    let got = store
        .get_schedule(&ACME, &s.id, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.name, "renamed");
    assert_eq!(got.next_run_at, Some(start + secs(6)));
    assert_eq!(got.last_run_at, Some(start));
    let c = config(Duration::from_secs(5), Duration::from_secs(3600));
    assert_eq!(materialise(&*store, now, &c).await.unwrap().created, 0);
}

async fn deleting_a_schedule_cancels_the_runs_ahead_and_keeps_those_that_fell_due(
    store: Arc<dyn Store>,
) {
    let start = t0();
    let (_, s) = every_second_made_ahead(&*store, start).await;
    let now = start + secs(1);
    assert!(store.delete_schedule(&ACME, &s.id, now).await.unwrap());
    assert!(!store.delete_schedule(&ACME, &s.id, now).await.unwrap());
    assert!(store
        .get_schedule(&ACME, &s.id, start)
        .await
        .unwrap()
        .is_none());
    assert_eq!(runs_of(&*store, &s).await, [start, start + secs(1)]);
    let cancelled = cancelled_of(&*store, &s).await;
    assert_eq!(
        instants(&cancelled),
        (2..=5).map(|n| start + secs(n)).collect::<Vec<_>>()
    );
    assert_cancelled_at(&*store, &cancelled, now).await;
    let c = config(Duration::from_secs(5), Duration::from_secs(3600));
    let none = materialise(&*store, start + secs(10), &c).await.unwrap();
    assert_eq!(none.created, 0);
}

async fn a_run_held_under_another_lease_is_left_to_it_and_not_made_twice(store: Arc<dyn Store>) {
    let start = t0();
    let (_, s) = every_second_made_ahead(&*store, start).await;
    // Another instance claimed the runs due within two seconds ahead.
    let held = store
        .claim_ahead(start + ms(100), start + secs(2), 10, LEASE, &[], &[])
        .await
        .unwrap();
    let held_at: Vec<_> = held.iter().map(|c| c.delivery_time).collect();
    assert_eq!(held_at, [start + secs(1), start + secs(2)]);
    let now = start + ms(500);
    save_restarted(&*store, &s, now, |p| p.paused = true).await;
    assert_eq!(
        runs_of(&*store, &s).await,
        [start, start + secs(1), start + secs(2)],
        "the run that fell due stays, and the lease holds those held, as it holds a cancel"
    );
    let cancelled = cancelled_of(&*store, &s).await;
    assert_eq!(
        instants(&cancelled),
        (3..=5).map(|n| start + secs(n)).collect::<Vec<_>>()
    );
    assert_cancelled_at(&*store, &cancelled, now).await;
    let now = start + ms(600);
    save_restarted(&*store, &s, now, |r| r.paused = false).await;
    let c = config(Duration::from_secs(5), Duration::from_secs(3600));
    let made = materialise(&*store, now, &c).await.unwrap();
    assert_eq!(made.created, 3, "the instants cancelled, not those held");
    assert_eq!(
        runs_of(&*store, &s).await,
        (0..=5).map(|n| start + secs(n)).collect::<Vec<_>>(),
        "one live message per run"
    );
}

async fn cancelled_runs_let_the_next_message_of_their_key_go(store: Arc<dyn Store>) {
    let start = t0();
    let t = add_target(&*store, &ACME).await;
    let mut s = every(&t, "1s", start);
    s.ordering_key = Some(ordering_key("report"));
    insert_schedule(&*store, &s).await;
    let c = config(Duration::from_secs(5), Duration::from_secs(3600));
    materialise(&*store, start, &c).await.unwrap();
    // A message of the key due between the runs at +1 s and +2 s: it waits
    // for the run at +1 s.
    let mut m = message_value(&t, start + ms(1_500), start);
    m.ordering_key = Some(ordering_key("report"));
    let m = insert(&*store, &m).await;
    let first = messages_of(&*store, &s).await.remove(0);
    deliver(&*store, &first, start).await;
    save_restarted(&*store, &s, start + ms(500), |p| p.paused = true).await;
    assert_eq!(
        claimed_ids(&store.claim_due(start + ms(1_500), 10, LEASE).await.unwrap()),
        [m.id],
        "the runs ahead of it are cancelled: it is its key's head"
    );
}
