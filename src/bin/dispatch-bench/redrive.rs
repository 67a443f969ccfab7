//! The redrive scenario (docs/api.md#bulk-redrive-cancel-and-replay):
//! `--redrive` messages are delivered to a webhook that refuses them (400),
//! so they become dead letters; then the steady scenario runs on another
//! target and, two seconds into it, one `POST /messages/redrive` moves every
//! dead letter back, due at once, to a webhook that now accepts them. It
//! prints how long the call took and how long until all were delivered again,
//! beside the steady messages' lateness while it ran (PostgreSQL only: it
//! counts the dead letters in the database).

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, ensure};
use axum::{extract::State, http::StatusCode, routing::post, Router};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use super::{
    receive,
    service::{create_target, lateness_ms, percentile, schedule, start_service},
    Args, Arrivals, Result,
};

/// The dead-letter target's receiver: refuses while `refuse`, counts the rest.
#[derive(Default)]
struct Dead {
    refuse: AtomicBool,
    refused: AtomicUsize,
    accepted: AtomicUsize,
}

async fn dead(State(d): State<Arc<Dead>>) -> StatusCode {
    if d.refuse.load(Ordering::SeqCst) {
        d.refused.fetch_add(1, Ordering::SeqCst);
        StatusCode::BAD_REQUEST
    } else {
        d.accepted.fetch_add(1, Ordering::SeqCst);
        StatusCode::OK
    }
}

async fn count_dead(db_url: &str) -> anyhow::Result<i64> {
    let mut conn = PgConnection::connect(db_url).await?;
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM messages WHERE state = 'DeadLetter'")
        .fetch_one(&mut conn)
        .await?;
    Ok(n)
}

pub(crate) async fn run(args: &Args, run: usize) -> anyhow::Result<Result> {
    if args.store != "postgres" {
        bail!("the redrive scenario runs on PostgreSQL only");
    }
    let arrivals = Arc::new(Arrivals::default());
    let d = Arc::new(Dead {
        refuse: AtomicBool::new(true),
        ..Dead::default()
    });
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(arrivals.clone())
        .merge(
            Router::new()
                .route("/dead", post(dead))
                .with_state(d.clone()),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let service = start_service(args).await?;
    let dead_target =
        create_target(args, &service, "redrive", &format!("http://{addr}/dead")).await?;
    let steady_target =
        create_target(args, &service, "steady", &format!("http://{addr}/hook")).await?;

    // The dead letters, made the way they are made in service.
    let dead_n = args.redrive;
    schedule(args, &service, &dead_target, &vec![Utc::now(); dead_n]).await?;
    let deadline = Instant::now() + Duration::from_secs(120 + dead_n as u64 / 500);
    while count_dead(&service.db_url).await? < dead_n as i64 {
        ensure!(
            Instant::now() < deadline,
            "the dead letters did not all die in time"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    d.refuse.store(false, Ordering::SeqCst);

    // Steady, and the redrive two seconds into it.
    let n = args.steady_rate * args.steady_seconds;
    let start = Utc::now() + TimeDelta::milliseconds(3_000);
    let times: Vec<DateTime<Utc>> = (0..n)
        .map(|i| start + TimeDelta::microseconds((i as i64 * 1_000_000) / args.steady_rate as i64))
        .collect();
    schedule(args, &service, &steady_target, &times).await?;
    ensure!(
        Utc::now() < start,
        "scheduling the steady messages took longer than the lead time"
    );
    let at = start + TimeDelta::seconds(2);
    tokio::time::sleep((at - Utc::now()).to_std().unwrap_or_default()).await;
    let clock = Instant::now();
    let called_at = Utc::now();
    let r = reqwest::Client::new()
        .post(format!("{}/messages/redrive", service.base))
        .bearer_auth(&service.token)
        .json(&json!({"targetId": dead_target}))
        .send()
        .await?;
    let status = r.status();
    let body: Value = r.json().await?;
    let call = clock.elapsed();
    ensure!(status == 200, "the redrive answered {status}: {body}");
    ensure!(
        body["count"] == json!(dead_n),
        "the redrive moved {body}, not {dead_n}"
    );

    let deadline =
        Instant::now() + Duration::from_secs(60 + args.steady_seconds as u64 + dead_n as u64 / 200);
    let steady_done = || super::distinct_arrivals(&arrivals.seen.lock().unwrap(), n);
    let mut all_redelivered = None;
    while Instant::now() < deadline {
        if all_redelivered.is_none() && d.accepted.load(Ordering::SeqCst) >= dead_n {
            all_redelivered = Some(clock.elapsed());
        }
        if all_redelivered.is_some() && steady_done() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let peak_rss_mb = service.peak_rss_mb();
    service.stop(&args.pg).await;
    server.abort();

    let seen = arrivals.seen.lock().unwrap().clone();
    let mut firsts = std::collections::HashMap::new();
    let mut duplicates = 0;
    for (id, at, scheduled) in seen {
        if firsts.insert(id, (at, scheduled)).is_some() {
            duplicates += 1;
        }
    }
    let lateness = lateness_ms(firsts.values());
    // Those due from the call on: what the redrive and its backlog did to them.
    let during = lateness_ms(firsts.values().filter(|(_, due)| *due >= called_at));
    let before = lateness_ms(firsts.values().filter(|(_, due)| *due < called_at));
    let redelivered = d.accepted.load(Ordering::SeqCst);
    let notes = format!(
        "bulk redrive of {dead_n} dead letters: the call took {:.2} s; all delivered again {} after it; {} of {dead_n} redelivered; \
         steady due before the call: p99 {:.1} ms; due from the call on: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms \
         (the rate column is the redriven deliveries per second)",
        call.as_secs_f64(),
        all_redelivered.map_or("not".into(), |t| format!("{:.2} s", t.as_secs_f64())),
        redelivered,
        percentile(&before, 0.99),
        percentile(&during, 0.5),
        percentile(&during, 0.99),
        during.last().copied().unwrap_or(f64::NAN),
    );
    Ok(Result {
        scenario: "redrive".into(),
        run,
        messages: n,
        delivered: firsts.len(),
        duplicates,
        rate_per_s: all_redelivered.map_or(f64::NAN, |t| redelivered as f64 / t.as_secs_f64()),
        peak_rss_mb,
        notes: Some(notes),
        failed_check: redelivered < dead_n,
        ..Result::with_lateness(&lateness)
    })
}
