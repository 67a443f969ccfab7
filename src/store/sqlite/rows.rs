//! Row types of the SQLite store and their conversions. Times are integer
//! milliseconds since the epoch; ids and JSON are text.

use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    auth::sealing::Sealer,
    domain::{
        ids::{MessageId, ScheduleId, TargetId},
        message::{Attempt, Message},
        payload::Payload,
        target::{Target, TargetConfig},
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

pub fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub fn from_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

pub fn opt_from_ms(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.map(from_ms)
}

pub fn id_text(id: &MessageId) -> String {
    id.0.hyphenated().to_string()
}

pub fn parse_id(s: &str) -> StoreResult<MessageId> {
    Uuid::parse_str(s)
        .map(MessageId)
        .map_err(|e| StoreError::Corrupt(format!("message id {s}: {e}")))
}

pub fn config_json(config: &str) -> StoreResult<Value> {
    serde_json::from_str(config).map_err(|e| StoreError::Corrupt(format!("target config: {e}")))
}

/// A target's configuration from its row's columns (see `store::sealed`).
pub fn config_from_row(
    sealer: Option<&Sealer>,
    id: &str,
    kind: &str,
    config: &str,
    key_id: Option<&str>,
    sealed: Option<&[u8]>,
) -> StoreResult<TargetConfig> {
    open_config(sealer, id, kind, config_json(config)?, key_id, sealed)
}

#[derive(sqlx::FromRow)]
pub struct MessageRow {
    id: String,
    account: String,
    target_id: String,
    state: String,
    payload: String,
    delivery_time: i64,
    next_attempt_at: Option<i64>,
    attempt_count: i64,
    delivered_at: Option<i64>,
    cancelled_at: Option<i64>,
    dead_lettered_at: Option<i64>,
    last_error: Option<String>,
    ordering_key: Option<String>,
    schedule_id: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<MessageRow> for Message {
    type Error = StoreError;
    fn try_from(r: MessageRow) -> StoreResult<Message> {
        Ok(Message {
            id: parse_id(&r.id)?,
            account: r.account,
            target_id: TargetId::from_trusted(r.target_id),
            state: state_from_str(&r.state)?,
            delivery_time: from_ms(r.delivery_time),
            next_attempt_at: opt_from_ms(r.next_attempt_at),
            attempt_count: r.attempt_count.max(0) as u32,
            delivered_at: opt_from_ms(r.delivered_at),
            cancelled_at: opt_from_ms(r.cancelled_at),
            dead_lettered_at: opt_from_ms(r.dead_lettered_at),
            last_error: r.last_error,
            ordering_key: r.ordering_key,
            schedule_id: r.schedule_id.map(ScheduleId::from_trusted),
            created_at: from_ms(r.created_at),
            updated_at: from_ms(r.updated_at),
            payload: Payload::parse(r.payload).map_err(|e| StoreError::Corrupt(e.to_string()))?,
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
    config: String,
    secrets_key_id: Option<String>,
    sealed_secrets: Option<Vec<u8>>,
    created_at: i64,
    updated_at: i64,
    breaker_state: String,
    consecutive_failures: i64,
    open_until: Option<i64>,
    cooldown_ms: Option<i64>,
}

impl TargetRow {
    pub fn into_target(self, sealer: Option<&Sealer>) -> StoreResult<Target> {
        let r = self;
        let config = config_from_row(
            sealer,
            &r.id,
            &r.kind,
            &r.config,
            r.secrets_key_id.as_deref(),
            r.sealed_secrets.as_deref(),
        )?;
        Ok(Target {
            health: health_from_row(
                config.limits().breaker.as_ref(),
                &r.breaker_state,
                r.consecutive_failures,
                opt_from_ms(r.open_until),
                r.cooldown_ms,
            ),
            config,
            id: TargetId::from_trusted(r.id),
            account: r.account,
            name: r.name,
            enabled: r.enabled,
            created_at: from_ms(r.created_at),
            updated_at: from_ms(r.updated_at),
        })
    }
}

#[derive(sqlx::FromRow)]
pub struct AttemptRow {
    attempt: i64,
    started_at: i64,
    finished_at: i64,
    duration_ms: i64,
    outcome: String,
    status_code: Option<i64>,
    error: Option<String>,
    response_body: Option<String>,
    retry_after_ms: Option<i64>,
}

impl TryFrom<AttemptRow> for Attempt {
    type Error = StoreError;
    fn try_from(r: AttemptRow) -> StoreResult<Attempt> {
        Ok(Attempt {
            attempt: r.attempt.max(0) as u32,
            started_at: from_ms(r.started_at),
            finished_at: from_ms(r.finished_at),
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
    pub id: String,
    pub target_id: String,
    pub payload: String,
    pub delivery_time: i64,
    pub attempt_count: i64,
    pub ladder_attempts: i64,
    pub scheduled_at: i64,
    pub gated: bool,
    pub ordering_key: Option<String>,
    /// Returned by an ahead claim only.
    #[sqlx(default)]
    pub due_at: Option<i64>,
}
