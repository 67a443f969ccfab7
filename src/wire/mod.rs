//! Wire types: what the API reads and writes, separate from domain types.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

pub mod batch;
pub mod bulk;
pub mod event;
pub mod problem;
pub mod pull;
pub mod schedule;
pub mod span;
pub mod target;

pub use target::TargetIn;

use crate::domain::{
    message::{Attempt, Message},
    target::{FieldError, Target},
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
    /// The circuit breaker's state; null without `config.circuitBreaker`.
    pub health: Option<HealthOut>,
}

/// A circuit breaker (docs/api.md#circuit-breaker): `open`, its messages wait without
/// consuming attempts until `openUntil`; then one probe (`halfOpen`) decides.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthOut {
    #[schema(value_type = String, example = "closed")]
    pub state: &'static str,
    /// Retryable failures in a row across the target's messages.
    pub consecutive_failures: u32,
    #[serde(with = "serde_ts::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub open_until: Option<DateTime<Utc>>,
}

impl HealthOut {
    pub fn new(t: &Target) -> Option<Self> {
        t.config.limits().breaker.map(|_| Self {
            state: t.health.state.as_str(),
            consecutive_failures: t.health.consecutive_failures,
            open_until: t.health.open_until,
        })
    }
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
            health: HealthOut::new(t),
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
    /// The message's orderingKey (docs/api.md#ordering-keys), if it has one.
    pub ordering_key: Option<String>,
    /// The schedule whose run made this message (docs/api.md#recurring-schedules), if one did.
    #[schema(example = "DI-S-aabbcc1122")]
    pub schedule_id: Option<String>,
    /// The event that made this message (docs/api.md#events-and-subscriptions), if one did.
    #[schema(example = "DI-E-01890a5d-ac96-774b-bcce-b302099a8057")]
    pub event_id: Option<String>,
    /// That event's type.
    #[serde(rename = "type")]
    #[schema(example = "order.created")]
    pub event_type: Option<String>,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
    pub payload: String,
}

impl MessageOut {
    /// The message's answer as JSON text, to be kept (with an idempotency
    /// key) or sent as it is.
    pub fn text(m: &Message) -> Box<serde_json::value::RawValue> {
        serde_json::value::to_raw_value(&Self::new(m)).expect("a message serialises to JSON")
    }

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
            ordering_key: m.ordering_key.as_deref().map(str::to_string),
            schedule_id: m.schedule_id.as_ref().map(ToString::to_string),
            event_id: m.event_id.as_ref().map(ToString::to_string),
            event_type: m.event_type.clone(),
            created_at: m.created_at,
            updated_at: m.updated_at,
            payload: m.payload.as_str().to_string(),
        }
    }
}

/// Schedule a message.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageIn {
    #[schema(value_type = String, required = true, example = "DI-T-aabbcc1122", pattern = "^DI-T-[0-9a-f]{10}$")]
    pub target_id: Field<String>,
    /// RFC 3339 with an offset; a past time is delivered at once.
    #[schema(value_type = String, required = true, example = "2020-07-01T12:34:00Z", format = DateTime)]
    pub delivery_time: Field<String>,
    /// At most 61,440 characters (Unicode scalar values); send JSON as a string.
    #[schema(value_type = String, required = true, example = "Hello, World!", max_length = 61440)]
    pub payload: Field<String>,
    /// Messages of one target with the same orderingKey are attempted one at
    /// a time, in order of deliveryTime, then of creation (docs/api.md#ordering-keys).
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255, example = "order-1234",
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub ordering_key: Field<String>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RescheduleIn {
    /// RFC 3339 with an offset; a past time is delivered at once.
    #[schema(value_type = String, required = true, example = "2020-07-01T12:34:00Z", format = DateTime)]
    pub delivery_time: Field<String>,
}

/// A webhook's new signing secret: how long the replaced one keeps signing.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RotateSecretIn {
    /// Seconds, 0 to 604800 (seven days), default 86400: until then every
    /// delivery carries two `v1,` signatures, by the new secret and by the
    /// replaced one; 0 replaces it at once.
    #[schema(value_type = Option<u32>, minimum = 0, maximum = 604800, example = 86400)]
    pub overlap_seconds: Field<f64>,
}

/// A member of a request body that never fails to deserialize: it is
/// missing, of the wrong type, or a value. A body is then read whole, and
/// every member's problem is named at once (`errors[]`), not only the first.
/// In the document it is the member's own type, required.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Field<T> {
    #[default]
    Missing,
    /// Of another type; what it must be ("a string").
    Invalid(String),
    Valid(T),
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read as an option: serde hands a member that is absent to
        // `deserialize_option` as none, so no `#[serde(default)]` is needed
        // (which would put a default into the document).
        let Some(value) = Option::<Value>::deserialize(d)? else {
            return Ok(Field::Missing);
        };
        if value.is_null() {
            return Ok(Field::Missing);
        }
        Ok(match serde_json::from_value::<T>(value) {
            Ok(v) => Field::Valid(v),
            Err(e) => {
                let e = e.to_string();
                Field::Invalid(expected(&e).unwrap_or("of another type").to_string())
            }
        })
    }
}

