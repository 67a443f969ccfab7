//! The service under test (Dispatch as its own process on a fresh database),
//! its target, scheduling, and reading back what was delivered.

use std::{
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use chrono::{DateTime, Utc};
use dispatch::{
    domain::{
        ids::{AccountId, TargetId},
        message::Message,
        payload::Payload,
    },
    store::{postgres::PgStore, MessageStore},
};
use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use super::Args;

pub(crate) struct Service {
    pub(crate) child: tokio::process::Child,
    pub(crate) base: String,
    pub(crate) token: String,
    /// The client the token was issued to: (id, secret).
    pub(crate) client: (String, String),
    pub(crate) db_url: String,
    /// The PostgreSQL database to drop afterwards, if any.
    pub(crate) db_name: Option<String>,
    pub(crate) _dir: Option<tempfile::TempDir>,
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn dispatch_binary(args: &Args) -> PathBuf {
    args.dispatch.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name(format!("dispatch{}", std::env::consts::EXE_SUFFIX))
    })
}

/// Another `serve` on `service`'s database, once ready: (process, base URL).
pub(crate) async fn serve_beside(
    args: &Args,
    service: &Service,
) -> anyhow::Result<(tokio::process::Child, String)> {
    let port = free_port();
    let child = tokio::process::Command::new(dispatch_binary(args))
        .arg("serve")
        .env("DATABASE_URL", &service.db_url)
        .env("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true")
        .env("RUST_LOG", "warn")
        .env("DISPATCH_SWEEPER__LEASE", "30s")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let base = format!("http://127.0.0.1:{port}");
    ready(&base).await?;
    Ok((child, base))
}

/// Waits until the instance at `base` answers `/health/ready` with 200,
/// 20 s at most.
async fn ready(base: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let started = Instant::now();
    while http
        .get(format!("{base}/health/ready"))
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        if started.elapsed() > Duration::from_secs(20) {
            bail!("dispatch at {base} did not become ready");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

pub(crate) async fn start_service(args: &Args) -> anyhow::Result<Service> {
    start_service_with(args, &[]).await
}

/// As `start_service`, with more environment for the service (its config).
pub(crate) async fn start_service_with(
    args: &Args,
    extra: &[(&'static str, String)],
) -> anyhow::Result<Service> {
    let (db_url, db_name, dir) = if args.store == "sqlite" {
        let dir = tempfile::tempdir()?;
        (
            format!("sqlite://{}", dir.path().join("dispatch.db").display()),
            None,
            Some(dir),
        )
    } else {
        let db_name = format!("dispatch_bench_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&args.pg)
            .await
            .with_context(|| format!("connecting to {}", args.pg))?;
        sqlx::query(&format!("CREATE DATABASE {db_name}"))
            .execute(&mut admin)
            .await?;
        let url = format!(
            "{}/{db_name}",
            args.pg.rsplit_once('/').map(|(b, _)| b).unwrap_or(&args.pg)
        );
        (url, Some(db_name), None)
    };
    let bin = dispatch_binary(args);
    let port = free_port();
    let mut envs = vec![
        ("DATABASE_URL", db_url.clone()),
        ("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{port}")),
        ("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true".into()),
        ("RUST_LOG", "warn".into()),
        ("DISPATCH_AWS__SQS_BATCH", args.sqs_batch.to_string()),
        // moto answers slowly under load: give each call time rather than
        // measuring timeouts and retries.
        ("DISPATCH_AWS__TIMEOUT", "50s".into()),
        ("DISPATCH_SWEEPER__LEASE", "60s".into()),
    ];
    envs.extend(extra.iter().cloned());
    let out = tokio::process::Command::new(&bin)
        .args(["clients", "create", "--account", "bench", "--name", "bench"])
        .envs(envs.clone())
        .output()
        .await
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "dispatch clients create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let client: Value = serde_json::from_slice(&out.stdout)?;
    let child = tokio::process::Command::new(&bin)
        .arg("serve")
        .envs(envs)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let base = format!("http://127.0.0.1:{port}");
    ready(&base).await?;
    let token = token_for(&base, &client).await?;
    Ok(Service {
        child,
        base,
        token,
        client: (
            client["clientId"].as_str().unwrap_or_default().to_string(),
            client["clientSecret"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ),
        db_url,
        db_name,
        _dir: dir,
    })
}

/// An access token for `client`, as `dispatch clients create` printed it.
pub(crate) async fn token_for(base: &str, client: &Value) -> anyhow::Result<String> {
    let token: Value = reqwest::Client::new()
        .post(format!("{base}/oauth/token"))
        .basic_auth(
            client["clientId"].as_str().context("a client id")?,
            client["clientSecret"].as_str(),
        )
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await?
        .json()
        .await?;
    Ok(token["access_token"]
        .as_str()
        .context("an access token")?
        .to_string())
}

impl Service {
    /// CPU seconds (user and system) the service has used so far.
    pub(crate) fn cpu_seconds(&self) -> f64 {
        let Some(pid) = self.child.id() else {
            return 0.0;
        };
        // Fields 14 and 15 of /proc/PID/stat, in clock ticks (100 a second
        // on Linux); the command name in field 2 may hold spaces, so count
        // from the closing parenthesis.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let rest = s.rsplit_once(')')?.1;
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let utime: f64 = fields.get(11)?.parse().ok()?;
                let stime: f64 = fields.get(12)?.parse().ok()?;
                Some((utime + stime) / 100.0)
            })
            .unwrap_or(0.0)
    }

    pub(crate) fn peak_rss_mb(&self) -> f64 {
        let Some(pid) = self.child.id() else {
            return 0.0;
        };
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|kb| kb.parse::<f64>().ok())
                        .map(|kb| kb / 1024.0)
                })
            })
            .unwrap_or(0.0)
    }

    pub(crate) async fn stop(mut self, admin: &str) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await;
        let _ = self.child.start_kill();
        if let Some(name) = &self.db_name {
            if let Ok(mut admin) = PgConnection::connect(admin).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await;
            }
        }
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx]
}

