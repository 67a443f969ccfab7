//! `/messages`: schedule, get, list, attempts, cancel, reschedule.

use axum::{
    extract::{Path, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{
    error::{ApiError, ApiResult, Problem},
    extract::{encode_cursor, JsonBody, QueryParams},
    wire::{AttemptOut, List, MessageIn, MessageOut, RescheduleIn},
    AppState,
};
use crate::{
    auth::{Principal, Scope},
    domain::{
        ids::{MessageId, TargetId},
        message::{Message, State as MsgState},
        payload::Payload,
        target::FieldError,
        time,
    },
    metrics as m,
    retention::IDEMPOTENCY_TTL,
    store::{BatchItem, IdempotencyInput, InsertOutcome, MessageFilter, Transition},
};

pub(super) const MAX_IDEMPOTENCY_KEY: usize = 255;

fn parse_id(id: &str) -> ApiResult<MessageId> {
    id.parse().map_err(|_| ApiError::NotFound)
}

fn string_field<'a>(body: &'a Value, name: &str, errors: &mut Vec<FieldError>) -> Option<&'a str> {
    match body.get(name) {
        Some(Value::String(s)) => Some(s),
        None | Some(Value::Null) => {
            errors.push(FieldError::new(name, "is required"));
            None
        }
        Some(_) => {
            errors.push(FieldError::new(name, "must be a string"));
            None
        }
    }
}

fn delivery_time(
    body: &Value,
    errors: &mut Vec<FieldError>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let s = string_field(body, "deliveryTime", errors)?;
    match time::parse_rfc3339(s) {
        Ok(t) => Some(t),
        Err(e) => {
            errors.push(FieldError::new("deliveryTime", e.to_string()));
            None
        }
    }
}

fn created_response(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::CREATED);
    let location = body
        .get("messageId")
        .and_then(Value::as_str)
        .and_then(|id| HeaderValue::from_str(&format!("/messages/{id}")).ok());
    let mut response = (status, Json(body)).into_response();
    if let Some(location) = location {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// Schedule a message.
///
/// With an `Idempotency-Key` header, the same key and body within 24 hours
/// answer the first response again; the same key with another body answers 409.
#[utoipa::path(
    post, path = "/messages", tag = "messages", request_body = MessageIn,
    params(("Idempotency-Key" = Option<String>, Header, description = "At most 255 characters")),
    responses(
        (status = 201, description = "Scheduled", body = MessageOut, headers(("Location" = String))),
        (status = 400, description = "Invalid input; errors[].field names the field", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Idempotency-Key reused with another body", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["messages:write"]))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    principal.require(Scope::MessagesWrite)?;
    let mut errors = Vec::new();
    let key = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(k)) if !k.is_empty() && k.chars().count() <= MAX_IDEMPOTENCY_KEY => {
            Some(k.to_string())
        }
        Some(_) => {
            errors.push(FieldError::new(
                "Idempotency-Key",
                "must be 1 to 255 visible ASCII characters",
            ));
            None
        }
    };
    let (message, response, idempotency) =
        match parse_message(&body, &principal.account, key, time::now()) {
            Ok(parsed) if errors.is_empty() => parsed,
            Ok(_) => return Err(ApiError::Validation(errors)),
            Err(more) => {
                errors.extend(more);
                return Err(ApiError::Validation(errors));
            }
        };
    let item = BatchItem {
        message,
        idempotency,
    };
    match state.inserts.insert(item).await? {
        InsertOutcome::Created(created) => {
            metrics::counter!(m::SCHEDULED).increment(1);
            state.wake.due(created.delivery_time);
            Ok(created_response(201, response))
        }
        InsertOutcome::Replayed { status, response } => {
            let mut r = created_response(status, response);
            r.headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            Ok(r)
        }
        InsertOutcome::KeyConflict => Err(ApiError::Conflict(
            "this Idempotency-Key was used with a different request within the last 24 hours"
                .into(),
        )),
        InsertOutcome::UnknownTarget => Err(ApiError::field("targetId", "is not a known target")),
    }
}

/// A message to schedule, parsed from a request body: the message, the 201
/// response it answers, and (with a key) what the key remembers.
pub(super) type Parsed = (Message, Value, Option<IdempotencyInput>);

