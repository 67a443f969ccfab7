//! The event scenarios. `fanout`: `--fanout-targets` webhook targets each
//! subscribed to one type, and `--fanout-events` events of it published due
//! at one instant, so that every event becomes one message to every target
//! (200 × 100 = 20,000 deliveries, to set beside `burst`). `publish`,
//! `publish-none` and `publish-crowd`: POST /events from 32 connections, the
//! events matching `--publish-targets` targets, none of them, or those
//! targets while `--crowd` subscriptions of other types sit in the account
//! (to set beside `ingest`, which is POST /messages from 32 connections).

use std::time::Instant;

use anyhow::{ensure, Context};
use chrono::{DateTime, TimeDelta, Utc};
use dispatch::domain::ids::TargetId;
use futures::StreamExt;
use serde_json::{json, Value};

use super::{ingest::finish, service::Service, Args, Result};

/// The type every scenario's events have.
const TYPE: &str = "bench.event";

async fn post(service: &Service, path: &str, body: &Value) -> anyhow::Result<Value> {
    let r = reqwest::Client::new()
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

/// `n` more webhook targets at `hook` (beside `first`), each subscribed to
/// `types`; all their ids.
pub(crate) async fn subscribed_targets(
    service: &Service,
    first: &TargetId,
    hook: &str,
    n: usize,
    types: &[&str],
) -> anyhow::Result<Vec<TargetId>> {
    let mut ids = vec![first.clone()];
    for i in 1..n {
        let t = post(
            service,
            "/targets",
            &json!({"name": format!("subscriber {i}"), "type": "webhook", "config": {"url": hook}}),
        )
        .await?;
        ids.push(t["targetId"].as_str().context("a targetId")?.parse()?);
    }
    let bodies: Vec<Value> = ids
        .iter()
        .map(|t| json!({"targetId": t, "types": types}))
        .collect();
    futures::stream::iter(&bodies)
        .map(|b| post(service, "/subscriptions", b))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(ids)
}

/// Publishes `events` events due at `at`, 32 at a time; each must reach
/// `expect` targets.
async fn publish_all(
    service: &Service,
    events: usize,
    at: DateTime<Utc>,
    expect: usize,
) -> anyhow::Result<usize> {
    let http = reqwest::Client::new();
    let url = format!("{}/events", service.base);
    // The bodies are written before the clock starts.
    let body = serde_json::to_vec(&json!({"type": TYPE, "payload": "benchmark payload",
        "deliveryTime": dispatch::domain::time::format(&at)}))?;
    let made: Vec<anyhow::Result<usize>> = futures::stream::iter(0..events)
        .map(|_| {
            let (http, url, body) = (&http, &url, body.clone());
            async move {
                let r = http
                    .post(url)
                    .bearer_auth(&service.token)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?;
                ensure!(r.status() == 201, "publishing answered {}", r.status());
                #[derive(serde::Deserialize)]
                struct Made {
                    messages: Vec<serde::de::IgnoredAny>,
                }
                let made: Made = serde_json::from_slice(&r.bytes().await?)?;
                ensure!(
                    made.messages.len() == expect,
                    "an event reached {} targets, not {expect}",
                    made.messages.len()
                );
                Ok(made.messages.len())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    Ok(made.into_iter().collect::<anyhow::Result<Vec<_>>>()?.len())
}

/// The fan-out scenario's targets, each subscribed to the events' type.
pub(crate) async fn subscribe(
    args: &Args,
    service: &Service,
    first: &TargetId,
    hook: &str,
) -> anyhow::Result<()> {
    subscribed_targets(service, first, hook, args.fanout_targets, &[TYPE]).await?;
    Ok(())
}

/// The fan-out scenario's events, due at `at`.
pub(crate) async fn fanout(
    args: &Args,
    service: &Service,
    at: DateTime<Utc>,
) -> anyhow::Result<()> {
    publish_all(service, args.fanout_events, at, args.fanout_targets).await?;
    Ok(())
}

/// The publish scenarios: events per second over POST /events.
pub(crate) async fn publish(
    args: &Args,
    service: Service,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    first: &TargetId,
    hook: &str,
    scenario: &str,
    run: usize,
) -> anyhow::Result<Result> {
    // publish-none: the same targets and subscriptions, to another type.
    let (types, expect) = match scenario {
        "publish-none" => (["bench.other"], 0),
        _ => ([TYPE], args.publish_targets),
    };
    let targets = subscribed_targets(&service, first, hook, args.publish_targets, &types).await?;
    if scenario == "publish-crowd" {
        // Subscriptions of other types (an exact one and a family each),
        // spread over the targets.
        let bodies: Vec<Value> = (0..args.crowd)
            .map(|i| {
                json!({"targetId": targets[i % targets.len()],
                       "types": [format!("crowd.t{i}"), format!("crowd{i}.*")]})
            })
            .collect();
        futures::stream::iter(&bodies)
            .map(|b| post(&service, "/subscriptions", b))
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<anyhow::Result<Vec<_>>>()?;
    }
    let at = Utc::now() + TimeDelta::hours(1);
    let clock = Instant::now();
    let published = publish_all(&service, args.ingest, at, expect).await?;
    let secs = clock.elapsed().as_secs_f64();
    let mut r = finish(
        args,
        scenario,
        args.ingest,
        published,
        secs,
        None,
        (service, server),
        run,
    )
    .await?;
    r.notes = Some(format!(
        "{:.0} events/s, each making {expect} messages{}",
        r.rate_per_s,
        if scenario == "publish-crowd" {
            format!(", beside {} subscriptions of other types", args.crowd)
        } else {
            String::new()
        }
    ));
    Ok(r)
}
