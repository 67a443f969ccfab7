//! The binary itself: `clients create`, `migrate`, `serve` without a
//! database, and a graceful stop on SIGTERM.

mod common;

#[path = "cli/clients.rs"]
mod clients;
#[path = "cli/embedded_admin.rs"]
mod embedded_admin;
#[path = "cli/first_start.rs"]
mod first_start;
#[path = "cli/lifecycle.rs"]
mod lifecycle;

use std::{process::Stdio, time::Duration};

use tokio::io::AsyncBufReadExt;

use common::{account, in_ms, receiver::Receiver, receiver::Reply, TestApp, TestDb};
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
async fn clients_create_without_scopes_grants_all_five_and_refuses_unknown_ones() {
    let db = TestDb::new().await;
    let out = dispatch()
        .args(["clients", "create", "--account", "a", "--name", "n"])
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["scopes"].as_array().unwrap().len(), 5);
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
pub(crate) async fn serve_in(
    dir: &std::path::Path,
    until: &str,
) -> (tokio::process::Child, Vec<String>) {
    serve_logging(dir, until, "json").await
}

/// `dispatch serve` in `dir` with `log.format` set, its standard error read
/// (a pipe, as a log collector reads it) up to the line holding `until`.
pub(crate) async fn serve_logging(
    dir: &std::path::Path,
    until: &str,
    format: &str,
) -> (tokio::process::Child, Vec<String>) {
    serve_with(dispatch(), dir, until, format).await
}

/// `command` (a `dispatch()`, perhaps with more environment) serving as
/// `serve_logging` does.
pub(crate) async fn serve_with(
    mut command: tokio::process::Command,
    dir: &std::path::Path,
    until: &str,
    format: &str,
) -> (tokio::process::Child, Vec<String>) {
    let mut child = command
        .arg("serve")
        .current_dir(dir)
        .env("DISPATCH_SERVER__LISTEN", "127.0.0.1:0")
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .env("RUST_LOG", "info")
        .env("DISPATCH_LOG__FORMAT", format)
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

pub(crate) fn after<'a>(lines: &'a [String], prefix: &str) -> &'a str {
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

    let api = common::Api::for_client(base.clone(), http.clone(), &id, &secret).await;
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
async fn logs_written_to_a_pipe_are_plain_text_or_json_as_configured() {
    for format in ["pretty", "json"] {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, lines) = serve_logging(dir.path(), "dispatch is serving", format).await;
        child.start_kill().unwrap();
        child.wait().await.unwrap();
        assert!(
            !lines.iter().any(|l| l.contains('\u{1b}')),
            "{format}: colour escapes in {lines:?}"
        );
        let serving = lines.last().unwrap();
        if format == "json" {
            let event: Value = serde_json::from_str(serving).expect("a JSON log line");
            assert_eq!(event["level"], "INFO", "{serving}");
        } else {
            assert!(serving.contains(" INFO "), "{serving}");
        }
    }
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
    assert!(store
        .get_target(&account("demo"), &id)
        .await
        .unwrap()
        .is_some());

    // Provisioning run again (the compose demo on every `up`) creates no second one.
    for _ in 0..2 {
        let same = common::dispatch_json(
            &db.url,
            [
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
                "--unless-exists",
            ],
        )
        .await;
        assert_eq!(same["targetId"], t["targetId"]);
        assert_eq!(same["config"]["credentials"]["secretAccessKey"], "***");
    }
    let all = store
        .list_targets(&account("demo"), None, 100)
        .await
        .unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    // Another account's target of that name is not this account's.
    let theirs = common::dispatch_json(
        &db.url,
        [
            "targets",
            "create",
            "--account",
            "other",
            "--name",
            "q",
            "--type",
            "sqs",
            "--target-config",
            config,
            "--unless-exists",
        ],
    )
    .await;
    assert_ne!(theirs["targetId"], t["targetId"]);
    assert_eq!(
        store
            .list_targets(&account("other"), None, 100)
            .await
            .unwrap()
            .len(),
        1
    );

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

