//! The ingest scenarios (POST /messages, POST /messages/batch) and, beside
//! each, PostgreSQL's own floor measured on the same server in the same run:
//! what pgbench commits of the same kind of insert. The machine's speed
//! moves from hour to hour; the ratio of the two does much less.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use chrono::{TimeDelta, Utc};
use dispatch::domain::ids::TargetId;
use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use super::{
    service::{schedule, Service},
    Args, Result,
};

/// What the benchmark reads of a batch's answer.
#[derive(serde::Deserialize)]
struct Scheduled {
    scheduled: usize,
}

/// How long pgbench runs for each floor.
const FLOOR_SECONDS: u32 = 5;

/// POST /messages, 32 requests at a time, for messages due in an hour:
/// schedule requests per second, beside PostgreSQL's rate for one-row
/// INSERT transactions from 32 clients.
pub(crate) async fn ingest(
    args: &Args,
    service: Service,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    target_id: &TargetId,
    run: usize,
) -> anyhow::Result<Result> {
    let floor = floor_for(args, &service, 1, 32).await?;
    let at = Utc::now() + TimeDelta::hours(1);
    let times = vec![at; args.ingest];
    let api = Args {
        via: "api".into(),
        ..args.clone()
    };
    let clock = Instant::now();
    schedule(&api, &service, target_id, &times).await?;
    let secs = clock.elapsed().as_secs_f64();
    finish(
        args,
        "ingest",
        times.len(),
        times.len(),
        secs,
        floor,
        (service, server),
        run,
    )
    .await
}

/// POST /messages/batch, 1,000 messages a request and 4 requests at a time,
/// due in an hour: messages scheduled per second, beside PostgreSQL's rate
/// for 1,000-row INSERTs from 4 clients.
pub(crate) async fn ingest_batch(
    args: &Args,
    service: Service,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    target_id: &TargetId,
    run: usize,
) -> anyhow::Result<Result> {
    let floor = floor_for(args, &service, 1000, 4).await?;
    let at = dispatch::domain::time::format(&(Utc::now() + TimeDelta::hours(1)));
    let http = reqwest::Client::new();
    let requests = args.batch.div_ceil(1000);
    // The requests are written before the clock starts: the load generator
    // shares the cores with the service, and what it spends building JSON
    // is not the service's time.
    let bodies: Vec<Vec<u8>> = (0..requests)
        .map(|r| {
            let n = (args.batch - r * 1000).min(1000);
            let messages: Vec<Value> = (0..n)
                .map(|_| json!({"targetId": target_id, "deliveryTime": at, "payload": "benchmark payload"}))
                .collect();
            serde_json::to_vec(&json!({ "messages": messages }))
        })
        .collect::<std::result::Result<_, _>>()?;
    let url = format!("{}/messages/batch", service.base);
    let clock = Instant::now();
    let results: Vec<anyhow::Result<usize>> = futures::stream::iter(bodies)
        .map(|body| {
            let (http, service, url) = (&http, &service, &url);
            async move {
                let r = http
                    .post(url)
                    .bearer_auth(&service.token)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?;
                anyhow::ensure!(r.status() == 200, "the batch answered {}", r.status());
                let answer: Scheduled = serde_json::from_slice(&r.bytes().await?)?;
                Ok(answer.scheduled)
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let secs = clock.elapsed().as_secs_f64();
    let scheduled: usize = results
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?
        .iter()
        .sum();
    finish(
        args,
        "batch",
        args.batch,
        scheduled,
        secs,
        floor,
        (service, server),
        run,
    )
    .await
}

type Running = (Service, tokio::task::JoinHandle<std::io::Result<()>>);

#[allow(clippy::too_many_arguments)]
pub(crate) async fn finish(
    args: &Args,
    scenario: &str,
    messages: usize,
    scheduled: usize,
    secs: f64,
    floor: Option<f64>,
    (service, server): Running,
    run: usize,
) -> anyhow::Result<Result> {
    let peak_rss_mb = service.peak_rss_mb();
    service.stop(&args.pg).await;
    server.abort();
    let rate_per_s = scheduled as f64 / secs;
    Ok(Result {
        scenario: scenario.into(),
        run,
        messages,
        delivered: scheduled,
        duplicates: 0,
        rate_per_s,
        peak_rss_mb,
        floor_per_s: floor,
        floor_ratio: floor.map(|f| rate_per_s / f),
        notes: floor.map(|f| {
            format!(
                "{rate_per_s:.0}/s against PostgreSQL's floor of {f:.0} rows/s (pgbench, same server, same run): {:.2}×",
                rate_per_s / f
            )
        }),
        failed_check: false,
        timings: Vec::new(),
        ..Result::with_lateness(&[])
    })
}

/// On PostgreSQL (unless `--floor false`): the rows per second pgbench
/// commits into a table shaped as a message (uuid key, target, payload, due
/// time) with `rows` rows an INSERT from `clients` clients, in the
/// service's own database before the scenario runs.
async fn floor_for(
    args: &Args,
    service: &Service,
    rows: u32,
    clients: u32,
) -> anyhow::Result<Option<f64>> {
    if !args.floor || args.store != "postgres" {
        return Ok(None);
    }
    let mut conn = PgConnection::connect(&service.db_url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS floor_messages (id uuid PRIMARY KEY, target_id text NOT NULL, \
           payload bytea NOT NULL, delivery_time timestamptz NOT NULL)",
    )
    .execute(&mut conn)
    .await?;
    let insert = if rows == 1 {
        "INSERT INTO floor_messages VALUES (gen_random_uuid(), 'DI-T-floor', 'benchmark payload', now() + interval '1 hour');\n".to_string()
    } else {
        format!(
            "INSERT INTO floor_messages SELECT gen_random_uuid(), 'DI-T-floor', 'benchmark payload', now() + interval '1 hour' \
             FROM generate_series(1, {rows});\n"
        )
    };
    let script = tempfile::NamedTempFile::new()?;
    std::fs::write(script.path(), insert)?;
    let out = tokio::process::Command::new("pgbench")
        .args(["-n", "-j", "2", "-T"])
        .arg(FLOOR_SECONDS.to_string())
        .arg("-c")
        .arg(clients.to_string())
        .arg("-f")
        .arg(script.path())
        .arg(&service.db_url)
        .output()
        .await
        .context(
            "running pgbench for PostgreSQL's floor (it comes with PostgreSQL's client tools; \
             --floor false leaves the floor out)",
        )?;
    sqlx::query("DROP TABLE floor_messages")
        .execute(&mut conn)
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "pgbench failed: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // "tps = 28512.345678 (without initial connection time)"
    let tps: f64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no tps in pgbench's output: {stdout}"))?;
    // Let the floor's writes settle before the scenario's own.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(Some(tps * f64::from(rows)))
}
