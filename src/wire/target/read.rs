//! A target body's members read by the domain's rules, each problem named
//! by its field (`config.auth.clientId`).

use std::collections::BTreeMap;

use super::{
    forms::NUL,
    types::{
        AuthKindIn, AwsIn, CircuitBreakerIn, FlowControlIn, FormatIn, LimitsIn, OAuthIn,
        SnsConfigIn, SqsConfigIn, WebhookConfigIn,
    },
};
use crate::{
    domain::target::{
        gate::{self, period, CircuitBreaker, FlowControl, Limits},
        generate_signing_secret, rules, signing_key, AwsCredentials, FieldError, Format,
        OAuthClientCredentials, SnsConfig, SqsConfig, WebhookConfig,
    },
    wire::Field,
};

pub(super) fn err<T>(
    errors: &mut Vec<FieldError>,
    field: impl Into<String>,
    message: &str,
) -> Option<T> {
    errors.push(FieldError::new(field, message));
    None
}

/// A non-empty string member; `None` when absent and not required.
fn string(
    f: Field<String>,
    field: &str,
    required: bool,
    e: &mut Vec<FieldError>,
) -> Option<String> {
    match f {
        Field::Valid(s) if s.contains('\0') => err(e, field, NUL),
        Field::Valid(s) if !s.is_empty() => Some(s),
        Field::Valid(_) => err(e, field, "must not be empty"),
        Field::Missing if !required => None,
        Field::Missing => err(e, field, "is required"),
        Field::Invalid(_) => err(e, field, "must be a string"),
    }
}

/// Read `(value, ok)`: a required member whose absence is an error returns
/// `(None, false)`; an optional member left out returns `(None, true)`.
fn http_url(
    f: Field<String>,
    field: &str,
    required: bool,
    e: &mut Vec<FieldError>,
) -> (Option<String>, bool) {
    let before = e.len();
    let Some(s) = string(f, field, required, e) else {
        return (None, e.len() == before);
    };
    match rules::http_url_problem(&s) {
        None => (Some(s), true),
        Some(problem) => (err(e, field, &problem), false),
    }
}

fn read_format(f: Field<FormatIn>, e: &mut Vec<FieldError>) -> Option<Format> {
    match f {
        Field::Missing => Some(Format::Envelope),
        Field::Valid(FormatIn::Envelope) => Some(Format::Envelope),
        Field::Valid(FormatIn::Raw) => Some(Format::Raw),
        Field::Invalid(_) => err(e, "config.format", "must be envelope or raw"),
    }
}

fn content_type(f: Field<String>, e: &mut Vec<FieldError>) -> Option<Option<String>> {
    match f {
        Field::Missing => Some(None),
        Field::Valid(s) if rules::is_media_type(&s) => Some(Some(s)),
        Field::Valid(s) if s.contains('\0') => err(e, "config.contentType", NUL),
        _ => err(
            e,
            "config.contentType",
            &format!(
                "must be a media type such as application/json; charset=utf-8, at most {} characters",
                rules::MAX_MEDIA_TYPE
            ),
        ),
    }
}

fn region(f: Field<String>, e: &mut Vec<FieldError>) -> Option<String> {
    let region = string(f, "config.region", true, e)?;
    if rules::is_region(&region) {
        Some(region)
    } else {
        err(
            e,
            "config.region",
            "is not an AWS region such as eu-north-1",
        )
    }
}

impl WebhookConfigIn {
    pub(super) fn read(
        self,
        e: &mut Vec<FieldError>,
        generated: &mut bool,
    ) -> Option<WebhookConfig> {
        let (url, _) = http_url(self.url, "config.url", true, e);
        let headers = read_headers(self.headers, e);
        // An integer, as JSON Schema counts them: 5000 and 5000.0 alike.
        let timeout_ms = match self.timeout_ms {
            Field::Missing => None,
            Field::Valid(ms) if ms.fract() == 0.0 && rules::TIMEOUT_MS.contains(&(ms as u64)) => {
                Some(ms as u64)
            }
            _ => err(e, "config.timeoutMs", "must be an integer from 1 to 300000"),
        };
        let signing_secret = match string(self.signing_secret, "config.signingSecret", false, e) {
            None => {
                *generated = true;
                Some(generate_signing_secret())
            }
            Some(s) if signing_key(&s).is_some() => Some(s),
            Some(_) => err(
                e,
                "config.signingSecret",
                "must be whsec_ followed by 16 to 64 bytes in base64",
            ),
        };
        let auth = match self.auth {
            Field::Missing => Some(None),
            Field::Valid(auth) => auth.read(e).map(Some),
            Field::Invalid(_) => err(
                e,
                "config.auth",
                "must be null or an oauth2ClientCredentials object",
            ),
        };
        let format = read_format(self.format, e);
        let content_type = content_type(self.content_type, e);
        let limits = self.limits.read(e);
        let headers = headers?;
        if matches!(auth, Some(Some(_))) {
            // With OAuth, Dispatch sends the bearer token itself.
            for name in headers
                .keys()
                .filter(|n| n.eq_ignore_ascii_case("authorization"))
            {
                err::<()>(
                    e,
                    format!("config.headers.{name}"),
                    "is set by Dispatch when auth is set and cannot be overridden",
                );
            }
        }
        Some(WebhookConfig {
            url: url?,
            headers,
            timeout_ms,
            signing_secret: signing_secret?,
            auth: auth?,
            previous_signing_secret: None,
            format: format?,
            content_type: content_type?,
            limits: limits?,
        })
    }
}

