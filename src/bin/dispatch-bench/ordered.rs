//! The ordered scenario (docs/api.md#ordering-keys): `--ordered-keys` keys of
//! `--ordered-per-key` messages each, all due within a few milliseconds, for
//! one webhook whose first attempt at every key's first message fails (a
//! retryable 500). The receiver holds each request a millisecond, so that
//! two attempts of one key in flight at once would overlap, and checks that
//! every key arrives in order: it prints deliveries per second, the number
//! of messages that arrived before an earlier one of their key, and the most
//! attempts of one key it saw in flight at once.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, http::HeaderMap, http::StatusCode, routing::post, Router};
use chrono::{DateTime, TimeDelta, Utc};
use dispatch::{
    domain::{
        ids::{AccountId, TargetId},
        message::{Message, OrderingKey},
        payload::Payload,
    },
    store::{postgres::PgStore, MessageStore},
};
use futures::StreamExt;
use serde_json::{json, Value};

use super::{
    service::{
        arrival_rate, create_target, lateness_ms, post_batch, start_service, Service, Timing,
    },
    Args, Result,
};

#[derive(Default)]
struct Keys {
    /// Per key: attempts in flight now, the next index expected.
    in_flight: HashMap<String, u32>,
    next: HashMap<String, usize>,
    /// Message ids whose failing first attempt was answered.
    failed_once: HashSet<String>,
    delivered: HashSet<String>,
    max_in_flight: u32,
    out_of_order: usize,
    duplicates: usize,
    /// (arrival, scheduled) of each first successful delivery.
    timings: Vec<Timing>,
}

#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "messageId")]
    message_id: &'a str,
    #[serde(rename = "originalDeliveryTime")]
    original: &'a str,
    payload: &'a str,
}

async fn receive(
    State(keys): State<Arc<Mutex<Keys>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let now = Utc::now();
    let Ok(e) = serde_json::from_slice::<Envelope>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let key = headers
        .get("dispatch-ordering-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let index: usize = e.payload.parse().unwrap_or(usize::MAX);
    {
        let mut k = keys.lock().unwrap();
        let n = k.in_flight.entry(key.clone()).or_default();
        *n += 1;
        let n = *n;
        k.max_in_flight = k.max_in_flight.max(n);
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    let mut guard = keys.lock().unwrap();
    let k = &mut *guard;
    *k.in_flight.get_mut(&key).unwrap() -= 1;
    if index == 0 && k.failed_once.insert(e.message_id.to_string()) {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    if !k.delivered.insert(e.message_id.to_string()) {
        k.duplicates += 1;
        return StatusCode::OK;
    }
    let next = k.next.entry(key).or_default();
    if index != *next {
        k.out_of_order += 1;
    }
    *next = (*next).max(index + 1);
    if let Ok(t) = DateTime::parse_from_rfc3339(e.original) {
        k.timings.push((now, t.with_timezone(&Utc)));
    }
    StatusCode::OK
}

fn key_name(k: usize) -> String {
    format!("customer-{k:05}")
}

/// Schedules every key's messages, message `i` of a key due `i` ms after
/// `start`: directly in PostgreSQL (`--via store`), else through
/// POST /messages/batch, whole keys to a request.
async fn schedule(
    args: &Args,
    service: &Service,
    target: &TargetId,
    start: DateTime<Utc>,
) -> anyhow::Result<()> {
    let per = args.ordered_per_key;
    let keys_per_chunk = (1000 / per).max(1);
    let chunks: Vec<(usize, usize)> = (0..args.ordered_keys)
        .step_by(keys_per_chunk)
        .map(|k| (k, (k + keys_per_chunk).min(args.ordered_keys)))
        .collect();
    let at = |i: usize| start + TimeDelta::milliseconds(i as i64);
    if args.via == "store" && args.store == "postgres" {
        let store = PgStore::connect(&service.db_url, 4, Duration::from_secs(5)).await?;
        let account = AccountId::parse("bench").expect("a valid account name");
        let now = Utc::now();
        for (from, to) in chunks {
            let messages: Vec<Message> = (from..to)
                .flat_map(|k| (0..per).map(move |i| (k, i)))
                .map(|(k, i)| {
                    let mut m = Message::scheduled(
                        &account,
                        target.clone(),
                        at(i),
                        Payload::parse(i.to_string()).unwrap(),
                        now,
                    );
                    m.ordering_key = Some(OrderingKey::parse(key_name(k)).expect("a valid key"));
                    m
                })
                .collect();
            store.insert_messages(&account, &messages).await?;
        }
        return Ok(());
    }
    let http = reqwest::Client::new();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(chunks)
        .map(|(from, to)| {
            let messages: Vec<Value> = (from..to)
                .flat_map(|k| (0..per).map(move |i| (k, i)))
                .map(|(k, i)| {
                    json!({"targetId": target, "deliveryTime": dispatch::domain::time::format(&at(i)),
                           "payload": i.to_string(), "orderingKey": key_name(k)})
                })
                .collect();
            let http = &http;
            async move {
                post_batch(http, &service.base, &service.token, messages).await?;
                Ok(())
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    results.into_iter().collect()
}

pub(crate) async fn run(args: &Args, run: usize) -> anyhow::Result<Result> {
    let keys = Arc::new(Mutex::new(Keys::default()));
    let app = Router::new()
        .route("/ordered", post(receive))
        .with_state(keys.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook = format!("http://{}/ordered", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let service = start_service(args).await?;
    let target = create_target(args, &service, "ordered", &hook).await?;
    let n = args.ordered_keys * args.ordered_per_key;
    let lead_ms = if args.via == "store" && args.store == "postgres" {
        3_000 + n as i64 / 10
    } else {
        3_000 + n as i64 / 5
    };
    let start = Utc::now() + TimeDelta::milliseconds(lead_ms);
    let clock = Instant::now();
    schedule(args, &service, &target, start).await?;
    if Utc::now() > start {
        anyhow::bail!(
            "scheduling took {:?}, longer than the lead time; lower --ordered-keys",
            clock.elapsed()
        );
    }
    let deadline =
        Instant::now() + Duration::from_secs(60 + lead_ms as u64 / 1000 + n as u64 / 200);
    while keys.lock().unwrap().delivered.len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // stragglers and duplicates
    let peak_rss_mb = service.peak_rss_mb();
    service.stop(&args.pg).await;
    server.abort();

    let k = keys.lock().unwrap();
    let lateness = lateness_ms(&k.timings);
    let rate_per_s = arrival_rate(&k.timings);
    Ok(Result {
        scenario: "ordered".into(),
        run,
        messages: n,
        delivered: k.delivered.len(),
        duplicates: k.duplicates,
        rate_per_s,
        peak_rss_mb,
        notes: Some(format!(
            "{} keys x {}: out of order {}, most attempts of one key in flight at once {}, heads failed once {}",
            args.ordered_keys,
            args.ordered_per_key,
            k.out_of_order,
            k.max_in_flight,
            k.failed_once.len()
        )),
        failed_check: k.out_of_order > 0 || k.max_in_flight > 1,
        ..Result::with_lateness(&lateness)
    })
}
