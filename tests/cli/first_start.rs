//! A newcomer's first start: a second `serve` beside a running one fails at
//! once and says why; on PostgreSQL, a database that does not exist is
//! created when the user may (or the error says how), a person at a
//! terminal gets a development client, and the migrations say nothing
//! when there is nothing to say.

use std::{process::Stdio, time::Duration};

use super::dispatch;

/// `dispatch serve` on an address another program holds stops at once,
/// naming the address and what to do, before it opens (or creates) a store.
#[tokio::test]
async fn a_second_serve_on_a_taken_address_fails_at_once_and_opens_no_store() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("fresh.db");
    let run = dispatch()
        .arg("serve")
        .env("DISPATCH_SERVER__LISTEN", addr.to_string())
        .env("DATABASE_URL", format!("sqlite://{}", store.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("it stops by itself")
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("dispatch: {addr} is in use"))
            && err.contains("--listen")
            && err.contains("DISPATCH_SERVER__LISTEN"),
        "{err}"
    );
    assert!(!store.exists(), "the store was opened before the address");
}

pub(crate) mod postgres {
    use std::{process::Stdio, time::Duration};

    use sqlx::{Connection, PgConnection};

    use super::super::{after, common, dispatch};
    use common::TestDb;

    async fn admin() -> PgConnection {
        PgConnection::connect(&common::pg_admin_url())
            .await
            .expect("PostgreSQL answers")
    }

    async fn exists(name: &str) -> bool {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(name)
            .fetch_one(&mut admin().await)
            .await
            .unwrap()
    }

    /// A URL naming a database that does not exist (yet); the TestDb drops
    /// whatever is made under its name.
    async fn missing_database() -> TestDb {
        let db = TestDb::postgres().await;
        sqlx::query(&format!("DROP DATABASE {}", db.name))
            .execute(&mut admin().await)
            .await
            .unwrap();
        assert!(!exists(&db.name).await);
        db
    }

    /// `dispatch serve` with standard error on a terminal (a pseudo-terminal
    /// that `script` provides), read until `until`; then stopped.
    async fn serve_at_a_terminal(url: &str, until: &str) -> Vec<String> {
        use tokio::io::AsyncBufReadExt;
        let port = common::free_port();
        let mut child = tokio::process::Command::new("script")
            .args([
                "-qfec",
                &format!("{} serve", env!("CARGO_BIN_EXE_dispatch")),
                "/dev/null",
            ])
            .env("DATABASE_URL", url)
            .env("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("`script` (util-linux) runs, to give the server a terminal");
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut lines = Vec::new();
        let read = async {
            while let Some(line) = out.next_line().await.unwrap() {
                let done = line.contains(until);
                lines.push(line.trim_end_matches('\r').to_string());
                if done {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .unwrap_or_else(|_| panic!("no `{until}` in {lines:?}"));
        let _ = child.start_kill();
        let _ = child.wait().await;
        lines
    }

    /// The PostgreSQL quick start from an empty server: `DATABASE_URL=…/dispatch
    /// dispatch serve` at a terminal creates the database, migrates it and
    /// prints a development client whose token request succeeds.
    #[tokio::test]
    async fn serve_creates_a_missing_database_and_prints_a_client_at_a_terminal() {
        let db = missing_database().await;
        let lines = serve_at_a_terminal(&db.url, "Get a token").await;
        assert!(exists(&db.name).await, "{lines:?}");
        assert!(
            lines.iter().any(|l| l.contains("created the database")),
            "{lines:?}"
        );
        let id = after(&lines, "client id:").to_string();
        let secret = after(&lines, "client secret:").to_string();
        assert!(id.starts_with("dc_") && !secret.is_empty(), "{lines:?}");
        let store = common::open_any_store(&db.url).await;
        let clients = store.list_clients(&common::account("demo")).await.unwrap();
        assert_eq!(clients.len(), 1, "for the account demo");
        assert_eq!(clients[0].client_id, id);
    }

    /// Under a supervisor (standard error a pipe, read as a log), the first
    /// start makes no client and logs no secret: it says how to make one.
    #[tokio::test]
    async fn serve_to_a_log_makes_no_client_and_says_how_to_create_one() {
        let db = TestDb::postgres().await;
        let dir = tempfile::tempdir().unwrap();
        let (mut child, lines) = {
            let mut c = dispatch();
            c.env("DATABASE_URL", &db.url);
            super::super::serve_with(c, dir.path(), "no OAuth clients yet", "pretty").await
        };
        let _ = child.start_kill();
        let _ = child.wait().await;
        assert!(
            !lines.iter().any(|l| l.contains("client secret")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("dispatch clients create --account")),
            "{lines:?}"
        );
        let store = common::open_any_store(&db.url).await;
        assert_eq!(store.count_clients().await.unwrap(), 0);
    }

    /// A user who may not create databases gets one message, once, that
    /// names the database and the command that creates it.
    #[tokio::test]
    async fn a_missing_database_the_user_may_not_create_is_explained_once() {
        let db = missing_database().await;
        let role = format!("dispatch_nocreate_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE ROLE {role} LOGIN NOCREATEDB"))
            .execute(&mut admin().await)
            .await
            .unwrap();
        let url = db
            .url
            .replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
        assert_ne!(
            url, db.url,
            "the test server's URL has the form postgres://postgres@…"
        );
        let out = dispatch()
            .arg("migrate")
            .env("DATABASE_URL", &url)
            .output()
            .await
            .unwrap();
        sqlx::query(&format!("DROP ROLE {role}"))
            .execute(&mut admin().await)
            .await
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let said = format!("the database \"{}\" does not exist", db.name);
        assert_eq!(err.matches(&said).count(), 1, "{err}");
        assert!(
            err.contains("createdb -h ") && err.contains(&db.name),
            "{err}"
        );
        assert!(
            err.contains("permission denied"),
            "the server's reason: {err}"
        );
        assert!(!exists(&db.name).await);
    }

    /// Migrating a database that is up to date says so and nothing else:
    /// no notices from the server about tables that exist already.
    #[tokio::test]
    async fn migrating_twice_prints_no_server_notices() {
        let db = TestDb::postgres().await;
        for _ in 0..2 {
            let out = dispatch()
                .arg("migrate")
                .env("DATABASE_URL", &db.url)
                .env("RUST_LOG", "info")
                .output()
                .await
                .unwrap();
            assert!(out.status.success());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("already exists"), "{err}");
            assert!(!err.contains("notice"), "{err}");
        }
    }
}
