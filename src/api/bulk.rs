//! `POST /messages/redrive`, `/messages/cancel`, `/messages/replay`
//! (docs/api.md#bulk-redrive-cancel-and-replay): many messages at once, one transaction per 1,000.

use axum::{extract::State, Json};

use super::{
    body::Body,
    error::{ApiError, ApiResult},
};
use crate::{
    domain::{
        ids::{MessageId, TargetId},
        message::State as MsgState,
        target::FieldError,
    },
    service::bulk::BULK_IDS_MAX,
    service::{Actor, Permission},
    state::AppState,
    store::{Bulk, BulkAction, RangeOn},
    wire::{
        bulk::{BulkCancelIn, CountOut, RedriveIn, ReplayIn},
        problem::Problem,
        Field,
    },
};

/// What every bulk body shares, read with each problem named.
struct Common {
    target_id: Option<TargetId>,
    from: Option<chrono::DateTime<chrono::Utc>>,
    to: Option<chrono::DateTime<chrono::Utc>>,
    ids: Option<Vec<MessageId>>,
}

fn common(
    target_id: Field<String>,
    from: Field<String>,
    to: Field<String>,
    ids: Field<Vec<String>>,
    errors: &mut Vec<FieldError>,
) -> Common {
    let target_id = target_id.take_optional_target_id(errors);
    let from = from.take_optional_instant("from", errors);
    let to = to.take_optional_instant("to", errors);
    let ids = ids.take_optional("messageIds", errors);
    if ids.as_ref().is_some_and(|ids| ids.len() > BULK_IDS_MAX) {
        errors.push(FieldError::new("messageIds", "lists more than 1,000 ids"));
    }
    if target_id.is_none() && ids.is_none() && errors.is_empty() {
        errors.push(FieldError::new(
            "targetId",
            "or messageIds is required: a filter must name a target or messages",
        ));
    }
    // An id that is not one names no message: it is not counted.
    let ids = ids.map(|ids| ids.iter().filter_map(|s| s.parse().ok()).collect());
    Common {
        target_id,
        from,
        to,
        ids,
    }
}

async fn apply(state: &AppState, actor: &Actor, bulk: Bulk) -> ApiResult<Json<CountOut>> {
    let count = state.service.bulk(actor, &bulk).await?;
    Ok(Json(CountOut { count }))
}

/// Reschedule dead letters in bulk.
///
/// One transaction per 1,000 messages, so deliveries go on while it runs; a
/// call matching more than `bulk.max` (default 100,000) changes nothing. An
/// unknown or foreign `targetId` answers 400 naming it; listed ids that name
/// no message of the account are not counted. Each redriven message's ladder
/// starts over; a keyed message takes its place in its key's order again.
#[utoipa::path(
    post, path = "/messages/redrive", operation_id = "redrive_messages", tag = "messages", request_body = RedriveIn,
    responses((status = 200, body = CountOut),
              (status = 400, description = "Invalid input, no target and no ids, or more than bulk.max messages match", body = Problem, content_type = "application/problem+json"),
              (status = 409, description = "The account would pass limits.scheduled_messages (problem type …/quota); nothing changed", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn redrive(
    State(state): State<AppState>,
    actor: Actor,
    Body(body): Body<RedriveIn>,
) -> ApiResult<Json<CountOut>> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let mut errors = Vec::new();
    let c = common(
        body.target_id,
        body.from,
        body.to,
        body.message_ids,
        &mut errors,
    );
    let at = body
        .delivery_time
        .take_optional_instant("deliveryTime", &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let bulk = Bulk {
        action: BulkAction::Redrive {
            at: at.unwrap_or_else(|| state.service.now()),
        },
        target_id: c.target_id,
        ids: c.ids,
        range_on: RangeOn::DeadLetteredAt,
        from: c.from,
        to: c.to,
    };
    apply(&state, &actor, bulk).await
}

/// Cancel Scheduled messages and dead letters in bulk.
///
/// One transaction per 1,000 messages; at most `bulk.max` may match. A
/// message whose attempt is under way is left to finish and not counted;
/// cancelling a key's head lets the key's next message go at once.
#[utoipa::path(
    post, path = "/messages/cancel", operation_id = "cancel_messages", tag = "messages", request_body = BulkCancelIn,
    responses((status = 200, body = CountOut),
              (status = 400, description = "Invalid input, no target and no ids, or more than bulk.max messages match", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn cancel(
    State(state): State<AppState>,
    actor: Actor,
    Body(body): Body<BulkCancelIn>,
) -> ApiResult<Json<CountOut>> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let mut errors = Vec::new();
    let c = common(
        body.target_id,
        body.from,
        body.to,
        body.message_ids,
        &mut errors,
    );
    let only = body
        .state
        .take_optional("state", &mut errors)
        .and_then(|s| match MsgState::parse(&s) {
            Some(st @ (MsgState::Scheduled | MsgState::DeadLetter)) => Some(st),
            _ => {
                errors.push(FieldError::new("state", "must be Scheduled or DeadLetter"));
                None
            }
        });
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let bulk = Bulk {
        action: BulkAction::Cancel { only },
        target_id: c.target_id,
        ids: c.ids,
        range_on: RangeOn::DeliveryTime,
        from: c.from,
        to: c.to,
    };
    apply(&state, &actor, bulk).await
}

/// Deliver again what a target delivered in a time range.
///
/// Each message Delivered in [`from`, `to`) becomes Scheduled again with the
/// same messageId (receivers are idempotent on it), its earlier attempts
/// kept, the ladder starting over. Only what retention still holds can be
/// replayed. One transaction per 1,000 messages; at most `bulk.max`.
#[utoipa::path(
    post, path = "/messages/replay", operation_id = "replay_messages", tag = "messages", request_body = ReplayIn,
    responses((status = 200, body = CountOut),
              (status = 400, description = "Invalid input, or more than bulk.max messages match", body = Problem, content_type = "application/problem+json"),
              (status = 409, description = "The account would pass limits.scheduled_messages (problem type …/quota); nothing changed", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn replay(
    State(state): State<AppState>,
    actor: Actor,
    Body(body): Body<ReplayIn>,
) -> ApiResult<Json<CountOut>> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let mut errors = Vec::new();
    let target_id = body.target_id.take_target_id(&mut errors);
    let from = body.from.take_instant("from", &mut errors);
    let to = body.to.take_instant("to", &mut errors);
    let at = body
        .delivery_time
        .take_optional_instant("deliveryTime", &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let bulk = Bulk {
        action: BulkAction::Replay {
            at: at.unwrap_or_else(|| state.service.now()),
        },
        target_id,
        ids: None,
        range_on: RangeOn::DeliveredAt,
        from,
        to,
    };
    apply(&state, &actor, bulk).await
}
