//! The `neighbours` scenario: what one account's heavy changes cost
//! another's requests. The neighbour account has a target with
//! `--neighbours` messages due in an hour. The benchmark's own account
//! then (1) posts single messages from 32 connections for a few seconds
//! alone, and again while the neighbour disables and enables its target
//! over and over and posts batches to it; (2) disables and enables an empty
//! target of its own, alone, and again while the neighbour cancels
//! `--neighbours-cancel` messages of a second target in one bulk call.
//! Each is reported as latencies, alone beside next to the neighbour, and
//! every answer that was not a success is counted.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use chrono::{TimeDelta, Utc};
use dispatch::domain::ids::TargetId;
use futures::StreamExt;
use serde_json::{json, Value};

use super::{
    noisy::account_token,
    service::{percentile, post_batch, Service},
    Args, Result,
};

/// How long the own account posts, alone and beside the neighbour.
const POSTING: Duration = Duration::from_secs(8);
/// Target changes the own account times, alone and beside.
const CHANGES: usize = 20;

/// Latencies in ms, sorted, and the answers that were not successes.
#[derive(Default)]
struct Timed {
    ms: Vec<f64>,
    failed: usize,
}

impl Timed {
    fn summary(&self) -> String {
        format!(
            "n {} p50 {:.1} ms p99 {:.1} ms max {:.1} ms, {} failed",
            self.ms.len(),
            percentile(&self.ms, 0.50),
            percentile(&self.ms, 0.99),
            self.ms.last().copied().unwrap_or(0.0),
            self.failed
        )
    }
}

pub(crate) async fn neighbours(
    args: &Args,
    service: Service,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    target_id: &TargetId,
    hook: &str,
    run: usize,
) -> anyhow::Result<Result> {
    let http = reqwest::Client::new();
    let theirs = account_token(args, &service, "neighbour").await?;
    let toggled = create(&http, &service.base, &theirs, hook).await?;
    let cancelled = create(&http, &service.base, &theirs, hook).await?;
    fill(&http, &service.base, &theirs, &toggled, args.neighbours).await?;
    fill(
        &http,
        &service.base,
        &theirs,
        &cancelled,
        args.neighbours_cancel,
    )
    .await?;
    let mine = create(&http, &service.base, &service.token, hook).await?;

    // (1) Posting, alone, then beside toggles and batches.
    let alone = post_for(&http, &service, target_id, POSTING).await;
    let stop = Arc::new(AtomicBool::new(false));
    let toggles = Arc::new(AtomicUsize::new(0));
    let neighbour = tokio::spawn(toggle_and_post(
        http.clone(),
        service.base.clone(),
        theirs.clone(),
        toggled.clone(),
        stop.clone(),
        toggles.clone(),
    ));
    let beside = post_for(&http, &service, target_id, POSTING).await;
    stop.store(true, Ordering::SeqCst);
    let neighbour_failed = neighbour.await??;

    // (2) Target changes, alone, then beside a bulk cancel.
    let changes_alone = change_times(&http, &service, &mine, CHANGES).await;
    let cancel = tokio::spawn({
        let (http, base, token, target) = (
            http.clone(),
            service.base.clone(),
            theirs.clone(),
            cancelled.clone(),
        );
        async move {
            let clock = Instant::now();
            let r = http
                .post(format!("{base}/messages/cancel"))
                .bearer_auth(&token)
                .json(&json!({"targetId": target, "state": "Scheduled"}))
                .send()
                .await?;
            let status = r.status();
            let body: Value = r.json().await.unwrap_or_default();
            anyhow::Ok((status, body["count"].as_u64(), clock.elapsed()))
        }
    });
    // The cancel is under way before the changes begin.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let changes_beside = change_times(&http, &service, &mine, CHANGES).await;
    let changes_done = Instant::now();
    let (status, count, took) = cancel.await??;
    let cancel_ran_longer = !changes_done.elapsed().is_zero() && took > Duration::from_millis(200);

    let notes = format!(
        "POST /messages (32 connections, {posting} s): alone {alone}; beside {toggles} disables/enables of a \
         {n}-message target and its batches ({neighbour_failed} of the neighbour's requests failed) {beside}; \
         p99 ratio {ratio:.2}. Target disable/enable ({CHANGES} each): alone {changes_alone}; beside a bulk \
         cancel of {cancel_n} ({status}, {count:?} cancelled in {took:.1} s{longer}) {changes_beside}",
        posting = POSTING.as_secs(),
        alone = alone.summary(),
        toggles = toggles.load(Ordering::SeqCst),
        n = args.neighbours,
        beside = beside.summary(),
        ratio = percentile(&beside.ms, 0.99) / percentile(&alone.ms, 0.99).max(0.001),
        changes_alone = changes_alone.summary(),
        cancel_n = args.neighbours_cancel,
        took = took.as_secs_f64(),
        longer = if cancel_ran_longer { "" } else { ", over before the changes" },
        changes_beside = changes_beside.summary(),
    );
    println!("neighbours: {notes}");
    let peak_rss_mb = service.peak_rss_mb();
    server.abort();
    service.stop(&args.pg).await;
    Ok(Result {
        scenario: "neighbours".into(),
        run,
        messages: alone.ms.len() + beside.ms.len(),
        peak_rss_mb,
        notes: Some(notes),
        failed_check: beside.failed > 0 || changes_beside.failed > 0,
        ..Result::default()
    })
}

