//! Row types of the SQLite store and their conversions. Times are integer
//! milliseconds since the epoch; ids and JSON are text.

use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    domain::{
        ids::{EventId, MessageId},
        message::OrderingKey,
        target::TargetConfig,
    },
    sealing::Sealer,
    store::{sealed::open_config, StoreError, StoreResult},
};

pub use crate::store::sql::rows::{AttemptRow, MessageRow, ATTEMPT_COLUMNS, MESSAGE_COLUMNS};

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

pub fn parse_event_id(s: &str) -> StoreResult<EventId> {
    Uuid::parse_str(s)
        .map(EventId)
        .map_err(|e| StoreError::Corrupt(format!("event id {s}: {e}")))
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
pub struct ClaimRow {
    pub id: String,
    pub account: String,
    pub target_id: String,
    pub payload: String,
    pub delivery_time: i64,
    pub attempt_count: i64,
    pub ladder_attempts: i64,
    pub scheduled_at: i64,
    pub gated: bool,
    pub ordering_key: Option<OrderingKey>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    /// Returned by an ahead claim only.
    #[sqlx(default)]
    pub due_at: Option<i64>,
}
