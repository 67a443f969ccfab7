//! Subscriptions and events on the wire (docs/api.md#events-and-subscriptions):
//! what `POST /subscriptions`, a merge patch and `POST /events` read, and
//! what their endpoints answer.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::Field;
use crate::{
    domain::{
        event::{pattern_texts, EventType, Pattern, Subscription, MAX_PATTERNS, NAME_MAX_CHARS},
        ids::TargetId,
        message::OrderingKey,
        payload::Payload,
        target::FieldError,
        time::serde_ts,
    },
    store::{EventView, ResponseJson},
};

/// A subscription as created, or as a merge patch leaves it.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionIn {
    /// The account's target that gets the matching events; cannot be
    /// changed afterwards.
    #[schema(value_type = String, required = true, example = "DI-T-aabbcc1122", pattern = "^DI-T-[0-9a-f]{10}$")]
    pub target_id: Field<String>,
    /// 1 to 100 patterns: a type (`order.created`), a family (`order.*`:
    /// every type under `order.`, at any depth) or `*` (every type but
    /// Dispatch's own, under `dispatch.`).
    #[schema(value_type = Vec<String>, required = true, min_items = 1, max_items = 100, example = json!(["order.created", "invoice.*"]))]
    pub types: Field<Vec<Value>>,
    /// At most 200 characters; empty when left out.
    #[schema(value_type = Option<String>, max_length = 200, example = "billing")]
    pub name: Field<String>,
    /// True when left out.
    #[schema(value_type = Option<bool>)]
    pub enabled: Field<bool>,
}

/// A merge patch of a subscription: any of its members; `targetId`, if
/// given, must be the one it has.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionPatch {
    /// Its target, which cannot change: another answers 400.
    #[schema(value_type = Option<String>, example = "DI-T-aabbcc1122", pattern = "^DI-T-[0-9a-f]{10}$")]
    pub target_id: Field<String>,
    /// 1 to 100 patterns, replacing the list.
    #[schema(value_type = Option<Vec<String>>, min_items = 1, max_items = 100, example = json!(["order.*"]))]
    pub types: Field<Vec<Value>>,
    /// At most 200 characters.
    #[schema(value_type = Option<String>, max_length = 200)]
    pub name: Field<String>,
    #[schema(value_type = Option<bool>)]
    pub enabled: Field<bool>,
}

/// What a subscription's document says, checked.
#[derive(Debug, Clone)]
pub struct SubscriptionSpec {
    pub target_id: TargetId,
    pub name: String,
    pub types: Vec<Pattern>,
    pub enabled: bool,
}

/// Every problem of a subscription's document, each named (`types[2]`).
pub fn parse_subscription(doc: &Value) -> Result<SubscriptionSpec, Vec<FieldError>> {
    if !doc.is_object() {
        return Err(vec![FieldError::new("", "must be a JSON object")]);
    }
    let input: SubscriptionIn = serde_json::from_value(doc.clone())
        .map_err(|e| vec![FieldError::new("", e.to_string())])?;
    let mut errors = Vec::new();
    let target_id = input.target_id.take_target_id(&mut errors);
    let types = input
        .types
        .take("types", &mut errors)
        .and_then(|given| patterns(given, &mut errors));
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
    let enabled = input
        .enabled
        .take_optional("enabled", &mut errors)
        .unwrap_or(true);
    match (target_id, types) {
        (Some(target_id), Some(types)) if errors.is_empty() => Ok(SubscriptionSpec {
            target_id,
            name,
            types,
            enabled,
        }),
        _ => Err(errors),
    }
}

/// The document a merge patch applies to: every field its owner sets.
pub fn document(s: &Subscription) -> Value {
    json!({
        "targetId": s.target_id.as_str(),
        "name": s.name,
        "types": pattern_texts(&s.types),
        "enabled": s.enabled,
    })
}

