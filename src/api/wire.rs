//! Wire types: what the API reads and writes, separate from domain types.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::{
    message::{Attempt, Message},
    target::Target,
    time::serde_ts,
};

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetOut {
    #[schema(example = "DI-T-aabbcc1122")]
    pub target_id: String,
    pub name: String,
    #[serde(rename = "type")]
    #[schema(example = "webhook")]
    pub kind: &'static str,
    pub enabled: bool,
    /// The configuration; secrets show as `***`, except a generated signing
    /// secret in the response to the create that generated it.
    #[schema(value_type = Object)]
    pub config: Value,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
}

impl TargetOut {
    pub fn new(t: &Target) -> Self {
        Self {
            target_id: t.id.to_string(),
            name: t.name.clone(),
            kind: t.config.kind(),
            enabled: t.enabled,
            config: t.config.to_public_json(),
            created_at: t.created_at,
            updated_at: t.updated_at,
        }
    }

    /// As `new`, but a signing secret Dispatch generated is shown in full:
    /// the one time its owner can learn it.
    pub fn with_generated_secret(t: &Target, generated: bool) -> Self {
        let mut out = Self::new(t);
        if let (true, crate::domain::target::TargetConfig::Webhook(w)) = (generated, &t.config) {
            out.config["signingSecret"] = Value::String(w.signing_secret.clone());
        }
        out
    }
}

/// What a target is.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum TargetKindIn {
    Webhook,
    Sqs,
    Sns,
}

/// Create a target. `config` depends on `type`: see the README.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct TargetIn {
    /// 1 to 200 characters, not only spaces.
    #[schema(min_length = 1, max_length = 200, pattern = "\\S")]
    pub name: String,
    #[schema(rename = "type")]
    pub kind: TargetKindIn,
    #[schema(value_type = Object)]
    pub config: Value,
    /// Defaults to true.
    pub enabled: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageOut {
    #[schema(example = "DI-M-0190f3a4-7b1c-7cde-8f00-112233445566")]
    pub message_id: String,
    pub target_id: String,
    /// Scheduled, Delivered, Cancelled or DeadLetter
    pub state: &'static str,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub delivery_time: DateTime<Utc>,
    #[serde(with = "serde_ts::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub attempt_count: u32,
    #[serde(with = "serde_ts::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub delivered_at: Option<DateTime<Utc>>,
    #[serde(with = "serde_ts::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub cancelled_at: Option<DateTime<Utc>>,
    #[serde(with = "serde_ts::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub dead_lettered_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
    pub payload: String,
}

impl MessageOut {
    pub fn new(m: &Message) -> Self {
        Self {
            message_id: m.id.to_string(),
            target_id: m.target_id.to_string(),
            state: m.state.as_str(),
            delivery_time: m.delivery_time,
            next_attempt_at: if m.state == crate::domain::message::State::Scheduled {
                m.next_attempt_at
            } else {
                None
            },
            attempt_count: m.attempt_count,
            delivered_at: m.delivered_at,
            cancelled_at: m.cancelled_at,
            dead_lettered_at: m.dead_lettered_at,
            last_error: m.last_error.clone(),
            created_at: m.created_at,
            updated_at: m.updated_at,
            payload: m.payload.as_str().to_string(),
        }
    }
}

/// Schedule a message.
#[derive(Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct MessageIn {
    #[schema(example = "DI-T-aabbcc1122", pattern = "^DI-T-[0-9a-f]{10}$")]
    pub target_id: String,
    /// RFC 3339 with an offset; a past time is delivered at once.
    #[schema(example = "2020-07-01T12:34:00Z", format = DateTime)]
    pub delivery_time: String,
    /// At most 61,440 characters.
    #[schema(example = "Hello, World!", max_length = 61440)]
    pub payload: String,
}

#[derive(Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct RescheduleIn {
    #[schema(example = "2020-07-01T12:34:00Z")]
    pub delivery_time: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptOut {
    pub attempt: u32,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub started_at: DateTime<Utc>,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub finished_at: DateTime<Utc>,
    pub duration_ms: u64,
    /// Success, RetryableFailure or NonRetryableFailure
    pub outcome: &'static str,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    /// The first 1,024 bytes of the response, decoded as UTF-8 with invalid sequences replaced.
    pub response_body: Option<String>,
}

impl AttemptOut {
    pub fn new(a: &Attempt) -> Self {
        Self {
            attempt: a.attempt,
            started_at: a.started_at,
            finished_at: a.finished_at,
            duration_ms: a.duration_ms,
            outcome: a.outcome.as_str(),
            status_code: a.status_code,
            error: a.error.clone(),
            response_body: a.response_body.clone(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct List<T: ToSchema> {
    pub items: Vec<T>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TokenOut {
    pub access_token: String,
    /// Always Bearer
    pub token_type: &'static str,
    pub expires_in: u64,
    pub scope: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OAuthErrorOut {
    /// invalid_request, invalid_client, unsupported_grant_type or invalid_scope
    pub error: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_description: Option<String>,
}