/// Runs `dispatch users create ARGS` on `db`, writing `stdin` (when given) to
/// its standard input; otherwise standard input is empty and not a terminal.
async fn users_create(db: &TestDb, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = dispatch()
        .args(["users", "create"])
        .args(args)
        .env("DATABASE_URL", &db.url)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        // It may exit before reading (a refused email): a broken pipe is fine.
        let _ = tokio::io::AsyncWriteExt::write_all(&mut pipe, input.as_bytes()).await;
    }
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("users create exits")
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The one JSON line a successful `users create` prints.
fn printed_user(out: &std::process::Output) -> Value {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "users create failed: {stderr}");
    assert_eq!(stdout.lines().count(), 1, "one line of JSON: {stdout}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// `users create` was refused, saying `reason`, and printed nothing on stdout.
fn assert_refused(out: &std::process::Output, reason: &str) {
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "users create should fail ({reason}), stdout: {}",
        text(&out.stdout)
    );
    assert!(stderr.contains(reason), "expected `{reason}` in: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout: {}",
        text(&out.stdout)
    );
}

#[tokio::test]
async fn users_create_gives_the_role_asked_for_and_refuses_an_unknown_one() {
    let db = TestDb::new().await;
    let out = users_create(
        &db,
        &[
            "--account",
            "acme",
            "--email",
            "viewer@example.com",
            "--role",
            "viewer",
        ],
        None,
    )
    .await;
    assert_eq!(printed_user(&out)["role"], "viewer");
    let store = common::open_any_store(&db.url).await;
    let stored = store
        .find_user("viewer@example.com")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.role, dispatch::store::portal::Role::Viewer);

    let out = users_create(
        &db,
        &[
            "--account",
            "acme",
            "--email",
            "root@example.com",
            "--role",
            "root",
        ],
        None,
    )
    .await;
    assert_refused(&out, "--role");
    assert!(store.find_user("root@example.com").await.unwrap().is_none());
}

#[tokio::test]
async fn users_create_generates_a_password_prints_it_once_and_it_verifies() {
    let db = TestDb::new().await;
    let out = users_create(
        &db,
        &[
            "--account",
            "acme",
            "--email",
            " Ops@Example.COM ",
            "--generate-password",
        ],
        None,
    )
    .await;
    let printed = printed_user(&out);
    let password = printed["password"]
        .as_str()
        .expect("a generated password is printed")
        .to_string();
    assert_eq!(
        printed,
        serde_json::json!({"account": "acme", "email": "ops@example.com", "role": "admin",
                           "password": password}),
        "the email is trimmed and lower-cased; the first person is an admin"
    );
    assert!(
        password.chars().count() >= 12,
        "a generated password is long enough: {password}"
    );
    assert_eq!(
        text(&out.stdout).matches(&password).count(),
        1,
        "printed once"
    );
    assert!(
        !text(&out.stderr).contains(&password),
        "not repeated on stderr"
    );

    // Without a terminal and without a flag a password is generated as well.
    let out = users_create(
        &db,
        &["--account", "acme", "--email", "dev@example.com"],
        None,
    )
    .await;
    let other = printed_user(&out)["password"]
        .as_str()
        .expect("a generated password is printed")
        .to_string();
    assert_ne!(other, password, "each generated password is new");

    let store = common::open_any_store(&db.url).await;
    let user = store
        .find_user("ops@example.com")
        .await
        .unwrap()
        .expect("the user is stored under the lower-cased email");
    assert_eq!(user.account.as_str(), "acme");
    assert_eq!(user.email, "ops@example.com");
    assert!(
        !user.password_hash.contains(&password),
        "only a hash is kept"
    );
    assert!(
        dispatch::auth::secrets::verify_secret(&password, &user.password_hash),
        "the printed password verifies against the stored hash"
    );
    assert!(!dispatch::auth::secrets::verify_secret(
        &other,
        &user.password_hash
    ));
    let dev = store.find_user("dev@example.com").await.unwrap().unwrap();
    assert!(dispatch::auth::secrets::verify_secret(
        &other,
        &dev.password_hash
    ));
    assert!(store.find_user("Ops@Example.COM").await.unwrap().is_none());
}

