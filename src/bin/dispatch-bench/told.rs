//! The `told` scenario: the burst, with the account subscribed to
//! `dispatch.message.delivered` on a second webhook target (to set beside
//! `burst` in the same run). Its rate is the burst's deliveries; its notes
//! say whether each delivery's event arrived, once, and how long after the
//! burst's last delivery the last event came.

use std::{collections::HashMap, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{body::Bytes, extract::State};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{fanout::subscribed_targets, service::Service, Arrivals, Timing};

/// Where the told events arrive, beside the burst's hook.
pub(crate) const PATH: &str = "/told";

#[derive(Deserialize)]
struct Envelope {
    payload: String,
}

#[derive(Deserialize)]
struct Told {
    #[serde(rename = "messageId")]
    message_id: String,
}

/// An event's arrival: the message it tells of, and when it came.
pub(crate) async fn receive(State(a): State<Arc<Arrivals>>, body: Bytes) -> &'static str {
    let now = Utc::now();
    if let Ok(e) = serde_json::from_slice::<Envelope>(&body) {
        if let Ok(t) = serde_json::from_str::<Told>(&e.payload) {
            a.told.lock().unwrap().push((t.message_id, now));
        }
    }
    "ok"
}

/// A webhook target at `url` subscribed to the deliveries' events.
pub(crate) async fn subscribe(service: &Service, url: &str) -> anyhow::Result<()> {
    let r = reqwest::Client::new()
        .post(format!("{}/targets", service.base))
        .bearer_auth(&service.token)
        .json(&json!({"name": "told", "type": "webhook", "config": {"url": url}}))
        .send()
        .await?;
    let t: Value = r.json().await?;
    let id = t["targetId"].as_str().context("a targetId")?.parse()?;
    subscribed_targets(service, &id, url, 1, &["dispatch.message.delivered"]).await?;
    Ok(())
}

/// Waits until an event of each of the `n` deliveries has come (or the
/// deadline); what came, beside the deliveries' own arrivals.
pub(crate) async fn wait(
    arrivals: &Arrivals,
    delivered: &[(String, DateTime<Utc>)],
    within: Duration,
) -> String {
    let n = delivered.len();
    let deadline = tokio::time::Instant::now() + within;
    while arrivals.told.lock().unwrap().len() < n && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // duplicates
    let told = arrivals.told.lock().unwrap().clone();
    let mut each: HashMap<&str, usize> = HashMap::new();
    for (id, _) in &told {
        *each.entry(id.as_str()).or_default() += 1;
    }
    let missing = delivered
        .iter()
        .filter(|(id, _)| !each.contains_key(id.as_str()))
        .count();
    let twice = each.values().filter(|c| **c > 1).count();
    let last_delivery = delivered.iter().map(|(_, at)| *at).max();
    let last_told = told.iter().map(|(_, at)| *at).max();
    let lag = match (last_delivery, last_told) {
        (Some(d), Some(t)) => format!(
            "{:.0} ms",
            (t - d).num_microseconds().unwrap_or(0) as f64 / 1000.0
        ),
        _ => "n/a".into(),
    };
    format!(
        "{} events of {n} deliveries arrived ({missing} missing, {twice} twice); the last {lag} after the burst's last delivery",
        each.len()
    )
}

/// The deliveries' first arrivals, by message id.
pub(crate) fn firsts(seen: &HashMap<String, Timing>) -> Vec<(String, DateTime<Utc>)> {
    seen.iter().map(|(id, (at, _))| (id.clone(), *at)).collect()
}
