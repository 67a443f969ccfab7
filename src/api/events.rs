//! `/subscriptions` and `/events` (docs/api.md#events-and-subscriptions).
//! Subscriptions are a target's configuration (`targets:` scopes); events
//! are messages (`messages:` scopes).

use axum::{
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::Response,
    Json,
};

use super::{
    body::Body,
    error::{ApiError, ApiResult},
    extract::{self, encode_cursor, JsonBody, QueryParams},
};
use crate::{
    domain::{
        event::Subscription,
        ids::{EventId, SubscriptionId, TargetId},
        target::FieldError,
    },
    service::{
        events::{PublishOutcome, PublishRequest},
        Actor, Permission,
    },
    state::AppState,
    store::{EventCursor, EventQuery, SubscriptionCursor},
    wire::{
        bulk::CountOut,
        event::{
            self as wire, EventIn, EventOut, EventReplayIn, SubscriptionIn, SubscriptionOut,
            SubscriptionPatch,
        },
        problem::Problem,
        List,
    },
};

fn subscription_id(id: &str) -> ApiResult<SubscriptionId> {
    id.parse().map_err(|_| ApiError::NotFound)
}

fn respond(status: StatusCode, s: &Subscription) -> Response {
    extract::resource(status, SubscriptionOut::new(s), || {
        format!("/subscriptions/{}", s.id)
    })
}

/// Subscribe a target to event types.
#[utoipa::path(
    post, path = "/subscriptions", tag = "events", request_body = SubscriptionIn,
    responses(
        (status = 201, description = "Created", body = SubscriptionOut, headers(("Location" = String))),
        (status = 400, description = "Invalid input; errors[].field names each field (`types[2]`)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The account is at limits.subscriptions (problem type …/quota)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["targets:write"]))
)]
pub async fn create_subscription(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ConfigureTargets)?;
    let spec = wire::parse_subscription(&body).map_err(ApiError::Validation)?;
    let s = state.service.create_subscription(&actor, spec).await?;
    Ok(respond(StatusCode::CREATED, &s))
}

/// List the account's subscriptions, newest first; of one target with
/// `targetId`.
#[utoipa::path(
    get, path = "/subscriptions", tag = "events",
    params(("targetId" = Option<String>, Query), ("limit" = Option<u32>, Query, description = "1 to 1000, default 50"),
           ("cursor" = Option<String>, Query)),
    responses((status = 200, description = "A page of subscriptions", body = List<SubscriptionOut>),
              (status = 400, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:read"]))
)]
pub async fn list_subscriptions(
    State(state): State<AppState>,
    actor: Actor,
    q: QueryParams,
) -> ApiResult<Json<List<SubscriptionOut>>> {
    state.service.check(&actor, Permission::ReadTargets)?;
    let mut errors = Vec::new();
    let target = q.get("targetId").and_then(|s| {
        s.parse::<TargetId>()
            .map_err(|_| errors.push(FieldError::new("targetId", "is not a target id")))
            .ok()
    });
    let limit = q.limit_noting(&mut errors);
    let after = q.cursor_noting(&mut errors, SubscriptionCursor::decode);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let mut subs = state
        .service
        .reads(&actor)
        .subscriptions(target.as_ref(), after.as_ref(), limit + 1)
        .await?;
    let next_cursor = if subs.len() > limit as usize {
        subs.truncate(limit as usize);
        subs.last()
            .map(|s| encode_cursor(&SubscriptionCursor::after(s).encode()))
    } else {
        None
    };
    Ok(Json(List {
        items: subs.iter().map(SubscriptionOut::new).collect(),
        next_cursor,
    }))
}

/// Get a subscription.
#[utoipa::path(
    get, path = "/subscriptions/{subscriptionId}", tag = "events", params(("subscriptionId" = String, Path)),
    responses((status = 200, body = SubscriptionOut), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:read"]))
)]
pub async fn get_subscription(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ReadTargets)?;
    let id = subscription_id(&id)?;
    let s = state
        .service
        .reads(&actor)
        .subscription(&id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(respond(StatusCode::OK, &s))
}

/// Change a subscription with a JSON merge patch (RFC 7396): its name,
/// types or `enabled`. Its `targetId` cannot change.
#[utoipa::path(
    patch, path = "/subscriptions/{subscriptionId}", tag = "events", params(("subscriptionId" = String, Path)),
    request_body(content(
        (SubscriptionPatch = "application/merge-patch+json"),
        (SubscriptionPatch = "application/json"),
    )),
    responses((status = 200, body = SubscriptionOut), (status = 400, body = Problem, content_type = "application/problem+json"),
              (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:write"]))
)]
pub async fn patch_subscription(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    JsonBody(patch): JsonBody,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ConfigureTargets)?;
    let id = subscription_id(&id)?;
    if !patch.is_object() {
        return Err(ApiError::field("", "a merge patch must be a JSON object"));
    }
    let s = state
        .service
        .update_subscription(&actor, &id, &patch)
        .await?;
    Ok(respond(StatusCode::OK, &s))
}

