//! The pull scenarios (docs/api.md#pull-targets), on PostgreSQL.
//!
//! - `pull`: `--pull` messages due on a pull target, read by
//!   `--pull-consumers` consumers each looping `receive` (max 100) and `ack`
//!   of the batch; beside it, in the same PostgreSQL, pgmq (the `pgmq`
//!   crate's queue: `read` 100 then `delete` of the batch) with as many
//!   connections. Prints both rates and their ratio.
//! - `pull-wake`: `--wake-consumers` consumers long-polling one pull target
//!   while `--wake-messages` messages are scheduled due now, one every
//!   20 ms: each one's latency is from its 201 to the receive that got it.
//! - `pull-idle`: `--idle-consumers` consumers long-polling an empty pull
//!   target for `--idle-seconds`: the transactions PostgreSQL counted in
//!   that time, Dispatch's CPU and its peak memory.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context};
use chrono::Utc;
use dispatch::domain::ids::TargetId;
use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::{postgres::PgPoolOptions, Connection, PgConnection};

use super::{
    service::{percentile, schedule, start_service, Service},
    Args, Result,
};

async fn post(
    http: &reqwest::Client,
    service: &Service,
    path: &str,
    body: &Value,
) -> anyhow::Result<Value> {
    let r = http
        .post(format!("{}{path}", service.base))
        .bearer_auth(&service.token)
        .json(body)
        .send()
        .await?;
    let status = r.status();
    let answer: Value = r.json().await?;
    ensure!(
        status.is_success(),
        "POST {path} answered {status}: {answer}"
    );
    Ok(answer)
}

async fn pull_target(service: &Service) -> anyhow::Result<TargetId> {
    let http = reqwest::Client::new();
    let t = post(
        &http,
        service,
        "/targets",
        &json!({"name": "queue", "type": "pull", "config": {"visibilityTimeout": "5m"}}),
    )
    .await?;
    Ok(t["targetId"].as_str().context("a targetId")?.parse()?)
}

pub(crate) async fn run(args: &Args, scenario: &str, run: usize) -> anyhow::Result<Result> {
    if args.store != "postgres" {
        bail!("the pull scenarios run on PostgreSQL only");
    }
    let service = start_service(args).await?;
    let target = pull_target(&service).await?;
    let result = match scenario {
        "pull" => throughput(args, &service, &target, run).await,
        "pull-wake" => wake(args, &service, &target, run).await,
        "pull-idle" => idle(args, &service, &target, run).await,
        other => bail!("unknown scenario {other}"),
    };
    let peak_rss_mb = service.peak_rss_mb();
    service.stop(&args.pg).await;
    result.map(|r| Result { peak_rss_mb, ..r })
}

/// Receives and acks every message with `consumers` consumers; the rate.
async fn drain(
    service: &Service,
    target: &TargetId,
    consumers: usize,
    n: usize,
) -> anyhow::Result<f64> {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let counts: Vec<anyhow::Result<usize>> = futures::stream::iter(0..consumers)
        .map(|_| {
            let http = http.clone();
            async move {
                let mut got = 0;
                loop {
                    let out = post(
                        &http,
                        service,
                        &format!("/targets/{target}/receive"),
                        &json!({"max": 100}),
                    )
                    .await?;
                    let items = out["items"].as_array().context("items")?;
                    if items.is_empty() {
                        return Ok(got);
                    }
                    let handles: Vec<&Value> = items.iter().map(|i| &i["receiptHandle"]).collect();
                    let acked = post(
                        &http,
                        service,
                        &format!("/targets/{target}/ack"),
                        &json!({ "receiptHandles": handles }),
                    )
                    .await?;
                    ensure!(acked["acked"] == items.len(), "an ack answered {acked}");
                    got += items.len();
                }
            }
        })
        .buffer_unordered(consumers)
        .collect()
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    let total: usize = counts
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?
        .iter()
        .sum();
    ensure!(total == n, "received and acked {total} of {n}");
    Ok(n as f64 / elapsed)
}

