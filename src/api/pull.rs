//! A pull target's consumers (docs/api.md#pull-targets): receive, ack, nack
//! and visibility. Each needs `messages:receive` (or `messages:write`).

use axum::{
    extract::{Path, State},
    http::StatusCode,
    Json,
};

use super::{
    body::{Body, OptionalBody},
    error::{ApiError, ApiResult},
};
use crate::{
    domain::ids::TargetId,
    service::{Actor, Permission},
    state::AppState,
    wire::{
        problem::Problem,
        pull::{AckIn, AckOut, NackIn, NackOut, ReceiveIn, ReceiveOut, ReceivedOut, VisibilityIn},
    },
};

fn target_id(id: &str) -> ApiResult<TargetId> {
    id.parse().map_err(|_| ApiError::NotFound)
}

/// Receive messages of a pull target, earliest due first; each is hidden
/// from other receives for the visibility timeout. With `wait`, the answer
/// comes as soon as a message is receivable, or with no items when `wait`
/// ends.
#[utoipa::path(
    post, path = "/targets/{targetId}/receive", tag = "pull", params(("targetId" = String, Path)),
    request_body(content = Option<ReceiveIn>, description = "May be left out: 10 messages, no wait"),
    responses(
        (status = 200, description = "What was received (none for a disabled target)", body = ReceiveOut),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not a pull target; or, with `wait`, the account has `limits.waiting_receives` receives waiting on this instance already (problem type …/quota)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["messages:receive"]))
)]
pub async fn receive(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    OptionalBody(body): OptionalBody<ReceiveIn>,
) -> ApiResult<Json<ReceiveOut>> {
    state.service.check(&actor, Permission::ReceiveMessages)?;
    let target = target_id(&id)?;
    let req = body.read().map_err(ApiError::Validation)?;
    let items = state.service.receive(&actor, &target, req).await?;
    let now = state.service.now();
    Ok(Json(ReceiveOut {
        items: items
            .iter()
            .map(|i| ReceivedOut::new(&i.message, &i.handle, i.receive_count, now))
            .collect(),
    }))
}

/// Acknowledge received messages: each becomes Delivered. A handle that is
/// not its message's latest receive changes nothing and is listed in `stale`.
#[utoipa::path(
    post, path = "/targets/{targetId}/ack", tag = "pull", params(("targetId" = String, Path)),
    request_body = AckIn,
    responses(
        (status = 200, body = AckOut),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not a pull target", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["messages:receive"]))
)]
pub async fn ack(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    Body(body): Body<AckIn>,
) -> ApiResult<Json<AckOut>> {
    state.service.check(&actor, Permission::ReceiveMessages)?;
    let target = target_id(&id)?;
    let handles = body.read().map_err(ApiError::Validation)?;
    let s = state.service.ack(&actor, &target, &handles).await?;
    Ok(Json(AckOut {
        acked: s.done,
        stale: s.stale,
    }))
}

/// Give received messages back: receivable again after `delay`. A message
/// given back after its last allowed receive is a dead letter.
#[utoipa::path(
    post, path = "/targets/{targetId}/nack", tag = "pull", params(("targetId" = String, Path)),
    request_body = NackIn,
    responses(
        (status = 200, body = NackOut),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not a pull target", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["messages:receive"]))
)]
pub async fn nack(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    Body(body): Body<NackIn>,
) -> ApiResult<Json<NackOut>> {
    state.service.check(&actor, Permission::ReceiveMessages)?;
    let target = target_id(&id)?;
    let (handles, delay) = body.read().map_err(ApiError::Validation)?;
    let s = state.service.nack(&actor, &target, &handles, delay).await?;
    Ok(Json(NackOut {
        released: s.done,
        stale: s.stale,
    }))
}

/// Set a received message's remaining visibility (`0s`: receivable at once).
#[utoipa::path(
    post, path = "/targets/{targetId}/visibility", tag = "pull", params(("targetId" = String, Path)),
    request_body = VisibilityIn,
    responses(
        (status = 200, description = "Changed"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The handle is stale, or this is not a pull target", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["messages:receive"]))
)]
pub async fn visibility(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    Body(body): Body<VisibilityIn>,
) -> ApiResult<StatusCode> {
    state.service.check(&actor, Permission::ReceiveMessages)?;
    let target = target_id(&id)?;
    let (handle, visibility) = body.read().map_err(ApiError::Validation)?;
    state
        .service
        .change_visibility(&actor, &target, &handle, visibility)
        .await?;
    Ok(StatusCode::OK)
}
