//! The noisy neighbour (issue: fair delivery): another account's target
//! accepts connections and never answers, with `--noisy` messages due at
//! once, while the steady scenario runs for the benchmark's own account.

use anyhow::Context;
use chrono::Utc;
use serde_json::{json, Value};

use super::{service::Service, Args};

/// A receiver route that never answers.
pub(crate) async fn hang() -> &'static str {
    futures::future::pending::<()>().await;
    ""
}

/// A token for a client of `account`, made with `dispatch clients create`
/// beside the running service.
pub(crate) async fn account_token(
    args: &Args,
    service: &Service,
    account: &str,
) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(super::service::dispatch_binary(args))
        .args(["clients", "create", "--account", account, "--name", account])
        .env("DATABASE_URL", &service.db_url)
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "dispatch clients create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client: Value = serde_json::from_slice(&out.stdout)?;
    super::service::token_for(&service.base, &client).await
}

/// Account `noisy`: `args.noisy_targets` webhooks at `hang_url` (30 s per
/// attempt) and `args.noisy` messages due now spread over them, through the
/// batch endpoint.
pub(crate) async fn noisy_neighbour(
    args: &Args,
    service: &Service,
    hang_url: &str,
) -> anyhow::Result<()> {
    let token = account_token(args, service, "noisy").await?;
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for _ in 0..args.noisy_targets.max(1) {
        let target: Value = http
            .post(format!("{}/targets", service.base))
            .bearer_auth(&token)
            .json(&json!({"name": "hangs", "type": "webhook",
                          "config": {"url": hang_url, "timeoutMs": 30000}}))
            .send()
            .await?
            .json()
            .await?;
        ids.push(
            target["targetId"]
                .as_str()
                .context("a target id")?
                .to_string(),
        );
    }
    let now = dispatch::domain::time::format(&Utc::now());
    let mut left = args.noisy;
    let mut batch = 0;
    while left > 0 {
        let n = left.min(1000);
        left -= n;
        let id = &ids[batch % ids.len()];
        batch += 1;
        let messages: Vec<Value> = (0..n)
            .map(|_| json!({"targetId": id, "deliveryTime": now, "payload": "noise"}))
            .collect();
        super::service::post_batch(&http, &service.base, &token, messages).await?;
    }
    Ok(())
}