/// pgmq's rate in the same PostgreSQL: its SQL installed (`pgmq.read` 100,
/// `pgmq.delete` of the batch).
async fn pgmq_rate(db_url: &str, consumers: usize, n: usize) -> anyhow::Result<f64> {
    let pool = PgPoolOptions::new()
        .max_connections(consumers as u32)
        .connect(db_url)
        .await?;
    let queue = pgmq::PGMQueueExt::new_with_pool(pool).await;
    // pgmq's own SQL (its functions and tables), as its extension installs it.
    queue.install_sql_from_embedded().await?;
    queue.create("bench").await?;
    let payloads = vec![json!("benchmark payload"); 1000];
    for chunk in 0..n.div_ceil(1000) {
        let k = (n - chunk * 1000).min(1000);
        queue.send_batch("bench", &payloads[..k]).await?;
    }
    let started = Instant::now();
    let counts: Vec<anyhow::Result<usize>> = futures::stream::iter(0..consumers)
        .map(|_| {
            let queue = &queue;
            async move {
                let mut got = 0;
                loop {
                    let batch = queue.read_batch::<Value>("bench", 300, 100).await?;
                    if batch.is_empty() {
                        return Ok(got);
                    }
                    let ids: Vec<i64> = batch.iter().map(|m| m.msg_id).collect();
                    queue.delete_batch("bench", &ids).await?;
                    got += ids.len();
                }
            }
        })
        .buffer_unordered(consumers)
        .collect()
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    let total: usize = counts
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?
        .iter()
        .sum();
    ensure!(total == n, "pgmq read and deleted {total} of {n}");
    Ok(n as f64 / elapsed)
}

async fn throughput(
    args: &Args,
    service: &Service,
    target: &TargetId,
    run: usize,
) -> anyhow::Result<Result> {
    let n = args.pull;
    let pgmq = pgmq_rate(&service.db_url, args.pull_consumers, n).await?;
    let store_args = Args {
        via: "store".into(),
        ..args.clone()
    };
    let due = Utc::now() - chrono::TimeDelta::seconds(1);
    schedule(&store_args, service, target, &vec![due; n]).await?;
    let rate = drain(service, target, args.pull_consumers, n).await?;
    Ok(Result {
        scenario: "pull".into(),
        run,
        messages: n,
        delivered: n,
        rate_per_s: rate,
        notes: Some(format!(
            "{} consumers, receive 100 + ack: {rate:.0} messages/s; pgmq (read 100 + delete) in the same \
             PostgreSQL: {pgmq:.0}/s; ratio {:.2}",
            args.pull_consumers,
            rate / pgmq
        )),
        ..Result::default()
    })
}

