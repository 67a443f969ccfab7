//! The runs a change withdraws. A run's message is made ahead
//! of its instant and listed by `GET /messages?scheduleId=` from then on; a
//! pause, a patch of what the runs are, or a delete cancels those not yet
//! due (`Cancelled`, `cancelledAt` the change's instant), they stay listed,
//! and none is ever delivered. The schedule as it is after the change runs
//! at its instants with messages of its own, even at an instant whose
//! earlier message was cancelled; a patch of its name alone keeps the runs.

use super::*;

/// How far ahead of its instant a run's message is made here.
const AHEAD: Duration = Duration::from_secs(6);

/// How far ahead of now the runs a test watches are, at least, when it
/// starts: the change lands before they fall due, on a busy machine too.
const MARGIN_MS: i64 = 2_500;

/// A schedule every second whose runs are made `AHEAD`, and those runs as
/// listed.
struct Withdrawal {
    app: TestApp,
    api: Api,
    rx: Receiver,
    target: String,
    id: String,
    /// Every message of the schedule before the change.
    before: Vec<Value>,
    /// Those at least `MARGIN_MS` ahead of now.
    ahead: Vec<Value>,
}

fn due(m: &Value) -> i64 {
    ms(&m["deliveryTime"])
}

fn id_of(m: &Value) -> &str {
    m["messageId"].as_str().unwrap()
}

impl Withdrawal {
    async fn start(payload: &str) -> Self {
        let app = TestApp::spawn_with(|c| c.schedules.ahead = AHEAD).await;
        let api = app.api("acme").await;
        let rx = Receiver::start().await;
        rx.always(Reply::status(200));
        let target = target(&api, &rx).await;
        let s = create(
            &api,
            json!({"targetId": target, "every": "1s", "payload": payload}),
        )
        .await;
        let id = s["scheduleId"].as_str().unwrap().to_string();
        // The runs up to `AHEAD` exist once a pass has run: this one, or the
        // instance's own (which this one passes over while it runs).
        let (app_ref, api_ref, sid) = (&app, &api, id.as_str());
        let (before, ahead) = eventually("runs made ahead", || async move {
            pass_at(app_ref, Utc::now(), AHEAD).await;
            let now = Utc::now().timestamp_millis();
            let before = messages_of(api_ref, sid).await;
            let ahead: Vec<Value> = before
                .iter()
                .filter(|m| due(m) > now + MARGIN_MS)
                .cloned()
                .collect();
            (ahead.len() >= 2).then_some((before, ahead))
        })
        .await;
        for m in &ahead {
            assert_eq!(m["state"], "Scheduled", "{m}");
            assert_eq!(m["payload"], payload);
        }
        Self {
            app,
            api,
            rx,
            target,
            id,
            before,
            ahead,
        }
    }

    async fn listed(&self) -> Vec<Value> {
        messages_of(&self.api, &self.id).await
    }

    /// Of the messages listed before the change, those due after `cut` (the
    /// change's instant) are now Cancelled at `cut` and still listed, the
    /// others not; those watched are among the first. Returns them.
    async fn assert_withdrawn_at(&self, cut: i64) -> Vec<Value> {
        let listed = self.listed().await;
        let mut cancelled = Vec::new();
        for was in &self.before {
            let now = listed
                .iter()
                .find(|m| m["messageId"] == was["messageId"])
                .unwrap_or_else(|| panic!("{} is no longer listed: {listed:?}", id_of(was)));
            if due(now) > cut {
                assert_eq!(now["state"], "Cancelled", "{now}");
                assert_eq!(ms(&now["cancelledAt"]), cut, "{now}");
                assert_eq!(now["nextAttemptAt"], Value::Null, "{now}");
                assert_eq!(now["deliveryTime"], was["deliveryTime"]);
                assert_eq!(now["scheduleId"], self.id.as_str());
                cancelled.push(now.clone());
            } else {
                assert_ne!(now["state"], "Cancelled", "due by the change: {now}");
            }
        }
        for m in &self.ahead {
            assert!(
                cancelled.iter().any(|c| c["messageId"] == m["messageId"]),
                "{} was not cancelled: {cancelled:?}",
                id_of(m)
            );
        }
        cancelled
    }

    /// Each of `cancelled` is still Cancelled, was never attempted, and
    /// never reached the receiver. Called once something due after all of
    /// them was delivered.
    async fn assert_never_delivered(&self, cancelled: &[Value]) {
        let arrived: HashSet<String> = self
            .rx
            .received()
            .iter()
            .map(|r| r.json()["messageId"].as_str().unwrap().to_string())
            .collect();
        for c in cancelled {
            let m = self.api.message(id_of(c)).await;
            assert_eq!(m["state"], "Cancelled", "{m}");
            assert_eq!(m["attemptCount"], 0, "{m}");
            assert_eq!(self.api.attempts(id_of(c)).await, Vec::<Value>::new());
            assert!(!arrived.contains(id_of(c)), "{} was delivered", id_of(c));
        }
    }

