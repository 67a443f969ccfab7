//! The load benchmark: starts Dispatch (PostgreSQL or the embedded store) as its own process,
//! a keep-alive webhook receiver that records arrival times, then runs the
//! scenarios and prints a table and JSON. Run it in release:
//!
//!     cargo run --release --bin dispatch-bench -- --runs 3
//!
//! Scenarios: `burst` (N messages due at one instant), `steady` (messages due
//! at a fixed rate), `backlog` (steady behind far-future messages), `ingest`
//! (POST /messages), `batch` (POST /messages/batch), `sqs` (N messages due at
//! one instant for one SQS queue on moto), `noisy` (steady, while another
//! account's target hangs with `--noisy` messages due), `token` (POST
//! /oauth/token for a valid client, then floods of wrong secrets and unknown
//! ids), `ordered` (keys of messages that must arrive in order, each key's
//! first message failing once), `redrive` (steady, while one call redrives
//! `--redrive` dead letters), `schedules` (`--schedules` schedules every
//! second for `--schedule-seconds` runs, their starts spread over a second),
//! `purge` (steady, while retention deletes `--purge` expired delivered
//! messages), `fanout` (events due at one instant, each to every one of
//! `--fanout-targets` subscribed targets), `publish`, `publish-none` and
//! `publish-crowd` (POST /events matching `--publish-targets` targets, none,
//! or those beside `--crowd` subscriptions of other types), `pull` (a pull
//! target's consumers receiving and acking `--pull` messages, beside pgmq in
//! the same PostgreSQL), `pull-wake` (long-polling consumers woken by new
//! messages), `pull-idle` (what long-polling an empty queue costs) and
//! `flood` (`--flood` connections that send half a request's headers, beside
//! a normal client and the health probe), `crash` (the burst, with the
//! instance killed by SIGKILL once 40 % have arrived and started again) and
//! `crash2` (the same beside a second instance, which goes on alone). The ingest scenarios also measure PostgreSQL's own floor with
//! pgbench; the JSON and SVG charts of a run are written to `--out`. Lateness is arrival at the receiver (for SQS: the acknowledged send)
//! minus the scheduled time. Every scenario checks that every message arrived
//! and counts duplicates.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::bail;

mod args;
mod charts;
mod crash;
mod fanout;
mod flood;
mod ingest;
mod neighbours;
mod noisy;
mod ordered;
mod pull;
mod purge;
mod redrive;
mod schedules;
mod service;
mod token;
mod told;

use args::Args;
use axum::{body::Bytes, extract::State, routing::post, Router};
use chrono::{DateTime, TimeDelta, Utc};
use clap::Parser;

use serde::Deserialize;
use serde_json::json;
use service::{
    arrival_rate, create_target, delivered_times, lateness_ms, percentile, schedule, start_service,
    Timing,
};
use sqlx::{Connection, PgConnection};

/// (messageId, arrival, scheduled time) of one request.
pub(crate) type Arrival = (String, DateTime<Utc>, DateTime<Utc>);

#[derive(Default)]
struct Arrivals {
    /// Every arrival, duplicates included.
    seen: Mutex<Vec<Arrival>>,
    /// The `told` scenario's events: the message each tells of, and when
    /// it came.
    told: Mutex<Vec<(String, DateTime<Utc>)>>,
}

