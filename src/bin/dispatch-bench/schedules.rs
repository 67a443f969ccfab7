//! The schedules scenario (docs/api.md#recurring-schedules): `--schedules` schedules over
//! `--schedule-targets` targets, each `every: "1s"` for `--schedule-seconds`
//! runs, their starts spread evenly over one second (so that as many runs
//! fall due each second as there are schedules, a steady stream), all
//! created over the API before the first run. It prints the runs delivered
//! per second, their lateness at the receiver, duplicates at the receiver,
//! and (PostgreSQL) the runs the database holds against those expected (none
//! missing, none twice) and how far ahead of its run each was created.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::ensure;
use axum::{routing::post, Router};
use chrono::{TimeDelta, Utc};
use futures::StreamExt;
use serde_json::json;
use sqlx::{Connection, PgConnection};

use super::{
    receive,
    service::{arrival_rate, create_target, lateness_ms, start_service},
    Args, Arrivals, Result,
};

pub(crate) async fn run(args: &Args, run: usize) -> anyhow::Result<Result> {
    let arrivals = Arc::new(Arrivals::default());
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(arrivals.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let service = start_service(args).await?;
    let mut targets = Vec::new();
    for _ in 0..args.schedule_targets.max(1) {
        targets.push(
            create_target(args, &service, "schedules", &format!("http://{addr}/hook")).await?,
        );
    }

    let (n, runs) = (args.schedules, args.schedule_seconds);
    // Time to create them all first: a few thousand a second over the API.
    let start = Utc::now() + TimeDelta::milliseconds(5_000 + (n as i64) / 2);
    let http = reqwest::Client::new();
    let created: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let first = start + TimeDelta::microseconds((i as i64 * 1_000_000) / n as i64);
            let last = first + TimeDelta::seconds(runs as i64 - 1);
            let body = json!({
                "targetId": targets[i % targets.len()], "every": "1s", "payload": "benchmark run",
                "startAt": dispatch::domain::time::format(&first),
                "endAt": dispatch::domain::time::format(&last),
            });
            let (http, service) = (&http, &service);
            async move {
                let r = http
                    .post(format!("{}/schedules", service.base))
                    .bearer_auth(&service.token)
                    .json(&body)
                    .send()
                    .await?;
                ensure!(
                    r.status() == 201,
                    "creating a schedule answered {}",
                    r.status()
                );
                Ok(())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    ensure!(
        Utc::now() < start,
        "creating the schedules took longer than the lead time"
    );

    let expected = n * runs;
    let deadline = Instant::now()
        + (start - Utc::now()).to_std().unwrap_or_default()
        + Duration::from_secs(runs as u64 + 60);
    loop {
        let done = arrivals.seen.lock().unwrap().len();
        if done >= expected || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Stragglers and duplicates, and a run past endAt would show now.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let peak_rss_mb = service.peak_rss_mb();
    let held = if args.store == "postgres" {
        let mut conn = PgConnection::connect(&service.db_url).await?;
        let (runs_held, distinct, min_lead, p1_lead, span): (i64, i64, f64, f64, f64) = sqlx::query_as(
            "SELECT count(*), count(DISTINCT (schedule_id, schedule_run)), \
               coalesce(min(extract(epoch FROM schedule_run - created_at))::float8 * 1000, 'NaN'), \
               coalesce(percentile_cont(0.01) WITHIN GROUP (ORDER BY extract(epoch FROM schedule_run - created_at)) * 1000, 'NaN'), \
               coalesce(extract(epoch FROM max(created_at) - min(created_at))::float8, 'NaN') \
             FROM messages WHERE schedule_id IS NOT NULL",
        )
        .fetch_one(&mut conn)
        .await?;
        Some((runs_held, distinct, min_lead, p1_lead, span))
    } else {
        None
    };
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
    let timings: Vec<_> = firsts.into_values().collect();
    let lateness = lateness_ms(&timings);
    let rate = arrival_rate(&timings);
    let mut notes = format!(
        "{n} schedules every 1s over {} targets, {runs} runs each: {} of {expected} runs delivered, \
         {:.0} runs/s (5th to 95th percentile arrival)",
        targets.len(),
        timings.len(),
        rate
    );
    let mut failed_check = timings.len() != expected || duplicates > 0;
    if let Some((runs_held, distinct, min_lead, p1_lead, span)) = held {
        notes.push_str(&format!(
            "; the database holds {runs_held} run messages, {distinct} distinct (schedule, run), \
             made at {:.0} runs/s (from the first to the last made); each created ahead of its run \
             by at least {min_lead:.0} ms (1st percentile {p1_lead:.0} ms)",
            runs_held as f64 / span
        ));
        failed_check |= runs_held != expected as i64 || distinct != runs_held;
    }
    Ok(Result {
        scenario: "schedules".into(),
        run,
        messages: expected,
        delivered: timings.len(),
        duplicates,
        rate_per_s: rate,
        peak_rss_mb,
        notes: Some(notes),
        failed_check,
        ..Result::with_lateness(&lateness)
    })
}
