//! Delivery to targets: one attempt in, one classified result out.

pub mod aws;
pub mod guard;
pub mod http1;
pub mod oauth;
pub mod policy;
pub mod resolver;
pub mod signing;
pub mod webhook;

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::{
    clock::Clock,
    domain::{
        ids::{EventId, MessageId, TargetId},
        retry::AttemptOutcome,
        target::{Format, TargetConfig, RAW_CONTENT_TYPE},
        time,
    },
};

/// One message as delivery reads it: what is sent, and where. The sweeper
/// lends it from what it claimed.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub id: &'a MessageId,
    pub target_id: &'a TargetId,
    pub target: &'a TargetConfig,
    pub payload: &'a str,
    pub delivery_time: DateTime<Utc>,
    pub ordering_key: Option<&'a str>,
    /// The event that made it, and its type (docs/api.md#events-and-subscriptions).
    pub event_id: Option<&'a EventId>,
    pub event_type: Option<&'a str>,
}

/// The JSON body every target receives (docs/api.md#delivery-formats).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope<'a> {
    pub message_id: &'a MessageId,
    pub target_id: &'a TargetId,
    pub original_delivery_time: String,
    pub delivery_time: String,
    pub payload: &'a str,
    /// Only for a message made from an event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<&'a EventId>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub event_type: Option<&'a str>,
}

impl<'a> Envelope<'a> {
    pub fn new(m: &Outgoing<'a>, now: DateTime<Utc>) -> Self {
        Self {
            message_id: m.id,
            target_id: m.target_id,
            original_delivery_time: time::format(&m.delivery_time),
            delivery_time: time::format(&now),
            payload: m.payload,
            event_id: m.event_id,
            event_type: m.event_type,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("envelopes serialize")
    }
}

/// The wait a `Retry-After` value asks for: delay-seconds, or an HTTP date
/// (a date already past asks for none). Anything else is ignored.
pub fn retry_after(value: &str) -> Option<std::time::Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(std::time::Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// What one attempt came to, before the ladder decides what follows.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub outcome: AttemptOutcome,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub response_body: Option<String>,
    /// The wait the receiver asked for before the next attempt (a 429 or 503
    /// with Retry-After), as asked.
    pub retry_after: Option<std::time::Duration>,
}

impl Delivered {
    pub fn failure(outcome: AttemptOutcome, error: impl Into<String>) -> Self {
        Self {
            outcome,
            status_code: None,
            error: Some(error.into()),
            response_body: None,
            retry_after: None,
        }
    }
}

/// Holds the long-lived clients; one per process, shared by every delivery.
pub struct Deliverer {
    webhook: webhook::WebhookClient,
    aws: aws::AwsClients,
    /// Send messages due together for one SQS target with SendMessageBatch.
    sqs_batch: bool,
    /// The time each envelope's `deliveryTime` says.
    clock: Arc<dyn Clock>,
}

/// At most this many entries go into one SendMessageBatch.
pub const SQS_BATCH_MAX: usize = 10;

impl Deliverer {
    pub fn new(
        webhook: webhook::WebhookClient,
        aws: aws::AwsClients,
        sqs_batch: bool,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            webhook,
            aws,
            sqs_batch,
            clock,
        }
    }

    /// Messages with the same key may be delivered together by `deliver_batch`.
    pub fn batch_key(&self, m: &Outgoing) -> Option<TargetId> {
        (self.sqs_batch && matches!(m.target, TargetConfig::Sqs(_))).then(|| m.target_id.clone())
    }

    /// The longest one attempt at this target may take: with OAuth, up to
    /// two token requests and two sends.
    pub fn attempt_timeout(&self, m: &Outgoing) -> Duration {
        match m.target {
            TargetConfig::Webhook(c) if c.auth.is_some() => 4 * self.webhook.timeout_for(c),
            TargetConfig::Webhook(c) => self.webhook.timeout_for(c),
            TargetConfig::Sqs(_) | TargetConfig::Sns(_) => self.aws.timeout(),
            TargetConfig::Pull(_) => Duration::ZERO,
        }
    }

