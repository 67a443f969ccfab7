//! The rows of messages, targets and attempts, read the same from either
//! database, and their conversions into domain types.

use serde_json::Value;
use sqlx::types::Json;

use super::{At, Text, Uid};
use crate::{
    domain::{
        ids::{AccountId, EventId, MessageId, ScheduleId, TargetId},
        message::{Attempt, Message, OrderingKey},
        payload::Payload,
        target::Target,
    },
    sealing::Sealer,
    store::{
        health_from_row, outcome_from_str, sealed::open_config, state_from_str, StoreError,
        StoreResult,
    },
};

pub const MESSAGE_COLUMNS: &str = "id, account, target_id, state, payload, delivery_time, next_attempt_at, \
     attempt_count, delivered_at, cancelled_at, dead_lettered_at, last_error, created_at, updated_at, ordering_key, \
     schedule_id, event_id, event_type";

pub const TARGET_COLUMNS: &str =
    "id, account, name, kind, enabled, config, secrets_key_id, sealed_secrets, created_at, updated_at, \
     breaker_state, consecutive_failures, open_until, cooldown_ms";

pub const ATTEMPT_COLUMNS: &str =
    "attempt, started_at, finished_at, duration_ms, outcome, status_code, error, response_body, \
     retry_after_ms";

#[derive(sqlx::FromRow)]
pub struct MessageRow {
    id: Uid,
    account: AccountId,
    target_id: String,
    state: String,
    payload: Text,
    delivery_time: At,
    next_attempt_at: Option<At>,
    attempt_count: i32,
    delivered_at: Option<At>,
    cancelled_at: Option<At>,
    dead_lettered_at: Option<At>,
    last_error: Option<String>,
    ordering_key: Option<OrderingKey>,
    schedule_id: Option<String>,
    event_id: Option<Uid>,
    event_type: Option<String>,
    created_at: At,
    updated_at: At,
}

fn at(t: Option<At>) -> Option<chrono::DateTime<chrono::Utc>> {
    t.map(Into::into)
}

impl TryFrom<MessageRow> for Message {
    type Error = StoreError;
    fn try_from(r: MessageRow) -> StoreResult<Message> {
        Ok(Message {
            id: MessageId(r.id.0),
            account: r.account,
            target_id: TargetId::from_trusted(r.target_id),
            state: state_from_str(&r.state)?,
            delivery_time: r.delivery_time.into(),
            next_attempt_at: at(r.next_attempt_at),
            attempt_count: r.attempt_count.max(0) as u32,
            delivered_at: at(r.delivered_at),
            cancelled_at: at(r.cancelled_at),
            dead_lettered_at: at(r.dead_lettered_at),
            last_error: r.last_error,
            ordering_key: r.ordering_key,
            schedule_id: r.schedule_id.map(ScheduleId::from_trusted),
            event_id: r.event_id.map(|u| EventId(u.0)),
            event_type: r.event_type,
            created_at: r.created_at.into(),
            updated_at: r.updated_at.into(),
            payload: payload(r.payload)?,
        })
    }
}

/// A stored payload, checked again as it is read.
pub fn payload(text: Text) -> StoreResult<Payload> {
    Payload::parse(text.0).map_err(|e| StoreError::Corrupt(e.to_string()))
}

#[derive(sqlx::FromRow)]
pub struct TargetRow {
    id: String,
    account: AccountId,
    name: String,
    kind: String,
    enabled: bool,
    config: Json<Value>,
    secrets_key_id: Option<String>,
    sealed_secrets: Option<Vec<u8>>,
    created_at: At,
    updated_at: At,
    breaker_state: String,
    consecutive_failures: i32,
    open_until: Option<At>,
    cooldown_ms: Option<i64>,
}

impl TargetRow {
    pub fn into_target(self, sealer: Option<&Sealer>) -> StoreResult<Target> {
        let r = self;
        let config = open_config(
            sealer,
            &r.id,
            &r.kind,
            r.config.0,
            r.secrets_key_id.as_deref(),
            r.sealed_secrets.as_deref(),
        )?;
        Ok(Target {
            health: health_from_row(
                config.limits().breaker.as_ref(),
                &r.breaker_state,
                i64::from(r.consecutive_failures),
                at(r.open_until),
                r.cooldown_ms,
            ),
            config,
            id: TargetId::from_trusted(r.id),
            account: r.account,
            name: r.name,
            enabled: r.enabled,
            created_at: r.created_at.into(),
            updated_at: r.updated_at.into(),
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct AttemptRow {
    attempt: i32,
    started_at: At,
    finished_at: At,
    duration_ms: i64,
    outcome: String,
    status_code: Option<i32>,
    error: Option<String>,
    response_body: Option<String>,
    retry_after_ms: Option<i64>,
}

impl TryFrom<AttemptRow> for Attempt {
    type Error = StoreError;
    fn try_from(r: AttemptRow) -> StoreResult<Attempt> {
        Ok(Attempt {
            attempt: r.attempt.max(0) as u32,
            started_at: r.started_at.into(),
            finished_at: r.finished_at.into(),
            duration_ms: r.duration_ms.max(0) as u64,
            outcome: outcome_from_str(&r.outcome)?,
            status_code: r.status_code.and_then(|c| u16::try_from(c).ok()),
            error: r.error,
            response_body: r.response_body,
            retry_after_ms: r.retry_after_ms.map(|ms| ms.max(0) as u64),
        })
    }
}
