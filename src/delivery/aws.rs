//! Amazon SQS and SNS delivery. One SDK client per distinct (region,
//! endpoint, credentials), built once and reused; SDK retries are off, the
//! ladder retries.

use std::{collections::HashMap, sync::Arc, time::Duration};

use aws_config::{retry::RetryConfig, timeout::TimeoutConfig, BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use tokio::sync::Mutex;

use super::{guard, Delivered};
use crate::domain::{
    retry::AttemptOutcome,
    target::{AwsCredentials, SnsConfig, SqsConfig},
};

/// What distinguishes one SDK client from another.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    region: String,
    endpoint: Option<String>,
    credentials: Option<(String, String)>,
}

impl ClientKey {
    fn new(region: &str, endpoint: &Option<String>, credentials: &Option<AwsCredentials>) -> Self {
        Self {
            region: region.to_string(),
            endpoint: endpoint.clone(),
            credentials: credentials
                .as_ref()
                .map(|c| (c.access_key_id.clone(), c.secret_access_key.clone())),
        }
    }
}

pub struct AwsClients {
    timeout: Duration,
    /// Every connection resolves through the private-network guard (None
    /// only when `webhook.allow_private_networks` lifts the rule).
    guard: Option<guard::GuardedResolver>,
    /// Whether a target without credentials may use the server's own identity.
    allow_default_credentials: bool,
    sqs: Mutex<HashMap<ClientKey, aws_sdk_sqs::Client>>,
    sns: Mutex<HashMap<ClientKey, aws_sdk_sns::Client>>,
}

/// One SQS or SNS message: its body (the envelope, or a raw payload) and
/// the attributes that name it.
pub struct SqsEntry<'a> {
    pub message_id: String,
    pub target_id: &'a str,
    pub original_delivery_time: &'a str,
    /// Only for a raw body, whose envelope fields are all attributes.
    pub delivery_time: Option<&'a str>,
    pub ordering_key: Option<&'a str>,
    pub event_id: Option<String>,
    pub event_type: Option<&'a str>,
    pub body: String,
}

impl SqsEntry<'_> {
    /// A FIFO queue's or topic's `MessageGroupId` (docs/api.md#sqs): the
    /// orderingKey, else the target's `messageGroupId`, else the targetId. A
    /// key that is not a valid group id (over 128 characters, or other than
    /// printable ASCII) is sent as `sha256:` and its digest in hex, the same
    /// for every message of the key.
    pub fn group_id<'b>(&'b self, configured: Option<&'b str>) -> std::borrow::Cow<'b, str> {
        use std::borrow::Cow;
        match self.ordering_key {
            Some(k) if k.len() <= 128 && k.bytes().all(|b| b.is_ascii_graphic()) => {
                Cow::Borrowed(k)
            }
            Some(k) => {
                use sha2::Digest;
                let digest = sha2::Sha256::digest(k.as_bytes());
                Cow::Owned(format!(
                    "sha256:{}",
                    digest
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                ))
            }
            None => Cow::Borrowed(configured.unwrap_or(self.target_id)),
        }
    }
}

