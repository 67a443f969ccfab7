//! `/targets`: create, list, get, merge-patch, enable, disable, rotate the
//! signing secret, delete.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
    Json,
};
use chrono::TimeDelta;

use super::{
    body::Body,
    error::{ApiError, ApiResult},
    extract::{encode_cursor, JsonBody, QueryParams},
};
use crate::{
    domain::{
        ids::TargetId,
        target::{FieldError, Target, TargetSpec},
    },
    service::targets::{TargetChange, OVERLAP_RULE},
    service::{Actor, Permission},
    state::AppState,
    store::TargetCursor,
    wire::{
        problem::Problem, target::TargetPatchIn, Field, List, RotateSecretIn, TargetIn, TargetOut,
    },
};

fn parse_id(id: &str) -> ApiResult<TargetId> {
    id.parse().map_err(|_| ApiError::NotFound)
}

fn respond(status: StatusCode, t: &Target, show_generated_secret: bool) -> Response {
    let out = TargetOut::with_generated_secret(t, show_generated_secret);
    super::extract::resource(status, out, || format!("/targets/{}", t.id))
}

/// Create a target.
#[utoipa::path(
    post, path = "/targets", tag = "targets", request_body = TargetIn,
    responses(
        (status = 201, description = "Created", body = TargetOut, headers(("Location" = String))),
        (status = 400, description = "Invalid configuration", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The account is at limits.targets (problem type …/quota)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["targets:write"]))
)]
pub async fn create(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ConfigureTargets)?;
    let spec: TargetSpec = crate::wire::target::parse(&body)?;
    let saved = state.service.create_target(&actor, spec).await?;
    Ok(respond(
        StatusCode::CREATED,
        &saved.target,
        saved.generated_secret,
    ))
}

/// List the account's targets, newest first.
#[utoipa::path(
    get, path = "/targets", tag = "targets",
    params(("limit" = Option<u32>, Query, description = "1 to 1000, default 50"), ("cursor" = Option<String>, Query)),
    responses((status = 200, description = "A page of targets", body = List<TargetOut>)),
    security(("bearer" = ["targets:read"]))
)]
pub async fn list(
    State(state): State<AppState>,
    actor: Actor,
    q: QueryParams,
) -> ApiResult<Json<List<TargetOut>>> {
    state.service.check(&actor, Permission::ReadTargets)?;
    let limit = q.limit()?;
    let after = q
        .cursor()?
        .map(|c| {
            TargetCursor::decode(&c)
                .ok_or_else(|| ApiError::field("cursor", "is not a cursor this service issued"))
        })
        .transpose()?;
    let mut targets = state
        .service
        .reads(&actor)
        .targets(after.as_ref(), limit + 1)
        .await?;
    let next_cursor = if targets.len() > limit as usize {
        targets.truncate(limit as usize);
        targets
            .last()
            .map(|t| encode_cursor(&TargetCursor::after(t).encode()))
    } else {
        None
    };
    Ok(Json(List {
        items: targets.iter().map(TargetOut::new).collect(),
        next_cursor,
    }))
}

async fn load(state: &AppState, actor: &Actor, id: &str) -> ApiResult<Target> {
    let id = parse_id(id)?;
    state
        .service
        .reads(actor)
        .target(&id)
        .await?
        .ok_or(ApiError::NotFound)
}

/// Get a target.
#[utoipa::path(
    get, path = "/targets/{targetId}", tag = "targets",
    params(("targetId" = String, Path)),
    responses((status = 200, body = TargetOut), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:read"]))
)]
pub async fn get(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ReadTargets)?;
    let t = load(&state, &actor, &id).await?;
    Ok(respond(StatusCode::OK, &t, false))
}

/// Change a target with a JSON merge patch (RFC 7396).
///
/// `null` removes a key; a secret sent back as `***` keeps its stored value;
/// `type` cannot change.
#[utoipa::path(
    patch, path = "/targets/{targetId}", tag = "targets",
    params(("targetId" = String, Path)),
    request_body(content(
        (TargetPatchIn = "application/merge-patch+json"),
        (TargetPatchIn = "application/json"),
    )),
    responses((status = 200, body = TargetOut), (status = 400, body = Problem, content_type = "application/problem+json"),
              (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:write"]))
)]
pub async fn patch(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    JsonBody(patch): JsonBody,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ConfigureTargets)?;
    let id = parse_id(&id)?;
    let saved = state
        .service
        .update_target(&actor, &id, TargetChange::MergePatch(&patch))
        .await?;
    Ok(respond(
        StatusCode::OK,
        &saved.target,
        saved.generated_secret,
    ))
}

async fn set_enabled(
    state: AppState,
    actor: Actor,
    id: String,
    enabled: bool,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ConfigureTargets)?;
    let id = parse_id(&id)?;
    let t = state
        .service
        .set_target_enabled(&actor, &id, enabled)
        .await?;
    Ok(respond(StatusCode::OK, &t, false))
}

/// Enable a target: its waiting messages are delivered, oldest first.
#[utoipa::path(
    post, path = "/targets/{targetId}/enable", tag = "targets", params(("targetId" = String, Path)),
    responses((status = 200, body = TargetOut), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:write"]))
)]
pub async fn enable(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    set_enabled(state, actor, id, true).await
}

/// Disable a target: its messages wait, Scheduled, without consuming retries.
#[utoipa::path(
    post, path = "/targets/{targetId}/disable", tag = "targets", params(("targetId" = String, Path)),
    responses((status = 200, body = TargetOut), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:write"]))
)]
pub async fn disable(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    set_enabled(state, actor, id, false).await
}

/// Rotate a webhook's signing secret: the new one is shown in full, once;
/// the replaced one signs beside it until `overlapSeconds` have passed.
#[utoipa::path(
    post, path = "/targets/{targetId}/rotate-secret", tag = "targets", params(("targetId" = String, Path)),
    request_body = RotateSecretIn,
    responses((status = 200, description = "The target, its new signingSecret shown once", body = TargetOut),
              (status = 400, description = "overlapSeconds out of range", body = Problem, content_type = "application/problem+json"),
              (status = 404, body = Problem, content_type = "application/problem+json"),
              (status = 409, description = "Not a webhook: an SQS or SNS target has no signing secret", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:write"]))
)]
pub async fn rotate_secret(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    Body(body): Body<RotateSecretIn>,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ConfigureTargets)?;
    let id = parse_id(&id)?;
    // The body's shape here; the service holds the overlap's range (an
    // integer too large for a duration is out of it too).
    let overlap = match body.overlap_seconds {
        Field::Missing => TimeDelta::days(1),
        Field::Valid(s) if s.fract() == 0.0 => {
            TimeDelta::try_seconds(s as i64).unwrap_or(TimeDelta::MAX)
        }
        _ => {
            return Err(ApiError::Validation(vec![FieldError::new(
                "overlapSeconds",
                OVERLAP_RULE,
            )]))
        }
    };
    let saved = state
        .service
        .rotate_signing_secret(&actor, &id, overlap)
        .await?;
    Ok(respond(StatusCode::OK, &saved.target, true))
}

/// Delete a target; refused while it has Scheduled or DeadLetter messages.
#[utoipa::path(
    delete, path = "/targets/{targetId}", tag = "targets", params(("targetId" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = Problem, content_type = "application/problem+json"),
              (status = 409, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:write"]))
)]
pub async fn delete(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    state.service.check(&actor, Permission::ConfigureTargets)?;
    let id = parse_id(&id)?;
    state.service.delete_target(&actor, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
