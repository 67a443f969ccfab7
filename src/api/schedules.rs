//! `/schedules` (docs/api.md#recurring-schedules): create, list, get, merge-patch, pause, resume,
//! delete. `schedules:` scopes are the `messages:` scopes.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
    Json,
};

use super::{
    error::{ApiError, ApiResult},
    extract::{encode_cursor, JsonBody, QueryParams},
};
use crate::{
    domain::{
        ids::{ScheduleId, TargetId},
        schedule::Schedule,
        target::FieldError,
    },
    service::{Actor, Permission},
    state::AppState,
    store::ScheduleCursor,
    wire::{
        problem::Problem,
        schedule::{self as wire, ScheduleIn, ScheduleOut},
        List,
    },
};

fn parse_id(id: &str) -> ApiResult<ScheduleId> {
    id.parse().map_err(|_| ApiError::NotFound)
}

/// `nextRunAt` and `lastRunAt` as of `now`.
fn respond(status: StatusCode, s: &Schedule, now: chrono::DateTime<chrono::Utc>) -> Response {
    super::extract::resource(status, ScheduleOut::new(s, now), || {
        format!("/schedules/{}", s.id)
    })
}

/// Create a schedule: `cron` or `every`, in `timeZone`, between `startAt`
/// and `endAt`. Each run creates one message, delivered like any other.
///
/// Daylight saving: a wall-clock time that does not exist that day runs at
/// the first instant after the gap; one that occurs twice runs once, at its
/// first occurrence.
#[utoipa::path(
    post, path = "/schedules", tag = "schedules", request_body = ScheduleIn,
    responses(
        (status = 201, description = "Created", body = ScheduleOut, headers(("Location" = String))),
        (status = 400, description = "Invalid input; errors[].field names each field", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The account is at limits.schedules, limits.schedule_runs_per_second or limits.scheduled_messages (problem type …/quota)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["messages:write"]))
)]
pub async fn create(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let spec = wire::parse(&body)?;
    let s = state.service.create_schedule(&actor, spec).await?;
    // As of its creation: a first run at that instant is its next run.
    Ok(respond(StatusCode::CREATED, &s, s.created_at))
}

/// List the account's schedules, newest first; of one target with `targetId`.
#[utoipa::path(
    get, path = "/schedules", tag = "schedules",
    params(("targetId" = Option<String>, Query), ("limit" = Option<u32>, Query, description = "1 to 1000, default 50"),
           ("cursor" = Option<String>, Query)),
    responses((status = 200, description = "A page of schedules", body = List<ScheduleOut>)),
    security(("bearer" = ["messages:read"]))
)]
pub async fn list(
    State(state): State<AppState>,
    actor: Actor,
    q: QueryParams,
) -> ApiResult<Json<List<ScheduleOut>>> {
    state.service.check(&actor, Permission::ReadMessages)?;
    let mut errors = Vec::new();
    let target = q.get("targetId").and_then(|s| {
        s.parse::<TargetId>()
            .map_err(|_| errors.push(FieldError::new("targetId", "is not a target id")))
            .ok()
    });
    let limit = q.limit_noting(&mut errors);
    let after = q.cursor_noting(&mut errors, ScheduleCursor::decode);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let now = state.service.now();
    let mut schedules = state
        .service
        .reads(&actor)
        .schedules(target.as_ref(), after.as_ref(), limit + 1, now)
        .await?;
    let next_cursor = if schedules.len() > limit as usize {
        schedules.truncate(limit as usize);
        schedules
            .last()
            .map(|s| encode_cursor(&ScheduleCursor::after(s).encode()))
    } else {
        None
    };
    Ok(Json(List {
        items: schedules.iter().map(|s| ScheduleOut::new(s, now)).collect(),
        next_cursor,
    }))
}

/// Get a schedule.
#[utoipa::path(
    get, path = "/schedules/{scheduleId}", tag = "schedules", params(("scheduleId" = String, Path)),
    responses((status = 200, body = ScheduleOut), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:read"]))
)]
pub async fn get(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ReadMessages)?;
    let id = parse_id(&id)?;
    let s = state
        .service
        .reads(&actor)
        .schedule(&id, state.service.now())
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(respond(StatusCode::OK, &s, state.service.now()))
}

/// Change a schedule with a JSON merge patch (RFC 7396).
///
/// Giving one of `cron` and `every` replaces the other. Runs go on from now
/// under the new rule.
#[utoipa::path(
    patch, path = "/schedules/{scheduleId}", tag = "schedules", params(("scheduleId" = String, Path)),
    request_body(content(
        (ScheduleIn = "application/merge-patch+json"),
        (ScheduleIn = "application/json"),
    )),
    responses((status = 200, body = ScheduleOut), (status = 400, body = Problem, content_type = "application/problem+json"),
              (status = 404, body = Problem, content_type = "application/problem+json"),
              (status = 409, description = "Other changes kept landing at the same time, the new rule would pass limits.schedule_runs_per_second, or the account is at limits.scheduled_messages (problem type …/quota)", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn patch(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    JsonBody(patch): JsonBody,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let id = parse_id(&id)?;
    if !patch.is_object() {
        return Err(ApiError::field("", "a merge patch must be a JSON object"));
    }
    let s = state.service.update_schedule(&actor, &id, &patch).await?;
    Ok(respond(StatusCode::OK, &s, state.service.now()))
}

async fn set_paused(
    state: AppState,
    actor: Actor,
    id: String,
    paused: bool,
) -> ApiResult<Response> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let id = parse_id(&id)?;
    let s = state
        .service
        .set_schedule_paused(&actor, &id, paused)
        .await?;
    Ok(respond(StatusCode::OK, &s, state.service.now()))
}

/// Pause a schedule: no runs are created until it is resumed.
#[utoipa::path(
    post, path = "/schedules/{scheduleId}/pause", tag = "schedules", params(("scheduleId" = String, Path)),
    responses((status = 200, body = ScheduleOut), (status = 404, body = Problem, content_type = "application/problem+json"),
              (status = 409, description = "Other changes kept landing at the same time", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn pause(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    set_paused(state, actor, id, true).await
}

/// Resume a schedule: runs go on from now; those missed while paused are
/// not made up.
#[utoipa::path(
    post, path = "/schedules/{scheduleId}/resume", tag = "schedules", params(("scheduleId" = String, Path)),
    responses((status = 200, body = ScheduleOut), (status = 404, body = Problem, content_type = "application/problem+json"),
              (status = 409, description = "Other changes kept landing at the same time, or the account is at limits.scheduled_messages (problem type …/quota)", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn resume(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    set_paused(state, actor, id, false).await
}

/// Delete a schedule: no further runs; messages already created stay.
#[utoipa::path(
    delete, path = "/schedules/{scheduleId}", tag = "schedules", params(("scheduleId" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["messages:write"]))
)]
pub async fn delete(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    state.service.check(&actor, Permission::ChangeMessages)?;
    let id = parse_id(&id)?;
    state.service.delete_schedule(&actor, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
