//! The load benchmark: starts PostgreSQL-backed Dispatch as its own process,
//! a keep-alive webhook receiver that records arrival times, then runs the
//! scenarios and prints a table and JSON. Run it in release:
//!
//!     cargo run --release --bin dispatch-bench -- --runs 3
//!
//! Scenarios: `burst` (N messages due at one instant), `steady` (messages due
//! at a fixed rate). Lateness is arrival at the receiver minus the scheduled
//! time. Every scenario checks that every message arrived and counts duplicates.

use std::{
    collections::HashMap,
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use axum::{body::Bytes, extract::State, routing::post, Router};
use chrono::{DateTime, TimeDelta, Utc};
use clap::Parser;
use dispatch::{
    domain::{
        ids::{MessageId, TargetId},
        message::{Message, State as MsgState},
        payload::Payload,
    },
    store::{postgres::PgStore, Store},
};
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

#[derive(Debug, Parser)]
#[command(about = "Dispatch load benchmark")]
struct Args {
    /// A PostgreSQL server where the benchmark may create and drop databases.
    #[arg(
        long,
        env = "DISPATCH_BENCH_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pg: String,
    /// Scenarios to run: burst, steady (comma-separated).
    #[arg(long, default_value = "burst,steady")]
    scenarios: String,
    /// Messages due at one instant in the burst scenario.
    #[arg(long, default_value_t = 20_000)]
    burst: usize,
    /// Messages per second, and seconds, of the steady scenario.
    #[arg(long, default_value_t = 100)]
    steady_rate: usize,
    #[arg(long, default_value_t = 10)]
    steady_seconds: usize,
    /// Runs of each scenario; the table shows the median.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// The dispatch binary (default: beside this one).
    #[arg(long)]
    dispatch: Option<PathBuf>,
}

/// (messageId, arrival, scheduled time) of one request.
type Arrival = (String, DateTime<Utc>, DateTime<Utc>);

#[derive(Default)]
struct Arrivals {
    /// Every arrival, duplicates included.
    seen: Mutex<Vec<Arrival>>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "messageId")]
    message_id: &'a str,
    #[serde(rename = "originalDeliveryTime")]
    original: &'a str,
}

async fn receive(State(a): State<Arc<Arrivals>>, body: Bytes) -> &'static str {
    let now = Utc::now();
    if let Ok(e) = serde_json::from_slice::<Envelope>(&body) {
        if let Ok(t) = DateTime::parse_from_rfc3339(e.original) {
            a.seen
                .lock()
                .unwrap()
                .push((e.message_id.to_string(), now, t.with_timezone(&Utc)));
        }
    }
    "ok"
}

#[derive(Debug, Clone, serde::Serialize)]
struct Result {
    scenario: String,
    run: usize,
    messages: usize,
    delivered: usize,
    duplicates: usize,
    /// Deliveries per second between the 5th and 95th percentile of arrivals.
    rate_per_s: f64,
    lateness_p50_ms: f64,
    lateness_p99_ms: f64,
    lateness_max_ms: f64,
    peak_rss_mb: f64,
}

struct Service {
    child: tokio::process::Child,
    base: String,
    token: String,
    db_url: String,
    db_name: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn dispatch_binary(args: &Args) -> PathBuf {
    args.dispatch.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name(format!("dispatch{}", std::env::consts::EXE_SUFFIX))
    })
}

