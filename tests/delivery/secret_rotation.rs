//! Rotating a webhook's signing secret (`POST /targets/{id}/rotate-secret`):
//! the new secret is shown once; during the overlap every delivery carries
//! two `v1,` signatures, by the new and by the replaced secret, and after
//! it (or with no overlap) only the new one.

use super::*;
use common::problem::assert_invalid;

/// The `webhook-signature` header of the `n`-th request the receiver got,
/// checked against each secret.
fn signed_by(req: &common::receiver::Received, secrets: &[&str]) -> Vec<bool> {
    let id = req.header("webhook-id").expect("webhook-id");
    let ts = req.header("webhook-timestamp").expect("webhook-timestamp");
    let header = req.header("webhook-signature").expect("webhook-signature");
    secrets
        .iter()
        .map(|secret| signature_is_valid(secret, &id, &ts, &req.body, &header))
        .collect()
}

/// A webhook target of `acme` and its receiver: the app, the receiver, the
/// API, the target as created (its generated secret shown) and its id.
async fn webhook_target() -> (TestApp, Receiver, Api, Value, String) {
    let app = TestApp::spawn().await;
    let rx = Receiver::start().await;
    let api = app.api("acme").await;
    let target = api.webhook_with(&rx.url("/hook"), json!({})).await;
    let tid = s(&target["targetId"]).to_string();
    (app, rx, api, target, tid)
}

#[tokio::test]
async fn a_rotated_secret_signs_beside_the_new_one_until_the_overlap_ends() {
    let _machine = share_the_machine().await;
    let (app, rx, api, target, tid) = webhook_target().await;
    let first = s(&target["config"]["signingSecret"]).to_string();

    let r = api
        .post(
            &format!("/targets/{tid}/rotate-secret"),
            json!({"overlapSeconds": 3600}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let rotated: Value = r.json().await.unwrap();
    let second = s(&rotated["config"]["signingSecret"]).to_string();
    assert!(second.starts_with("whsec_") && second != first, "{second}");
    // Shown once: a read shows neither secret, and nothing of the overlap.
    let read: Value = api
        .get(&format!("/targets/{tid}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read["config"]["signingSecret"], "***");
    assert!(
        read["config"].get("previousSigningSecret").is_none(),
        "{read}"
    );
    assert!(!read.to_string().contains(&first[6..]), "{read}");

    schedule_now(&api, &target, "during the overlap").await;
    let got = rx.wait_for(1, WAIT).await;
    let header = got[0].header("webhook-signature").unwrap();
    assert_eq!(header.split(' ').count(), 2, "{header}");
    assert_eq!(signed_by(&got[0], &[&second, &first]), [true, true]);

    // A change that keeps the secret keeps the overlap.
    let r = api
        .patch(&format!("/targets/{tid}"), json!({"name": "renamed"}))
        .await;
    assert_eq!(r.status(), 200);
    schedule_now(&api, &target, "after a rename").await;
    let got = rx.wait_for(2, WAIT).await;
    assert_eq!(signed_by(&got[1], &[&second, &first]), [true, true]);

    // Rotating with no overlap replaces the secret at once: one signature.
    let r = api
        .post(
            &format!("/targets/{tid}/rotate-secret"),
            json!({"overlapSeconds": 0}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let third = s(&r.json::<Value>().await.unwrap()["config"]["signingSecret"]).to_string();
    schedule_now(&api, &target, "after the overlap").await;
    let got = rx.wait_for(3, WAIT).await;
    let header = got[2].header("webhook-signature").unwrap();
    assert_eq!(header.split(' ').count(), 1, "{header}");
    assert_eq!(
        signed_by(&got[2], &[&third, &second, &first]),
        [true, false, false]
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_secret_set_by_patch_ends_the_overlap_and_the_default_overlap_is_a_day() {
    let _machine = share_the_machine().await;
    let (app, rx, api, target, tid) = webhook_target().await;
    // To the millisecond, as the embedded store keeps times: a rotation in
    // the same millisecond is stored no later than this.
    let before =
        chrono::DurationRound::duration_trunc(Utc::now(), chrono::TimeDelta::milliseconds(1))
            .unwrap();
    let r = api
        .post(&format!("/targets/{tid}/rotate-secret"), json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let second = s(&r.json::<Value>().await.unwrap()["config"]["signingSecret"]).to_string();
    // The default overlap, as stored: a day from the rotation.
    let stored = app
        .store()
        .get_target(
            &dispatch::domain::ids::AccountId::from_trusted("acme"),
            &tid.parse().unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    let dispatch::domain::target::TargetConfig::Webhook(w) = &stored.config else {
        panic!("a webhook")
    };
    let until = w
        .previous_signing_secret
        .as_ref()
        .expect("an overlap")
        .until;
    let day = chrono::TimeDelta::days(1);
    assert!(
        until >= before + day && until <= Utc::now() + day,
        "{until}"
    );

    // The owner sets a secret of their own: it alone signs from now on.
    let own = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let r = api
        .patch(
            &format!("/targets/{tid}"),
            json!({"config": {"signingSecret": own}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    schedule_now(&api, &target, "x").await;
    let got = rx.wait_for(1, WAIT).await;
    assert_eq!(signed_by(&got[0], &[own, &second]), [true, false]);
    app.shutdown().await;
}

#[tokio::test]
async fn a_bad_rotation_changes_nothing() {
    let _machine = share_the_machine().await;
    let (app, rx, api, target, tid) = webhook_target().await;
    let secret = s(&target["config"]["signingSecret"]).to_string();
    let path = format!("/targets/{tid}/rotate-secret");
    for bad in [
        json!({"overlapSeconds": -1}),
        json!({"overlapSeconds": 604_801}),
        json!({"overlapSeconds": 1.5}),
        json!({"overlapSeconds": "3600"}),
        json!({"overlapSeconds": 1e20}),
        json!({"overlapSeconds": -1e20}),
    ] {
        assert_invalid(api.post(&path, bad).await, "overlapSeconds").await;
    }
    // Not a webhook: no signing secret to rotate.
    let queue = api
        .post(
            "/targets",
            json!({"name": "q", "type": "sqs", "config": {
                "queueUrl": "https://sqs.eu-north-1.amazonaws.com/123456789012/q",
                "region": "eu-north-1",
                "credentials": {"accessKeyId": "AKIDEXAMPLE", "secretAccessKey": "s"}}}),
        )
        .await;
    assert_eq!(queue.status(), 201);
    let queue: Value = queue.json().await.unwrap();
    let r = api
        .post(
            &format!("/targets/{}/rotate-secret", s(&queue["targetId"])),
            json!({}),
        )
        .await;
    let problem = common::problem::assert_problem(r, 409).await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("only a webhook target has a signing secret"),
        "{problem}"
    );
    // Another account's target is not found, and keeps its secret.
    let other = app.api("globex").await;
    let r = other.post(&path, json!({})).await;
    common::problem::assert_problem(r, 404).await;
    // A token without targets:write may not.
    let token = app.token("acme", &["targets:read"]).await;
    let r = reqwest::Client::new()
        .post(app.url(&path))
        .bearer_auth(token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    schedule_now(&api, &target, "x").await;
    let got = rx.wait_for(1, WAIT).await;
    let header = got[0].header("webhook-signature").unwrap();
    assert_eq!(header.split(' ').count(), 1, "{header}");
    assert_eq!(signed_by(&got[0], &[&secret]), [true]);
    app.shutdown().await;
}