    /// The longest `deliver` can take for this message, where its clients'
    /// own timeouts end it (a webhook's request, with or without tokens).
    pub fn bounded_by(&self, m: &Outgoing) -> Option<Duration> {
        match m.target {
            TargetConfig::Webhook(c) if c.auth.is_none() => Some(self.webhook.timeout_for(c)),
            TargetConfig::Webhook(_) => Some(self.webhook.max_timeout()),
            TargetConfig::Sqs(_) | TargetConfig::Sns(_) => None,
            TargetConfig::Pull(_) => Some(Duration::ZERO),
        }
    }

    pub async fn deliver(&self, m: &Outgoing<'_>) -> Delivered {
        let envelope = Envelope::new(m, self.clock.now());
        match m.target {
            TargetConfig::Webhook(config) => {
                let (body, raw) = match config.format {
                    Format::Envelope => (envelope.to_bytes().into(), None),
                    // The producer's characters exactly; the envelope's
                    // fields go as headers.
                    Format::Raw => (
                        bytes::Bytes::copy_from_slice(m.payload.as_bytes()),
                        Some(webhook::Raw {
                            content_type: config
                                .content_type
                                .as_deref()
                                .unwrap_or(RAW_CONTENT_TYPE),
                            envelope: &envelope,
                        }),
                    ),
                };
                let letter = webhook::Letter {
                    id: m.id,
                    ordering_key: m.ordering_key,
                    event_type: m.event_type,
                    body,
                    raw,
                };
                self.webhook.deliver(config, &letter).await
            }
            TargetConfig::Sqs(config) => self.aws.send_sqs(config, &sqs_entry(m, &envelope)).await,
            TargetConfig::Sns(config) => {
                self.aws.publish_sns(config, &sqs_entry(m, &envelope)).await
            }
            // Its consumers receive its messages; the sweeper never claims them.
            TargetConfig::Pull(_) => Delivered::failure(
                AttemptOutcome::NonRetryableFailure,
                "a pull target's messages are received by its consumers, not sent".to_string(),
            ),
        }
    }

    /// Delivers up to ten messages of one SQS target in one call; one result
    /// per message, in order. Other targets are delivered one by one.
    pub async fn deliver_batch(&self, messages: &[Outgoing<'_>]) -> Vec<Delivered> {
        match messages.first().map(|m| m.target) {
            Some(TargetConfig::Sqs(config)) if messages.len() > 1 => {
                let now = self.clock.now();
                let envelopes: Vec<Envelope> =
                    messages.iter().map(|m| Envelope::new(m, now)).collect();
                let entries: Vec<aws::SqsEntry> = messages
                    .iter()
                    .zip(&envelopes)
                    .map(|(c, e)| sqs_entry(c, e))
                    .collect();
                self.aws.send_sqs_batch(config, &entries).await
            }
            _ => futures::future::join_all(messages.iter().map(|m| self.deliver(m))).await,
        }
    }
}

/// An SQS or SNS message: the envelope as its body, or (raw) the payload,
/// with `deliveryTime` joining the attributes the envelope's fields make.
fn sqs_entry<'a>(m: &Outgoing<'a>, envelope: &'a Envelope<'a>) -> aws::SqsEntry<'a> {
    let raw = m.target.format() == Format::Raw;
    aws::SqsEntry {
        message_id: m.id.to_string(),
        target_id: m.target_id.as_str(),
        original_delivery_time: &envelope.original_delivery_time,
        delivery_time: raw.then_some(envelope.delivery_time.as_str()),
        ordering_key: m.ordering_key,
        event_id: m.event_id.map(ToString::to_string),
        event_type: m.event_type,
        body: if raw {
            m.payload.to_string()
        } else {
            String::from_utf8(envelope.to_bytes()).expect("JSON is UTF-8")
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        assert_eq!(retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(" 0 "), Some(Duration::ZERO));
        let in_a_minute = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(61));
        let wait = retry_after(&in_a_minute).unwrap();
        assert!(
            wait > Duration::from_secs(55) && wait <= Duration::from_secs(61),
            "{wait:?}"
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        for ignored in ["", "-5", "1.5", "soon", "120 seconds"] {
            assert_eq!(retry_after(ignored), None, "{ignored:?}");
        }
    }
}
