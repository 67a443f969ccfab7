//! Schedules on the wire (docs/api.md#recurring-schedules): what `POST /schedules` and a merge
//! patch read, and what every schedule endpoint answers.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::Field;
use crate::domain::{
    ids::{AccountId, ScheduleId, TargetId},
    message::OrderingKey,
    payload::Payload,
    schedule::{parse_zone, Recurrence, Schedule},
    target::FieldError,
    time::{self, serde_ts},
};

/// A schedule as created, or as a merge patch leaves it.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleIn {
    #[schema(value_type = String, required = true, example = "DI-T-aabbcc1122", pattern = "^DI-T-[0-9a-f]{10}$")]
    pub target_id: Field<String>,
    /// At most 200 characters; empty when left out.
    #[schema(value_type = Option<String>, max_length = 200, example = "daily report")]
    pub name: Field<String>,
    /// Five fields (minute hour day-of-month month day-of-week) with names,
    /// ranges, lists and steps, read as wall-clock times in `timeZone`.
    /// Exactly one of `cron` and `every`.
    #[schema(value_type = Option<String>, example = "30 9 * * MON-FRI")]
    pub cron: Field<String>,
    /// A duration of at least `1s` (`30s`, `15m`, `1h`, `1h 30m`, `1500ms`):
    /// runs at `startAt`, or the creation instant, plus whole multiples of
    /// it. Exactly one of `cron` and `every`.
    #[schema(value_type = Option<String>, example = "15m")]
    pub every: Field<String>,
    /// An IANA time zone name; `UTC` when left out.
    #[schema(value_type = Option<String>, example = "Europe/Stockholm")]
    pub time_zone: Field<String>,
    /// Each run's message's payload: at most 61,440 characters.
    #[schema(value_type = String, required = true, max_length = 61440, example = "{\"report\": \"daily\"}")]
    pub payload: Field<String>,
    /// Each run's message's orderingKey (docs/api.md#ordering-keys).
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255)]
    pub ordering_key: Field<String>,
    /// No run before this instant (RFC 3339 with an offset).
    #[schema(value_type = Option<String>, format = DateTime)]
    pub start_at: Field<String>,
    /// No run after this instant (RFC 3339 with an offset).
    #[schema(value_type = Option<String>, format = DateTime)]
    pub end_at: Field<String>,
    /// Created paused, or (in a patch) paused and resumed as
    /// `/pause` and `/resume` do.
    #[schema(value_type = Option<bool>)]
    pub paused: Field<bool>,
}

/// What a schedule's document says, checked.
#[derive(Debug, Clone)]
pub struct ScheduleSpec {
    pub target_id: TargetId,
    pub name: String,
    pub recurrence: Recurrence,
    pub zone: chrono_tz::Tz,
    pub payload: Payload,
    pub ordering_key: Option<OrderingKey>,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub paused: bool,
}

impl ScheduleSpec {
    /// The schedule this document describes, as created at `created_at`:
    /// not yet saved (revision 0), no run made, its cursor not yet set.
    pub fn into_schedule(
        self,
        id: ScheduleId,
        account: AccountId,
        created_at: DateTime<Utc>,
    ) -> Schedule {
        Schedule {
            id,
            account,
            target_id: self.target_id,
            name: self.name,
            recurrence: self.recurrence,
            zone: self.zone,
            payload: self.payload,
            ordering_key: self.ordering_key,
            start_at: self.start_at,
            end_at: self.end_at,
            paused: self.paused,
            next_run_at: None,
            last_run_at: None,
            revision: 0,
            created_at,
            updated_at: created_at,
        }
    }
}

const NAME_MAX_CHARS: usize = 200;

/// An instant to the millisecond, as a schedule keeps it.
fn instant(s: Option<String>, name: &str, errors: &mut Vec<FieldError>) -> Option<DateTime<Utc>> {
    s.and_then(|s| super::instant(&s, name, errors))
        .map(time::truncate_ms)
}