/// Delete a subscription: its target gets no more events through it;
/// messages already made stay.
#[utoipa::path(
    delete, path = "/subscriptions/{subscriptionId}", tag = "events", params(("subscriptionId" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:write"]))
)]
pub async fn delete_subscription(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    state.service.check(&actor, Permission::ConfigureTargets)?;
    let id = subscription_id(&id)?;
    state.service.delete_subscription(&actor, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Publish an event: one message to each target with an enabled
/// subscription whose types match, made in one transaction (a target
/// matched by several subscriptions gets one). No match is no error:
/// `"messages": []`.
///
/// With an `Idempotency-Key` header, the same key and body within 24 hours
/// answer the first response again and make nothing; the same key with
/// another body answers 409.
#[utoipa::path(
    post, path = "/events", tag = "events", request_body = EventIn,
    params(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 characters, no control characters")),
    responses(
        (status = 201, description = "Published", body = EventOut, headers(("Location" = String))),
        (status = 400, description = "Invalid input; errors[].field names the field", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Idempotency-Key reused with another body, or its fan-out would pass limits.scheduled_messages (problem type …/quota)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["messages:write"]))
)]
pub async fn publish(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
    Body(body): Body<EventIn>,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let mut errors = Vec::new();
    let key = extract::idempotency_key(&headers, &mut errors);
    let spec = match wire::parse_event(body) {
        Ok(spec) if errors.is_empty() => spec,
        Ok(_) => return Err(ApiError::Validation(errors)),
        Err(more) => {
            errors.extend(more);
            return Err(ApiError::Validation(errors));
        }
    };
    let req = PublishRequest {
        ty: spec.ty,
        payload: spec.payload,
        delivery_time: spec.delivery_time,
        ordering_key: spec.ordering_key,
        idempotency_key: key,
    };
    match state.service.publish(&actor, req).await? {
        PublishOutcome::Created(view) => Ok(extract::created(
            201,
            EventOut::text(&view),
            "/events",
            "eventId",
            false,
        )),
        PublishOutcome::Replayed { status, response } => Ok(extract::created(
            status, response, "/events", "eventId", true,
        )),
    }
}

/// Get an event, with each message it made and that message's state
/// (null once retention removed the message).
#[utoipa::path(
    get, path = "/events/{eventId}", tag = "events", params(("eventId" = String, Path)),
    responses((status = 200, body = EventOut), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:read"]))
)]
pub async fn get_event(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Json<EventOut>> {
    state.service.check(&actor, Permission::ReadMessages)?;
    let id: EventId = id.parse().map_err(|_| ApiError::NotFound)?;
    let view = state
        .service
        .reads(&actor)
        .published_event(&id)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(EventOut::new(&view)))
}

/// List the account's events, newest first: of one `type`, created in
/// [`from`, `to`).
#[utoipa::path(
    get, path = "/events", tag = "events",
    params(("type" = Option<String>, Query), ("from" = Option<String>, Query, description = "RFC 3339: created at or after"),
           ("to" = Option<String>, Query, description = "RFC 3339: created before"),
           ("limit" = Option<u32>, Query, description = "1 to 1000, default 50"), ("cursor" = Option<String>, Query)),
    responses((status = 200, description = "A page of events", body = List<EventOut>),
              (status = 400, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:read"]))
)]
pub async fn list_events(
    State(state): State<AppState>,
    actor: Actor,
    q: QueryParams,
) -> ApiResult<Json<List<EventOut>>> {
    state.service.check(&actor, Permission::ReadMessages)?;
    let mut errors = Vec::new();
    let ty = q.get("type").and_then(|t| {
        crate::domain::event::EventType::parse(t)
            .map_err(|rule| errors.push(FieldError::new("type", rule)))
            .ok()
    });
    let mut instant = |name: &str| {
        q.sent(name)
            .and_then(|s| crate::wire::instant(s, name, &mut errors))
    };
    let from = instant("from");
    let to = instant("to");
    let limit = q.limit_noting(&mut errors);
    let after = q.cursor_noting(&mut errors, EventCursor::decode);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let query = EventQuery {
        ty: ty.map(|t| t.to_string()),
        from,
        to,
    };
    let mut events = state
        .service
        .reads(&actor)
        .published_events(&query, after.as_ref(), limit + 1)
        .await?;
    let next_cursor = if events.len() > limit as usize {
        events.truncate(limit as usize);
        events
            .last()
            .map(|v| encode_cursor(&EventCursor::after(&v.event).encode()))
    } else {
        None
    };
    Ok(Json(List {
        items: events.iter().map(EventOut::new).collect(),
        next_cursor,
    }))
}

/// Deliver a time range of the account's events to one target: each event
/// published in [`from`, `to`) whose type matches `types` (by default the
/// target's enabled subscriptions' patterns) becomes a new message to it,
/// due at `deliveryTime` (default now), listed among the event's messages.
/// One transaction per 1,000 events; more than `bulk.max` answer 400 and
/// make nothing.
#[utoipa::path(
    post, path = "/events/replay", operation_id = "replay_events", tag = "events", request_body = EventReplayIn,
    responses((status = 200, body = CountOut),
              (status = 400, description = "Invalid input, or more than bulk.max events match", body = Problem, content_type = "application/problem+json"),
              (status = 409, description = "The account would pass limits.scheduled_messages (problem type …/quota); nothing changed", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn replay(
    State(state): State<AppState>,
    actor: Actor,
    Body(body): Body<EventReplayIn>,
) -> ApiResult<Json<CountOut>> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let spec = wire::parse_replay(body).map_err(ApiError::Validation)?;
    let count = state.service.replay_events(&actor, spec).await?;
    Ok(Json(CountOut { count }))
}
