//! The target bodies a client sends, as the server parses them and the
//! document shows them; `read` checks them by the domain's rules.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::forms::{content_type_schema, headers_schema, scopes_schema};
use crate::wire::Field;

/// A create body: `{"name", "type", "config", "enabled"?}`. `config` is read
/// as the type's config (`WebhookConfigIn`, `SqsConfigIn`, `SnsConfigIn`)
/// once `type` is known.
#[derive(Debug, Default, Deserialize)]
pub struct TargetIn {
    pub name: Field<String>,
    #[serde(rename = "type")]
    pub kind: Field<TargetKindIn>,
    pub config: Field<Map<String, Value>>,
    pub enabled: Field<bool>,
}

/// What a target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetKindIn {
    Webhook,
    Sqs,
    Sns,
    Pull,
}

/// A webhook: Dispatch POSTs each message to `url`, signed (Standard Webhooks).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookConfigIn {
    /// An http or https URL with a host (format `http-url`). By default its
    /// address must be public: loopback, private, link-local and metadata
    /// addresses answer 400.
    #[schema(value_type = String, required = true, format = "http-url", min_length = 1, example = "https://example.com/hooks/orders")]
    pub url: Field<String>,
    /// Sent with every attempt: at most 32, with at most 8 KiB of names and
    /// values in all. Names are RFC 9110 tokens other than those Dispatch
    /// sets (`Host`, `Content-Length`, `Content-Type`, `Transfer-Encoding`,
    /// `Connection`, `User-Agent`, `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature`, in any case; and `Authorization` when `auth` is
    /// set): format `header-name`. Values are visible ASCII, spaces and tabs,
    /// and secrets: a response shows `***`.
    #[schema(schema_with = headers_schema, required = false)]
    pub headers: Field<BTreeMap<String, Field<String>>>,
    /// Milliseconds an attempt may take, 1 to 300000; the server's default when absent.
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 300000)]
    pub timeout_ms: Field<f64>,
    /// `whsec_` and 16 to 64 bytes in base64 (format `webhook-secret`);
    /// generated when absent and shown once, in the response to the create.
    #[schema(value_type = Option<String>, format = "webhook-secret", min_length = 1, example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]
    pub signing_secret: Field<String>,
    /// Dispatch fetches a token from `tokenUrl` and sends it as a bearer token.
    #[schema(value_type = Option<OAuthIn>)]
    pub auth: Field<OAuthIn>,
    #[schema(value_type = Option<FormatIn>)]
    pub format: Field<FormatIn>,
    /// A raw body's `Content-Type` (`text/plain; charset=utf-8` when
    /// absent): a media type, `type/subtype` and parameters, at most 255
    /// characters. An envelope is always `application/json`.
    #[schema(schema_with = content_type_schema, required = false)]
    pub content_type: Field<String>,
    #[serde(flatten)]
    pub limits: LimitsIn,
}

/// What the target receives. `envelope` (the default): a JSON object with
/// the message's fields around its payload. `raw`: the payload's characters
/// exactly, the envelope's fields beside it as `dispatch-*` headers (a
/// webhook, signed over that body) or as message attributes (SQS, SNS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FormatIn {
    Envelope,
    Raw,
}

/// What any target's config may limit (docs/api.md#flow-control-and-fairness).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsIn {
    /// Holds back attempts to this target: they wait, Scheduled, and go in
    /// delivery-time order as soon as the limits allow.
    #[schema(value_type = Option<FlowControlIn>)]
    pub flow_control: Field<FlowControlIn>,
    /// Stops attempts to a failing target for a while.
    #[schema(value_type = Option<CircuitBreakerIn>)]
    pub circuit_breaker: Field<CircuitBreakerIn>,
}

/// `parallelism` caps the attempts in flight to the target across all
/// instances; `rate` caps the attempts started in any `period` (a sliding
/// window, not calendar-aligned). Either may be left out.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowControlIn {
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 10000)]
    pub parallelism: Field<f64>,
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1000000)]
    pub rate: Field<f64>,
    /// A whole number and a unit (`ms`, `s`, `m`, `h`): `1s` when absent.
    #[schema(value_type = Option<String>, pattern = "^[1-9][0-9]{0,5}(ms|s|m|h)$", example = "1s")]
    pub period: Field<String>,
}

/// After `failures` consecutive retryable failures across the target's
/// messages the breaker opens: messages wait without consuming attempts;
/// after `cooldown` one probe is made; a success closes it, a failure
/// reopens it with the cooldown doubled, at most 1 h. A failure the
/// receiver answers for good (a non-retryable one) shows it reachable and
/// starts the count over.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CircuitBreakerIn {
    /// 1 to 10000; 20 when absent.
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 10000)]
    pub failures: Field<f64>,
    /// A whole number and a unit (`ms`, `s`, `m`, `h`): `1m` when absent;
    /// above `1h` it waits 1 h.
    #[schema(value_type = Option<String>, pattern = "^[1-9][0-9]{0,5}(ms|s|m|h)$", example = "1m")]
    pub cooldown: Field<String>,
}