pub(super) fn parse_message(
    body: &Value,
    account: &str,
    key: Option<String>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Parsed, Vec<FieldError>> {
    let mut errors = Vec::new();
    let target_id =
        string_field(body, "targetId", &mut errors).and_then(|s| match s.parse::<TargetId>() {
            Ok(t) => Some(t),
            Err(_) => {
                errors.push(FieldError::new("targetId", "is not a known target"));
                None
            }
        });
    let delivery_time = delivery_time(body, &mut errors);
    let payload = string_field(body, "payload", &mut errors).and_then(|s| {
        match Payload::parse(s.to_string()) {
            Ok(p) => Some(p),
            Err(e) => {
                errors.push(FieldError::new("payload", e.to_string()));
                None
            }
        }
    });
    let (Some(target_id), Some(delivery_time), Some(payload), true) =
        (target_id, delivery_time, payload, errors.is_empty())
    else {
        return Err(errors);
    };
    let message = Message {
        id: MessageId::new(),
        account: account.to_string(),
        target_id,
        state: MsgState::Scheduled,
        delivery_time,
        next_attempt_at: Some(delivery_time),
        attempt_count: 0,
        delivered_at: None,
        cancelled_at: None,
        dead_lettered_at: None,
        last_error: None,
        created_at: now,
        updated_at: now,
        payload,
    };
    let response =
        serde_json::to_value(MessageOut::new(&message)).expect("a message serialises to JSON");
    let idempotency = key.map(|key| {
        // The same request means the same target, instant and payload.
        let mut hash = Sha256::new();
        for part in [
            message.target_id.as_str(),
            &time::format(&message.delivery_time),
            message.payload.as_str(),
        ] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part.as_bytes());
        }
        IdempotencyInput {
            key,
            request_hash: hash.finalize().to_vec(),
            status: 201,
            response: response.clone(),
            ttl: IDEMPOTENCY_TTL,
        }
    });
    Ok((message, response, idempotency))
}

/// List messages, newest first.
#[utoipa::path(
    get, path = "/messages", tag = "messages",
    params(
        ("targetId" = Option<String>, Query), ("state" = Option<String>, Query, description = "Scheduled, Delivered, Cancelled or DeadLetter"),
        ("limit" = Option<u32>, Query, description = "1 to 1000, default 50"), ("cursor" = Option<String>, Query),
    ),
    responses((status = 200, body = List<MessageOut>), (status = 400, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:read"]))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    q: QueryParams,
) -> ApiResult<Json<List<MessageOut>>> {
    principal.require(Scope::MessagesRead)?;
    let mut errors = Vec::new();
    let target_id = q.get("targetId").and_then(|s| match s.parse::<TargetId>() {
        Ok(t) => Some(t),
        Err(_) => {
            errors.push(FieldError::new("targetId", "is not a target id"));
            None
        }
    });
    let state_filter = q.get("state").and_then(|s| match MsgState::parse(s) {
        Some(st) => Some(st),
        None => {
            errors.push(FieldError::new(
                "state",
                "must be one of Scheduled, Delivered, Cancelled, DeadLetter",
            ));
            None
        }
    });
    let limit = q.limit().map_err(|e| {
        if let ApiError::Validation(mut v) = e {
            errors.append(&mut v)
        }
    });
    let cursor = q.cursor().map_err(|e| {
        if let ApiError::Validation(mut v) = e {
            errors.append(&mut v)
        }
    });
    let before = match cursor {
        Ok(Some(c)) => match c.parse::<MessageId>() {
            Ok(id) => Some(id),
            Err(_) => {
                errors.push(FieldError::new(
                    "cursor",
                    "is not a cursor this service issued",
                ));
                None
            }
        },
        _ => None,
    };
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let limit = limit.unwrap_or(super::extract::DEFAULT_LIMIT);
    let filter = MessageFilter {
        target_id,
        state: state_filter,
        ..MessageFilter::default()
    };
    let mut messages = state
        .store
        .list_messages(&principal.account, &filter, before.as_ref(), limit + 1)
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
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<MessageOut>> {
    principal.require(Scope::MessagesRead)?;
    let id = parse_id(&id)?;
    let m = state
        .store
        .get_message(&principal.account, &id)
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
    principal: Principal,
    Path(id): Path<String>,
    q: QueryParams,
) -> ApiResult<Json<List<AttemptOut>>> {
    principal.require(Scope::MessagesRead)?;
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
        .store
        .list_attempts(&principal.account, &id, after, limit + 1)
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

fn transition_result(t: Transition, action: &str) -> ApiResult<Json<MessageOut>> {
    match t {
        Transition::Done(m) => Ok(Json(MessageOut::new(&m))),
        Transition::NotFound => Err(ApiError::NotFound),
        Transition::WrongState(s) => Err(ApiError::Conflict(format!(
            "a {} message cannot be {action}",
            s.as_str()
        ))),
        Transition::InFlight => Err(ApiError::Conflict(format!(
            "an attempt to deliver this message is under way; it cannot be {action} until it ends"
        ))),
    }
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
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<MessageOut>> {
    principal.require(Scope::MessagesWrite)?;
    let id = parse_id(&id)?;
    transition_result(
        state
            .store
            .cancel(&principal.account, &id, time::now())
            .await?,
        "cancelled",
    )
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
    principal: Principal,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<MessageOut>> {
    principal.require(Scope::MessagesWrite)?;
    let id = parse_id(&id)?;
    let mut errors = Vec::new();
    let Some(at) = delivery_time(&body, &mut errors) else {
        return Err(ApiError::Validation(errors));
    };
    let result = transition_result(
        state
            .store
            .reschedule(&principal.account, &id, at, time::now())
            .await?,
        "rescheduled",
    );
    if result.is_ok() {
        state.wake.due(at);
    }
    result
}