async fn create(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    hook: &str,
) -> anyhow::Result<String> {
    let t: Value = http
        .post(format!("{base}/targets"))
        .bearer_auth(token)
        .json(&json!({"name": "neighbours", "type": "webhook", "config": {"url": hook}}))
        .send()
        .await?
        .json()
        .await?;
    Ok(t["targetId"].as_str().context("a target id")?.to_string())
}

/// `n` messages due in an hour, 1,000 a batch, 4 batches at a time.
async fn fill(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    target: &str,
    n: usize,
) -> anyhow::Result<()> {
    let at = dispatch::domain::time::format(&(Utc::now() + TimeDelta::hours(1)));
    let batches: Vec<usize> = (0..n.div_ceil(1000))
        .map(|b| (n - b * 1000).min(1000))
        .collect();
    let results: Vec<anyhow::Result<Value>> = futures::stream::iter(batches)
        .map(|k| {
            let messages: Vec<Value> = (0..k)
                .map(|_| json!({"targetId": target, "deliveryTime": at, "payload": "neighbour"}))
                .collect();
            post_batch(http, base, token, messages)
        })
        .buffer_unordered(4)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(())
}

/// Single `POST /messages` from 32 connections for `secs`: each one's time.
async fn post_for(
    http: &reqwest::Client,
    service: &Service,
    target: &TargetId,
    secs: Duration,
) -> Timed {
    let at = dispatch::domain::time::format(&(Utc::now() + TimeDelta::hours(1)));
    let until = Instant::now() + secs;
    let workers = (0..32).map(|_| {
        let (http, base, token, at) = (
            http.clone(),
            service.base.clone(),
            service.token.clone(),
            at.clone(),
        );
        let target = target.as_str().to_string();
        async move {
            let mut timed = Timed::default();
            while Instant::now() < until {
                let clock = Instant::now();
                let ok = http
                    .post(format!("{base}/messages"))
                    .bearer_auth(&token)
                    .json(&json!({"targetId": target, "deliveryTime": at, "payload": "mine"}))
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 201);
                timed.ms.push(clock.elapsed().as_secs_f64() * 1000.0);
                timed.failed += usize::from(!ok);
            }
            timed
        }
    });
    let mut all = Timed::default();
    for t in futures::future::join_all(workers).await {
        all.ms.extend(t.ms);
        all.failed += t.failed;
    }
    all.ms.sort_by(f64::total_cmp);
    all
}

/// The neighbour, until `stop`: disables and enables its target over and
/// over, and posts batches of 100 to it from 12 connections. Answers how
/// many of its requests failed.
async fn toggle_and_post(
    http: reqwest::Client,
    base: String,
    token: String,
    target: String,
    stop: Arc<AtomicBool>,
    toggles: Arc<AtomicUsize>,
) -> anyhow::Result<usize> {
    let at = dispatch::domain::time::format(&(Utc::now() + TimeDelta::hours(1)));
    let failed = Arc::new(AtomicUsize::new(0));
    let posters = (0..12).map(|_| {
        let (http, base, token, target, at, stop, failed) = (
            http.clone(),
            base.clone(),
            token.clone(),
            target.clone(),
            at.clone(),
            stop.clone(),
            failed.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let messages: Vec<Value> = (0..100)
                    .map(
                        |_| json!({"targetId": target, "deliveryTime": at, "payload": "neighbour"}),
                    )
                    .collect();
                if post_batch(&http, &base, &token, messages).await.is_err() {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    });
    let posters: Vec<_> = posters.collect();
    let mut enable = false;
    while !stop.load(Ordering::SeqCst) {
        let action = if enable { "enable" } else { "disable" };
        let ok = http
            .post(format!("{base}/targets/{target}/{action}"))
            .bearer_auth(&token)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if !ok {
            failed.fetch_add(1, Ordering::SeqCst);
        }
        toggles.fetch_add(1, Ordering::SeqCst);
        enable = !enable;
    }
    for p in posters {
        p.await?;
    }
    Ok(failed.load(Ordering::SeqCst))
}

/// Disables and enables `target` `n` times each, one after another: each
/// change's time.
async fn change_times(http: &reqwest::Client, service: &Service, target: &str, n: usize) -> Timed {
    let mut timed = Timed::default();
    for i in 0..2 * n {
        let action = if i % 2 == 0 { "disable" } else { "enable" };
        let clock = Instant::now();
        let ok = http
            .post(format!("{}/targets/{target}/{action}", service.base))
            .bearer_auth(&service.token)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        timed.ms.push(clock.elapsed().as_secs_f64() * 1000.0);
        timed.failed += usize::from(!ok);
    }
    timed.ms.sort_by(f64::total_cmp);
    timed
}