/// Every problem of a schedule's document, each named.
pub fn parse(doc: &Value) -> Result<ScheduleSpec, Vec<FieldError>> {
    if !doc.is_object() {
        return Err(vec![FieldError::new("", "must be a JSON object")]);
    }
    let input: ScheduleIn = serde_json::from_value(doc.clone())
        .map_err(|e| vec![FieldError::new("", e.to_string())])?;
    let mut errors = Vec::new();
    let target_id = input.target_id.take_target_id(&mut errors);
    let name = input
        .name
        .take_optional("name", &mut errors)
        .unwrap_or_default();
    if name.chars().count() > NAME_MAX_CHARS || name.chars().any(char::is_control) {
        errors.push(FieldError::new(
            "name",
            "must be at most 200 characters, none of them a control character",
        ));
    }
    let cron = input.cron.take_optional("cron", &mut errors);
    let every = input.every.take_optional("every", &mut errors);
    let recurrence = match (cron, every) {
        (Some(c), None) => match c.parse() {
            Ok(c) => Some(Recurrence::Cron(c)),
            Err(e) => {
                errors.push(FieldError::new("cron", e.0));
                None
            }
        },
        (None, Some(e)) => match e.parse() {
            Ok(e) => Some(Recurrence::Every(e)),
            Err(e) => {
                errors.push(FieldError::new("every", e.0));
                None
            }
        },
        (Some(_), Some(_)) => {
            errors.push(FieldError::new(
                "every",
                "cannot be given beside cron: give exactly one of cron and every",
            ));
            None
        }
        (None, None) => {
            if !errors
                .iter()
                .any(|e| e.field == "cron" || e.field == "every")
            {
                errors.push(FieldError::new(
                    "cron",
                    "is required unless every is given: give exactly one of cron and every",
                ));
            }
            None
        }
    };
    let zone = match input.time_zone.take_optional("timeZone", &mut errors) {
        None => Some(chrono_tz::Tz::UTC),
        Some(z) => match parse_zone(&z) {
            Ok(z) => Some(z),
            Err(e) => {
                errors.push(FieldError::new("timeZone", e.0));
                None
            }
        },
    };
    let payload =
        input
            .payload
            .take("payload", &mut errors)
            .and_then(|p| match Payload::parse(p) {
                Ok(p) => Some(p),
                Err(e) => {
                    errors.push(FieldError::new("payload", e.to_string()));
                    None
                }
            });
    let ordering_key = input
        .ordering_key
        .take_optional("orderingKey", &mut errors)
        .and_then(|k| {
            OrderingKey::parse(k)
                .map_err(|rule| errors.push(FieldError::new("orderingKey", rule)))
                .ok()
        });
    let start_at = input.start_at.take_optional("startAt", &mut errors);
    let start_at = instant(start_at, "startAt", &mut errors);
    let end_at = input.end_at.take_optional("endAt", &mut errors);
    let end_at = instant(end_at, "endAt", &mut errors);
    if let (Some(s), Some(e)) = (start_at, end_at) {
        if e < s {
            errors.push(FieldError::new("endAt", "must not be before startAt"));
        }
    }
    let paused = input
        .paused
        .take_optional("paused", &mut errors)
        .unwrap_or(false);
    match (target_id, recurrence, zone, payload) {
        (Some(target_id), Some(recurrence), Some(zone), Some(payload)) if errors.is_empty() => {
            Ok(ScheduleSpec {
                target_id,
                name,
                recurrence,
                zone,
                payload,
                ordering_key,
                start_at,
                end_at,
                paused,
            })
        }
        _ => Err(errors),
    }
}

/// The document a merge patch applies to: every field a person sets.
pub fn document(s: &Schedule) -> Value {
    json!({
        "targetId": s.target_id.as_str(),
        "name": s.name,
        "cron": s.recurrence.cron(),
        "every": s.recurrence.every(),
        "timeZone": s.zone.name(),
        "payload": s.payload.as_str(),
        "orderingKey": s.ordering_key.as_deref(),
        "startAt": s.start_at.as_ref().map(time::format),
        "endAt": s.end_at.as_ref().map(time::format),
        "paused": s.paused,
    })
}

