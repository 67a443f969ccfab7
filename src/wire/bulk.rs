//! The bodies of `POST /messages/redrive`, `/messages/cancel` and
//! `/messages/replay` (docs/api.md#bulk-redrive-cancel-and-replay), and
//! their answer.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Field;

/// Reschedule dead letters: those of `targetId` dead-lettered in
/// [`from`, `to`), or those listed in `messageIds` (both: those that are
/// both).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedriveIn {
    #[schema(value_type = Option<String>, example = "DI-T-aabbcc1122")]
    pub target_id: Field<String>,
    /// RFC 3339: dead-lettered at or after.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub from: Field<String>,
    /// RFC 3339: dead-lettered before.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub to: Field<String>,
    /// Up to 1,000 message ids; ids that name no message of the account are
    /// not counted and nothing of theirs changes.
    #[schema(value_type = Option<Vec<String>>, max_items = 1000)]
    pub message_ids: Field<Vec<String>>,
    /// RFC 3339; default now.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub delivery_time: Field<String>,
}

/// Cancel Scheduled and DeadLetter messages: those of `targetId` due
/// (`deliveryTime`) in [`from`, `to`), or those listed; optionally only
/// those in `state`. A message whose attempt is under way is left alone.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkCancelIn {
    #[schema(value_type = Option<String>, example = "DI-T-aabbcc1122")]
    pub target_id: Field<String>,
    /// RFC 3339: due at or after.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub from: Field<String>,
    /// RFC 3339: due before.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub to: Field<String>,
    #[schema(value_type = Option<Vec<String>>, max_items = 1000)]
    pub message_ids: Field<Vec<String>>,
    /// Scheduled or DeadLetter: only messages in this state.
    #[schema(value_type = Option<String>, pattern = "^(Scheduled|DeadLetter)$")]
    pub state: Field<String>,
}

/// Deliver again the target's messages Delivered in [`from`, `to`): each
/// becomes Scheduled with the same messageId, its earlier attempts kept.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplayIn {
    #[schema(value_type = String, required = true, example = "DI-T-aabbcc1122")]
    pub target_id: Field<String>,
    /// RFC 3339: delivered at or after.
    #[schema(value_type = String, required = true, format = DateTime)]
    pub from: Field<String>,
    /// RFC 3339: delivered before.
    #[schema(value_type = String, required = true, format = DateTime)]
    pub to: Field<String>,
    /// RFC 3339; default now.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub delivery_time: Field<String>,
}

/// How many messages the call changed.
#[derive(Debug, Serialize, ToSchema)]
pub struct CountOut {
    pub count: u64,
}
