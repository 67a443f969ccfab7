//! What a pull target's consumers send and get (docs/api.md#pull-targets).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{serde_ts, Field};
use crate::domain::{
    ids::EventId,
    message::Message,
    receipt::ReceiptHandle,
    target::{
        pull::{self, Span},
        FieldError,
    },
};

/// A receive as read from its body.
#[derive(Debug, Clone)]
pub struct ReceiveRequest {
    /// 1 to 100.
    pub max: u32,
    /// How long to wait for something receivable: at most 20 s.
    pub wait: Duration,
    /// The target's visibility timeout when absent.
    pub visibility: Option<Span>,
}

/// At most this many receipt handles in one ack or nack.
pub const MAX_HANDLES: usize = 1000;

/// Receive messages; every member may be left out (an empty body too).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceiveIn {
    /// 1 to 100; 10 when absent.
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub max: Field<f64>,
    /// How long to wait for a message when none is receivable: `0s` (the
    /// default) to `20s`. The answer comes as soon as one is.
    #[schema(schema_with = wait_schema, required = false)]
    pub wait: Field<String>,
    /// How long the messages received stay hidden from other receives:
    /// 1 s to 12 h; the target's `visibilityTimeout` when absent.
    #[schema(schema_with = receive_visibility_schema, required = false)]
    pub visibility_timeout: Field<String>,
}

/// Receipt handles of received messages.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AckIn {
    /// 1 to 1000 handles, each from a receive of this target.
    #[schema(value_type = Vec<String>, min_items = 1, max_items = 1000)]
    pub receipt_handles: Field<Vec<String>>,
}

/// Receipt handles of received messages to give back.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NackIn {
    /// 1 to 1000 handles, each from a receive of this target.
    #[schema(value_type = Vec<String>, min_items = 1, max_items = 1000)]
    pub receipt_handles: Field<Vec<String>>,
    /// When the messages are receivable again: `0s` (the default, at once)
    /// to `12h`.
    #[schema(schema_with = delay_schema, required = false)]
    pub delay: Field<String>,
}

/// A received message's remaining visibility.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VisibilityIn {
    #[schema(value_type = String, required = true)]
    pub receipt_handle: Field<String>,
    /// `0s` (receivable at once) to `12h`, from now.
    #[schema(schema_with = visibility_schema, required = true)]
    pub visibility_timeout: Field<String>,
}

fn wait_schema() -> utoipa::openapi::Object {
    super::span::schema(0, pull::MAX_WAIT_MS, "20s", true).build()
}

fn receive_visibility_schema() -> utoipa::openapi::Object {
    super::span::schema(
        *pull::VISIBILITY_MS.start(),
        *pull::VISIBILITY_MS.end(),
        "60s",
        true,
    )
    .build()
}

fn delay_schema() -> utoipa::openapi::Object {
    super::span::schema(0, TWELVE_HOURS, "30s", true).build()
}

fn visibility_schema() -> utoipa::openapi::Object {
    super::span::schema(0, TWELVE_HOURS, "120s", false).build()
}

/// A duration member within `range` (milliseconds); `None` when absent.
fn span(
    f: Field<String>,
    name: &str,
    range: std::ops::RangeInclusive<u64>,
    within: &str,
    required: bool,
    e: &mut Vec<FieldError>,
) -> Option<Span> {
    let problem =
        format!("must be a duration {within}: a whole number and a unit (ms, s, m, h, d)");
    match f {
        Field::Missing if required => {
            e.push(FieldError::new(name, "is required"));
            None
        }
        Field::Missing => None,
        Field::Valid(s) => match Span::parse(&s) {
            Some(span) if range.contains(&span.ms()) => Some(span),
            _ => {
                e.push(FieldError::new(name, problem));
                None
            }
        },
        Field::Invalid(_) => {
            e.push(FieldError::new(name, problem));
            None
        }
    }
}

const TWELVE_HOURS: u64 = 43_200_000;

impl ReceiveIn {
    pub fn read(self) -> Result<ReceiveRequest, Vec<FieldError>> {
        let mut e = Vec::new();
        let max = match self.max {
            Field::Missing => Some(pull::DEFAULT_RECEIVE),
            Field::Valid(n)
                if n.fract() == 0.0 && n >= 1.0 && n <= f64::from(pull::MAX_RECEIVE) =>
            {
                Some(n as u32)
            }
            _ => {
                e.push(FieldError::new("max", "must be an integer from 1 to 100"));
                None
            }
        };
        let wait = span(
            self.wait,
            "wait",
            0..=pull::MAX_WAIT_MS,
            "from 0s to 20s",
            false,
            &mut e,
        );
        let visibility = span(
            self.visibility_timeout,
            "visibilityTimeout",
            pull::VISIBILITY_MS,
            "from 1s to 12h",
            false,
            &mut e,
        );
        match max {
            Some(max) if e.is_empty() => Ok(ReceiveRequest {
                max,
                wait: Duration::from_millis(wait.map_or(0, |w| w.ms())),
                visibility,
            }),
            _ => Err(e),
        }
    }
}

