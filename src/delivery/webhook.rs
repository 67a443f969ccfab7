//! Webhook delivery over one shared keep-alive HTTP client.

use std::time::Duration;

use reqwest::{header, redirect, Client, StatusCode};

use super::{guard, oauth::ReceiverTokens, signing, Delivered};
use crate::domain::{ids::MessageId, retry::AttemptOutcome, target::WebhookConfig};

/// Bytes of the response kept in the attempt record.
pub const RESPONSE_EXCERPT: usize = 1024;
/// Bytes of a response read to keep the connection reusable; past this the
/// connection is dropped instead.
const DRAIN_LIMIT: usize = 64 * 1024;

pub const USER_AGENT: &str = concat!("Dispatch/", env!("CARGO_PKG_VERSION"));

/// What one attempt sends: the message's id (`webhook-id`), its orderingKey
/// (`dispatch-ordering-key`) and the body.
pub struct Letter<'a> {
    pub id: &'a MessageId,
    pub ordering_key: Option<&'a str>,
    /// Shared, not copied, by each request that sends it.
    pub body: bytes::Bytes,
}

const WEBHOOK_ID: header::HeaderName = header::HeaderName::from_static("webhook-id");
const WEBHOOK_TIMESTAMP: header::HeaderName = header::HeaderName::from_static("webhook-timestamp");
const WEBHOOK_SIGNATURE: header::HeaderName = header::HeaderName::from_static("webhook-signature");
const ORDERING_KEY: header::HeaderName = header::HeaderName::from_static("dispatch-ordering-key");
const JSON: header::HeaderValue = header::HeaderValue::from_static("application/json");

pub struct WebhookClient {
    client: Client,
    tokens: ReceiverTokens,
    default_timeout: Duration,
    max_timeout: Duration,
    allow_private: bool,
}

impl WebhookClient {
    /// `max_timeout` keeps every attempt inside its lease; opening a
    /// connection (to a receiver or its token endpoint) may take at most
    /// `connect_timeout` of it.
    pub fn new(
        default_timeout: Duration,
        max_timeout: Duration,
        connect_timeout: Duration,
        allow_private: bool,
    ) -> Self {
        let mut builder = Client::builder()
            .connect_timeout(connect_timeout)
            .redirect(redirect::Policy::none())
            // A proxy would resolve names for us, past the private-network guard.
            .no_proxy()
            .user_agent(USER_AGENT)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(512);
        if !allow_private {
            builder = builder.dns_resolver(guard::resolver());
        }
        let client = builder.build().expect("a TLS-capable HTTP client builds");
        let tokens = ReceiverTokens::new(client.clone());
        Self {
            client,
            tokens,
            default_timeout,
            max_timeout,
            allow_private,
        }
    }

    /// The longest any attempt takes, whatever the target's config.
    pub fn max_timeout(&self) -> Duration {
        self.max_timeout
    }

    /// The timeout of one request to this target.
    pub fn timeout_for(&self, config: &WebhookConfig) -> Duration {
        config
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.default_timeout)
            .min(self.max_timeout)
    }

    /// One attempt: fetches or reuses the receiver's OAuth token when the
    /// target has one, and on a 401 refreshes it once and tries again.
    pub async fn deliver(&self, config: &WebhookConfig, letter: &Letter<'_>) -> Delivered {
        let timeout = self.timeout_for(config);
        if config.auth.is_none() {
            // One request, which its own timeout (at most max_timeout) ends.
            return self.attempt(config, letter, timeout).await;
        }
        // The whole attempt, token requests included, stays inside the lease.
        match tokio::time::timeout(self.max_timeout, self.attempt(config, letter, timeout)).await {
            Ok(delivered) => delivered,
            Err(_) => Delivered::failure(
                AttemptOutcome::RetryableFailure,
                format!("timeout after {}ms", self.max_timeout.as_millis()),
            ),
        }
    }

    async fn attempt(
        &self,
        config: &WebhookConfig,
        letter: &Letter<'_>,
        timeout: Duration,
    ) -> Delivered {
        let Ok(url) = reqwest::Url::parse(&config.url) else {
            return Delivered::failure(
                AttemptOutcome::NonRetryableFailure,
                "the target URL is invalid",
            );
        };
        if let Some(refused) = self.refuse_literal(&url) {
            return refused;
        }
        // The current secret, and the replaced one while a rotation's
        // overlap lasts: the receiver may check either.
        let keys: Option<Vec<Vec<u8>>> = config
            .signing_secrets(chrono::Utc::now())
            .map(crate::domain::target::signing_key)
            .collect();
        let Some(keys) = keys else {
            return Delivered::failure(
                AttemptOutcome::NonRetryableFailure,
                "the signing secret is invalid",
            );
        };
        let Some(auth) = &config.auth else {
            return self.send(&url, config, &keys, letter, timeout, None).await;
        };
        if let Some(refused) = reqwest::Url::parse(&auth.token_url)
            .ok()
            .and_then(|u| self.refuse_literal(&u))
        {
            return refused;
        }
        let token = match self.tokens.token(auth, None, timeout).await {
            Ok(t) => t,
            Err(f) => return Delivered::failure(f.outcome, f.error),
        };
        let first = self
            .send(&url, config, &keys, letter, timeout, Some(&token))
            .await;
        if first.status_code != Some(401) {
            return first;
        }
        match self.tokens.token(auth, Some(&token), timeout).await {
            Ok(fresh) => {
                self.send(&url, config, &keys, letter, timeout, Some(&fresh))
                    .await
            }
            Err(f) => Delivered::failure(f.outcome, f.error),
        }
    }

    /// IP literals never reach the guarded resolver: check them here.
    fn refuse_literal(&self, url: &reqwest::Url) -> Option<Delivered> {
        if self.allow_private {
            return None;
        }
        guard::refuse_literal(url).err().map(|refused| {
            Delivered::failure(AttemptOutcome::NonRetryableFailure, refused.to_string())
        })
    }

    async fn send(
        &self,
        url: &reqwest::Url,
        config: &WebhookConfig,
        keys: &[Vec<u8>],
        letter: &Letter<'_>,
        timeout: Duration,
        bearer: Option<&str>,
    ) -> Delivered {
        let (id, body) = (letter.id, &letter.body);
        let msg_id = id.to_string();
        let timestamp = chrono::Utc::now().timestamp();
        let mut request = self
            .client
            .post(url.clone())
            .timeout(timeout)
            .header(header::CONTENT_TYPE, JSON)
            .header(WEBHOOK_ID, &msg_id)
            .header(WEBHOOK_TIMESTAMP, timestamp.to_string())
            .header(
                WEBHOOK_SIGNATURE,
                signing::sign_all(keys, &msg_id, timestamp, body),
            );
        if let Some(key) = letter.ordering_key {
            // Any UTF-8 without control characters is a valid header value.
            match header::HeaderValue::from_bytes(key.as_bytes()) {
                Ok(value) => request = request.header(ORDERING_KEY, value),
                Err(_) => {
                    return Delivered::failure(
                        AttemptOutcome::NonRetryableFailure,
                        "the orderingKey cannot be sent as a header",
                    )
                }
            }
        }
        for (name, value) in &config.headers {
            request = request.header(name, value);
        }
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        match request.body(body.clone()).send().await {
            Ok(response) => classify_response(response).await,
            Err(e) => classify_error(&e, timeout),
        }
    }
}

