//! Test harness: a real PostgreSQL database per test, the real app on port 0,
//! and real HTTP receivers.
#![allow(dead_code)]

pub mod aws_stub;
pub mod browser;
pub mod calendar;
pub mod moto;
pub mod problem;
pub mod proxy;
pub mod receiver;

use std::{sync::Arc, time::Duration};

use dispatch::{
    app::{self, Running},
    auth::secrets,
    config::Config,
    domain::{ids::AccountId, scope::Scope},
    store::{postgres::PgStore, ClientRecord, Store},
};
use reqwest::{Client, RequestBuilder, Response};
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

/// An account by its name, as the store is asked for it.
pub fn account(name: &str) -> AccountId {
    AccountId::parse(name).unwrap()
}

/// The server tests create their databases on. `.ci/run` exports it; the
/// default is the local PostgreSQL on 127.0.0.1:5432.
pub fn pg_admin_url() -> String {
    std::env::var("DISPATCH_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// The store the tests run on: PostgreSQL (default) or the embedded SQLite
/// store (`DISPATCH_TEST_STORE=sqlite`). `scripts/test` runs both halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

pub fn backend() -> Backend {
    match std::env::var("DISPATCH_TEST_STORE").as_deref() {
        Ok("sqlite") => Backend::Sqlite,
        Ok("postgres") | Ok("") | Err(_) => Backend::Postgres,
        Ok(other) => panic!("DISPATCH_TEST_STORE must be postgres or sqlite, not {other}"),
    }
}

/// A fresh database, removed when the value is dropped.
pub struct TestDb {
    pub name: String,
    pub url: String,
    admin: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// A database on the backend under test.
    pub async fn new() -> Self {
        match backend() {
            Backend::Postgres => Self::postgres().await,
            Backend::Sqlite => Self::sqlite(),
        }
    }

    /// An embedded store in a temporary directory.
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("dispatch.db");
        Self {
            name: "sqlite".into(),
            url: format!("sqlite://{}", path.display()),
            admin: None,
            _dir: Some(dir),
        }
    }

    /// A PostgreSQL database, for what only PostgreSQL does (several instances).
    pub async fn postgres() -> Self {
        let admin = pg_admin_url();
        let mut conn = PgConnection::connect(&admin).await.unwrap_or_else(|e| {
            panic!(
                "cannot reach PostgreSQL at {admin}: {e}\n\
                 Start one (the test script `scripts/test` starts a throwaway cluster) or set DISPATCH_TEST_PG_URL."
            )
        });
        let name = format!("dispatch_test_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let base = admin
            .rsplit_once('/')
            .map(|(b, _)| b.to_string())
            .unwrap_or(admin.clone());
        Self {
            url: format!("{base}/{name}"),
            name,
            admin: Some(admin),
            _dir: None,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some(admin) = self.admin.clone() else {
            return;
        };
        let name = self.name.clone();
        // Drop cannot await; use a small runtime on a plain thread.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut conn) = PgConnection::connect(&admin).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// A port nothing listens on now, for a process a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The configuration tests start from: port 0, private networks allowed
/// (receivers are on loopback), a quick backstop poll.
pub fn test_config(db_url: &str) -> Config {
    let mut c = Config::defaults();
    c.database.url = db_url.to_string();
    c.server.listen = "127.0.0.1:0".parse().unwrap();
    c.webhook.allow_private_networks = true;
    c.sweeper.poll_interval = Duration::from_secs(1);
    c
}

/// Compresses the retry ladder so that it runs in milliseconds.
pub fn fast_ladder(c: &mut Config) {
    c.retry.minute_delay = Duration::from_millis(50);
    c.retry.hour_delay = Duration::from_millis(150);
}

pub struct TestApp {
    pub db: Arc<TestDb>,
    pub running: Option<Running>,
    pub base: String,
    pub http: Client,
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    pub async fn spawn_with(configure: impl FnOnce(&mut Config)) -> Self {
        let db = Arc::new(TestDb::new().await);
        Self::spawn_on(db, configure).await
    }

    /// On PostgreSQL whatever the backend under test: for what needs several
    /// instances or a database server to break.
    pub async fn spawn_postgres_with(configure: impl FnOnce(&mut Config)) -> Self {
        let db = Arc::new(TestDb::postgres().await);
        Self::spawn_on(db, configure).await
    }

    /// Another instance on the same database.
    pub async fn spawn_on(db: Arc<TestDb>, configure: impl FnOnce(&mut Config)) -> Self {
        let mut config = test_config(&db.url);
        configure(&mut config);
        let running = app::start(config).await.expect("the app starts");
        let base = format!("http://{}", running.addr);
        Self {
            db,
            running: Some(running),
            base,
            http: Client::new(),
        }
    }

    pub fn running(&self) -> &Running {
        self.running.as_ref().expect("running")
    }

    pub fn store(&self) -> Arc<dyn Store> {
        self.running().store.clone()
    }

    /// The time by the app's own clock.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.running().state.service.now()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Creates an OAuth client directly in the store; returns (id, secret).
    pub async fn client(&self, account: &str, scopes: &[&str]) -> (String, String) {
        let (client_id, secret) = secrets::generate_client_credentials();
        let scopes: Vec<Scope> = if scopes.is_empty() {
            Scope::ALL.to_vec()
        } else {
            scopes.iter().map(|s| s.parse().unwrap()).collect()
        };
        self.store()
            .create_client(&ClientRecord {
                client_id: client_id.clone(),
                account: AccountId::from_trusted(account),
                name: "test".into(),
                secret_hash: secrets::hash_client_secret(&secret),
                scopes,
            })
            .await
            .unwrap();
        (client_id, secret)
    }

    /// A bearer token for a new client of `account` with `scopes` (all when empty).
    pub async fn token(&self, account: &str, scopes: &[&str]) -> String {
        let (id, secret) = self.client(account, scopes).await;
        let r = self
            .http
            .post(self.url("/oauth/token"))
            .basic_auth(&id, Some(&secret))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json::<Value>().await.unwrap()["access_token"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// An API client acting for `account` with every scope.
    pub async fn api(&self, account: &str) -> Api {
        Api {
            base: self.base.clone(),
            http: self.http.clone(),
            token: self.token(account, &[]).await,
        }
    }

    pub async fn shutdown(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

/// A small typed client for the API.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: Client,
    pub token: String,
}

impl Api {
    /// An `Api` for the server at `base`, with the token its token endpoint
    /// gives the client `id` with `secret`.
    pub async fn for_client(base: String, http: Client, id: &str, secret: &str) -> Api {
        let token: Value = http
            .post(format!("{base}/oauth/token"))
            .basic_auth(id, Some(secret))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let token = token["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("a token for {id}: {token}"))
            .to_string();
        Api { base, http, token }
    }

    pub fn req(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{}", self.base, path))
            .bearer_auth(&self.token)
    }

    pub async fn get(&self, path: &str) -> Response {
        self.req(reqwest::Method::GET, path).send().await.unwrap()
    }

    pub async fn post(&self, path: &str, body: Value) -> Response {
        self.req(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn post_empty(&self, path: &str) -> Response {
        self.req(reqwest::Method::POST, path).send().await.unwrap()
    }

    pub async fn patch(&self, path: &str, body: Value) -> Response {
        self.req(reqwest::Method::PATCH, path)
            .header("content-type", "application/merge-patch+json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    pub async fn delete(&self, path: &str) -> Response {
        self.req(reqwest::Method::DELETE, path)
            .send()
            .await
            .unwrap()
    }

    /// Creates a webhook target for `url`; returns its JSON.
    pub async fn webhook(&self, url: &str) -> Value {
        self.webhook_with(url, json!({})).await
    }

    /// A webhook target with `extra` config members; returns the create response.
    pub async fn webhook_with(&self, url: &str, extra: Value) -> Value {
        let mut config = json!({ "url": url });
        for (k, v) in extra.as_object().unwrap() {
            config[k] = v.clone();
        }
        let r = self
            .post(
                "/targets",
                json!({"name": "hook", "type": "webhook", "config": config}),
            )
            .await;
        assert_eq!(r.status(), 201, "{:?}", r.text().await);
        r.json().await.unwrap()
    }

    /// Schedules `payload` for `target_id` at `at` (RFC 3339); returns the message JSON.
    pub async fn schedule(&self, target_id: &str, at: &str, payload: &str) -> Value {
        let r = self
            .post(
                "/messages",
                json!({"targetId": target_id, "deliveryTime": at, "payload": payload}),
            )
            .await;
        assert_eq!(r.status(), 201, "{:?}", r.text().await);
        r.json().await.unwrap()
    }

    /// Schedules `n` messages for `at` through the batch endpoint, 1,000 a
    /// request; returns their ids.
    pub async fn schedule_many(&self, target: &str, at: &str, n: usize) -> Vec<String> {
        let mut ids = Vec::with_capacity(n);
        while ids.len() < n {
            let k = (n - ids.len()).min(1000);
            let messages: Vec<Value> = (0..k)
                .map(
                    |i| json!({"targetId": target, "deliveryTime": at, "payload": format!("m{i}")}),
                )
                .collect();
            let r = self
                .post("/messages/batch", json!({ "messages": messages }))
                .await;
            assert_eq!(r.status(), 200);
            let out: Value = r.json().await.unwrap();
            assert_eq!(out["scheduled"], k, "{out}");
            ids.extend(
                out["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i["message"]["messageId"].as_str().unwrap().to_string()),
            );
        }
        ids
    }

    pub async fn message(&self, id: &str) -> Value {
        let r = self.get(&format!("/messages/{id}")).await;
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    /// Polls (cheaply, every 20 ms) until the message reaches `state`, or panics after `within`.
    pub async fn wait_for_state(&self, id: &str, state: &str, within: Duration) -> Value {
        let what = format!("message {id} reaches {state}");
        eventually(within, &what, async || {
            let m = self.message(id).await;
            if m["state"] == state {
                Ok(m)
            } else {
                Err(m)
            }
        })
        .await
    }

    pub async fn attempts(&self, id: &str) -> Vec<Value> {
        let r = self
            .get(&format!("/messages/{id}/attempts?limit=1000"))
            .await;
        assert_eq!(r.status(), 200);
        r.json::<Value>().await.unwrap()["items"]
            .as_array()
            .unwrap()
            .clone()
    }
}

/// Asks `check` every 20 ms until it answers `Ok`, and returns that; after
/// `within` panics, naming `what` was awaited and the last `Err` answered.
/// For what no event announces (a state in the store, a page).
pub async fn eventually<T, E: std::fmt::Debug>(
    within: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(done) => return done,
            Err(last) => assert!(
                tokio::time::Instant::now() < deadline,
                "not within {within:?}: {what}; last seen: {last:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An RFC 3339 instant `ms` milliseconds from now (negative: in the past).
pub fn in_ms(ms: i64) -> String {
    dispatch::domain::time::format(&(chrono::Utc::now() + chrono::TimeDelta::milliseconds(ms)))
}

/// Opens the store directly, for tests that look below the API.
pub async fn open_store(url: &str) -> PgStore {
    PgStore::connect(url, 5, Duration::from_secs(5))
        .await
        .unwrap()
}

/// Opens whichever store `url` names (no running binary may hold it).
pub async fn open_any_store(url: &str) -> Arc<dyn Store> {
    let mut config = Config::defaults();
    config.database.url = url.to_string();
    app::open_store(&config)
        .await
        .expect("the store opens")
        .into_parts()
        .0
}

/// Runs `dispatch ARGS` against the database at `db_url`, expects it to
/// succeed (its standard error is the failure message) and returns the JSON
/// it printed.
pub async fn dispatch_json<I, S>(db_url: &str, args: I) -> Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `dispatch serve` on `db_url` in a process of its own, with `env`, once
/// it says it is serving (listener bound, sweeper started); and its base URL.
pub async fn serve_process(db_url: &str, env: &[(&str, &str)]) -> (tokio::process::Child, String) {
    let port = free_port();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatch"));
    command
        .arg("serve")
        .env("DATABASE_URL", db_url)
        .env("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("the dispatch binary starts");
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let serving = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("dispatch is serving") {
                return;
            }
        }
        panic!("the process exited before serving");
    };
    tokio::time::timeout(Duration::from_secs(30), serving)
        .await
        .expect("it serves within 30 s");
    // Keep reading, so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, format!("http://127.0.0.1:{port}"))
}
