//! Row types and their conversions into domain types.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    auth::sealing::Sealer,
    domain::{
        ids::{MessageId, ScheduleId, TargetId},
        message::{Attempt, Message},
        payload::Payload,
        target::Target,
    },
    store::{
        health_from_row, outcome_from_str, sealed::open_config, state_from_str, StoreError,
        StoreResult,
    },
};

pub const MESSAGE_COLUMNS: &str = "id, account, target_id, state, payload, delivery_time, next_attempt_at, \
     attempt_count, delivered_at, cancelled_at, dead_lettered_at, last_error, created_at, updated_at, ordering_key, \
     schedule_id";

pub const TARGET_COLUMNS: &str =
    "id, account, name, kind, enabled, config, secrets_key_id, sealed_secrets, created_at, updated_at, \
     breaker_state, consecutive_failures, open_until, cooldown_ms";

pub const ATTEMPT_COLUMNS: &str =
    "attempt, started_at, finished_at, duration_ms, outcome, status_code, error, response_body, \
     retry_after_ms";

#[derive(sqlx::FromRow)]
pub struct MessageRow {
    id: Uuid,
    account: String,
    target_id: String,
    state: String,
    payload: Vec<u8>,
    delivery_time: DateTime<Utc>,
    next_attempt_at: Option<DateTime<Utc>>,
    attempt_count: i32,
    delivered_at: Option<DateTime<Utc>>,
    cancelled_at: Option<DateTime<Utc>>,
    dead_lettered_at: Option<DateTime<Utc>>,
    last_error: Option<String>,
    ordering_key: Option<String>,
    schedule_id: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<MessageRow> for Message {
    type Error = StoreError;
    fn try_from(r: MessageRow) -> StoreResult<Message> {
        Ok(Message {
            id: MessageId(r.id),
            account: r.account,
            target_id: TargetId::from_trusted(r.target_id),
            state: state_from_str(&r.state)?,
            delivery_time: r.delivery_time,
            next_attempt_at: r.next_attempt_at,
            attempt_count: r.attempt_count.max(0) as u32,
            delivered_at: r.delivered_at,
            cancelled_at: r.cancelled_at,
            dead_lettered_at: r.dead_lettered_at,
            last_error: r.last_error,
            ordering_key: r.ordering_key,
            schedule_id: r.schedule_id.map(ScheduleId::from_trusted),
            created_at: r.created_at,
            updated_at: r.updated_at,
            payload: payload_from_bytes(r.payload)?,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct TargetRow {
    id: String,
    account: String,
    name: String,
    kind: String,
    enabled: bool,
    config: Value,
    secrets_key_id: Option<String>,
    sealed_secrets: Option<Vec<u8>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    breaker_state: String,
    consecutive_failures: i32,
    open_until: Option<DateTime<Utc>>,
    cooldown_ms: Option<i64>,
}

impl TargetRow {
    pub fn into_target(self, sealer: Option<&Sealer>) -> StoreResult<Target> {
        let r = self;
        let config = open_config(
            sealer,
            &r.id,
            &r.kind,
            r.config,
            r.secrets_key_id.as_deref(),
            r.sealed_secrets.as_deref(),
        )?;
        Ok(Target {
            health: health_from_row(
                config.limits().breaker.as_ref(),
                &r.breaker_state,
                i64::from(r.consecutive_failures),
                r.open_until,
                r.cooldown_ms,
            ),
            config,
            id: TargetId::from_trusted(r.id),
            account: r.account,
            name: r.name,
            enabled: r.enabled,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct AttemptRow {
    attempt: i32,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
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
            started_at: r.started_at,
            finished_at: r.finished_at,
            duration_ms: r.duration_ms.max(0) as u64,
            outcome: outcome_from_str(&r.outcome)?,
            status_code: r.status_code.and_then(|c| u16::try_from(c).ok()),
            error: r.error,
            response_body: r.response_body,
            retry_after_ms: r.retry_after_ms.map(|ms| ms.max(0) as u64),
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct ClaimRow {
    pub id: Uuid,
    pub target_id: String,
    pub kind: String,
    pub config: Value,
    pub secrets_key_id: Option<String>,
    pub sealed_secrets: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    pub delivery_time: DateTime<Utc>,
    pub attempt_count: i32,
    pub ladder_attempts: i32,
    pub scheduled_at: DateTime<Utc>,
    pub gated: bool,
    pub ordering_key: Option<String>,
    /// Returned by an ahead claim only.
    #[sqlx(default)]
    pub due_at: Option<DateTime<Utc>>,
}

pub fn payload_from_bytes(bytes: Vec<u8>) -> StoreResult<Payload> {
    let s = String::from_utf8(bytes).map_err(|e| StoreError::Corrupt(format!("payload: {e}")))?;
    Payload::parse(s).map_err(|e| StoreError::Corrupt(e.to_string()))
}