/// The headers, each problem named by its header; `None` if any.
fn read_headers(
    f: Field<BTreeMap<String, Field<String>>>,
    e: &mut Vec<FieldError>,
) -> Option<BTreeMap<String, String>> {
    let sent = match f {
        Field::Missing => return Some(BTreeMap::new()),
        Field::Valid(sent) => sent,
        Field::Invalid(_) => {
            return err(
                e,
                "config.headers",
                "must be an object of header names to string values",
            )
        }
    };
    let before = e.len();
    let bytes: usize = sent
        .iter()
        .map(|(name, value)| {
            name.len()
                + if let Field::Valid(v) = value {
                    v.len()
                } else {
                    0
                }
        })
        .sum();
    if sent.len() > rules::MAX_HEADERS {
        err::<()>(
            e,
            "config.headers",
            &format!("must hold at most {} headers", rules::MAX_HEADERS),
        );
    } else if bytes > rules::MAX_HEADER_BYTES {
        err::<()>(
            e,
            "config.headers",
            &format!(
                "names and values must add up to at most {} bytes",
                rules::MAX_HEADER_BYTES
            ),
        );
    }
    let mut headers = BTreeMap::new();
    for (name, value) in sent {
        let field = format!("config.headers.{}", name.replace('\0', "\\u0000"));
        if !rules::is_header_name(&name) {
            err::<()>(e, field, "is not a valid header name");
        } else if rules::is_reserved_header(&name) {
            err::<()>(e, field, "is set by Dispatch and cannot be overridden");
        } else if let Field::Valid(value) = value.clone() {
            if rules::is_header_text(&value) {
                headers.insert(name, value);
            } else {
                err::<()>(e, field, "must be a string valid as a header value");
            }
        } else {
            err::<()>(e, field, "must be a string valid as a header value");
        }
    }
    (e.len() == before).then_some(headers)
}

impl OAuthIn {
    pub(super) fn read(self, e: &mut Vec<FieldError>) -> Option<OAuthClientCredentials> {
        let kind = match self.kind {
            Field::Valid(AuthKindIn::OAuth2ClientCredentials) => Some("oauth2ClientCredentials"),
            Field::Missing => err(e, "config.auth.type", "is required"),
            Field::Invalid(_) => err(e, "config.auth.type", "must be oauth2ClientCredentials"),
        };
        let (token_url, _) = http_url(self.token_url, "config.auth.tokenUrl", true, e);
        let client_id = string(self.client_id, "config.auth.clientId", true, e);
        let client_secret = string(self.client_secret, "config.auth.clientSecret", true, e);
        let scopes = match self.scopes {
            Field::Missing => Some(Vec::new()),
            Field::Valid(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, s)| match s {
                    Field::Valid(s) if !s.is_empty() && !s.contains('\0') => Some(s),
                    _ => err(
                        e,
                        format!("config.auth.scopes[{i}]"),
                        "must be a non-empty string without U+0000",
                    ),
                })
                .collect::<Vec<_>>()
                .into_iter()
                .collect::<Option<Vec<_>>>(),
            Field::Invalid(_) => err(
                e,
                "config.auth.scopes",
                "must be an array of non-empty strings",
            ),
        };
        Some(OAuthClientCredentials {
            kind: kind?.to_string(),
            token_url: token_url?,
            client_id: client_id?,
            client_secret: client_secret?,
            scopes: scopes?,
        })
    }
}

/// What an SQS or SNS config shares, read.
struct Aws {
    endpoint_url: Option<String>,
    credentials: Option<AwsCredentials>,
    message_group_id: Option<String>,
    format: Format,
    limits: Limits,
}

impl AwsIn {
    fn read(self, e: &mut Vec<FieldError>) -> Option<Aws> {
        let limits = self.limits.read(e);
        let format = read_format(self.format, e);
        let (endpoint_url, endpoint_ok) =
            http_url(self.endpoint_url, "config.endpointUrl", false, e);
        let credentials = match self.credentials {
            Field::Missing => Some(None),
            Field::Valid(c) => {
                let id = string(c.access_key_id, "config.credentials.accessKeyId", true, e);
                let secret = string(
                    c.secret_access_key,
                    "config.credentials.secretAccessKey",
                    true,
                    e,
                );
                id.zip(secret).map(|(access_key_id, secret_access_key)| {
                    Some(AwsCredentials {
                        access_key_id,
                        secret_access_key,
                    })
                })
            }
            Field::Invalid(_) => err(
                e,
                "config.credentials",
                "must be null or an object with accessKeyId and secretAccessKey",
            ),
        };
        let group = match string(self.message_group_id, "config.messageGroupId", false, e) {
            Some(id) if !rules::is_message_group_id(&id) => err(
                e,
                "config.messageGroupId",
                "must be at most 128 printable ASCII characters",
            ),
            other => Some(other),
        };
        Some(Aws {
            endpoint_url: endpoint_ok.then_some(endpoint_url)?,
            credentials: credentials?,
            message_group_id: group?,
            format: format?,
            limits: limits?,
        })
    }
}

