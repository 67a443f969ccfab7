//! PostgreSQL's own row types (the claim's); the shared ones are in
//! `store::sql::rows`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    domain::{message::OrderingKey, payload::Payload},
    store::{StoreError, StoreResult},
};

pub use crate::store::sql::rows::{AttemptRow, MessageRow, ATTEMPT_COLUMNS, MESSAGE_COLUMNS};

#[derive(sqlx::FromRow)]
pub struct ClaimRow {
    pub id: Uuid,
    pub account: String,
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
    pub ordering_key: Option<OrderingKey>,
    pub event_id: Option<Uuid>,
    pub event_type: Option<String>,
    /// Returned by an ahead claim only.
    #[sqlx(default)]
    pub due_at: Option<DateTime<Utc>>,
}

pub fn payload_from_bytes(bytes: Vec<u8>) -> StoreResult<Payload> {
    let s = String::from_utf8(bytes).map_err(|e| StoreError::Corrupt(format!("payload: {e}")))?;
    Payload::parse(s).map_err(|e| StoreError::Corrupt(e.to_string()))
}