/// RFC 7396 on `document(s)`.
pub fn merge(s: &Subscription, patch: &Value) -> Value {
    let mut doc = document(s);
    json_patch::merge(&mut doc, patch);
    doc
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionOut {
    #[schema(example = "DI-U-aabbcc1122")]
    pub subscription_id: String,
    pub target_id: String,
    pub name: String,
    #[schema(example = json!(["invoice.*"]))]
    pub types: Vec<String>,
    pub enabled: bool,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: DateTime<Utc>,
}

impl SubscriptionOut {
    pub fn new(s: &Subscription) -> Self {
        Self {
            subscription_id: s.id.to_string(),
            target_id: s.target_id.to_string(),
            name: s.name.clone(),
            types: pattern_texts(&s.types),
            enabled: s.enabled,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// Publish an event.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventIn {
    /// 1 to 255 characters: segments of letters, digits, `_` and `-` joined
    /// by dots. Types under `dispatch.` are Dispatch's own.
    #[schema(value_type = String, required = true, min_length = 1, max_length = 255, example = "order.created",
        pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$")]
    #[serde(rename = "type")]
    pub ty: Field<String>,
    /// At most 61,440 characters (Unicode scalar values); send JSON as a string.
    #[schema(value_type = String, required = true, example = "{\"orderId\": 42}", max_length = 61440)]
    pub payload: Field<String>,
    /// RFC 3339 with an offset; now when left out. Each message the event
    /// makes is due then.
    #[schema(value_type = Option<String>, example = "2020-07-01T12:34:00Z", format = DateTime)]
    pub delivery_time: Field<String>,
    /// Each message's orderingKey (docs/api.md#ordering-keys).
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255, example = "order-1234",
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub ordering_key: Field<String>,
}

/// What `EventIn` says, checked.
#[derive(Debug, Clone)]
pub struct EventSpec {
    pub ty: EventType,
    pub payload: Payload,
    pub delivery_time: Option<DateTime<Utc>>,
    pub ordering_key: Option<OrderingKey>,
}

/// Every problem of an event, each named.
pub fn parse_event(input: EventIn) -> Result<EventSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let ty = input
        .ty
        .take("type", &mut errors)
        .and_then(|t| match EventType::parse(&t) {
            Ok(t) => Some(t),
            Err(rule) => {
                errors.push(FieldError::new("type", rule));
                None
            }
        });
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
    let delivery_time = input
        .delivery_time
        .take_optional_instant("deliveryTime", &mut errors);
    let ordering_key = input
        .ordering_key
        .take_optional("orderingKey", &mut errors)
        .and_then(|k| {
            OrderingKey::parse(k)
                .map_err(|rule| errors.push(FieldError::new("orderingKey", rule)))
                .ok()
        });
    match (ty, payload) {
        (Some(ty), Some(payload)) if errors.is_empty() => Ok(EventSpec {
            ty,
            payload,
            delivery_time,
            ordering_key,
        }),
        _ => Err(errors),
    }
}

/// A message an event made.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventMessageOut {
    #[schema(example = "DI-M-01890a5d-ac96-774b-bcce-b302099a8057")]
    pub message_id: String,
    pub target_id: String,
    /// The message's state while it exists; null once retention removed it.
    #[schema(example = "Scheduled")]
    pub state: Option<&'static str>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventOut {
    #[schema(example = "DI-E-01890a5d-ac96-774b-bcce-b302099a8057")]
    pub event_id: String,
    #[serde(rename = "type")]
    #[schema(example = "order.created")]
    pub ty: String,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub delivery_time: DateTime<Utc>,
    pub ordering_key: Option<String>,
    pub payload: String,
    #[serde(with = "serde_ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// One message per target that subscribed to the type when it was
    /// published (and those replays made of it), in target order.
    pub messages: Vec<EventMessageOut>,
}

impl EventOut {
    pub fn new(v: &EventView) -> Self {
        let e = &v.event;
        Self {
            event_id: e.id.to_string(),
            ty: e.ty.to_string(),
            delivery_time: e.delivery_time,
            ordering_key: e.ordering_key.as_ref().map(|k| k.to_string()),
            payload: e.payload.as_str().to_string(),
            created_at: e.created_at,
            messages: v
                .messages
                .iter()
                .map(|m| EventMessageOut {
                    message_id: m.message_id.to_string(),
                    target_id: m.target_id.to_string(),
                    state: m.state.map(|s| s.as_str()),
                })
                .collect(),
        }
    }

    /// The answer as JSON text, to be kept with an idempotency key.
    pub fn text(v: &EventView) -> ResponseJson {
        serde_json::value::to_raw_value(&Self::new(v)).expect("an event serialises to JSON")
    }
}

/// Make the account's events of a time range into messages to one target
/// again: a new subscriber catches up.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventReplayIn {
    #[schema(value_type = String, required = true, example = "DI-T-aabbcc1122")]
    pub target_id: Field<String>,
    /// RFC 3339: events published at or after.
    #[schema(value_type = String, required = true, format = DateTime)]
    pub from: Field<String>,
    /// RFC 3339: events published before.
    #[schema(value_type = String, required = true, format = DateTime)]
    pub to: Field<String>,
    /// Patterns the events' types must match; the target's enabled
    /// subscriptions' patterns when left out.
    #[schema(value_type = Option<Vec<String>>, min_items = 1, max_items = 100, example = json!(["order.*"]))]
    pub types: Field<Vec<Value>>,
    /// RFC 3339; now when left out.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub delivery_time: Field<String>,
}

/// What `EventReplayIn` says, checked.
#[derive(Debug, Clone)]
pub struct EventReplaySpec {
    pub target_id: TargetId,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub types: Option<Vec<Pattern>>,
    pub delivery_time: Option<DateTime<Utc>>,
}

/// Each pattern of `types`, or its problems, each named (`types[1]`).
fn patterns(given: Vec<Value>, errors: &mut Vec<FieldError>) -> Option<Vec<Pattern>> {
    if given.is_empty() || given.len() > MAX_PATTERNS {
        errors.push(FieldError::new("types", "must hold 1 to 100 patterns"));
        return None;
    }
    let mut patterns = Vec::with_capacity(given.len());
    for (i, v) in given.iter().enumerate() {
        match v.as_str().map(Pattern::parse) {
            Some(Ok(p)) => patterns.push(p),
            Some(Err(rule)) => errors.push(FieldError::new(format!("types[{i}]"), rule)),
            None => errors.push(FieldError::new(format!("types[{i}]"), "must be a string")),
        }
    }
    Some(patterns)
}

/// Every problem of a replay, each named.
pub fn parse_replay(input: EventReplayIn) -> Result<EventReplaySpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let target_id = input.target_id.take_target_id(&mut errors);
    let from = input.from.take_instant("from", &mut errors);
    let to = input.to.take_instant("to", &mut errors);
    let types = input
        .types
        .take_optional("types", &mut errors)
        .and_then(|t| patterns(t, &mut errors));
    let delivery_time = input
        .delivery_time
        .take_optional_instant("deliveryTime", &mut errors);
    match (target_id, from, to) {
        (Some(target_id), Some(from), Some(to)) if errors.is_empty() => Ok(EventReplaySpec {
            target_id,
            from,
            to,
            types,
            delivery_time,
        }),
        _ => Err(errors),
    }
}
