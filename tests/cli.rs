//! The binary itself: `clients create`, `migrate`, `serve` without a
//! database, and a graceful stop on SIGTERM.

mod common;

use std::{process::Stdio, time::Duration};

use tokio::io::AsyncBufReadExt;

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

/// Runs `dispatch serve` with no configuration but the port (0: its own
/// choice) in `dir`; reads stderr until `until` matches a line, and returns
/// the lines read.
async fn serve_in(dir: &std::path::Path, until: &str) -> (tokio::process::Child, Vec<String>) {
    let mut child = dispatch()
        .arg("serve")
        .current_dir(dir)
        .env("DISPATCH_SERVER__LISTEN", "127.0.0.1:0")
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .env("RUST_LOG", "info")
        .env("DISPATCH_LOG__FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut lines = Vec::new();
    let read = async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            let done = line.contains(until);
            lines.push(line);
            if done {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .unwrap_or_else(|_| panic!("no `{until}` in {lines:?}"));
    // Keep draining, so that the process never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    (child, lines)
}

fn after<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .map(str::trim)
        .unwrap_or_default()
}

#[tokio::test]
async fn serve_with_no_configuration_runs_on_the_embedded_store_and_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, lines) = serve_in(dir.path(), "Get a token").await;
    let (id, secret) = (
        after(&lines, "client id:").to_string(),
        after(&lines, "client secret:").to_string(),
    );
    assert!(id.starts_with("dc_") && !secret.is_empty(), "{lines:?}");
    let base = after(&lines, "Get a token:")
        .rsplit(' ')
        .next()
        .unwrap()
        .trim_end_matches("/oauth/token")
        .to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    assert!(
        dir.path().join("data/dispatch.db").exists(),
        "the store lives under ./data"
    );
    let http = reqwest::Client::new();
    assert_eq!(
        http.get(format!("{base}/health/ready"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let token: Value = http
        .post(format!("{base}/oauth/token"))
        .basic_auth(&id, Some(&secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let api = common::Api {
        base: base.clone(),
        http: http.clone(),
        token: token["access_token"].as_str().unwrap().into(),
    };
    let rx = Receiver::start().await;
    let target = api.webhook(&rx.url("/hook")).await["targetId"]
        .as_str()
        .unwrap()
        .to_string();
    let m = api.schedule(&target, &in_ms(300), "first message").await;
    api.wait_for_state(
        m["messageId"].as_str().unwrap(),
        "Delivered",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(rx.received()[0].json()["payload"], "first message");

    // A second process on the same file is refused, saying why and what to use instead.
    let other = dispatch()
        .arg("serve")
        .current_dir(dir.path())
        .env("DISPATCH_SERVER__LISTEN", "127.0.0.1:0")
        .output()
        .await
        .unwrap();
    assert!(!other.status.success());
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(
        err.contains("dispatch.db.lock") && err.contains("PostgreSQL"),
        "{err}"
    );

    // The development client is made once: a restart prints none.
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let (again, lines) = serve_in(dir.path(), "dispatch is serving").await;
    assert!(
        !lines.iter().any(|l| l.contains("client secret")),
        "a second client was created: {lines:?}"
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &again.id().unwrap().to_string()])
        .status();
    again.wait_with_output().await.unwrap();
    // The data survived the restart.
    let store = common::open_any_store(&format!(
        "sqlite://{}",
        dir.path().join("data/dispatch.db").display()
    ))
    .await;
    assert_eq!(store.count_clients().await.unwrap(), 1);
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
    // The schema is there: the store answers without migrating again.
    let store = common::open_any_store(&db.url).await;
    assert_eq!(store.count_clients().await.unwrap(), 0);
    assert!(store.signing_keys().await.unwrap().len() == 1);
}

#[tokio::test]
async fn sigterm_lets_attempts_in_flight_finish_and_records_them() {
    // Two processes on one database: PostgreSQL, whatever the store under test.
    let api_app = TestApp::spawn_postgres_with(|c| c.sweeper.enabled = false).await;
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
    let store = common::open_any_store(&db.url).await;
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
