//! `dispatch migrate` and a graceful stop on SIGTERM, on the store under test.

use std::{collections::BTreeSet, str::FromStr, sync::Arc};

use sqlx::{migrate::Migrator, Connection};

use super::*;
use common::{receiver::Gate, Backend};

/// The schema as the database holds it: its tables (sqlx's own left out)
/// and the `_sqlx_migrations` rows (version, description, success,
/// checksum). Read with a plain connection: nothing here migrates.
struct Schema {
    tables: BTreeSet<String>,
    applied: Vec<(i64, String, bool, Vec<u8>)>,
}

const APPLIED: &str =
    "SELECT version, description, success, checksum FROM _sqlx_migrations ORDER BY version";

async fn schema(url: &str) -> Schema {
    let (mut tables, applied): (BTreeSet<String>, _) = match common::backend() {
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            let tables: Vec<String> = sqlx::query_scalar(
                "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            let applied = if tables.iter().any(|t| t == "_sqlx_migrations") {
                sqlx::query_as(APPLIED).fetch_all(&mut c).await.unwrap()
            } else {
                Vec::new()
            };
            (tables.into_iter().collect(), applied)
        }
        Backend::Sqlite => {
            // Opened as it is: a missing file is an error, not a new store.
            let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
                .unwrap()
                .read_only(true);
            let mut c = sqlx::SqliteConnection::connect_with(&options)
                .await
                .unwrap_or_else(|e| panic!("the store at {url} cannot be opened: {e}"));
            let tables: Vec<String> = sqlx::query_scalar(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            let applied = if tables.iter().any(|t| t == "_sqlx_migrations") {
                sqlx::query_as(APPLIED).fetch_all(&mut c).await.unwrap()
            } else {
                Vec::new()
            };
            (tables.into_iter().collect(), applied)
        }
    };
    tables.remove("_sqlx_migrations");
    Schema { tables, applied }
}

/// The migrations directory of the store under test, as sqlx reads it.
async fn migrations() -> Migrator {
    let dir = match common::backend() {
        Backend::Postgres => "postgres",
        Backend::Sqlite => "sqlite",
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(dir);
    Migrator::new(path).await.expect("the migrations directory")
}

/// The tables the migrations leave: each one created, less those a later
/// migration drops, following renames.
fn tables_made_by(migrator: &Migrator) -> BTreeSet<String> {
    let mut tables = BTreeSet::new();
    for m in migrator.iter() {
        for line in m.sql.lines() {
            let words: Vec<String> = line
                .split_whitespace()
                .map(|w| w.trim_matches(|c| c == '(' || c == ';' || c == '"'))
                .map(str::to_lowercase)
                .collect();
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            match words.as_slice() {
                ["create", "table", "if", "not", "exists", name, ..]
                | ["create", "table", name, ..] => {
                    tables.insert(name.to_string());
                }
                ["drop", "table", "if", "exists", name, ..] | ["drop", "table", name, ..] => {
                    tables.remove(*name);
                }
                ["alter", "table", from, "rename", "to", to, ..] => {
                    tables.remove(*from);
                    tables.insert(to.to_string());
                }
                _ => {}
            }
        }
    }
    tables
}

#[tokio::test]
async fn migrate_applies_the_schema() {
    let db = TestDb::new().await;
    let migrator = migrations().await;
    let expected_tables = tables_made_by(&migrator);
    assert!(
        expected_tables.contains("messages") && expected_tables.len() >= 10,
        "{expected_tables:?}"
    );
    if common::backend() == Backend::Postgres {
        assert!(schema(&db.url).await.tables.is_empty(), "a fresh database");
    }

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

    let after = schema(&db.url).await;
    assert_eq!(after.tables, expected_tables);
    let expected: Vec<(i64, String, bool, Vec<u8>)> = migrator
        .iter()
        .map(|m| {
            (
                m.version,
                m.description.to_string(),
                true,
                m.checksum.to_vec(),
            )
        })
        .collect();
    assert_eq!(
        after.applied.len(),
        expected.len(),
        "every migration applied once"
    );
    assert_eq!(
        after.applied, expected,
        "each as the directory has it, successfully"
    );
}

/// Reads the process's log until a line holds `what`.
async fn said(
    log: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    what: &str,
) {
    let read = async {
        while let Some(line) = log.next_line().await.unwrap() {
            if line.contains(what) {
                return;
            }
        }
        panic!("the process ended without saying `{what}`");
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .unwrap_or_else(|_| panic!("no `{what}` within 20 s"));
}

#[tokio::test]
async fn sigterm_lets_attempts_in_flight_finish_and_records_them() {
    let db = Arc::new(TestDb::new().await);
    let client = common::dispatch_json(
        &db.url,
        ["clients", "create", "--account", "acme", "--name", "term"],
    )
    .await;
    let port = common::free_port();
    let mut worker = dispatch()
        .arg("serve")
        .env("DATABASE_URL", &db.url)
        .env("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = tokio::io::BufReader::new(worker.stderr.take().unwrap()).lines();
    said(&mut log, "dispatch is serving").await;

    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let api = common::Api::for_client(
        base,
        http,
        client["clientId"].as_str().unwrap(),
        client["clientSecret"].as_str().unwrap(),
    )
    .await;
    // Every answer waits until the test has seen the signal taken.
    let rx = Receiver::start().await;
    let gate = Gate::new();
    rx.always(Reply::status(200).held_until(&gate));
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
    rx.wait_for(5, Duration::from_secs(20)).await;

    // SIGTERM while all five attempts are under way, unanswered.
    let pid = worker.id().unwrap();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    said(&mut log, "shutting down").await;
    // Keep reading, so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
    assert!(
        worker.try_wait().unwrap().is_none(),
        "it waits for the attempts in flight"
    );
    gate.open();
    let status = tokio::time::timeout(Duration::from_secs(10), worker.wait())
        .await
        .expect("it exits once they are answered")
        .unwrap();
    assert!(status.success(), "a graceful stop exits 0: {status:?}");

    // Recorded before exit: an instance that delivers nothing finds each
    // message Delivered by its one attempt.
    let app = TestApp::spawn_on(db, |c| c.sweeper.enabled = false).await;
    let api = app.api("acme").await;
    for id in &ids {
        let m = api.message(id).await;
        assert_eq!(m["state"], "Delivered", "{m}");
        let attempts = api.attempts(id).await;
        assert_eq!(attempts.len(), 1, "{attempts:?}");
    }
    assert_eq!(rx.count(), 5);
    app.shutdown().await;
}