/// How many distinct messages arrived, counted only once `n` requests
/// have: a count of every arrival so far, taken every 50 ms under the
/// receiver's lock, stalled the receiver more the longer a run went (a
/// steady run's p99 grew from 5 to 20 ms over 20 s).
fn distinct_arrivals(seen: &[Arrival], n: usize) -> usize {
    if seen.len() < n {
        return seen.len();
    }
    seen.iter()
        .map(|(id, ..)| id.as_str())
        .collect::<std::collections::HashSet<_>>()
        .len()
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

#[derive(Debug, Clone, Default, serde::Serialize)]
struct Result {
    scenario: String,
    run: usize,
    messages: usize,
    delivered: usize,
    duplicates: usize,
    /// Deliveries per second between the 5th and 95th percentile of arrivals.
    rate_per_s: f64,
    /// The earliest arrival's lateness: how long the first delivery took
    /// to start (for a burst, the offset before its rate counts).
    lateness_min_ms: f64,
    lateness_p50_ms: f64,
    lateness_p99_ms: f64,
    lateness_max_ms: f64,
    peak_rss_mb: f64,
    /// PostgreSQL's own rate for the same kind of insert, measured beside
    /// an ingest scenario (rows per second), and the scenario's share of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_ratio: Option<f64>,
    /// Each delivery's (arrival, due time), for the charts.
    #[serde(skip)]
    timings: Vec<Timing>,
    /// What a scenario checks beyond the table's columns.
    #[serde(skip_serializing_if = "Option::is_none")]
    notes: Option<String>,
    /// A check of the scenario's own failed (see `notes`).
    #[serde(skip)]
    failed_check: bool,
}

async fn run_scenario(args: &Args, scenario: &str, run: usize) -> anyhow::Result<Result> {
    let arrivals = Arc::new(Arrivals::default());
    let app = Router::new()
        .route("/hook", post(receive))
        .route("/hang", post(noisy::hang))
        .route(told::PATH, post(told::receive))
        .with_state(arrivals.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook = format!("http://{}/hook", listener.local_addr()?);
    let hang = format!("http://{}/hang", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let service = if scenario == "purge" {
        // Retention looks every second instead of every minute.
        purge::start(args).await?
    } else if scenario.starts_with("crash") {
        // The default lease, which a killed instance's messages no longer
        // wait out.
        service::start_service_with(args, &[("DISPATCH_SWEEPER__LEASE", "30s".into())]).await?
    } else {
        start_service(args).await?
    };
    let mut service = service;
    let target_id = create_target(args, &service, scenario, &hook).await?;
    // `crash2`: a second instance on the same database, the survivor.
    let mut second = match scenario {
        "crash2" => Some(service::serve_beside(args, &service).await?),
        _ => None,
    };
    if scenario == "ingest" {
        return ingest::ingest(args, service, server, &target_id, run).await;
    }
    if scenario == "batch" {
        return ingest::ingest_batch(args, service, server, &target_id, run).await;
    }
    if scenario == "neighbours" {
        return neighbours::neighbours(args, service, server, &target_id, &hook, run).await;
    }
    if scenario == "flood" {
        return flood::flood(args, service, server, run).await;
    }
    if scenario.starts_with("publish") {
        return fanout::publish(args, service, server, &target_id, &hook, scenario, run).await;
    }
    if scenario == "backlog" {
        // Far-future messages that must not slow the due ones down.
        let far = Utc::now() + TimeDelta::days(30);
        let backlog = vec![far; args.backlog];
        let args_store = Args {
            via: "store".into(),
            ..args.clone()
        };
        schedule(&args_store, &service, &target_id, &backlog).await?;
        if args.analyze {
            // What autovacuum would have done by now in a service that grew its backlog over time.
            let mut conn = PgConnection::connect(&service.db_url).await?;
            sqlx::query("VACUUM ANALYZE messages")
                .execute(&mut conn)
                .await?;
        }
    }
    if scenario == "noisy" {
        noisy::noisy_neighbour(args, &service, &hang).await?;
    }
    if scenario == "purge" {
        purge::expired(args, &service, &target_id).await?;
    }
    if scenario == "fanout" {
        fanout::subscribe(args, &service, &target_id, &hook).await?;
    }
    if scenario == "told" {
        told::subscribe(&service, &hook.replace("/hook", told::PATH)).await?;
    }
    let n_planned = match scenario {
        "burst" | "told" | "crash" | "crash2" => args.burst,
        "fanout" => args.fanout_events * args.fanout_targets,
        "steady" | "backlog" | "noisy" | "purge" => args.steady_rate * args.steady_seconds,
        "sqs" => args.sqs,
        other => bail!("unknown scenario {other}"),
    };
    // Everything is scheduled before the first message falls due; over the
    // API that takes longer, so the lead time grows with the count.
    let lead_ms = if args.via == "store" && args.store == "postgres" {
        3_000 + n_planned as i64 / 20
    } else {
        3_000 + n_planned as i64 / 2
    };
    let start = Utc::now() + TimeDelta::milliseconds(lead_ms);
    let times: Vec<DateTime<Utc>> = match scenario {
        "steady" | "backlog" | "noisy" | "purge" => (0..n_planned)
            .map(|i| {
                start + TimeDelta::microseconds((i as i64 * 1_000_000) / args.steady_rate as i64)
            })
            .collect(),
        _ => vec![start; n_planned],
    };
    let n = times.len();
    let scheduling = Instant::now();
    if scenario == "fanout" {
        fanout::fanout(args, &service, start).await?;
    } else {
        schedule(args, &service, &target_id, &times).await?;
    }
    let scheduled_in = scheduling.elapsed();
    if Utc::now() > start {
        bail!(
            "scheduling took {scheduled_in:?}, longer than the lead time; lower the message count"
        );
    }

    let slowest = if scenario == "sqs" { 20 } else { 200 }; // the slowest rate waited for, per second
    let deadline = Instant::now()
        + Duration::from_secs(30 + (n / slowest) as u64 + args.steady_seconds as u64);
    let mut sqs_times = Vec::new();
    // `crash` and `crash2`: the instance is killed (SIGKILL) once 40 % have
    // arrived; `crash` starts it again at once.
    let mut killed: Option<(DateTime<Utc>, usize)> = None;
    let mut restarted_in = None;
    loop {
        let done = if scenario == "sqs" {
            tokio::time::sleep(Duration::from_millis(500)).await;
            sqs_times = delivered_times(&service).await?;
            sqs_times.len()
        } else {
            distinct_arrivals(&arrivals.seen.lock().unwrap(), n)
        };
        if scenario.starts_with("crash") && killed.is_none() && done * 10 >= n * 4 {
            service.child.start_kill()?;
            service.child.wait().await?;
            killed = Some((Utc::now(), done));
            if scenario == "crash" {
                let clock = Instant::now();
                let (child, base) = service::serve_beside(args, &service).await?;
                restarted_in = Some(clock.elapsed());
                service.child = child;
                service.base = base;
            }
        }
        if done >= n || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // stragglers and duplicates
    let peak_rss_mb = service.peak_rss_mb();
    let notes = match scenario {
        "purge" => Some(purge::left(args, &service).await?),
        "told" => {
            let mut firsts: HashMap<String, Timing> = HashMap::new();
            for (id, at, due) in arrivals.seen.lock().unwrap().iter() {
                firsts.entry(id.clone()).or_insert((*at, *due));
            }
            Some(told::wait(&arrivals, &told::firsts(&firsts), Duration::from_secs(30)).await)
        }
        _ if killed.is_some() => {
            // Duplicates an attempt interrupted by the kill explains come
            // within the kill's moment; wait a little longer for the rest.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let (at, done) = killed.unwrap_or_default();
            let seen = arrivals.seen.lock().unwrap().clone();
            Some(crash::notes(&seen, n, at, done, restarted_in))
        }
        _ => None,
    };
    if let Some((mut child, _)) = second.take() {
        let _ = child.start_kill();
    }
    service.stop(&args.pg).await;
    server.abort();

    // For webhooks: arrival at the receiver. For SQS: when the send was
    // acknowledged (the message's deliveredAt).
    let (first, duplicates): (Vec<Timing>, usize) = if scenario == "sqs" {
        (sqs_times, 0)
    } else {
        let seen = arrivals.seen.lock().unwrap().clone();
        let mut firsts: HashMap<String, Timing> = HashMap::new();
        let mut dups = 0;
        for (id, at, scheduled) in seen {
            if firsts.insert(id, (at, scheduled)).is_some() {
                dups += 1;
            }
        }
        (firsts.into_values().collect(), dups)
    };
    let lateness = lateness_ms(&first);
    let rate_per_s = arrival_rate(&first);
    let delivered = first.len();
    Ok(Result {
        timings: first,
        scenario: scenario.into(),
        run,
        messages: n,
        delivered,
        duplicates,
        rate_per_s,
        peak_rss_mb,
        notes,
        failed_check: false,
        ..Result::with_lateness(&lateness)
    })
}

impl Result {
    /// A result with the lateness figures of `sorted` (milliseconds, in
    /// order; none for a scenario that delivers nothing) and the rest unset.
    fn with_lateness(sorted: &[f64]) -> Self {
        Self {
            lateness_min_ms: sorted.first().copied().unwrap_or(f64::NAN),
            lateness_p50_ms: percentile(sorted, 0.5),
            lateness_p99_ms: percentile(sorted, 0.99),
            lateness_max_ms: sorted.last().copied().unwrap_or(f64::NAN),
            ..Default::default()
        }
    }
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
            if scenario == "token" {
                token::run(&args, run).await?;
                continue;
            }
            let r = match scenario {
                "ordered" => ordered::run(&args, run).await?,
                "redrive" => redrive::run(&args, run).await?,
                "schedules" => schedules::run(&args, run).await?,
                "pull" | "pull-wake" | "pull-idle" => pull::run(&args, scenario, run).await?,
                _ => run_scenario(&args, scenario, run).await?,
            };
            eprintln!("{}", serde_json::to_string(&r)?);
            results.push(r);
        }
    }
    println!(
        "\n{:<8} {:>8} {:>9} {:>5} {:>10} {:>9} {:>9} {:>9} {:>8} {:>9} {:>6}",
        "scenario",
        "messages",
        "delivered",
        "dups",
        "rate/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "RSS MB",
        "floor/s",
        "ratio"
    );
    let mut names: Vec<&str> = results.iter().map(|r| r.scenario.as_str()).collect();
    names.dedup();
    for name in names {
        let rs: Vec<&Result> = results.iter().filter(|r| r.scenario == name).collect();
        let med = |f: fn(&Result) -> f64| median(rs.iter().map(|r| f(r)).collect());
        println!(
            "{:<8} {:>8} {:>9} {:>5} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>9.0} {:>6.2}",
            name,
            rs[0].messages,
            rs.iter().map(|r| r.delivered).min().unwrap_or(0),
            rs.iter().map(|r| r.duplicates).max().unwrap_or(0),
            med(|r| r.rate_per_s),
            med(|r| r.lateness_p50_ms),
            med(|r| r.lateness_p99_ms),
            med(|r| r.lateness_max_ms),
            med(|r| r.peak_rss_mb),
            med(|r| r.floor_per_s.unwrap_or(f64::NAN)),
            med(|r| r.floor_ratio.unwrap_or(f64::NAN)),
        );
    }
    for r in results.iter().filter(|r| r.notes.is_some()) {
        println!(
            "{} (run {}): {}",
            r.scenario,
            r.run,
            r.notes.as_deref().unwrap_or("")
        );
    }
    let all = serde_json::to_string(&json!({"runs": results}))?;
    println!("{all}");
    std::fs::create_dir_all(&args.out)?;
    let json_file = args.out.join("bench.json");
    std::fs::write(&json_file, &all)?;
    println!("written: {}", json_file.display());
    if args.timings {
        for r in &results {
            let mut rows: Vec<&Timing> = r.timings.iter().collect();
            rows.sort_by_key(|(_, due)| *due);
            let mut csv = String::from("due,lateness_ms\n");
            for (at, due) in rows {
                let late = (*at - *due).num_microseconds().unwrap_or(0) as f64 / 1000.0;
                csv.push_str(&format!("{},{late:.3}\n", due.to_rfc3339()));
            }
            let file = args.out.join(format!("{}-{}.csv", r.scenario, r.run));
            std::fs::write(&file, csv)?;
            println!("written: {}", file.display());
        }
    }
    for file in charts::draw_all(&args.out, &results)? {
        println!("written: {file}");
    }
    let incomplete = results.iter().any(|r| r.delivered < r.messages);
    if incomplete {
        bail!("some messages were not delivered");
    }
    if results.iter().any(|r| r.failed_check) {
        bail!("a scenario's check failed (see its line above)");
    }
    Ok(())
}
