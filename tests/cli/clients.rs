//! `dispatch clients list` and `dispatch clients revoke` (docs/operations.md#commands).

use std::{sync::Arc, time::Instant};

use serde_json::json;

use super::*;

async fn run(db_url: &str, args: &[&str]) -> std::process::Output {
    dispatch()
        .args(args)
        .env("DATABASE_URL", db_url)
        .output()
        .await
        .unwrap()
}

async fn create(db_url: &str, account: &str, name: &str) -> (String, String) {
    let out = run(
        db_url,
        &["clients", "create", "--account", account, "--name", name],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        created["clientId"].as_str().unwrap().to_string(),
        created["clientSecret"].as_str().unwrap().to_string(),
    )
}

async fn list(db_url: &str, account: &str) -> Vec<Value> {
    let out = run(db_url, &["clients", "list", "--account", account]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    listed.as_array().expect("a JSON array").clone()
}

async fn token_status(app: &TestApp, id: &str, secret: &str) -> (u16, Value) {
    let r = app
        .http
        .post(app.url("/oauth/token"))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn clients_list_shows_an_accounts_clients_and_revoke_marks_one_and_refuses_its_requests() {
    let db = TestDb::new().await;
    let (ci, ci_secret) = create(&db.url, "acme", "ci").await;
    let (cron, cron_secret) = create(&db.url, "acme", "cron").await;
    create(&db.url, "globex", "other").await;

    let listed = list(&db.url, "acme").await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    let first = &listed[0];
    assert_eq!(first["clientId"], ci.as_str());
    assert_eq!(first["name"], "ci");
    assert_eq!(first["account"], "acme");
    assert_eq!(first["scopes"].as_array().unwrap().len(), 5);
    assert!(
        first["createdAt"].as_str().unwrap().ends_with('Z'),
        "{first}"
    );
    assert_eq!(first["revokedAt"], json!(null));
    let mut keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "account",
            "clientId",
            "createdAt",
            "name",
            "revokedAt",
            "scopes"
        ],
        "no secret, no hash"
    );
    assert!(list(&db.url, "nobody").await.is_empty());

    let out = run(&db.url, &["clients", "revoke", &cron]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = list(&db.url, "acme").await;
    assert_eq!(listed[0]["revokedAt"], json!(null));
    assert_eq!(listed[1]["clientId"], cron.as_str());
    let revoked_at = listed[1]["revokedAt"].as_str().expect("a revocation time");
    assert!(revoked_at.ends_with('Z'), "{revoked_at}");

    let app = TestApp::spawn_on(Arc::new(db), |_| {}).await;
    let (status, body) = token_status(&app, &cron, &cron_secret).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "invalid_client");
    assert_eq!(token_status(&app, &ci, &ci_secret).await.0, 200);
    app.shutdown().await;
}

#[tokio::test]
async fn revoking_an_unknown_client_exits_non_zero_and_says_so() {
    let db = TestDb::new().await;
    let out = run(&db.url, &["clients", "revoke", "dc_0123456789abcdef"]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no client with the id dc_0123456789abcdef"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// Several instances on one database: PostgreSQL only.
mod postgres {
    use super::*;

    #[tokio::test]
    async fn a_revoked_clients_tokens_are_refused_within_5_s_on_every_instance() {
        let first = TestApp::spawn_postgres_with(|_| {}).await;
        let second = TestApp::spawn_on(first.db.clone(), |_| {}).await;
        let (id, secret) = first.client("acme", &[]).await;
        let (_, body) = token_status(&first, &id, &secret).await;
        let token = body["access_token"].as_str().unwrap().to_string();
        let get = |app: &TestApp| app.http.get(app.url("/targets")).bearer_auth(&token).send();
        assert_eq!(get(&first).await.unwrap().status(), 200);
        assert_eq!(get(&second).await.unwrap().status(), 200);

        let out = run(&first.db.url, &["clients", "revoke", &id]).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let revoked = Instant::now();
        for app in [&second, &first] {
            loop {
                let r = get(app).await.unwrap();
                if r.status() == 401 {
                    let challenge = r.headers()["www-authenticate"].to_str().unwrap();
                    assert!(
                        challenge.contains(r#"error="invalid_token""#),
                        "{challenge}"
                    );
                    break;
                }
                assert_eq!(r.status(), 200);
                assert!(
                    revoked.elapsed() < Duration::from_secs(5),
                    "the revoked client's token still works after 5 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        assert!(revoked.elapsed() < Duration::from_secs(5));
        assert_eq!(token_status(&second, &id, &secret).await.0, 401);
        second.shutdown().await;
        first.shutdown().await;
    }
}