impl SqsConfigIn {
    pub(super) fn read(self, e: &mut Vec<FieldError>) -> Option<SqsConfig> {
        let (queue_url, _) = http_url(self.queue_url, "config.queueUrl", true, e);
        let region = region(self.region, e);
        let aws = self.aws.read(e)?;
        Some(SqsConfig {
            queue_url: queue_url?,
            region: region?,
            endpoint_url: aws.endpoint_url,
            credentials: aws.credentials,
            message_group_id: aws.message_group_id,
            format: aws.format,
            limits: aws.limits,
        })
    }
}

impl SnsConfigIn {
    pub(super) fn read(self, e: &mut Vec<FieldError>) -> Option<SnsConfig> {
        let topic_arn = string(self.topic_arn, "config.topicArn", true, e).and_then(|arn| {
            if rules::is_sns_arn(&arn) {
                Some(arn)
            } else {
                err(
                    e,
                    "config.topicArn",
                    "must be an SNS topic ARN: arn:aws:sns:<region>:<account>:<name>",
                )
            }
        });
        let region = region(self.region, e);
        let aws = self.aws.read(e)?;
        Some(SnsConfig {
            topic_arn: topic_arn?,
            region: region?,
            endpoint_url: aws.endpoint_url,
            credentials: aws.credentials,
            message_group_id: aws.message_group_id,
            format: aws.format,
            limits: aws.limits,
        })
    }
}

/// A whole number in `range`, as JSON Schema counts integers (5 and 5.0 alike).
fn whole(
    f: Field<f64>,
    field: &str,
    range: std::ops::RangeInclusive<u32>,
    e: &mut Vec<FieldError>,
) -> Option<Option<u32>> {
    match f {
        Field::Missing => Some(None),
        Field::Valid(n)
            if n.fract() == 0.0
                && n >= f64::from(*range.start())
                && n <= f64::from(*range.end()) =>
        {
            Some(Some(n as u32))
        }
        _ => err(
            e,
            field,
            &format!(
                "must be an integer from {} to {}",
                range.start(),
                range.end()
            ),
        ),
    }
}

fn duration(f: Field<String>, field: &str, e: &mut Vec<FieldError>) -> Option<Option<u64>> {
    match f {
        Field::Missing => Some(None),
        Field::Valid(s) => match period::parse(&s) {
            Some(ms) => Some(Some(ms)),
            None => err(
                e,
                field,
                "must be a whole number from 1 to 999999 and a unit: 500ms, 1s, 5m, 1h",
            ),
        },
        Field::Invalid(_) => err(e, field, "must be a string such as 1s"),
    }
}

impl LimitsIn {
    /// `flowControl` and `circuitBreaker`, each problem named by its field.
    pub(super) fn read(self, e: &mut Vec<FieldError>) -> Option<Limits> {
        let flow = match self.flow_control {
            Field::Missing => Some(None),
            Field::Valid(f) => f.read(e).map(Some),
            Field::Invalid(_) => err(e, "config.flowControl", "must be null or an object"),
        };
        let breaker = match self.circuit_breaker {
            Field::Missing => Some(None),
            Field::Valid(b) => b.read(e).map(Some),
            Field::Invalid(_) => err(e, "config.circuitBreaker", "must be null or an object"),
        };
        Some(Limits {
            flow: flow?,
            breaker: breaker?,
        })
    }
}

impl FlowControlIn {
    fn read(self, e: &mut Vec<FieldError>) -> Option<FlowControl> {
        let parallelism = whole(
            self.parallelism,
            "config.flowControl.parallelism",
            1..=gate::MAX_PARALLELISM,
            e,
        );
        let rate = whole(self.rate, "config.flowControl.rate", 1..=gate::MAX_RATE, e);
        let period = duration(self.period, "config.flowControl.period", e);
        Some(FlowControl {
            parallelism: parallelism?,
            rate: rate?,
            period_ms: period?.unwrap_or(gate::DEFAULT_PERIOD_MS),
        })
    }
}

impl CircuitBreakerIn {
    fn read(self, e: &mut Vec<FieldError>) -> Option<CircuitBreaker> {
        let failures = whole(
            self.failures,
            "config.circuitBreaker.failures",
            gate::FAILURES,
            e,
        );
        let cooldown = duration(self.cooldown, "config.circuitBreaker.cooldown", e);
        Some(CircuitBreaker {
            failures: failures?.unwrap_or(gate::DEFAULT_FAILURES),
            cooldown_ms: cooldown?.unwrap_or(gate::DEFAULT_COOLDOWN_MS),
        })
    }
}