/// 2xx succeeds; 408, 425, 429 and 5xx are retryable; 3xx and other 4xx are not.
pub fn classify_status(status: StatusCode) -> AttemptOutcome {
    match status.as_u16() {
        200..=299 => AttemptOutcome::Success,
        408 | 425 | 429 | 500..=599 => AttemptOutcome::RetryableFailure,
        100..=199 => AttemptOutcome::RetryableFailure,
        _ => AttemptOutcome::NonRetryableFailure,
    }
}

async fn classify_response(mut response: reqwest::Response) -> Delivered {
    let status = response.status();
    // Only a 429 or a 503 asks for a wait (RFC 9110 §10.2.3, API.md §9).
    let retry_after = match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(super::retry_after),
        _ => None,
    };
    let mut excerpt = Vec::new();
    let mut read = 0usize;
    // Read a little of the body for the record; drain small bodies so the
    // connection goes back to the pool.
    while read < DRAIN_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                read += chunk.len();
                if excerpt.len() < RESPONSE_EXCERPT {
                    let take = (RESPONSE_EXCERPT - excerpt.len()).min(chunk.len());
                    excerpt.extend_from_slice(&chunk[..take]);
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    let outcome = classify_status(status);
    let error = match outcome {
        AttemptOutcome::Success => None,
        _ if status.is_redirection() => Some(format!(
            "HTTP {} (redirects are not followed)",
            status.as_u16()
        )),
        _ => Some(format!("HTTP {}", status.as_u16())),
    };
    Delivered {
        outcome,
        status_code: Some(status.as_u16()),
        error,
        response_body: Some(String::from_utf8_lossy(&excerpt).into_owned()),
        retry_after,
    }
}

fn classify_error(e: &reqwest::Error, timeout: Duration) -> Delivered {
    if let Some(refused) = guard::find_refusal(e) {
        return Delivered::failure(AttemptOutcome::NonRetryableFailure, refused.to_string());
    }
    // A connection that could not be opened in webhook.connect_timeout is a
    // connection failure, not the attempt's timeout.
    let message = if e.is_connect() {
        format!("connection failed: {}", root_cause(e))
    } else if e.is_timeout() {
        format!("timeout after {}ms", timeout.as_millis())
    } else {
        format!("request failed: {}", root_cause(e))
    };
    Delivered::failure(AttemptOutcome::RetryableFailure, message)
}

fn root_cause(e: &reqwest::Error) -> String {
    let mut last: &dyn std::error::Error = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_the_contract_says() {
        let c = |s: u16| classify_status(StatusCode::from_u16(s).unwrap());
        for s in [200, 201, 204, 299] {
            assert_eq!(c(s), AttemptOutcome::Success, "{s}");
        }
        for s in [408, 425, 429, 500, 502, 503, 504, 599] {
            assert_eq!(c(s), AttemptOutcome::RetryableFailure, "{s}");
        }
        for s in [
            300, 301, 302, 304, 307, 308, 400, 401, 403, 404, 405, 409, 410, 413, 422,
        ] {
            assert_eq!(c(s), AttemptOutcome::NonRetryableFailure, "{s}");
        }
    }
}