    /// The one message at each instant of `cancelled` after `from` that is
    /// not Cancelled (the schedule's own, as it is now), after a pass.
    async fn runs_again(&self, cancelled: &[Value], from: i64) -> Vec<Value> {
        let again = eventually("the instants run anew", || async move {
            pass_at(&self.app, Utc::now(), AHEAD).await;
            let listed = self.listed().await;
            let mut again = Vec::new();
            for c in cancelled.iter().filter(|c| due(c) > from) {
                let live: Vec<&Value> = listed
                    .iter()
                    .filter(|m| due(m) == due(c) && m["state"] != "Cancelled")
                    .collect();
                assert!(
                    live.len() <= 1,
                    "one live message at {}: {listed:?}",
                    due(c)
                );
                let live = live.first()?;
                assert_ne!(live["messageId"], c["messageId"]);
                again.push((*live).clone());
            }
            Some(again)
        })
        .await;
        assert!(
            !again.is_empty(),
            "no cancelled run after {from}: {cancelled:?}"
        );
        again
    }
}

#[tokio::test]
async fn a_pause_cancels_the_runs_made_ahead_and_a_resume_before_their_instant_runs_them() {
    let w = Withdrawal::start("x").await;
    let r = w
        .api
        .post_empty(&format!("/schedules/{}/pause", w.id))
        .await;
    assert_eq!(r.status(), 200);
    let paused: Value = r.json().await.unwrap();
    let cancelled = w.assert_withdrawn_at(ms(&paused["updatedAt"])).await;

    // Resumed before the last of them falls due: at that instant the
    // schedule runs again, with a message of its own.
    let r = w
        .api
        .post_empty(&format!("/schedules/{}/resume", w.id))
        .await;
    assert_eq!(r.status(), 200);
    let resumed_at = ms(&r.json::<Value>().await.unwrap()["updatedAt"]);
    let last = cancelled.iter().map(due).max().unwrap();
    assert!(resumed_at < last, "resumed at {resumed_at}, after {last}");
    let again = w.runs_again(&cancelled, resumed_at).await;
    let at_last = again.iter().find(|m| due(m) == last).unwrap();
    w.api
        .wait_for_state(id_of(at_last), "Delivered", WAIT)
        .await;
    w.assert_never_delivered(&cancelled).await;
}

#[tokio::test]
async fn a_patch_of_what_the_runs_are_cancels_those_made_ahead_and_runs_their_instants_anew() {
    let w = Withdrawal::start("before").await;
    let r = w
        .api
        .patch(&format!("/schedules/{}", w.id), json!({"payload": "after"}))
        .await;
    assert_eq!(r.status(), 200);
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["payload"], "after");
    let cut = ms(&patched["updatedAt"]);
    let cancelled = w.assert_withdrawn_at(cut).await;
    // Same grid, new payload: each of those instants has a message of the
    // schedule as it is now.
    let again = w.runs_again(&cancelled, cut).await;
    assert!(again.iter().all(|m| m["payload"] == "after"), "{again:?}");
    let last = again.iter().max_by_key(|m| due(m)).unwrap();
    w.api.wait_for_state(id_of(last), "Delivered", WAIT).await;
    let arrived =
        w.rx.received()
            .into_iter()
            .find(|r| r.json()["messageId"] == last["messageId"])
            .expect("the run at the last instant arrived");
    assert_eq!(arrived.json()["payload"], "after");
    w.assert_never_delivered(&cancelled).await;
}

#[tokio::test]
async fn a_patch_of_the_name_alone_keeps_the_runs_made_ahead() {
    let w = Withdrawal::start("x").await;
    let r = w
        .api
        .patch(&format!("/schedules/{}", w.id), json!({"name": "renamed"}))
        .await;
    assert_eq!(r.status(), 200);
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["name"], "renamed");
    let listed = w.listed().await;
    for was in &w.before {
        let now = listed
            .iter()
            .find(|m| m["messageId"] == was["messageId"])
            .unwrap_or_else(|| panic!("{} is no longer listed", id_of(was)));
        assert_ne!(now["state"], "Cancelled", "{now}");
    }
    assert!(
        listed.iter().all(|m| m["state"] != "Cancelled"),
        "{listed:?}"
    );
    // The very messages made before run, and no second one beside them.
    let last = w.ahead.iter().max_by_key(|m| due(m)).unwrap();
    w.api.wait_for_state(id_of(last), "Delivered", WAIT).await;
    pass_at(&w.app, Utc::now(), AHEAD).await;
    let listed = w.listed().await;
    let instants: HashSet<i64> = listed.iter().map(due).collect();
    assert_eq!(
        instants.len(),
        listed.len(),
        "one message per run: {listed:?}"
    );
}

#[tokio::test]
async fn a_delete_cancels_the_runs_made_ahead_and_they_stay_listed() {
    let w = Withdrawal::start("x").await;
    let r = w.api.delete(&format!("/schedules/{}", w.id)).await;
    assert_eq!(r.status(), 204);
    let listed = w.listed().await;
    let cut = listed
        .iter()
        .find(|m| m["state"] == "Cancelled")
        .map(|m| ms(&m["cancelledAt"]))
        .expect("a run cancelled by the delete");
    let cancelled = w.assert_withdrawn_at(cut).await;
    // A message due just after the last of them is delivered: by then any
    // of them would have been.
    let last = cancelled.iter().map(due).max().unwrap();
    let after = chrono::DateTime::from_timestamp_millis(last + 100).unwrap();
    let marker = w.api.schedule(&w.target, &format(&after), "marker").await;
    w.api
        .wait_for_state(id_of(&marker), "Delivered", WAIT)
        .await;
    w.assert_never_delivered(&cancelled).await;
    let later = pass_at(&w.app, Utc::now() + TimeDelta::seconds(10), AHEAD).await;
    assert_eq!(later.created, 0, "no further runs");
}