/// What a serde error says a value must be (`a string` from "invalid type:
/// integer `5`, expected a string at line 1 column 9"), if it says.
pub fn expected(serde_message: &str) -> Option<&str> {
    let (_, expected) = serde_message.split_once(", expected ")?;
    Some(expected.split(" at line ").next().unwrap_or(expected))
}

impl<T> Field<T> {
    /// The value, or its problem added to `errors` under `name`.
    pub fn take(self, name: &str, errors: &mut Vec<FieldError>) -> Option<T> {
        match self {
            Field::Valid(v) => Some(v),
            Field::Missing => {
                errors.push(FieldError::new(name, "is required"));
                None
            }
            Field::Invalid(expected) => {
                errors.push(FieldError::new(name, format!("must be {expected}")));
                None
            }
        }
    }

    /// As `take`, for a member that may be left out.
    pub fn take_optional(self, name: &str, errors: &mut Vec<FieldError>) -> Option<T> {
        match self {
            Field::Missing => None,
            f => f.take(name, errors),
        }
    }
}

/// An RFC 3339 instant, or its problem added to `errors` under `name`.
pub fn instant(s: &str, name: &str, errors: &mut Vec<FieldError>) -> Option<DateTime<Utc>> {
    crate::domain::time::parse_rfc3339(s)
        .map_err(|e| errors.push(FieldError::new(name, e.to_string())))
        .ok()
}

impl Field<String> {
    /// A required RFC 3339 instant.
    pub fn take_instant(self, name: &str, errors: &mut Vec<FieldError>) -> Option<DateTime<Utc>> {
        self.take(name, errors)
            .and_then(|s| instant(&s, name, errors))
    }

    /// An RFC 3339 instant that may be left out.
    pub fn take_optional_instant(
        self,
        name: &str,
        errors: &mut Vec<FieldError>,
    ) -> Option<DateTime<Utc>> {
        self.take_optional(name, errors)
            .and_then(|s| instant(&s, name, errors))
    }

    /// A required `targetId` in a target id's form; one that is not names
    /// no target (the same 400 an unknown target gets).
    pub fn take_target_id(
        self,
        errors: &mut Vec<FieldError>,
    ) -> Option<crate::domain::ids::TargetId> {
        self.take("targetId", errors)
            .and_then(|id| match id.parse() {
                Ok(t) => Some(t),
                Err(_) => {
                    errors.push(FieldError::new("targetId", "is not a known target"));
                    None
                }
            })
    }

    /// As `take_target_id`, for a `targetId` that may be left out.
    pub fn take_optional_target_id(
        self,
        errors: &mut Vec<FieldError>,
    ) -> Option<crate::domain::ids::TargetId> {
        match self {
            Field::Missing => None,
            f => f.take_target_id(errors),
        }
    }
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
    /// The wait before the next attempt that the receiver asked for with
    /// Retry-After (on a 429 or 503), as applied: at most `retry.max_retry_after`.
    pub retry_after_ms: Option<u64>,
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
            retry_after_ms: a.retry_after_ms,
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

/// A token request (RFC 6749 §4.4), form-encoded. The client authenticates
/// with HTTP Basic, or with `client_id` and `client_secret` here. The handler
/// reads the form itself, because RFC 6749 refuses a repeated parameter,
/// which a form deserializer would take silently; this type documents it.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct TokenForm {
    #[schema(example = "client_credentials", pattern = "^client_credentials$")]
    pub grant_type: String,
    /// Space-separated scopes, each one the client has; all of them when absent.
    pub scope: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_member_of_a_message_is_read_and_each_problem_named() {
        let m: MessageIn =
            serde_json::from_value(json!({"targetId": 5, "payload": null})).expect("never fails");
        let mut errors = Vec::new();
        assert_eq!(m.target_id.take("targetId", &mut errors), None);
        assert_eq!(m.delivery_time.take("deliveryTime", &mut errors), None);
        assert_eq!(m.payload.take("payload", &mut errors), None);
        let named: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.field.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("targetId", "must be a string"),
                ("deliveryTime", "is required"),
                ("payload", "is required")
            ]
        );
        let m: MessageIn = serde_json::from_value(
            json!({"targetId": "DI-T-aabbcc1122", "deliveryTime": "2030-01-01T00:00:00Z", "payload": "x"}),
        )
        .unwrap();
        assert_eq!(m.payload, Field::Valid("x".to_string()));
    }
}