/// RFC 7396 on `document(s)`, except that a patch giving one of `cron` and
/// `every` and not naming the other replaces the other: a schedule has
/// exactly one, and switching should not need a `null` for the one left.
pub fn merge(s: &Schedule, patch: &Value) -> Value {
    let mut doc = document(s);
    if let Some(p) = patch.as_object() {
        for (given, other) in [("cron", "every"), ("every", "cron")] {
            if p.get(given).is_some_and(|v| !v.is_null()) && !p.contains_key(other) {
                doc[other] = Value::Null;
            }
        }
    }
    json_patch::merge(&mut doc, patch);
    doc
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleOut {
    #[schema(example = "DI-S-aabbcc1122")]
    pub schedule_id: String,
    pub target_id: String,
    pub name: String,
    #[schema(example = "30 9 * * MON-FRI")]
    pub cron: Option<String>,
    #[schema(example = "15m")]
    pub every: Option<String>,
    #[schema(example = "Europe/Stockholm")]
    pub time_zone: String,
    pub payload: String,
    pub ordering_key: Option<String>,
    #[serde(with = "serde_ts::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub start_at: Option<DateTime<Utc>>,
    #[serde(with = "serde_ts::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub end_at: Option<DateTime<Utc>>,
    pub paused: bool,
    /// The first run at or after now; null while paused or when no run is
    /// left before `endAt`.
    #[serde(with = "serde_ts::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_run_at: Option<DateTime<Utc>>,
    /// The latest run whose message was created, at or before now.
    #[serde(with = "serde_ts::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_run_at: Option<DateTime<Utc>>,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
}

impl ScheduleOut {
    pub fn new(s: &Schedule, now: DateTime<Utc>) -> Self {
        Self {
            schedule_id: s.id.to_string(),
            target_id: s.target_id.to_string(),
            name: s.name.clone(),
            cron: s.recurrence.cron().map(str::to_string),
            every: s.recurrence.every().map(str::to_string),
            time_zone: s.zone.name().to_string(),
            payload: s.payload.as_str().to_string(),
            ordering_key: s.ordering_key.as_deref().map(str::to_string),
            start_at: s.start_at,
            end_at: s.end_at,
            paused: s.paused,
            next_run_at: s.next_run(now),
            last_run_at: s.last_run_at.filter(|&t| t <= now),
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(doc: Value) -> Vec<String> {
        parse(&doc)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn every_problem_is_named() {
        let ok = json!({"targetId": "DI-T-aabbcc1122", "every": "15m", "payload": "x"});
        assert!(parse(&ok).is_ok());
        assert_eq!(
            fields(json!({"every": "15m", "payload": "x"})),
            ["targetId"]
        );
        assert_eq!(
            fields(json!({"targetId": "DI-T-aabbcc1122", "payload": "x"})),
            ["cron"]
        );
        assert_eq!(
            fields(
                json!({"targetId": "DI-T-aabbcc1122", "cron": "* * * * *", "every": "1m", "payload": "x"})
            ),
            ["every"]
        );
        assert_eq!(
            fields(json!({"targetId": "DI-T-aabbcc1122", "cron": "61 * * * *", "payload": "x"})),
            ["cron"]
        );
        assert_eq!(
            fields(json!({"targetId": "DI-T-aabbcc1122", "every": "0.5s", "payload": "x"})),
            ["every"]
        );
        assert_eq!(
            fields(
                json!({"targetId": "DI-T-aabbcc1122", "every": "1m", "timeZone": "Mars/Olympus", "payload": "x"})
            ),
            ["timeZone"]
        );
        assert_eq!(
            fields(
                json!({"targetId": "DI-T-aabbcc1122", "every": "1m", "payload": "x",
                "startAt": "2026-01-02T00:00:00Z", "endAt": "2026-01-01T00:00:00Z"})
            ),
            ["endAt"]
        );
        assert_eq!(
            fields(
                json!({"targetId": "DI-T-aabbcc1122", "every": "1m", "payload": "x",
                "startAt": "2026-01-02T00:00:00"})
            ),
            ["startAt"]
        );
        assert_eq!(
            fields(json!({"targetId": 5, "every": 5, "payload": 5})),
            ["targetId", "every", "payload"]
        );
        assert_eq!(fields(json!([1])), [""]);
    }
}
