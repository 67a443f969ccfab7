//! Webhook delivery over keep-alive HTTP/1.1 connections (`http1`); the
//! receivers' OAuth tokens are fetched with a shared reqwest client.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request};
use reqwest::{header, redirect, Client, StatusCode};
use tokio::time::Instant;

use super::{guard, http1, oauth::ReceiverTokens, resolver::Resolver, signing, Delivered};
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
    /// The type of the event that made it (`dispatch-event-type`).
    pub event_type: Option<&'a str>,
    /// Shared, not copied, by each request that sends it.
    pub body: Bytes,
    /// Set when the body is the raw payload (docs/api.md#raw-format).
    pub raw: Option<Raw<'a>>,
}

/// A raw body's `Content-Type`, and the envelope whose fields go as headers.
pub struct Raw<'a> {
    pub content_type: &'a str,
    pub envelope: &'a super::Envelope<'a>,
}

const WEBHOOK_ID: header::HeaderName = header::HeaderName::from_static("webhook-id");
const WEBHOOK_TIMESTAMP: header::HeaderName = header::HeaderName::from_static("webhook-timestamp");
const WEBHOOK_SIGNATURE: header::HeaderName = header::HeaderName::from_static("webhook-signature");
const ORDERING_KEY: header::HeaderName = header::HeaderName::from_static("dispatch-ordering-key");
const EVENT_TYPE: header::HeaderName = header::HeaderName::from_static("dispatch-event-type");
const MESSAGE_ID: header::HeaderName = header::HeaderName::from_static("dispatch-message-id");
const TARGET_ID: header::HeaderName = header::HeaderName::from_static("dispatch-target-id");
const ORIGINAL_DELIVERY_TIME: header::HeaderName =
    header::HeaderName::from_static("dispatch-original-delivery-time");
const DELIVERY_TIME: header::HeaderName = header::HeaderName::from_static("dispatch-delivery-time");
const EVENT_ID: header::HeaderName = header::HeaderName::from_static("dispatch-event-id");
/// Headers of Dispatch's own that a target's custom header of the same name
/// never doubles.
const PREFIX: &str = "dispatch-";
const JSON: header::HeaderValue = header::HeaderValue::from_static("application/json");

pub struct WebhookClient {
    connections: http1::Connections,
    tokens: ReceiverTokens,
    default_timeout: Duration,
    max_timeout: Duration,
    allow_private: bool,
}

impl WebhookClient {
    /// `max_timeout` keeps every attempt inside its lease; opening a
    /// connection (to a receiver or its token endpoint) may take at most
    /// `connect_timeout` of it. Unless `allow_private`, every name is looked
    /// up in `names` and judged by the guard.
    pub fn new(
        default_timeout: Duration,
        max_timeout: Duration,
        connect_timeout: Duration,
        allow_private: bool,
        names: Resolver,
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
            builder = builder.dns_resolver(guard::resolver(&names));
        }
        let client = builder.build().expect("a TLS-capable HTTP client builds");
        Self {
            connections: http1::Connections::new(connect_timeout, allow_private, names),
            tokens: ReceiverTokens::new(client),
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
        let deadline = Instant::now() + timeout;
        let Some(origin) = http1::Origin::of(url) else {
            return Delivered::failure(
                AttemptOutcome::NonRetryableFailure,
                "the target URL is not http or https",
            );
        };
        let request = match request_for(url, config, keys, letter, bearer) {
            Ok(request) => request,
            Err(refused) => return refused,
        };
        let (response, lent) =
            match tokio::time::timeout_at(deadline, self.connections.send(origin, request)).await {
                Ok(Ok(answered)) => answered,
                Ok(Err(e)) => return classify_error(&e),
                Err(_) => {
                    return Delivered::failure(
                        AttemptOutcome::RetryableFailure,
                        format!("timeout after {}ms", timeout.as_millis()),
                    )
                }
            };
        let (head, mut body) = response.into_parts();
        let mut excerpt = Vec::new();
        // Read a little of the body for the record; a small body is drained
        // so the connection serves the next request.
        if http1::read_body(
            &mut body,
            RESPONSE_EXCERPT,
            DRAIN_LIMIT,
            deadline,
            &mut excerpt,
        )
        .await
        {
            self.connections.give_back(lent);
        }
        classify_response(head.status, &head.headers, &excerpt)
    }
}