async fn wake(
    args: &Args,
    service: &Service,
    target: &TargetId,
    run: usize,
) -> anyhow::Result<Result> {
    let http = reqwest::Client::new();
    let answered: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut consumers = Vec::new();
    for _ in 0..args.wake_consumers {
        let (http, answered, stop) = (http.clone(), answered.clone(), stop.clone());
        let (base, token, target) = (service.base.clone(), service.token.clone(), target.clone());
        consumers.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let r = http
                    .post(format!("{base}/targets/{target}/receive"))
                    .bearer_auth(&token)
                    .json(&json!({"max": 1, "wait": "20s"}))
                    .send();
                let r = tokio::select! {
                    r = r => r,
                    _ = stop.cancelled() => return,
                };
                let Ok(r) = r else { continue };
                let Ok(out) = r.json::<Value>().await else {
                    continue;
                };
                let at = Instant::now();
                for item in out["items"].as_array().into_iter().flatten() {
                    let id = item["messageId"].as_str().unwrap_or_default().to_string();
                    answered.lock().unwrap().insert(id, at);
                    let _ = http
                        .post(format!("{base}/targets/{target}/ack"))
                        .bearer_auth(&token)
                        .json(&json!({"receiptHandles": [item["receiptHandle"]]}))
                        .send()
                        .await;
                }
            }
        }));
    }
    // Every consumer is waiting before the first message.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut created: Vec<(String, Instant)> = Vec::new();
    for _ in 0..args.wake_messages {
        let m = post(
            &http,
            service,
            "/messages",
            &json!({"targetId": target, "deliveryTime": dispatch::domain::time::format(&Utc::now()),
                    "payload": "wake"}),
        )
        .await?;
        created.push((
            m["messageId"].as_str().context("an id")?.to_string(),
            Instant::now(),
        ));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while answered.lock().unwrap().len() < created.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    for c in consumers {
        let _ = c.await;
    }
    let answered = answered.lock().unwrap().clone();
    // From the 201 to the answer; a receive answered before the producer
    // read its 201 counts as 0.
    let mut latencies: Vec<f64> = created
        .iter()
        .filter_map(|(id, at)| {
            answered
                .get(id)
                .map(|got| got.saturating_duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(|a, b| a.total_cmp(b));
    Ok(Result {
        scenario: "pull-wake".into(),
        run,
        messages: created.len(),
        delivered: latencies.len(),
        notes: Some(format!(
            "{} consumers waiting; from the 201 to the receive's answer: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            args.wake_consumers,
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies.last().copied().unwrap_or(f64::NAN)
        )),
        ..Result::with_lateness(&latencies)
    })
}

/// Transactions PostgreSQL has counted in the service's database.
async fn transactions(db_url: &str) -> anyhow::Result<i64> {
    let mut conn = PgConnection::connect(db_url).await?;
    let (n,): (i64,) = sqlx::query_as(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&mut conn)
    .await?;
    conn.close().await?;
    Ok(n)
}

async fn idle(
    args: &Args,
    service: &Service,
    target: &TargetId,
    run: usize,
) -> anyhow::Result<Result> {
    // What the instance costs the database with nobody waiting (its
    // sweeper's backstop, the schedules' materialiser, retention), to set
    // the consumers' share apart.
    let quiet = Duration::from_secs((args.idle_seconds / 3).max(10));
    let tq0 = transactions(&service.db_url).await?;
    tokio::time::sleep(quiet).await;
    let baseline =
        (transactions(&service.db_url).await? - tq0 - 1).max(0) as f64 / quiet.as_secs_f64();
    let http = reqwest::Client::new();
    let stop = tokio_util::sync::CancellationToken::new();
    let answers = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut consumers = Vec::new();
    for _ in 0..args.idle_consumers {
        let (http, stop, answers) = (http.clone(), stop.clone(), answers.clone());
        let (base, token, target) = (service.base.clone(), service.token.clone(), target.clone());
        consumers.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let r = http
                    .post(format!("{base}/targets/{target}/receive"))
                    .bearer_auth(&token)
                    .json(&json!({"wait": "20s"}))
                    .send();
                tokio::select! {
                    r = r => if let Ok(r) = r { let _ = r.bytes().await; answers.fetch_add(1, std::sync::atomic::Ordering::Relaxed); },
                    _ = stop.cancelled() => return,
                }
            }
        }));
    }
    // Every consumer has asked once (and its instance learned the queue is empty).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (tx0, cpu0, t0) = (
        transactions(&service.db_url).await?,
        service.cpu_seconds(),
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let (tx1, cpu1, t1) = (
        transactions(&service.db_url).await?,
        service.cpu_seconds(),
        Instant::now(),
    );
    stop.cancel();
    for c in consumers {
        let _ = c.await;
    }
    let secs = (t1 - t0).as_secs_f64();
    // Our own reading of the counter is one transaction.
    let per_s = (tx1 - tx0 - 1).max(0) as f64 / secs;
    let cpu = (cpu1 - cpu0) / secs * 100.0;
    Ok(Result {
        scenario: "pull-idle".into(),
        run,
        messages: 0,
        delivered: 0,
        rate_per_s: per_s,
        notes: Some(format!(
            "{} consumers long-polling an empty queue for {secs:.0} s ({} answers): {per_s:.2} database \
             transactions/s against {baseline:.2}/s with nobody waiting ({:.2}/s for the consumers), \
             Dispatch CPU {cpu:.2} % of a core",
            args.idle_consumers,
            answers.load(std::sync::atomic::Ordering::Relaxed),
            per_s - baseline
        )),
        ..Result::default()
    })
}
