//! `/messages`: schedule, get, list, attempts, cancel, reschedule.

use axum::{
    extract::{Path, State},
    http::HeaderMap,
    response::Response,
    Json,
};

use super::{
    body::Body,
    error::{ApiError, ApiResult},
    extract::{encode_cursor, QueryParams},
};
use crate::{
    domain::{
        event::EventType,
        ids::{EventId, MessageId, ScheduleId, TargetId},
        message::{OrderingKey, State as MsgState},
        payload::Payload,
        target::FieldError,
    },
    service::{messages::ScheduleRequest, messages::Scheduled, IdempotencyKey},
    service::{Actor, Permission},
    state::AppState,
    store::MessageFilter,
    wire::{problem::Problem, AttemptOut, Field, List, MessageIn, MessageOut, RescheduleIn},
};

fn parse_id(id: &str) -> ApiResult<MessageId> {
    id.parse().map_err(|_| ApiError::NotFound)
}

/// What `MessageIn` holds beyond its types: a target id's form, an
/// RFC 3339 time, the payload's length. Every problem, each named.
pub(super) fn schedule_request(
    m: MessageIn,
    idempotency_key: Option<IdempotencyKey>,
) -> Result<ScheduleRequest, Vec<FieldError>> {
    let mut errors = Vec::new();
    let target_id = m.target_id.take_target_id(&mut errors);
    let delivery_time = m.delivery_time.take_instant("deliveryTime", &mut errors);
    let payload = m
        .payload
        .take("payload", &mut errors)
        .and_then(|p| match Payload::parse(p) {
            Ok(p) => Some(p),
            Err(e) => {
                errors.push(FieldError::new("payload", e.to_string()));
                None
            }
        });
    let ordering_key = match m.ordering_key {
        Field::Missing => None,
        key => key
            .take("orderingKey", &mut errors)
            .and_then(|k| match OrderingKey::parse(k) {
                Ok(k) => Some(k),
                Err(rule) => {
                    errors.push(FieldError::new("orderingKey", rule));
                    None
                }
            }),
    };
    match (target_id, delivery_time, payload) {
        (Some(target_id), Some(delivery_time), Some(payload)) if errors.is_empty() => {
            Ok(ScheduleRequest {
                target_id,
                delivery_time,
                payload,
                idempotency_key,
                ordering_key,
            })
        }
        _ => Err(errors),
    }
}

/// Schedule a message.
///
/// With an `Idempotency-Key` header, the same key and body within 24 hours
/// answer the first response again; the same key with another body answers 409.
#[utoipa::path(
    post, path = "/messages", tag = "messages", request_body = MessageIn,
    params(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 characters, no control characters")),
    responses(
        (status = 201, description = "Scheduled", body = MessageOut, headers(("Location" = String))),
        (status = 400, description = "Invalid input; errors[].field names the field", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Idempotency-Key reused with another body, or the account is at limits.scheduled_messages (problem type …/quota)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["messages:write"]))
)]
pub async fn create(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
    Body(body): Body<MessageIn>,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let mut errors = Vec::new();
    let key = super::extract::idempotency_key(&headers, &mut errors);
    let req = match schedule_request(body, key) {
        Ok(req) if errors.is_empty() => req,
        Ok(_) => return Err(ApiError::Validation(errors)),
        Err(more) => {
            errors.extend(more);
            return Err(ApiError::Validation(errors));
        }
    };
    match state.service.schedule(&actor, req).await? {
        Scheduled::Created { message } => Ok(super::extract::created(
            201,
            MessageOut::text(&message),
            "/messages",
            "messageId",
            false,
        )),
        Scheduled::Replayed { status, response } => Ok(super::extract::created(
            status,
            response,
            "/messages",
            "messageId",
            true,
        )),
    }
}

