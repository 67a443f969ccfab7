//! The operator commands (docs/operations.md#commands): `messages`,
//! `targets list|get|disable|enable`, `schedules list`, `users list`,
//! `clients list --table`, `serve --listen`; run as the binary, beside a
//! running instance on the same store, and checked against what the API
//! answers.

mod common;

use std::{process::Output, time::Duration};

use chrono::{TimeDelta, Utc};
use serde_json::{json, Value};

use common::{
    in_ms,
    receiver::{Receiver, Reply},
    Api, TestApp,
};
use dispatch::domain::time::format;

/// `dispatch ARGS` on `db_url`, its output whatever it is.
async fn run(db_url: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs and expects success; the standard output.
async fn ok(db_url: &str, args: &[&str]) -> String {
    let out = run(db_url, args).await;
    assert!(
        out.status.success(),
        "dispatch {args:?} failed: {}",
        stderr(&out)
    );
    assert_store_line(&out);
    stdout(&out)
}

/// Runs with `--json` and expects success; the JSON printed.
async fn json(db_url: &str, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let text = ok(db_url, &args).await;
    assert_eq!(text.lines().count(), 1, "one line of JSON: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Runs, expects a non-zero exit with `reason` on standard error and
/// nothing on standard output.
async fn refused(db_url: &str, args: &[&str], reason: &str) {
    let out = run(db_url, args).await;
    assert!(
        !out.status.success(),
        "dispatch {args:?} should fail ({reason}); printed {}",
        stdout(&out)
    );
    let err = stderr(&out);
    assert!(err.contains(reason), "expected `{reason}` in: {err}");
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", stdout(&out));
}

/// The store is named once, first, on standard error, and not on standard output.
fn assert_store_line(out: &Output) {
    let err = stderr(out);
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("store: "), "the store line first: {err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("store: ")).count(),
        1,
        "{err}"
    );
    assert!(!stdout(out).contains("store: "), "{}", stdout(out));
}

/// The rows of a table: its header, then one line per item.
fn table(text: &str) -> (String, Vec<String>) {
    let mut lines = text.lines().map(str::to_string);
    let header = lines.next().expect("a header line");
    (header, lines.collect())
}

async fn get_json(api: &Api, path: &str) -> Value {
    let r = api.get(path).await;
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

fn id(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap().to_string()
}

/// An instant `hours` from now, as the API writes it.
fn hours_ahead(hours: i64) -> String {
    format(&(Utc::now() + TimeDelta::hours(hours)))
}

#[tokio::test]
async fn messages_list_and_get_show_the_accounts_messages_only_as_the_api_does() {
    let app = TestApp::spawn().await;
    let db = app.db.url.clone();
    let (acme, globex) = (app.api("acme").await, app.api("globex").await);
    let rx = Receiver::start().await;
    let ours = id(&acme.webhook(&rx.url("/a")).await, "targetId");
    let theirs = id(&globex.webhook(&rx.url("/g")).await, "targetId");
    let later = hours_ahead(1);
    let first = id(&acme.schedule(&ours, &later, "one").await, "messageId");
    let second = id(&acme.schedule(&ours, &later, "two").await, "messageId");
    let foreign = id(&globex.schedule(&theirs, &later, "x").await, "messageId");

    let (header, rows) = table(&ok(&db, &["messages", "list", "--account", "acme"]).await);
    for column in ["MESSAGE ID", "STATE", "TARGET", "DELIVERY TIME", "ATTEMPTS"] {
        assert!(header.contains(column), "{header}");
    }
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows[0].starts_with(&second) && rows[1].starts_with(&first),
        "newest first: {rows:?}"
    );
    assert!(
        rows.iter()
            .all(|r| r.contains("Scheduled") && r.contains(&later)),
        "{rows:?}"
    );
    assert!(!rows.iter().any(|r| r.contains(&foreign)), "{rows:?}");

    // --json is the API's answer to the same question.
    let listed = json(&db, &["messages", "list", "--account", "acme"]).await;
    assert_eq!(listed, get_json(&acme, "/messages").await);
    let filtered = json(
        &db,
        &[
            "messages",
            "list",
            "--account",
            "acme",
            "--target",
            &ours,
            "--state",
            "Scheduled",
        ],
    )
    .await;
    assert_eq!(
        filtered,
        get_json(&acme, &format!("/messages?targetId={ours}&state=Scheduled")).await
    );
    assert_eq!(
        json(
            &db,
            &[
                "messages",
                "list",
                "--account",
                "acme",
                "--state",
                "Delivered"
            ]
        )
        .await,
        json!({"items": [], "nextCursor": null})
    );
    let got = json(&db, &["messages", "get", &first, "--account", "acme"]).await;
    assert_eq!(got, get_json(&acme, &format!("/messages/{first}")).await);

    // A page at a time: the cursor printed is the one the next page takes.
    let page = json(
        &db,
        &["messages", "list", "--account", "acme", "--limit", "1"],
    )
    .await;
    assert_eq!(page["items"][0]["messageId"], second.as_str());
    let cursor = page["nextCursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    let next = json(
        &db,
        &[
            "messages",
            "list",
            "--account",
            "acme",
            "--limit",
            "1",
            "--cursor",
            &cursor,
        ],
    )
    .await;
    assert_eq!(next["items"][0]["messageId"], first.as_str());
    assert_eq!(next["nextCursor"], Value::Null);
    let out = run(
        &db,
        &["messages", "list", "--account", "acme", "--limit", "1"],
    )
    .await;
    assert_eq!(table(&stdout(&out)).1.len(), 1);
    assert!(
        stderr(&out).contains(&format!("--cursor {cursor}")),
        "{}",
        stderr(&out)
    );

    // Another account's message is not found, as the API's 404.
    refused(
        &db,
        &["messages", "get", &foreign, "--account", "acme"],
        "not found",
    )
    .await;
    assert_eq!(
        globex.get(&format!("/messages/{first}")).await.status(),
        404,
        "the premise: the API hides it too"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn cancel_and_reschedule_change_the_message_and_a_delivered_one_is_refused_unchanged() {
    let app = TestApp::spawn().await;
    let db = app.db.url.clone();
    let acme = app.api("acme").await;
    let rx = Receiver::start().await;
    let target = id(&acme.webhook(&rx.url("/a")).await, "targetId");
    let waiting = id(
        &acme.schedule(&target, &hours_ahead(1), "w").await,
        "messageId",
    );
    let moved = id(
        &acme.schedule(&target, &hours_ahead(1), "m").await,
        "messageId",
    );
    let delivered = id(&acme.schedule(&target, &in_ms(0), "d").await, "messageId");
    let delivered_before = acme
        .wait_for_state(&delivered, "Delivered", Duration::from_secs(20))
        .await;

    // Cancel: the API sees it Cancelled; --json printed what the API answers.
    let cancelled = json(&db, &["messages", "cancel", &waiting, "--account", "acme"]).await;
    assert_eq!(cancelled["state"], "Cancelled");
    assert_eq!(cancelled, acme.message(&waiting).await);

    // A Delivered message: the conflict, one line, and nothing changes.
    refused(
        &db,
        &["messages", "cancel", &delivered, "--account", "acme"],
        "a Delivered message cannot be cancelled",
    )
    .await;
    assert_eq!(acme.message(&delivered).await, delivered_before);

    // Another account cannot touch it: not found, and it stays as it was.
    refused(
        &db,
        &["messages", "cancel", &moved, "--account", "globex"],
        "not found",
    )
    .await;
    refused(
        &db,
        &[
            "messages",
            "reschedule",
            &moved,
            "--account",
            "globex",
            "--at",
            &hours_ahead(3),
        ],
        "not found",
    )
    .await;
    let untouched = acme.message(&moved).await;
    assert_eq!(untouched["state"], "Scheduled");

    // Reschedule moves deliveryTime, as the API sees it.
    let at = hours_ahead(2);
    let out = ok(
        &db,
        &[
            "messages",
            "reschedule",
            &moved,
            "--account",
            "acme",
            "--at",
            &at,
        ],
    )
    .await;
    assert!(
        out.lines()
            .any(|l| l.starts_with("deliveryTime") && l.ends_with(&at)),
        "{out}"
    );
    let now = acme.message(&moved).await;
    assert_eq!(now["deliveryTime"], at.as_str());
    assert_eq!(now["state"], "Scheduled");

    // A bad --at: refused, saying what a time must be, and nothing changes.
    let no_offset = (Utc::now() + TimeDelta::hours(5))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    for bad in ["tomorrow", no_offset.as_str(), ""] {
        refused(
            &db,
            &[
                "messages",
                "reschedule",
                &moved,
                "--account",
                "acme",
                "--at",
                bad,
            ],
            "--at",
        )
        .await;
    }
    refused(
        &db,
        &[
            "messages",
            "reschedule",
            &moved,
            "--account",
            "acme",
            "--at",
            "tomorrow",
        ],
        "RFC 3339",
    )
    .await;
    assert_eq!(acme.message(&moved).await, now);
    app.shutdown().await;
}

#[tokio::test]
async fn redrive_schedules_dead_letters_again_by_id_or_by_target() {
    let app = TestApp::spawn().await;
    let db = app.db.url.clone();
    let acme = app.api("acme").await;
    let rx = Receiver::start().await;
    // A 400 is not retried: each message is a dead letter after one attempt.
    rx.always(Reply::status(400));
    let target = id(&acme.webhook(&rx.url("/a")).await, "targetId");
    let first = id(&acme.schedule(&target, &in_ms(0), "1").await, "messageId");
    let second = id(&acme.schedule(&target, &in_ms(0), "2").await, "messageId");
    let waiting = id(
        &acme.schedule(&target, &hours_ahead(1), "w").await,
        "messageId",
    );
    for m in [&first, &second] {
        acme.wait_for_state(m, "DeadLetter", Duration::from_secs(20))
            .await;
    }

    // One id, at a time given: Scheduled for then, the ladder started over.
    let at = hours_ahead(2);
    let out = ok(
        &db,
        &[
            "messages",
            "redrive",
            &first,
            "--account",
            "acme",
            "--at",
            &at,
        ],
    )
    .await;
    assert_eq!(out.trim(), "redriven: 1 message");
    let m = acme.message(&first).await;
    assert_eq!(m["state"], "Scheduled", "{m}");
    assert_eq!(m["deliveryTime"], at.as_str());

    // One id that is no dead letter: the reason, and nothing changes.
    refused(
        &db,
        &["messages", "redrive", &waiting, "--account", "acme"],
        "a Scheduled message cannot be redriven",
    )
    .await;
    refused(
        &db,
        &["messages", "redrive", &second, "--account", "globex"],
        "not found",
    )
    .await;
    assert_eq!(acme.message(&second).await["state"], "DeadLetter");

    // By target, due now by default: the receiver now accepts, and the one
    // dead letter left is delivered; the Scheduled ones are not counted.
    rx.always(Reply::status(200));
    let count = json(
        &db,
        &[
            "messages",
            "redrive",
            "--target",
            &target,
            "--account",
            "acme",
        ],
    )
    .await;
    assert_eq!(count, json!({"count": 1}));
    acme.wait_for_state(&second, "Delivered", Duration::from_secs(20))
        .await;
    assert_eq!(acme.message(&first).await["deliveryTime"], at.as_str());

    // Neither ids nor a target; a malformed id: refused before anything.
    refused(
        &db,
        &["messages", "redrive", "--account", "acme"],
        "--target",
    )
    .await;
    refused(
        &db,
        &["messages", "redrive", "DI-M-nope", "--account", "acme"],
        "is not a message id",
    )
    .await;
    app.shutdown().await;
}

#[tokio::test]
async fn targets_disable_and_enable_flip_enabled_as_the_api_sees_it_and_never_show_a_secret() {
    let app = TestApp::spawn().await;
    let db = app.db.url.clone();
    let (acme, globex) = (app.api("acme").await, app.api("globex").await);
    let rx = Receiver::start().await;
    let created = acme
        .webhook_with(
            &rx.url("/a"),
            json!({"headers": {"X-Api-Key": "key-not-to-print"}}),
        )
        .await;
    let signing = created["config"]["signingSecret"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        signing.starts_with("whsec_"),
        "the premise: a generated secret, shown once"
    );
    let target = id(&created, "targetId");
    let second = id(&acme.webhook(&rx.url("/b")).await, "targetId");
    let foreign = id(&globex.webhook(&rx.url("/g")).await, "targetId");

    let listed = ok(&db, &["targets", "list", "--account", "acme"]).await;
    let (header, rows) = table(&listed);
    for column in ["TARGET ID", "NAME", "TYPE", "ENABLED"] {
        assert!(header.contains(column), "{header}");
    }
    assert_eq!(rows.len(), 2, "{rows:?}");
    for t in [&target, &second] {
        assert_eq!(
            rows.iter().filter(|r| r.starts_with(t.as_str())).count(),
            1,
            "{rows:?}"
        );
    }
    assert!(!listed.contains(&foreign));
    assert_eq!(
        json(&db, &["targets", "list", "--account", "acme"]).await,
        get_json(&acme, "/targets").await
    );

    let disabled = json(&db, &["targets", "disable", &target, "--account", "acme"]).await;
    assert_eq!(disabled["enabled"], false);
    assert_eq!(
        disabled,
        get_json(&acme, &format!("/targets/{target}")).await
    );
    let shown = ok(&db, &["targets", "get", &target, "--account", "acme"]).await;
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("enabled") && l.ends_with("false")),
        "{shown}"
    );
    let enabled = json(&db, &["targets", "enable", &target, "--account", "acme"]).await;
    assert_eq!(enabled["enabled"], true);
    assert_eq!(
        enabled,
        get_json(&acme, &format!("/targets/{target}")).await
    );

    // Secrets show as the API shows them, in the table and in the JSON.
    let got = json(&db, &["targets", "get", &target, "--account", "acme"]).await;
    assert_eq!(got["config"]["headers"]["X-Api-Key"], "***");
    assert_eq!(got["config"]["signingSecret"], "***");
    for text in [
        shown,
        listed,
        ok(
            &db,
            &["targets", "get", &target, "--account", "acme", "--json"],
        )
        .await,
    ] {
        assert!(
            !text.contains("key-not-to-print") && !text.contains(&signing),
            "{text}"
        );
    }

    // Another account's target, or a malformed id: refused, unchanged.
    refused(
        &db,
        &["targets", "disable", &foreign, "--account", "acme"],
        "not found",
    )
    .await;
    refused(
        &db,
        &["targets", "get", &foreign, "--account", "acme"],
        "not found",
    )
    .await;
    refused(
        &db,
        &["targets", "disable", "DI-T-XYZ", "--account", "acme"],
        "is not a target id",
    )
    .await;
    assert_eq!(
        get_json(&globex, &format!("/targets/{foreign}")).await["enabled"],
        true
    );
    app.shutdown().await;
}

#[tokio::test]
async fn schedules_users_and_clients_are_listed_as_tables_and_as_json() {
    let app = TestApp::spawn().await;
    let db = app.db.url.clone();
    let acme = app.api("acme").await;
    let rx = Receiver::start().await;
    let target = id(&acme.webhook(&rx.url("/a")).await, "targetId");
    let r = acme
        .post(
            "/schedules",
            json!({"targetId": target, "name": "hourly", "every": "1h", "payload": "x",
                   "startAt": hours_ahead(1)}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let schedule = id(&r.json().await.unwrap(), "scheduleId");

    let (header, rows) = table(&ok(&db, &["schedules", "list", "--account", "acme"]).await);
    assert!(
        header.starts_with("SCHEDULE ID") && header.contains("NEXT RUN"),
        "{header}"
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0].starts_with(&schedule) && rows[0].contains("every 1h"),
        "{rows:?}"
    );
    assert_eq!(
        json(
            &db,
            &[
                "schedules",
                "list",
                "--account",
                "acme",
                "--target",
                &target
            ]
        )
        .await,
        get_json(&acme, &format!("/schedules?targetId={target}")).await
    );
    assert_eq!(
        json(&db, &["schedules", "list", "--account", "globex"]).await,
        json!({"items": [], "nextCursor": null})
    );

    for (email, role) in [
        ("ops@example.com", "operator"),
        ("boss@example.com", "admin"),
    ] {
        ok(
            &db,
            &[
                "users",
                "create",
                "--account",
                "acme",
                "--email",
                email,
                "--role",
                role,
                "--generate-password",
            ],
        )
        .await;
    }
    let people = ok(&db, &["users", "list", "--account", "acme"]).await;
    let (header, rows) = table(&people);
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["EMAIL", "ROLE", "SINCE"]
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows[0].starts_with("ops@example.com") && rows[0].contains("operator"),
        "{rows:?}"
    );
    let listed = json(&db, &["users", "list", "--account", "acme"]).await;
    let listed = listed.as_array().expect("an array");
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1]["email"], "boss@example.com");
    assert_eq!(listed[1]["role"], "admin");
    assert!(listed[1]["createdAt"].as_str().unwrap().ends_with('Z'));
    assert!(!people.contains("argon2") && !listed[0].to_string().contains("argon2"));
    assert_eq!(
        json(&db, &["users", "list", "--account", "globex"]).await,
        json!([])
    );

    // Clients: the JSON array scripts read stays the default off a
    // terminal; --table gives people the table.
    ok(
        &db,
        &["clients", "create", "--account", "acme", "--name", "ci"],
    )
    .await;
    let piped = ok(&db, &["clients", "list", "--account", "acme"]).await;
    assert!(
        piped.ends_with("]\n"),
        "a JSON array and a newline: {piped:?}"
    );
    let array: Value = serde_json::from_str(&piped).unwrap();
    assert_eq!(
        json(&db, &["clients", "list", "--account", "acme"]).await,
        array
    );
    let (header, rows) =
        table(&ok(&db, &["clients", "list", "--account", "acme", "--table"]).await);
    assert!(
        header.starts_with("CLIENT ID") && header.contains("REVOKED"),
        "{header}"
    );
    // The API's own client (the test's token) and `ci`, oldest first.
    let clients = array.as_array().unwrap();
    assert_eq!(clients.len(), 2, "{array}");
    assert_eq!(rows.len(), clients.len(), "{rows:?}");
    for (row, client) in rows.iter().zip(clients) {
        assert!(
            row.starts_with(client["clientId"].as_str().unwrap()),
            "{rows:?}"
        );
        assert!(row.contains(client["name"].as_str().unwrap()), "{rows:?}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_refused_with_a_clear_line_before_any_change() {
    let app = TestApp::spawn().await;
    let db = app.db.url.clone();
    let acme = app.api("acme").await;
    let rx = Receiver::start().await;
    let target = id(&acme.webhook(&rx.url("/a")).await, "targetId");
    let m = id(
        &acme.schedule(&target, &hours_ahead(1), "x").await,
        "messageId",
    );
    let before = acme.message(&m).await;

    refused(
        &db,
        &["messages", "get", "nope", "--account", "acme"],
        "\"nope\" is not a message id",
    )
    .await;
    refused(
        &db,
        &["messages", "cancel", "DI-M-1234", "--account", "acme"],
        "is not a message id",
    )
    .await;
    refused(
        &db,
        &["messages", "list", "--account", "acme", "--state", "Sent"],
        "possible values: Scheduled, Delivered, Cancelled, DeadLetter",
    )
    .await;
    refused(
        &db,
        &[
            "messages",
            "list",
            "--account",
            "acme",
            "--target",
            "orders",
        ],
        "--target \"orders\" is not a target id",
    )
    .await;
    refused(
        &db,
        &["messages", "list", "--account", "acme", "--limit", "1001"],
        "--limit",
    )
    .await;
    refused(
        &db,
        &["messages", "list", "--account", "acme", "--cursor", "x"],
        "--cursor",
    )
    .await;
    refused(&db, &["messages", "list"], "--account").await;
    refused(
        &db,
        &["messages", "cancel", &m, "--account", ""],
        "--account",
    )
    .await;
    assert_eq!(acme.message(&m).await, before);
    app.shutdown().await;
}

#[tokio::test]
async fn an_admin_command_without_a_database_says_it_uses_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .args(["users", "list", "--account", "acme"])
        .env_remove("DATABASE_URL")
        .env_remove("DISPATCH_DATABASE__URL")
        .env("RUST_LOG", "warn")
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).lines().next(),
        Some("store: embedded data/dispatch.db")
    );
    assert_eq!(stdout(&out), "EMAIL  ROLE  SINCE\n");
}