impl AwsClients {
    pub fn new(
        timeout: Duration,
        guard: Option<guard::GuardedResolver>,
        allow_default_credentials: bool,
    ) -> Self {
        Self {
            timeout,
            guard,
            allow_default_credentials,
            sqs: Mutex::default(),
            sns: Mutex::default(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn sdk_config(&self, key: &ClientKey) -> SdkConfig {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(key.region.clone()))
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(self.timeout)
                    .connect_timeout(self.timeout.min(Duration::from_secs(5)))
                    .build(),
            );
        if let Some(endpoint) = &key.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some(resolver) = &self.guard {
            // Every connection the SDK makes resolves through the guard.
            use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
            loader = loader.http_client(
                aws_smithy_http_client::Builder::new()
                    .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
                    .build_with_resolver(resolver.clone()),
            );
        }
        if let Some((id, secret)) = &key.credentials {
            loader = loader.credentials_provider(aws_sdk_sqs::config::Credentials::new(
                id,
                secret,
                None,
                None,
                "dispatch-target",
            ));
        }
        loader.load().await
    }

    async fn sqs_client(&self, c: &SqsConfig) -> aws_sdk_sqs::Client {
        let key = ClientKey::new(&c.region, &c.endpoint_url, &c.credentials);
        if let Some(client) = self.sqs.lock().await.get(&key) {
            return client.clone();
        }
        let client = aws_sdk_sqs::Client::new(&self.sdk_config(&key).await);
        self.sqs.lock().await.entry(key).or_insert(client).clone()
    }

    async fn sns_client(&self, c: &SnsConfig) -> aws_sdk_sns::Client {
        let key = ClientKey::new(&c.region, &c.endpoint_url, &c.credentials);
        if let Some(client) = self.sns.lock().await.get(&key) {
            return client.clone();
        }
        let client = aws_sdk_sns::Client::new(&self.sdk_config(&key).await);
        self.sns.lock().await.entry(key).or_insert(client).clone()
    }

    /// Why this target may not be sent to at all: a private IP literal as its
    /// endpoint (names are judged by the resolver), or no credentials where
    /// the server lends none.
    fn refusal(
        &self,
        endpoint: &Option<String>,
        credentials: &Option<AwsCredentials>,
    ) -> Option<Delivered> {
        if credentials.is_none() && !self.allow_default_credentials {
            return Some(Delivered::failure(
                AttemptOutcome::NonRetryableFailure,
                "the target has no AWS credentials and this server lends none \
                 (aws.allow_default_credentials is false)",
            ));
        }
        let url = endpoint.as_deref().and_then(|e| url::Url::parse(e).ok())?;
        self.guard.as_ref()?;
        guard::refuse_literal(&url).err().map(|refused| {
            Delivered::failure(AttemptOutcome::NonRetryableFailure, refused.to_string())
        })
    }

    pub async fn send_sqs(&self, c: &SqsConfig, entry: &SqsEntry<'_>) -> Delivered {
        use aws_sdk_sqs::types::MessageAttributeValue;
        if let Some(refused) = self.refusal(&c.endpoint_url, &c.credentials) {
            return refused;
        }
        let client = self.sqs_client(c).await;
        let mut request = client
            .send_message()
            .queue_url(&c.queue_url)
            .message_body(&entry.body);
        for (name, value) in attributes(entry) {
            let attr = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build();
            match attr {
                Ok(attr) => request = request.message_attributes(name, attr),
                Err(e) => {
                    return Delivered::failure(AttemptOutcome::NonRetryableFailure, e.to_string())
                }
            }
        }
        if c.queue_url.ends_with(".fifo") {
            request = request
                .message_group_id(entry.group_id(c.message_group_id.as_deref()))
                .message_deduplication_id(&entry.message_id);
        }
        match request.send().await {
            Ok(_) => Delivered {
                outcome: AttemptOutcome::Success,
                status_code: None,
                error: None,
                response_body: None,
                retry_after: None,
            },
            Err(e) => classify("SQS", &e),
        }
    }

    /// SendMessageBatch with up to 10 entries; one result per entry, in order.
    pub async fn send_sqs_batch(&self, c: &SqsConfig, entries: &[SqsEntry<'_>]) -> Vec<Delivered> {
        use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
        if let Some(refused) = self.refusal(&c.endpoint_url, &c.credentials) {
            return vec![refused; entries.len()];
        }
        let client = self.sqs_client(c).await;
        let fifo = c.queue_url.ends_with(".fifo");
        let mut request = client.send_message_batch().queue_url(&c.queue_url);
        for (i, entry) in entries.iter().enumerate() {
            let mut e = SendMessageBatchRequestEntry::builder()
                .id(format!("e{i}"))
                .message_body(&entry.body);
            for (name, value) in attributes(entry) {
                if let Ok(attr) = MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(value)
                    .build()
                {
                    e = e.message_attributes(name, attr);
                }
            }
            if fifo {
                e = e
                    .message_group_id(entry.group_id(c.message_group_id.as_deref()))
                    .message_deduplication_id(&entry.message_id);
            }
            match e.build() {
                Ok(e) => request = request.entries(e),
                Err(err) => {
                    let failed =
                        Delivered::failure(AttemptOutcome::NonRetryableFailure, err.to_string());
                    return vec![failed; entries.len()];
                }
            }
        }
        match request.send().await {
            Ok(out) => {
                let mut results = vec![
                    Delivered::failure(
                        AttemptOutcome::RetryableFailure,
                        "SQS: no result for this entry"
                    );
                    entries.len()
                ];
                for ok in out.successful() {
                    if let Some(i) = entry_index(ok.id()) {
                        if i < results.len() {
                            results[i] = Delivered {
                                outcome: AttemptOutcome::Success,
                                status_code: None,
                                error: None,
                                response_body: None,
                                retry_after: None,
                            };
                        }
                    }
                }
                for failed in out.failed() {
                    if let Some(i) = entry_index(failed.id()) {
                        if i < results.len() {
                            let code = failed.code();
                            // Sender faults are the request's fault; others are AWS's.
                            let outcome = if failed.sender_fault() && !is_retryable_code(code) {
                                AttemptOutcome::NonRetryableFailure
                            } else {
                                AttemptOutcome::RetryableFailure
                            };
                            let message = failed.message().unwrap_or("");
                            results[i] =
                                Delivered::failure(outcome, format!("SQS {code}: {message}"));
                        }
                    }
                }
                results
            }
            // A refusal of the whole request (too long, say) says nothing of
            // each message: send them one by one, each judged on its own.
            Err(SdkError::ServiceError(_)) | Err(SdkError::ConstructionFailure(_)) => {
                let mut results = Vec::with_capacity(entries.len());
                for entry in entries {
                    results.push(self.send_sqs(c, entry).await);
                }
                results
            }
            Err(e) => vec![classify("SQS", &e); entries.len()],
        }
    }

    pub async fn publish_sns(&self, c: &SnsConfig, entry: &SqsEntry<'_>) -> Delivered {
        use aws_sdk_sns::types::MessageAttributeValue;
        if let Some(refused) = self.refusal(&c.endpoint_url, &c.credentials) {
            return refused;
        }
        let client = self.sns_client(c).await;
        let mut request = client
            .publish()
            .topic_arn(&c.topic_arn)
            .message(&entry.body);
        for (name, value) in attributes(entry) {
            match MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
            {
                Ok(attr) => request = request.message_attributes(name, attr),
                Err(e) => {
                    return Delivered::failure(AttemptOutcome::NonRetryableFailure, e.to_string())
                }
            }
        }
        if c.topic_arn.ends_with(".fifo") {
            request = request
                .message_group_id(entry.group_id(c.message_group_id.as_deref()))
                .message_deduplication_id(&entry.message_id);
        }
        match request.send().await {
            Ok(_) => Delivered {
                outcome: AttemptOutcome::Success,
                status_code: None,
                error: None,
                response_body: None,
                retry_after: None,
            },
            Err(e) => classify("SNS", &e),
        }
    }
}

fn attributes<'a>(entry: &'a SqsEntry<'a>) -> impl Iterator<Item = (&'static str, &'a str)> {
    [
        ("messageId", entry.message_id.as_str()),
        ("targetId", entry.target_id),
        ("originalDeliveryTime", entry.original_delivery_time),
    ]
    .into_iter()
    .chain(entry.delivery_time.map(|t| ("deliveryTime", t)))
    .chain(entry.ordering_key.map(|k| ("orderingKey", k)))
    .chain(entry.event_id.as_deref().map(|e| ("eventId", e)))
    .chain(entry.event_type.map(|t| ("type", t)))
}

fn entry_index(id: &str) -> Option<usize> {
    id.strip_prefix('e')?.parse().ok()
}

/// Error codes that clear up by themselves.
fn is_retryable_code(code: &str) -> bool {
    matches!(
        code,
        "ThrottlingException"
            | "Throttling"
            | "ThrottledException"
            | "RequestThrottled"
            | "RequestThrottledException"
            | "TooManyRequestsException"
            | "ProvisionedThroughputExceededException"
            | "SlowDown"
            | "ServiceUnavailable"
            | "ServiceUnavailableException"
            | "InternalError"
            | "InternalFailure"
            | "InternalErrorException"
            | "RequestTimeout"
            | "RequestTimeoutException"
            | "ExpiredToken"
            | "ExpiredTokenException"
            | "RequestExpired"
            | "KMSThrottlingException"
            | "KMSThrottling"
            | "AWS.SimpleQueueService.KmsThrottled"
    )
}

/// Classifies an SDK error per docs/api.md#outcomes: throttling, 5xx, network errors,
/// timeouts and expired credentials retry; a missing queue or topic, access
/// denied, invalid parameters and too-large messages do not.
fn classify<E, R>(service: &str, e: &SdkError<E, R>) -> Delivered
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + HasStatus + 'static,
{
    match e {
        SdkError::TimeoutError(_) => Delivered::failure(
            AttemptOutcome::RetryableFailure,
            format!("{service}: timeout"),
        ),
        SdkError::DispatchFailure(f) => {
            if let Some(refused) = guard::find_refusal(e) {
                return Delivered::failure(
                    AttemptOutcome::NonRetryableFailure,
                    format!("{service}: {refused}"),
                );
            }
            let kind = if f.is_timeout() {
                "timeout"
            } else if f.is_io() {
                "network error"
            } else {
                "dispatch failure"
            };
            Delivered::failure(
                AttemptOutcome::RetryableFailure,
                format!("{service}: {kind}: {}", root(e)),
            )
        }
        SdkError::ResponseError(_) => Delivered::failure(
            AttemptOutcome::RetryableFailure,
            format!("{service}: unreadable response: {}", root(e)),
        ),
        SdkError::ConstructionFailure(_) => Delivered::failure(
            AttemptOutcome::NonRetryableFailure,
            format!("{service}: invalid request: {}", root(e)),
        ),
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status_code();
            let code = e.code().unwrap_or("Unknown");
            let message = e.message().unwrap_or("");
            let outcome = if is_retryable_code(code) || status >= 500 || status == 429 {
                AttemptOutcome::RetryableFailure
            } else {
                AttemptOutcome::NonRetryableFailure
            };
            // Throttled: wait as long as AWS asks, when it says.
            let throttled = status == 429 || status == 503 || code.contains("Throttl");
            let retry_after = ctx
                .raw()
                .header("retry-after")
                .filter(|_| throttled)
                .and_then(super::retry_after);
            Delivered {
                outcome,
                status_code: Some(status),
                error: Some(format!("{service} {code}: {message}")),
                response_body: None,
                retry_after,
            }
        }
        _ => Delivered::failure(
            AttemptOutcome::RetryableFailure,
            format!("{service}: {}", root(e)),
        ),
    }
}

/// The HTTP status and headers of a raw SDK response.
pub trait HasStatus {
    fn status_code(&self) -> u16;
    fn header(&self, name: &str) -> Option<&str>;
}

impl HasStatus for aws_smithy_runtime_api::http::Response {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers().get(name)
    }
}

fn root(e: &dyn std::error::Error) -> String {
    let mut last = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

/// Shared by the deliverer.
pub type SharedAws = Arc<AwsClients>;