#[tokio::test]
async fn users_create_reads_the_password_from_stdin_and_does_not_print_it() {
    let db = TestDb::new().await;
    let password = "correct horse battery staple";
    let out = users_create(
        &db,
        &[
            "--account",
            "acme",
            "--email",
            "ops@example.com",
            "--password-stdin",
        ],
        Some(&format!("{password}\r\nthe first line only\n")),
    )
    .await;
    assert_eq!(
        printed_user(&out),
        serde_json::json!({"account": "acme", "email": "ops@example.com", "role": "admin"}),
        "a chosen password is not printed"
    );
    assert!(!text(&out.stdout).contains(password));
    assert!(!text(&out.stderr).contains(password));

    // A chosen password and a generated one do not go together.
    let both = users_create(
        &db,
        &[
            "--account",
            "acme",
            "--email",
            "dev@example.com",
            "--password-stdin",
            "--generate-password",
        ],
        Some("another long password\n"),
    )
    .await;
    assert_refused(&both, "cannot be used with");

    let store = common::open_any_store(&db.url).await;
    let user = store
        .find_user("ops@example.com")
        .await
        .unwrap()
        .expect("the user is stored");
    assert_eq!(user.account.as_str(), "acme");
    assert!(
        dispatch::auth::secrets::verify_secret(password, &user.password_hash),
        "the first line, without its line ending, is the password"
    );
    assert!(!dispatch::auth::secrets::verify_secret(
        &format!("{password}\r\n"),
        &user.password_hash
    ));
    assert!(store.find_user("dev@example.com").await.unwrap().is_none());
}

#[tokio::test]
async fn users_create_refuses_an_email_that_is_taken() {
    let db = TestDb::new().await;
    let first = users_create(
        &db,
        &[
            "--account",
            "acme",
            "--email",
            "ops@example.com",
            "--password-stdin",
        ],
        Some("the first password\n"),
    )
    .await;
    printed_user(&first);
    // The same email in other letters, for another account.
    let again = users_create(
        &db,
        &[
            "--account",
            "globex",
            "--email",
            "OPS@example.com",
            "--password-stdin",
        ],
        Some("the second password\n"),
    )
    .await;
    assert_refused(
        &again,
        "a portal user with the email ops@example.com exists already",
    );

    let store = common::open_any_store(&db.url).await;
    let user = store.find_user("ops@example.com").await.unwrap().unwrap();
    assert_eq!(user.account.as_str(), "acme", "the first user is kept");
    assert!(dispatch::auth::secrets::verify_secret(
        "the first password",
        &user.password_hash
    ));
    assert!(!dispatch::auth::secrets::verify_secret(
        "the second password",
        &user.password_hash
    ));
}

#[tokio::test]
async fn users_create_refuses_a_password_shorter_than_12_characters() {
    let db = TestDb::new().await;
    let refused = [
        ("short@example.com", "only11chars"),
        // Ten characters in fourteen bytes: characters are counted.
        ("unicode@example.com", "ünïcödé-pw"),
        ("empty@example.com", ""),
    ];
    for (email, password) in refused {
        let out = users_create(
            &db,
            &["--account", "acme", "--email", email, "--password-stdin"],
            Some(&format!("{password}\n")),
        )
        .await;
        assert_refused(&out, "at least 12 characters");
    }
    // Exactly twelve is enough.
    let out = users_create(
        &db,
        &[
            "--account",
            "acme",
            "--email",
            "twelve@example.com",
            "--password-stdin",
        ],
        Some("exactly-12ch\n"),
    )
    .await;
    printed_user(&out);

    let store = common::open_any_store(&db.url).await;
    for (email, _) in refused {
        assert!(
            store.find_user(email).await.unwrap().is_none(),
            "{email} was not created"
        );
    }
    let user = store
        .find_user("twelve@example.com")
        .await
        .unwrap()
        .unwrap();
    assert!(dispatch::auth::secrets::verify_secret(
        "exactly-12ch",
        &user.password_hash
    ));
}

#[tokio::test]
async fn users_create_refuses_a_malformed_email() {
    let db = TestDb::new().await;
    let too_long = format!("{}@example.com", "a".repeat(250));
    let malformed = [
        "not-an-email",
        "@example.com",
        "ops@",
        "ops @example.com",
        "",
        too_long.as_str(),
    ];
    for email in malformed {
        let out = users_create(
            &db,
            &["--account", "acme", "--email", email, "--generate-password"],
            None,
        )
        .await;
        assert_refused(&out, "--email must be an email address");
    }
    let store = common::open_any_store(&db.url).await;
    for email in malformed {
        assert!(
            store
                .find_user(&email.trim().to_lowercase())
                .await
                .unwrap()
                .is_none(),
            "{email:?} was not created"
        );
    }
}
