//! `dispatch listen`: a webhook receiver for trying Dispatch out and for
//! looking at what a target receives. It accepts a request on any path,
//! checks its Standard Webhooks signature when given the target's signing
//! secret, prints one JSON line per request on standard output, and answers
//! with the status it is told (503 shows the retry ladder at work). A GET or
//! HEAD is not a delivery: it answers 200 unprinted, so that a script can
//! wait for the receiver to be up.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, Method, StatusCode, Uri},
    Router,
};
use chrono::{SecondsFormat, Utc};
use clap::Args;
use serde_json::{json, Value};

use crate::{delivery::signing, domain::target::signing_key};

/// How far a `webhook-timestamp` may be from this machine's clock, as the
/// Standard Webhooks specification recommends: older ones may be replays.
const TOLERANCE_SECS: i64 = 5 * 60;

#[derive(Debug, Args)]
pub struct ListenArgs {
    /// The port to listen on.
    #[arg(long, default_value_t = 9000)]
    pub port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// The target's signing secret (`whsec_…`): each request's signature is
    /// checked, and one that does not verify is answered 401.
    #[arg(long, value_name = "WHSEC")]
    pub secret: Option<String>,
    /// The status to answer requests with (those whose signature verifies).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u16).range(200..600))]
    pub status: u16,
}

struct Listener {
    key: Option<Vec<u8>>,
    status: StatusCode,
}

pub async fn listen(args: ListenArgs) -> anyhow::Result<()> {
    let key = args
        .secret
        .as_deref()
        .map(|s| signing_key(s).context("--secret must be a signing secret: whsec_ and base64"))
        .transpose()?;
    let status = StatusCode::from_u16(args.status).context("--status")?;
    let checked = key.is_some();
    let app = Router::new()
        .fallback(receive)
        .with_state(Arc::new(Listener { key, status }));
    let addr = SocketAddr::new(args.host, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    eprintln!(
        "listening on http://{} ({}); each request is printed below as one JSON line",
        listener.local_addr()?,
        if checked {
            "signatures checked"
        } else {
            "signatures not checked: pass --secret"
        },
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

async fn receive(
    State(l): State<Arc<Listener>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    if matches!(method, Method::GET | Method::HEAD) {
        // Not a delivery: a probe that the receiver is up.
        return StatusCode::OK;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let id = header("webhook-id");
    let signature = match &l.key {
        None => "not checked",
        Some(key) if verified(key, &headers, &body) => "valid",
        Some(_) => "invalid",
    };
    let body = serde_json::from_slice::<Value>(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let line = json!({
        "receivedAt": Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        "method": method.as_str(),
        "path": uri.path(),
        "webhookId": id,
        "signature": signature,
        "body": body,
    });
    println!("{line}");
    if signature == "invalid" {
        StatusCode::UNAUTHORIZED
    } else {
        l.status
    }
}

/// The signature verifies, for a timestamp within the tolerance.
fn verified(key: &[u8], headers: &HeaderMap, body: &[u8]) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(timestamp), Some(signature)) = (
        header("webhook-id"),
        header("webhook-timestamp").and_then(|t| t.parse::<i64>().ok()),
        header("webhook-signature"),
    ) else {
        return false;
    };
    (Utc::now().timestamp() - timestamp).abs() <= TOLERANCE_SECS
        && signing::verify(key, id, timestamp, body, signature)
}