fn handles(f: Field<Vec<String>>, e: &mut Vec<FieldError>) -> Option<Vec<String>> {
    match f {
        Field::Valid(h) if (1..=MAX_HANDLES).contains(&h.len()) => Some(h),
        Field::Missing => {
            e.push(FieldError::new("receiptHandles", "is required"));
            None
        }
        _ => {
            e.push(FieldError::new(
                "receiptHandles",
                "must be a list of 1 to 1000 receipt handles (strings)",
            ));
            None
        }
    }
}

impl AckIn {
    pub fn read(self) -> Result<Vec<String>, Vec<FieldError>> {
        let mut e = Vec::new();
        handles(self.receipt_handles, &mut e).ok_or(e)
    }
}

impl NackIn {
    pub fn read(self) -> Result<(Vec<String>, Duration), Vec<FieldError>> {
        let mut e = Vec::new();
        let h = handles(self.receipt_handles, &mut e);
        let delay = span(
            self.delay,
            "delay",
            0..=TWELVE_HOURS,
            "from 0s to 12h",
            false,
            &mut e,
        );
        match h {
            Some(h) if e.is_empty() => Ok((h, Duration::from_millis(delay.map_or(0, |d| d.ms())))),
            _ => Err(e),
        }
    }
}

impl VisibilityIn {
    pub fn read(self) -> Result<(String, Duration), Vec<FieldError>> {
        let mut e = Vec::new();
        let handle = match self.receipt_handle {
            Field::Valid(h) => Some(h),
            Field::Missing => {
                e.push(FieldError::new("receiptHandle", "is required"));
                None
            }
            Field::Invalid(_) => {
                e.push(FieldError::new("receiptHandle", "must be a string"));
                None
            }
        };
        let v = span(
            self.visibility_timeout,
            "visibilityTimeout",
            0..=TWELVE_HOURS,
            "from 0s to 12h",
            true,
            &mut e,
        );
        match (handle, v) {
            (Some(h), Some(v)) if e.is_empty() => Ok((h, Duration::from_millis(v.ms()))),
            _ => Err(e),
        }
    }
}

/// A received message.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceivedOut {
    #[schema(example = "DI-M-0190f3a4-7b1c-7cde-8f00-112233445566")]
    pub message_id: String,
    /// Names this receive: ack, nack and visibility take it. It goes stale
    /// when the message is received again, acked, nacked, cancelled or
    /// rescheduled.
    pub receipt_handle: String,
    /// Receives since the message was scheduled (or last rescheduled,
    /// redriven or replayed), this one included.
    pub receive_count: u32,
    /// When the message was created.
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub enqueued_at: DateTime<Utc>,
    /// When this receive was made.
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub delivery_time: DateTime<Utc>,
    /// The deliveryTime of its most recent schedule or reschedule.
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub original_delivery_time: DateTime<Utc>,
    pub ordering_key: Option<String>,
    pub event_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    pub payload: String,
}

impl ReceivedOut {
    pub fn new(
        m: &Message,
        handle: &ReceiptHandle,
        receive_count: u32,
        received_at: DateTime<Utc>,
    ) -> Self {
        Self {
            message_id: m.id.to_string(),
            receipt_handle: handle.encode(),
            receive_count,
            enqueued_at: m.created_at,
            delivery_time: received_at,
            original_delivery_time: m.delivery_time,
            ordering_key: m.ordering_key.as_ref().map(|k| k.as_str().to_string()),
            event_id: m.event_id.as_ref().map(EventId::to_string),
            event_type: m.event_type.clone(),
            payload: m.payload.as_str().to_string(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReceiveOut {
    pub items: Vec<ReceivedOut>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AckOut {
    /// Messages acknowledged: each is Delivered.
    pub acked: u64,
    /// The handles that named no message's latest receive, as sent.
    pub stale: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NackOut {
    /// Messages given back.
    pub released: u64,
    pub stale: Vec<String>,
}