#[test]
fn every_command_and_flag_says_what_it_is_for() {
    use clap::CommandFactory;
    fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in c.get_arguments() {
            let id = arg.get_id().as_str();
            if id != "help" && id != "version" && arg.get_help().is_none() {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in c.get_subcommands() {
            let path = format!("{path} {}", sub.get_name());
            if sub.get_name() != "help" && sub.get_about().is_none() {
                missing.push(path.clone());
            }
            walk(sub, &path, missing);
        }
    }
    let mut missing = Vec::new();
    walk(&dispatch::cli::Cli::command(), "dispatch", &mut missing);
    assert!(missing.is_empty(), "no help text: {missing:?}");
}

#[tokio::test]
async fn serve_listens_where_the_flag_says_over_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let configured = format!("127.0.0.1:{}", common::free_port());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .args(["serve", "--listen", &listen])
        .env_remove("DATABASE_URL")
        // The configuration names another address: the flag wins.
        .env("DISPATCH_SERVER__LISTEN", &configured)
        .env("RUST_LOG", "warn")
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let url = format!("http://{listen}/health/live");
    common::eventually(
        Duration::from_secs(30),
        "serve answers on --listen",
        async || match http.get(&url).send().await {
            Ok(r) if r.status() == 200 => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let help = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .args(["serve", "--help"])
        .output()
        .await
        .unwrap();
    let help = stdout(&help);
    assert!(
        help.contains("--listen") && help.contains("server.listen") && help.contains("Port 0"),
        "{help}"
    );
}

/// The store line with PostgreSQL itself: PostgreSQL only.
mod postgres {
    use super::*;

    #[tokio::test]
    async fn the_store_line_names_the_database_without_its_password() {
        let db = common::TestDb::postgres().await;
        // The test server trusts every connection: a password is sent and ignored.
        let with_password = db
            .url
            .replacen("://postgres@", "://postgres:hunter2-secret@", 1);
        assert_ne!(with_password, db.url, "the premise: a user in the URL");
        let out = run(&with_password, &["targets", "list", "--account", "acme"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        let line = stderr(&out).lines().next().unwrap_or_default().to_string();
        assert!(
            line.starts_with("store: PostgreSQL postgres://postgres@"),
            "{line}"
        );
        assert!(line.ends_with(&format!("/{}", db.name)), "{line}");
        assert!(!stderr(&out).contains("hunter2") && !stdout(&out).contains("hunter2"));
    }
}
