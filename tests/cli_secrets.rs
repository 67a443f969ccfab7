//! Secrets at rest through the binary (docs/operations.md#secrets-at-rest): targets created with a
//! key are stored sealed, `dispatch secrets rotate` moves them to a new key,
//! and `serve` says when secrets are stored unencrypted.

mod common;

use std::{process::Stdio, time::Duration};

use common::{in_ms, receiver::Receiver, TestApp, TestDb};
use dispatch::{
    config::{Config, KeyText},
    domain::{
        ids::{AccountId, TargetId},
        target::TargetConfig,
    },
    sealing::SealingKey,
};
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection, SqliteConnection};
use tokio::io::AsyncBufReadExt;

const KEY_1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_2: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
const HEADER_SECRET: &str = "hdr-secret-5a1e";
const SIGNING_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const AWS_SECRET: &str = "aws-secret-access-key-77f0";

fn dispatch(db: &TestDb) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    c
}

fn key_id(base64: &str) -> String {
    SealingKey::from_base64(base64).unwrap().id().to_string()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `dispatch targets create` under `KEY_1`; returns the printed target.
async fn create_target(db: &TestDb, kind: &str, config: Value) -> Value {
    let out = dispatch(db)
        .args([
            "targets",
            "create",
            "--account",
            "demo",
            "--name",
            kind,
            "--type",
            kind,
        ])
        .arg("--target-config")
        .arg(config.to_string())
        .env("DISPATCH_SECRETS__ENCRYPTION_KEY", KEY_1)
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (config as text, secrets_key_id, sealed_secrets) of a target, straight from the database.
async fn raw_target(db: &TestDb, id: &str) -> (String, Option<String>, Option<Vec<u8>>) {
    if db.url.starts_with("sqlite:") {
        let mut c = SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::query_as("SELECT config, secrets_key_id, sealed_secrets FROM targets WHERE id = ?")
            .bind(id)
            .fetch_one(&mut c)
            .await
            .unwrap()
    } else {
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        sqlx::query_as(
            "SELECT config::text, secrets_key_id, sealed_secrets FROM targets WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&mut c)
        .await
        .unwrap()
    }
}

async fn raw_signing_key_ids(db: &TestDb) -> Vec<Option<String>> {
    let sql = "SELECT key_id FROM signing_keys";
    let rows: Vec<(Option<String>,)> = if db.url.starts_with("sqlite:") {
        let mut c = SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
    } else {
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
    };
    rows.into_iter().map(|r| r.0).collect()
}

/// The target's row holds none of the secrets and is sealed under `key`.
async fn assert_sealed(db: &TestDb, id: &str, key: &str) {
    let (config, stored_key_id, sealed) = raw_target(db, id).await;
    assert_eq!(stored_key_id, Some(key_id(key)), "{id}");
    let sealed = sealed.expect("sealed secrets beside the config");
    for secret in [HEADER_SECRET, SIGNING_SECRET, AWS_SECRET] {
        assert!(!config.contains(secret), "{secret} readable in {config}");
        assert!(
            !sealed.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{secret} readable in the sealed column"
        );
    }
}

fn config_with(db: &TestDb, current: &str, previous: &[&str]) -> Config {
    let mut c = common::test_config(&db.url);
    c.secrets.encryption_key = Some(KeyText::new(current));
    c.secrets.previous_keys = previous.iter().map(|k| KeyText::new(*k)).collect();
    c
}

#[tokio::test]
async fn targets_created_with_a_key_are_sealed_and_rotate_moves_them_to_a_new_key() {
    let db = std::sync::Arc::new(TestDb::new().await);
    let rx = Receiver::start().await;
    let hook = create_target(
        &db,
        "webhook",
        json!({"url": rx.url("/hook"), "headers": {"X-Api-Key": HEADER_SECRET}, "signingSecret": SIGNING_SECRET}),
    )
    .await;
    assert_eq!(hook["config"]["headers"]["X-Api-Key"], "***");
    let queue = create_target(
        &db,
        "sqs",
        json!({"queueUrl": "http://127.0.0.1:5000/123456789012/q", "region": "us-east-1",
               "credentials": {"accessKeyId": "AKIDEXAMPLE", "secretAccessKey": AWS_SECRET}}),
    )
    .await;
    let hook_id = hook["targetId"].as_str().unwrap().to_string();
    let queue_id = queue["targetId"].as_str().unwrap().to_string();
    for id in [&hook_id, &queue_id] {
        assert_sealed(&db, id, KEY_1).await;
    }

    // The store configured with the key reads the secrets back (and makes a
    // signing key, sealed too, as an instance does when it starts).
    {
        let backend = dispatch::app::open_store(&config_with(&db, KEY_1, &[]))
            .await
            .unwrap();
        let (store, _) = backend.into_parts();
        let id: TargetId = hook_id.parse().unwrap();
        let TargetConfig::Webhook(w) = store
            .get_target(&AccountId::parse("demo").unwrap(), &id)
            .await
            .unwrap()
            .unwrap()
            .config
        else {
            panic!("a webhook")
        };
        assert_eq!(w.headers["X-Api-Key"], HEADER_SECRET);
        assert_eq!(w.signing_secret, SIGNING_SECRET);
        assert!(store.ensure_signing_key(chrono::Utc::now()).await.unwrap());
        assert_eq!(store.signing_keys().await.unwrap().len(), 1);
    }
    assert_eq!(raw_signing_key_ids(&db).await, vec![Some(key_id(KEY_1))]);

    // Without the old key, rotate cannot read the rows: it says which, and nothing else.
    let out = dispatch(&db)
        .args(["secrets", "rotate"])
        .env("DISPATCH_SECRETS__ENCRYPTION_KEY", KEY_2)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains(&hook_id) || err.contains(&queue_id), "{err}");
    assert!(err.contains(&key_id(KEY_1)), "{err}");
    for secret in [HEADER_SECRET, SIGNING_SECRET, AWS_SECRET, KEY_1, KEY_2] {
        assert!(!err.contains(secret), "{err}");
    }
    // Without any key it refuses.
    let out = dispatch(&db)
        .args(["secrets", "rotate"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("secrets.encryption_key"),
        "{}",
        text(&out.stderr)
    );

    // The new key from a file, the old one as a previous key.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dispatch.key"), format!("{KEY_2}\n")).unwrap();
    let file = dir.path().join("dispatch.toml");
    std::fs::write(
        &file,
        format!(
            "[secrets]\nencryption_key_file = {:?}\nprevious_keys = [\"{KEY_1}\"]\n",
            dir.path().join("dispatch.key").display().to_string()
        ),
    )
    .unwrap();
    let out = dispatch(&db)
        .arg("--config")
        .arg(&file)
        .args(["secrets", "rotate"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!(
            "re-encrypted 3 rows under key id {}",
            key_id(KEY_2)
        )),
        "{said}"
    );
    for id in [&hook_id, &queue_id] {
        assert_sealed(&db, id, KEY_2).await;
    }
    assert_eq!(raw_signing_key_ids(&db).await, vec![Some(key_id(KEY_2))]);
    // Nothing left to re-encrypt.
    let out = dispatch(&db)
        .arg("--config")
        .arg(&file)
        .args(["secrets", "rotate"])
        .output()
        .await
        .unwrap();
    assert!(
        text(&out.stdout).contains("re-encrypted 0 rows"),
        "{}",
        text(&out.stdout)
    );

    // The old key dropped: the service still reads and delivers with the secrets.
    let app = TestApp::spawn_on(db.clone(), |c| {
        c.secrets.encryption_key = Some(KeyText::new(KEY_2));
    })
    .await;
    let api = app.api("demo").await;
    let shown: Value = api
        .get(&format!("/targets/{hook_id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(shown["config"]["headers"]["X-Api-Key"], "***");
    api.schedule(&hook_id, &in_ms(-1), "{\"n\": 1}").await;
    let got = rx.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(got[0].header("x-api-key").as_deref(), Some(HEADER_SECRET));
    assert!(got[0].header("webhook-signature").is_some());
    app.shutdown().await;
}

/// Runs `dispatch serve` on `db` with `env`; returns its log lines up to
/// the one saying it serves.
async fn serve_log(db: &TestDb, env: &[(&str, &str)]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = dispatch(db);
    cmd.arg("serve")
        .current_dir(dir.path())
        .env("DISPATCH_SERVER__LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .env("DISPATCH_LOG__FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut lines = Vec::new();
    let read = async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            let done = line.contains("dispatch is serving");
            lines.push(line);
            if done {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .unwrap_or_else(|_| panic!("not serving: {lines:?}"));
    child.kill().await.unwrap();
    lines
}

#[tokio::test]
async fn serve_says_once_when_secrets_are_stored_unencrypted_and_never_shows_a_key() {
    let db = TestDb::new().await;
    let warning = "secrets are stored unencrypted; set secrets.encryption_key";
    let lines = serve_log(&db, &[]).await;
    let warned = lines.iter().filter(|l| l.contains(warning)).count();
    assert_eq!(warned, 1, "{lines:?}");

    let lines = serve_log(&db, &[("DISPATCH_SECRETS__ENCRYPTION_KEY", KEY_1)]).await;
    assert!(!lines.iter().any(|l| l.contains(warning)), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains(KEY_1)), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains(&key_id(KEY_1))),
        "the key id is logged: {lines:?}"
    );

    // A malformed key stops it before it serves, naming the setting only.
    let out = dispatch(&db)
        .arg("serve")
        .env("DISPATCH_SECRETS__ENCRYPTION_KEY", "c2hvcnQ=")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("secrets.encryption_key must be 32 bytes"),
        "{err}"
    );
    assert!(!err.contains("c2hvcnQ="), "{err}");
}