/// The request of one attempt, its URI in origin form (path and query).
fn request_for(
    url: &reqwest::Url,
    config: &WebhookConfig,
    keys: &[Vec<u8>],
    letter: &Letter<'_>,
    bearer: Option<&str>,
) -> Result<Request<Full<Bytes>>, Delivered> {
    let msg_id = letter.id.to_string();
    let timestamp = chrono::Utc::now().timestamp();
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    let mut request = Request::new(Full::new(letter.body.clone()));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = path.parse().map_err(|_| {
        Delivered::failure(
            AttemptOutcome::NonRetryableFailure,
            "the target URL is invalid",
        )
    })?;
    let headers = request.headers_mut();
    let text = |v: String| header::HeaderValue::try_from(v).expect("ASCII");
    match &letter.raw {
        None => {
            headers.insert(header::CONTENT_TYPE, JSON);
        }
        Some(raw) => {
            // Checked when the target was written (a media type in visible ASCII).
            let content_type = header::HeaderValue::from_str(raw.content_type).map_err(|_| {
                Delivered::failure(
                    AttemptOutcome::NonRetryableFailure,
                    "the contentType cannot be sent as a header",
                )
            })?;
            headers.insert(header::CONTENT_TYPE, content_type);
            let e = raw.envelope;
            headers.insert(MESSAGE_ID, text(msg_id.clone()));
            headers.insert(TARGET_ID, text(e.target_id.to_string()));
            headers.insert(
                ORIGINAL_DELIVERY_TIME,
                text(e.original_delivery_time.clone()),
            );
            headers.insert(DELIVERY_TIME, text(e.delivery_time.clone()));
            if let Some(event) = e.event_id {
                headers.insert(EVENT_ID, text(event.to_string()));
            }
        }
    }
    headers.insert(
        header::USER_AGENT,
        header::HeaderValue::from_static(USER_AGENT),
    );
    headers.insert(header::ACCEPT, header::HeaderValue::from_static("*/*"));
    headers.insert(WEBHOOK_ID, text(msg_id.clone()));
    headers.insert(WEBHOOK_TIMESTAMP, text(timestamp.to_string()));
    headers.insert(
        WEBHOOK_SIGNATURE,
        text(signing::sign_all(keys, &msg_id, timestamp, &letter.body)),
    );
    if let Some(key) = letter.ordering_key {
        // Any UTF-8 without control characters is a valid header value.
        let value = header::HeaderValue::from_bytes(key.as_bytes()).map_err(|_| {
            Delivered::failure(
                AttemptOutcome::NonRetryableFailure,
                "the orderingKey cannot be sent as a header",
            )
        })?;
        headers.insert(ORDERING_KEY, value);
    }
    if let Some(ty) = letter.event_type {
        // A type is ASCII letters, digits, '_', '-' and dots.
        headers.insert(EVENT_TYPE, text(ty.to_string()));
    }
    if let Some(basic) = basic_auth(url) {
        headers.insert(header::AUTHORIZATION, basic);
    }
    for (name, value) in &config.headers {
        // Checked when the target was written (an RFC 9110 token, visible
        // ASCII).
        let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            header::HeaderValue::from_str(value),
        ) else {
            return Err(Delivered::failure(
                AttemptOutcome::NonRetryableFailure,
                format!("the header {name} cannot be sent"),
            ));
        };
        if name.as_str().starts_with(PREFIX) && headers.contains_key(&name) {
            // Dispatch's value of its own header stands.
            continue;
        }
        headers.append(name, value);
    }
    if let Some(token) = bearer {
        let mut value = header::HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
            Delivered::failure(
                AttemptOutcome::NonRetryableFailure,
                "the receiver's token cannot be sent as a header",
            )
        })?;
        value.set_sensitive(true);
        headers.insert(header::AUTHORIZATION, value);
    }
    if !headers.contains_key(header::HOST) {
        let host = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        headers.insert(header::HOST, text(host));
    }
    Ok(request)
}

/// Credentials written in the URL (`https://user:pass@host/`) go as Basic
/// authentication, decoded, and the URL sent is without them.
fn basic_auth(url: &reqwest::Url) -> Option<header::HeaderValue> {
    use base64::{engine::general_purpose::STANDARD as B64, Engine};
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decode = |s: &str| percent_encoding::percent_decode_str(s).collect::<Vec<u8>>();
    let mut pair = decode(url.username());
    pair.push(b':');
    pair.extend(decode(url.password().unwrap_or_default()));
    let mut value = header::HeaderValue::try_from(format!("Basic {}", B64.encode(pair))).ok()?;
    value.set_sensitive(true);
    Some(value)
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

fn classify_response(status: StatusCode, headers: &header::HeaderMap, excerpt: &[u8]) -> Delivered {
    // Only a 429 or a 503 asks for a wait (RFC 9110 §10.2.3, docs/api.md#retry-after).
    let retry_after = match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => headers
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(super::retry_after),
        _ => None,
    };
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
        response_body: Some(String::from_utf8_lossy(excerpt).into_owned()),
        retry_after,
    }
}

fn classify_error(e: &http1::SendError) -> Delivered {
    if let Some(refused) = guard::find_refusal(e) {
        return Delivered::failure(AttemptOutcome::NonRetryableFailure, refused.to_string());
    }
    // A connection that could not be opened in webhook.connect_timeout is a
    // connection failure, not the attempt's timeout.
    let message = match e {
        http1::SendError::Connect(_) => format!("connection failed: {}", root_cause(e)),
        http1::SendError::Request(_) => format!("request failed: {}", root_cause(e)),
    };
    Delivered::failure(AttemptOutcome::RetryableFailure, message)
}

fn root_cause(e: &http1::SendError) -> String {
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
    fn credentials_in_the_url_go_as_basic_authentication_and_not_in_the_request_line() {
        let config: WebhookConfig = serde_json::from_value(serde_json::json!({
            "url": "https://al%20ice:p%40ss@example.com:8443/hook?x=1",
            "signingSecret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        }))
        .unwrap();
        let url = reqwest::Url::parse(&config.url).unwrap();
        let id = MessageId::at(chrono::Utc::now());
        let letter = Letter {
            id: &id,
            ordering_key: None,
            event_type: None,
            body: Bytes::from_static(b"{}"),
            raw: None,
        };
        let request = request_for(&url, &config, &[b"key".to_vec()], &letter, None).unwrap();
        assert_eq!(request.uri(), "/hook?x=1");
        assert_eq!(request.headers()[header::HOST], "example.com:8443");
        // base64("al ice:p@ss")
        assert_eq!(
            request.headers()[header::AUTHORIZATION],
            "Basic YWwgaWNlOnBAc3M="
        );
        let plain = reqwest::Url::parse("https://example.com/hook").unwrap();
        let request =
            request_for(&plain, &config, &[b"key".to_vec()], &letter, Some("t0k")).unwrap();
        assert_eq!(request.headers()[header::HOST], "example.com");
        assert_eq!(request.headers()[header::AUTHORIZATION], "Bearer t0k");
    }

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