/// Creates the scenario's target: the receiver's webhook, or an SQS queue on moto.
pub(crate) async fn create_target(
    args: &Args,
    service: &Service,
    scenario: &str,
    hook: &str,
) -> anyhow::Result<TargetId> {
    let config = if scenario == "sqs" {
        let moto = args
            .moto
            .as_deref()
            .context("the sqs scenario needs --moto URL (a moto server)")?;
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(moto)
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "bench", "bench", None, None, "bench",
            ))
            .load()
            .await;
        let queue = aws_sdk_sqs::Client::new(&sdk)
            .create_queue()
            .queue_name(format!("bench-{}", uuid::Uuid::new_v4().simple()))
            .send()
            .await?
            .queue_url()
            .context("a queue URL")?
            .to_string();
        json!({"type": "sqs", "config": {"queueUrl": queue, "region": "us-east-1", "endpointUrl": moto,
               "credentials": {"accessKeyId": "bench", "secretAccessKey": "bench"}}})
    } else {
        json!({"type": "webhook", "config": {"url": hook}})
    };
    let mut body = config;
    body["name"] = json!("bench");
    let target: Value = reqwest::Client::new()
        .post(format!("{}/targets", service.base))
        .bearer_auth(&service.token)
        .json(&body)
        .send()
        .await?
        .json()
        .await?;
    Ok(target["targetId"]
        .as_str()
        .with_context(|| format!("target created: {target}"))?
        .parse()?)
}

/// Schedules a message at each of `times`, directly in the store or over the API.
pub(crate) async fn schedule(
    args: &Args,
    service: &Service,
    target_id: &TargetId,
    times: &[DateTime<Utc>],
) -> anyhow::Result<()> {
    if args.via == "store" && args.store == "postgres" {
        let store = PgStore::connect(&service.db_url, 4, Duration::from_secs(5)).await?;
        let account = AccountId::parse("bench").expect("a valid account name");
        let now = Utc::now();
        for chunk in times.chunks(5_000) {
            let messages: Vec<Message> = chunk
                .iter()
                .map(|&at| {
                    Message::scheduled(
                        &account,
                        target_id.clone(),
                        at,
                        Payload::parse("benchmark payload".into()).unwrap(),
                        now,
                    )
                })
                .collect();
            store.insert_messages(&account, &messages).await?;
        }
        return Ok(());
    }
    let http = reqwest::Client::new();
    let url = format!("{}/messages", service.base);
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(times.iter().copied())
        .map(|at| {
            let (http, url, token) = (http.clone(), url.clone(), service.token.clone());
            let body = json!({"targetId": target_id, "deliveryTime": dispatch::domain::time::format(&at),
                              "payload": "benchmark payload"});
            async move {
                let r = http.post(url).bearer_auth(token).json(&body).send().await?;
                anyhow::ensure!(r.status() == 201, "scheduling answered {}", r.status());
                Ok(())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

/// POST /messages/batch with `messages` as `token`'s client; the answer.
pub(crate) async fn post_batch(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    messages: Vec<Value>,
) -> anyhow::Result<Value> {
    let r = http
        .post(format!("{base}/messages/batch"))
        .bearer_auth(token)
        .json(&json!({ "messages": messages }))
        .send()
        .await?;
    anyhow::ensure!(r.status() == 200, "the batch answered {}", r.status());
    Ok(r.json().await?)
}

/// When a message arrived (or was acknowledged) and when it was due.
pub(crate) type Timing = (DateTime<Utc>, DateTime<Utc>);

/// The lateness of each timing (arrival minus due time) in ms, sorted.
pub(crate) fn lateness_ms<'a>(timings: impl IntoIterator<Item = &'a Timing>) -> Vec<f64> {
    let mut v: Vec<f64> = timings
        .into_iter()
        .map(|(at, due)| (*at - *due).num_microseconds().unwrap_or(0) as f64 / 1000.0)
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// Arrivals per second between the 5th and 95th percentile of arrivals.
pub(crate) fn arrival_rate<'a>(timings: impl IntoIterator<Item = &'a Timing>) -> f64 {
    let mut arrivals: Vec<DateTime<Utc>> = timings.into_iter().map(|(at, _)| *at).collect();
    if arrivals.len() <= 20 {
        return f64::NAN;
    }
    arrivals.sort();
    let lo = arrivals[arrivals.len() * 5 / 100];
    let hi = arrivals[arrivals.len() * 95 / 100];
    let secs = (hi - lo).num_microseconds().unwrap_or(1).max(1) as f64 / 1e6;
    arrivals.len() as f64 * 0.9 / secs
}

/// (deliveredAt, deliveryTime) of every Delivered message, read through the API.
pub(crate) async fn delivered_times(service: &Service) -> anyhow::Result<Vec<Timing>> {
    let http = reqwest::Client::new();
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}/messages?state=Delivered&limit=1000", service.base);
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: Value = http
            .get(url)
            .bearer_auth(&service.token)
            .send()
            .await?
            .json()
            .await?;
        for m in page["items"].as_array().context("a list")? {
            let parse = |k: &str| {
                DateTime::parse_from_rfc3339(m[k].as_str().unwrap_or_default())
                    .map(|t| t.with_timezone(&Utc))
            };
            out.push((parse("deliveredAt")?, parse("deliveryTime")?));
        }
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return Ok(out),
        }
    }
}
