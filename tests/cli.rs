//! The binary itself: `clients create`, `migrate`, `serve` without a
//! database, and a graceful stop on SIGTERM.

mod common;

use std::{process::Stdio, time::Duration};

use common::{in_ms, receiver::Receiver, receiver::Reply, TestApp, TestDb};
use serde_json::Value;

fn dispatch() -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    c
}

#[tokio::test]
async fn clients_create_prints_the_credentials_once_and_they_work() {
    let db = TestDb::new().await;
    let out = dispatch()
        .args([
            "clients",
            "create",
            "--account",
            "acme",
            "--name",
            "ci",
            "--scope",
            "messages:read",
            "--scope",
            "messages:write",
        ])
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["account"], "acme");
    assert_eq!(
        created["scopes"],
        serde_json::json!(["messages:read", "messages:write"])
    );
    let (id, secret) = (
        created["clientId"].as_str().unwrap(),
        created["clientSecret"].as_str().unwrap(),
    );

    let app = TestApp::spawn_on(std::sync::Arc::new(db), |_| {}).await;
    let token: Value = app
        .http
        .post(app.url("/oauth/token"))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(token["token_type"], "Bearer");
    assert_eq!(token["scope"], "messages:read messages:write");
    app.shutdown().await;
}

#[tokio::test]
async fn clients_create_without_scopes_grants_all_four_and_refuses_unknown_ones() {
    let db = TestDb::new().await;
    let out = dispatch()
        .args(["clients", "create", "--account", "a", "--name", "n"])
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["scopes"].as_array().unwrap().len(), 4);
    let out = dispatch()
        .args([
            "clients",
            "create",
            "--account",
            "a",
            "--name",
            "n",
            "--scope",
            "admin",
        ])
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scope admin"));
}

#[tokio::test]
async fn serve_without_a_database_says_how_to_configure_one() {
    let out = dispatch()
        .arg("serve")
        .env("DISPATCH_SERVER__LISTEN", "127.0.0.1:0")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DATABASE_URL") && stderr.contains("postgres://"),
        "{stderr}"
    );
}

#[tokio::test]
async fn migrate_applies_the_schema() {
    let db = TestDb::new().await;
    let out = dispatch()
        .arg("migrate")
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = common::open_store(&db.url).await;
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    let tables: Vec<&str> = tables.iter().map(|t| t.0.as_str()).collect();
    for t in [
        "accounts",
        "attempts",
        "clients",
        "idempotency_keys",
        "messages",
        "signing_keys",
        "targets",
    ] {
        assert!(tables.contains(&t), "{t} in {tables:?}");
    }
}

#[tokio::test]
async fn sigterm_lets_attempts_in_flight_finish_and_records_them() {
    let api_app = TestApp::spawn_with(|c| c.sweeper.enabled = false).await;
    let rx = Receiver::start().await;
    rx.always(Reply::status(200).delay(Duration::from_millis(700)));
    let api = api_app.api("acme").await;
    let target = api.webhook(&rx.url("/hook")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            api.schedule(&target, &in_ms(-1), &format!("m{i}")).await["messageId"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut worker = dispatch()
        .arg("serve")
        .env("DATABASE_URL", &api_app.db.url)
        .env("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    rx.wait_for(5, Duration::from_secs(20)).await;
    let pid = worker.id().unwrap();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let status = tokio::time::timeout(Duration::from_secs(10), worker.wait())
        .await
        .expect("it exits")
        .unwrap();
    assert!(status.success(), "a graceful stop exits 0: {status:?}");
    // The attempts under way at SIGTERM finished and were recorded before exit.
    for id in &ids {
        let m = api.message(id).await;
        assert_eq!(m["state"], "Delivered", "{m}");
    }
    assert_eq!(rx.count(), 5);
    api_app.shutdown().await;
}

#[tokio::test]
async fn targets_create_provisions_a_target_from_the_command_line() {
    let db = TestDb::new().await;
    let config = r#"{"queueUrl":"http://127.0.0.1:5000/123456789012/q","region":"us-east-1","credentials":{"accessKeyId":"a","secretAccessKey":"s"}}"#;
    let out = dispatch()
        .args([
            "targets",
            "create",
            "--account",
            "demo",
            "--name",
            "q",
            "--type",
            "sqs",
            "--target-config",
            config,
        ])
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["type"], "sqs");
    assert_eq!(t["config"]["credentials"]["secretAccessKey"], "***");
    let id: dispatch::domain::ids::TargetId = t["targetId"].as_str().unwrap().parse().unwrap();
    let store = common::open_store(&db.url).await;
    use dispatch::store::Store;
    assert!(store.get_target("demo", &id).await.unwrap().is_some());

    let bad = dispatch()
        .args([
            "targets",
            "create",
            "--account",
            "demo",
            "--name",
            "q",
            "--type",
            "webhook",
            "--target-config",
            r#"{"url":"ftp://x"}"#,
        ])
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("config.url"));
}