async fn start_service(args: &Args) -> anyhow::Result<Service> {
    let db_name = format!("dispatch_bench_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&args.pg)
        .await
        .with_context(|| format!("connecting to {}", args.pg))?;
    sqlx::query(&format!("CREATE DATABASE {db_name}"))
        .execute(&mut admin)
        .await?;
    let db_url = format!(
        "{}/{db_name}",
        args.pg.rsplit_once('/').map(|(b, _)| b).unwrap_or(&args.pg)
    );
    let bin = dispatch_binary(args);
    let port = free_port();
    let envs = [
        ("DATABASE_URL", db_url.clone()),
        ("DISPATCH_SERVER__LISTEN", format!("127.0.0.1:{port}")),
        ("DISPATCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS", "true".into()),
        ("RUST_LOG", "warn".into()),
    ];
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
            bail!("dispatch did not become ready");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let token: Value = http
        .post(format!("{base}/oauth/token"))
        .basic_auth(
            client["clientId"].as_str().unwrap(),
            client["clientSecret"].as_str(),
        )
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await?
        .json()
        .await?;
    Ok(Service {
        child,
        base,
        token: token["access_token"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        db_url,
        db_name,
    })
}

impl Service {
    fn peak_rss_mb(&self) -> f64 {
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

    async fn stop(mut self, admin: &str) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await;
        let _ = self.child.start_kill();
        if let Ok(mut admin) = PgConnection::connect(admin).await {
            let _ = sqlx::query(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.db_name
            ))
            .execute(&mut admin)
            .await;
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx]
}

async fn run_scenario(args: &Args, scenario: &str, run: usize) -> anyhow::Result<Result> {
    let arrivals = Arc::new(Arrivals::default());
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(arrivals.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook = format!("http://{}/hook", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let service = start_service(args).await?;
    let http = reqwest::Client::new();
    let target: Value = http
        .post(format!("{}/targets", service.base))
        .bearer_auth(&service.token)
        .json(&json!({"name": "bench", "type": "webhook", "config": {"url": hook}}))
        .send()
        .await?
        .json()
        .await?;
    let target_id: TargetId = target["targetId"]
        .as_str()
        .context("target created")?
        .parse()?;
    let store = PgStore::connect(&service.db_url, 4, Duration::from_secs(5)).await?;

    // Schedule everything up front, directly in the store, so that only
    // delivery is measured; the first message falls due after scheduling ends.
    let now = Utc::now();
    let start = now + TimeDelta::seconds(3);
    let times: Vec<DateTime<Utc>> = match scenario {
        "burst" => vec![start; args.burst],
        "steady" => (0..args.steady_rate * args.steady_seconds)
            .map(|i| {
                start + TimeDelta::microseconds((i as i64 * 1_000_000) / args.steady_rate as i64)
            })
            .collect(),
        other => bail!("unknown scenario {other}"),
    };
    let n = times.len();
    for chunk in times.chunks(5_000) {
        let messages: Vec<Message> = chunk
            .iter()
            .map(|&at| Message {
                id: MessageId::new(),
                account: "bench".into(),
                target_id: target_id.clone(),
                state: MsgState::Scheduled,
                delivery_time: dispatch::domain::time::truncate_ms(at),
                next_attempt_at: Some(at),
                attempt_count: 0,
                delivered_at: None,
                cancelled_at: None,
                dead_lettered_at: None,
                last_error: None,
                created_at: now,
                updated_at: now,
                payload: Payload::parse("benchmark payload".into()).unwrap(),
            })
            .collect();
        store.insert_messages("bench", &messages).await?;
    }
    if Utc::now() > start {
        bail!("scheduling took longer than the lead time; lower the message count");
    }

    let deadline =
        Instant::now() + Duration::from_secs(30 + (n / 500) as u64 + args.steady_seconds as u64);
    loop {
        let unique = {
            let seen = arrivals.seen.lock().unwrap();
            seen.iter()
                .map(|(id, ..)| id.as_str())
                .collect::<std::collections::HashSet<_>>()
                .len()
        };
        if unique >= n || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // stragglers and duplicates
    let peak_rss_mb = service.peak_rss_mb();
    service.stop(&args.pg).await;
    server.abort();

    let seen = arrivals.seen.lock().unwrap().clone();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (id, ..) in &seen {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    let duplicates = counts.values().map(|c| c - 1).sum();
    let mut first: HashMap<&str, (DateTime<Utc>, DateTime<Utc>)> = HashMap::new();
    for (id, at, scheduled) in &seen {
        first.entry(id.as_str()).or_insert((*at, *scheduled));
    }
    let mut lateness: Vec<f64> = first
        .values()
        .map(|(at, sched)| (*at - *sched).num_microseconds().unwrap_or(0) as f64 / 1000.0)
        .collect();
    lateness.sort_by(|a, b| a.total_cmp(b));
    let mut arrival_times: Vec<DateTime<Utc>> = first.values().map(|(at, _)| *at).collect();
    arrival_times.sort();
    let rate_per_s = if arrival_times.len() > 20 {
        let lo = arrival_times[arrival_times.len() * 5 / 100];
        let hi = arrival_times[arrival_times.len() * 95 / 100];
        let secs = (hi - lo).num_microseconds().unwrap_or(1).max(1) as f64 / 1e6;
        (arrival_times.len() as f64 * 0.9) / secs
    } else {
        f64::NAN
    };
    Ok(Result {
        scenario: scenario.into(),
        run,
        messages: n,
        delivered: first.len(),
        duplicates,
        rate_per_s,
        lateness_p50_ms: percentile(&lateness, 0.5),
        lateness_p99_ms: percentile(&lateness, 0.99),
        lateness_max_ms: lateness.last().copied().unwrap_or(f64::NAN),
        peak_rss_mb,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut results = Vec::new();
    for scenario in args
        .scenarios
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        for run in 1..=args.runs {
            let r = run_scenario(&args, scenario, run).await?;
            eprintln!("{}", serde_json::to_string(&r)?);
            results.push(r);
        }
    }
    println!(
        "\n{:<8} {:>8} {:>9} {:>5} {:>10} {:>9} {:>9} {:>9} {:>8}",
        "scenario",
        "messages",
        "delivered",
        "dups",
        "rate/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "RSS MB"
    );
    let mut names: Vec<&str> = results.iter().map(|r| r.scenario.as_str()).collect();
    names.dedup();
    for name in names {
        let rs: Vec<&Result> = results.iter().filter(|r| r.scenario == name).collect();
        let med = |f: fn(&Result) -> f64| median(rs.iter().map(|r| f(r)).collect());
        println!(
            "{:<8} {:>8} {:>9} {:>5} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>8.1}",
            name,
            rs[0].messages,
            rs.iter().map(|r| r.delivered).min().unwrap_or(0),
            rs.iter().map(|r| r.duplicates).max().unwrap_or(0),
            med(|r| r.rate_per_s),
            med(|r| r.lateness_p50_ms),
            med(|r| r.lateness_p99_ms),
            med(|r| r.lateness_max_ms),
            med(|r| r.peak_rss_mb),
        );
    }
    println!("{}", serde_json::to_string(&json!({"runs": results}))?);
    let incomplete = results.iter().any(|r| r.delivered < r.messages);
    if incomplete {
        bail!("some messages were not delivered");
    }
    Ok(())
}