/// List messages, newest first.
#[utoipa::path(
    get, path = "/messages", tag = "messages",
    params(
        ("targetId" = Option<String>, Query), ("state" = Option<String>, Query, description = "Scheduled, Delivered, Cancelled or DeadLetter"),
        ("orderingKey" = Option<String>, Query, description = "Only the messages with this orderingKey"),
        ("scheduleId" = Option<String>, Query, description = "Only the messages of this schedule's runs"),
        ("eventId" = Option<String>, Query, description = "Only the messages this event made"),
        ("type" = Option<String>, Query, description = "Only the messages made from events of this type"),
        ("limit" = Option<u32>, Query, description = "1 to 1000, default 50"), ("cursor" = Option<String>, Query),
    ),
    responses((status = 200, body = List<MessageOut>), (status = 400, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:read"]))
)]
pub async fn list(
    State(state): State<AppState>,
    actor: Actor,
    q: QueryParams,
) -> ApiResult<Json<List<MessageOut>>> {
    state.service.check(&actor, Permission::ReadMessages)?;
    let mut errors = Vec::new();
    let target_id = q.get("targetId").and_then(|s| match s.parse::<TargetId>() {
        Ok(t) => Some(t),
        Err(_) => {
            errors.push(FieldError::new("targetId", "is not a target id"));
            None
        }
    });
    let schedule_id = q
        .get("scheduleId")
        .and_then(|s| match s.parse::<ScheduleId>() {
            Ok(t) => Some(t),
            Err(_) => {
                errors.push(FieldError::new("scheduleId", "is not a schedule id"));
                None
            }
        });
    let event_id = q.get("eventId").and_then(|s| match s.parse::<EventId>() {
        Ok(e) => Some(e),
        Err(_) => {
            errors.push(FieldError::new("eventId", "is not an event id"));
            None
        }
    });
    let event_type = q.get("type").and_then(|t| match EventType::parse(t) {
        Ok(t) => Some(t.to_string()),
        Err(rule) => {
            errors.push(FieldError::new("type", rule));
            None
        }
    });
    let state_filter = q.sent("state").and_then(|s| match MsgState::parse(s) {
        Some(st) => Some(st),
        None => {
            errors.push(FieldError::new(
                "state",
                "must be one of Scheduled, Delivered, Cancelled, DeadLetter",
            ));
            None
        }
    });
    let limit = q.limit_noting(&mut errors);
    let before = q.cursor_noting(&mut errors, |c| c.parse::<MessageId>().ok());
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let filter = MessageFilter {
        target_id,
        state: state_filter,
        ordering_key: q.get("orderingKey").map(str::to_string),
        schedule_id,
        event_id,
        event_type,
        ..MessageFilter::default()
    };
    let mut messages = state
        .service
        .reads(&actor)
        .messages(&filter, before.as_ref(), limit + 1)
        .await?;
    let next_cursor = if messages.len() > limit as usize {
        messages.truncate(limit as usize);
        messages.last().map(|m| encode_cursor(&m.id.to_string()))
    } else {
        None
    };
    Ok(Json(List {
        items: messages.iter().map(MessageOut::new).collect(),
        next_cursor,
    }))
}

/// Get a message.
#[utoipa::path(
    get, path = "/messages/{messageId}", tag = "messages", params(("messageId" = String, Path)),
    responses((status = 200, body = MessageOut), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:read"]))
)]
pub async fn get(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Json<MessageOut>> {
    state.service.check(&actor, Permission::ReadMessages)?;
    let id = parse_id(&id)?;
    let m = state
        .service
        .reads(&actor)
        .message(&id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(MessageOut::new(&m)))
}

/// A message's attempts, oldest first.
#[utoipa::path(
    get, path = "/messages/{messageId}/attempts", tag = "messages",
    params(("messageId" = String, Path), ("limit" = Option<u32>, Query), ("cursor" = Option<String>, Query)),
    responses((status = 200, body = List<AttemptOut>), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:read"]))
)]
pub async fn attempts(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    q: QueryParams,
) -> ApiResult<Json<List<AttemptOut>>> {
    state.service.check(&actor, Permission::ReadMessages)?;
    let id = parse_id(&id)?;
    let limit = q.limit()?;
    let after = q
        .cursor()?
        .map(|c| {
            c.parse::<u32>()
                .map_err(|_| ApiError::field("cursor", "is not a cursor this service issued"))
        })
        .transpose()?;
    let mut attempts = state
        .service
        .reads(&actor)
        .attempts(&id, after, limit + 1)
        .await?
        .ok_or(ApiError::NotFound)?;
    let next_cursor = if attempts.len() > limit as usize {
        attempts.truncate(limit as usize);
        attempts
            .last()
            .map(|a| encode_cursor(&a.attempt.to_string()))
    } else {
        None
    };
    Ok(Json(List {
        items: attempts.iter().map(AttemptOut::new).collect(),
        next_cursor,
    }))
}

/// Cancel a Scheduled or DeadLetter message.
#[utoipa::path(
    post, path = "/messages/{messageId}/cancel", tag = "messages", params(("messageId" = String, Path)),
    responses((status = 200, body = MessageOut), (status = 404, body = Problem, content_type = "application/problem+json"),
              (status = 409, description = "Delivered, Cancelled, or an attempt under way", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn cancel(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Json<MessageOut>> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let id = parse_id(&id)?;
    let m = state.service.cancel(&actor, &id).await?;
    Ok(Json(MessageOut::new(&m)))
}

/// Reschedule a Scheduled or DeadLetter message; the retry ladder starts over.
#[utoipa::path(
    post, path = "/messages/{messageId}/reschedule", tag = "messages", params(("messageId" = String, Path)),
    request_body = RescheduleIn,
    responses((status = 200, body = MessageOut), (status = 400, body = Problem, content_type = "application/problem+json"),
              (status = 404, body = Problem, content_type = "application/problem+json"),
              (status = 409, description = "Delivered, Cancelled, or an attempt under way", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn reschedule(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    Body(body): Body<RescheduleIn>,
) -> ApiResult<Json<MessageOut>> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let id = parse_id(&id)?;
    let mut errors = Vec::new();
    let at = body.delivery_time.take_instant("deliveryTime", &mut errors);
    let Some(at) = at else {
        return Err(ApiError::Validation(errors));
    };
    let m = state.service.reschedule(&actor, &id, at).await?;
    Ok(Json(MessageOut::new(&m)))
}