/// A queue its consumers read over HTTPS (`receive`, `ack`, `nack`,
/// `visibility`): Dispatch sends nothing. `flowControl` and
/// `circuitBreaker` do not apply (400).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullConfigIn {
    /// How long a received message stays hidden from other receives: 1 s
    /// to 12 h, a whole number and a unit (`ms`, `s`, `m`, `h`, `d`); `60s`
    /// when absent.
    #[schema(schema_with = pull_visibility_schema, required = false)]
    pub visibility_timeout: Field<String>,
    /// Receives without an ack after which the message is a dead letter
    /// (when the last visibility runs out): 1 to 1000; 5 when absent.
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub max_receive_count: Field<f64>,
    /// How long a message may wait to be received after its delivery time
    /// before it is a dead letter: 1 min to 14 d; `14d` when absent.
    #[schema(schema_with = pull_retention_schema, required = false)]
    pub retention: Field<String>,
}

fn pull_visibility_schema() -> utoipa::openapi::Object {
    use crate::domain::target::pull;
    crate::wire::span::schema(
        *pull::VISIBILITY_MS.start(),
        *pull::VISIBILITY_MS.end(),
        "60s",
        true,
    )
    .build()
}

fn pull_retention_schema() -> utoipa::openapi::Object {
    use crate::domain::target::pull;
    crate::wire::span::schema(
        *pull::RETENTION_MS.start(),
        *pull::RETENTION_MS.end(),
        "14d",
        true,
    )
    .build()
}

/// OAuth 2 client credentials for a webhook.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OAuthIn {
    #[serde(rename = "type")]
    #[schema(value_type = AuthKindIn, required = true)]
    pub kind: Field<AuthKindIn>,
    /// An http or https URL with a host (format `http-url`), public as `url` is.
    #[schema(value_type = String, required = true, format = "http-url", min_length = 1)]
    pub token_url: Field<String>,
    #[schema(value_type = String, required = true, min_length = 1, pattern = "^[^\\u0000]*$")]
    pub client_id: Field<String>,
    /// A secret: a response shows `***`.
    #[schema(value_type = String, required = true, min_length = 1, pattern = "^[^\\u0000]*$")]
    pub client_secret: Field<String>,
    #[schema(schema_with = scopes_schema, required = false)]
    pub scopes: Field<Vec<Field<String>>>,
}

/// The only kind of webhook authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
pub enum AuthKindIn {
    #[serde(rename = "oauth2ClientCredentials")]
    OAuth2ClientCredentials,
}

/// An Amazon SQS queue.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SqsConfigIn {
    #[schema(value_type = String, required = true, format = "http-url", min_length = 1, example = "https://sqs.eu-north-1.amazonaws.com/123456789012/orders")]
    pub queue_url: Field<String>,
    #[schema(value_type = String, required = true, pattern = "^[a-z]{2}(-[a-z]+)+-[0-9]+$", example = "eu-north-1")]
    pub region: Field<String>,
    #[serde(flatten)]
    pub aws: AwsIn,
}

/// An Amazon SNS topic.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnsConfigIn {
    #[schema(value_type = String, required = true, example = "arn:aws:sns:eu-north-1:123456789012:orders",
        pattern = "^arn:aws[^:\\u0000]*:sns:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:[A-Za-z0-9_.-]{1,256}$")]
    pub topic_arn: Field<String>,
    #[schema(value_type = String, required = true, pattern = "^[a-z]{2}(-[a-z]+)+-[0-9]+$", example = "eu-north-1")]
    pub region: Field<String>,
    #[serde(flatten)]
    pub aws: AwsIn,
}

/// What SQS and SNS configs share.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsIn {
    /// Another endpoint than AWS's own (format `http-url`), public as a webhook's `url` is.
    #[schema(value_type = Option<String>, format = "http-url", min_length = 1)]
    pub endpoint_url: Field<String>,
    /// Without them, the server's own AWS identity, only where the operator
    /// allows it (`aws.allow_default_credentials`); otherwise 400.
    #[schema(value_type = Option<AwsCredentialsIn>)]
    pub credentials: Field<AwsCredentialsIn>,
    /// The FIFO message group: 1 to 128 printable ASCII characters.
    #[schema(value_type = Option<String>, pattern = "^[!-~]{1,128}$")]
    pub message_group_id: Field<String>,
    /// `raw`: the message body is the payload's characters exactly, and
    /// every field of the envelope a message attribute.
    #[schema(value_type = Option<FormatIn>)]
    pub format: Field<FormatIn>,
    #[serde(flatten)]
    pub limits: LimitsIn,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsCredentialsIn {
    #[schema(value_type = String, required = true, min_length = 1, pattern = "^[^\\u0000]*$")]
    pub access_key_id: Field<String>,
    /// A secret: a response shows `***`.
    #[schema(value_type = String, required = true, min_length = 1, pattern = "^[^\\u0000]*$")]
    pub secret_access_key: Field<String>,
}

/// A merge patch (RFC 7396) of a target, as the document shows it. The
/// server applies the patch to the stored target and reads the result as a
/// `TargetIn`; `type` cannot change.
pub struct TargetPatchIn;
