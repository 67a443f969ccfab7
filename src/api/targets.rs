//! `/targets`: create, list, get, merge-patch, enable, disable, delete.

use axum::{
    extract::{Path, State},
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    Json,
};

use super::{
    error::{ApiError, ApiResult, Problem},
    extract::{encode_cursor, JsonBody, QueryParams},
    wire::{List, TargetIn, TargetOut},
    AppState,
};
use crate::{
    auth::{Principal, Scope},
    delivery::policy::OutboundPolicy,
    domain::{
        ids::TargetId,
        target::{self, Target, TargetConfig, TargetSpec},
        time,
    },
    store::{self, DeleteTarget, TargetCursor},
};

fn parse_id(id: &str) -> ApiResult<TargetId> {
    id.parse().map_err(|_| ApiError::NotFound)
}

/// The outbound rules (private networks, AWS credentials) at creation and change time.
pub(crate) async fn check_outbound(state: &AppState, config: &TargetConfig) -> ApiResult<()> {
    OutboundPolicy::from_config(&state.config)
        .check(config)
        .await
        .map_err(ApiError::from)
}

fn respond(status: StatusCode, t: &Target, show_generated_secret: bool) -> Response {
    let out = TargetOut::with_generated_secret(t, show_generated_secret);
    let location = format!("/targets/{}", t.id);
    if status == StatusCode::CREATED {
        (status, [(header::LOCATION, location)], Json(out)).into_response()
    } else {
        (status, Json(out)).into_response()
    }
}

/// Create a target.
#[utoipa::path(
    post, path = "/targets", tag = "targets", request_body = TargetIn,
    responses(
        (status = 201, description = "Created", body = TargetOut, headers(("Location" = String))),
        (status = 400, description = "Invalid configuration", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["targets:write"]))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody,
) -> ApiResult<Response> {
    principal.require(Scope::TargetsWrite)?;
    let spec: TargetSpec = target::parse_spec(&body)?;
    check_outbound(&state, &spec.config).await?;
    match store::insert_new_target(state.store.as_ref(), &principal.account, &spec, time::now())
        .await?
    {
        Some(t) => Ok(respond(StatusCode::CREATED, &t, spec.generated_secret)),
        None => Err(ApiError::Internal),
    }
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
    principal: Principal,
    q: QueryParams,
) -> ApiResult<Json<List<TargetOut>>> {
    principal.require(Scope::TargetsRead)?;
    let limit = q.limit()?;
    let after = q
        .cursor()?
        .map(|c| {
            TargetCursor::decode(&c)
                .ok_or_else(|| ApiError::field("cursor", "is not a cursor this service issued"))
        })
        .transpose()?;
    let mut targets = state
        .store
        .list_targets(&principal.account, after.as_ref(), limit + 1)
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

async fn load(state: &AppState, principal: &Principal, id: &str) -> ApiResult<Target> {
    let id = parse_id(id)?;
    state
        .store
        .get_target(&principal.account, &id)
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
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    principal.require(Scope::TargetsRead)?;
    let t = load(&state, &principal, &id).await?;
    Ok(respond(StatusCode::OK, &t, false))
}

/// Change a target with a JSON merge patch (RFC 7396).
///
/// `null` removes a key; a secret sent back as `***` keeps its stored value;
/// `type` cannot change.
#[utoipa::path(
    patch, path = "/targets/{targetId}", tag = "targets",
    params(("targetId" = String, Path)),
    request_body(content = Object, content_type = "application/merge-patch+json"),
    responses((status = 200, body = TargetOut), (status = 400, body = Problem, content_type = "application/problem+json"),
              (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:write"]))
)]
pub async fn patch(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    JsonBody(patch): JsonBody,
) -> ApiResult<Response> {
    principal.require(Scope::TargetsWrite)?;
    let current = load(&state, &principal, &id).await?;
    let stored = target::patchable_document(&current);
    let mut merged = stored.clone();
    json_patch::merge(&mut merged, &patch);
    if merged.get("type") != stored.get("type") {
        return Err(ApiError::field(
            "type",
            "cannot be changed; create a new target instead",
        ));
    }
    if let (Some(new), Some(old)) = (merged.get_mut("config"), stored.get("config")) {
        let sent = patch.get("config").unwrap_or(&serde_json::Value::Null);
        target::keep_secrets(current.config.kind(), new, old, sent)?;
    }
    let spec = target::parse_spec(&merged)?;
    check_outbound(&state, &spec.config).await?;
    let now = time::now();
    let changed = Target {
        name: spec.name,
        config: spec.config,
        updated_at: now,
        ..current.clone()
    };
    let mut updated = if changed.name != current.name || changed.config != current.config {
        state
            .store
            .update_target(&changed)
            .await?
            .ok_or(ApiError::NotFound)?
    } else {
        current
    };
    if spec.enabled != updated.enabled {
        updated = state
            .store
            .set_target_enabled(&principal.account, &updated.id, spec.enabled, now)
            .await?
            .ok_or(ApiError::NotFound)?;
        if spec.enabled {
            state.wake.now();
        }
    }
    Ok(respond(StatusCode::OK, &updated, spec.generated_secret))
}

async fn set_enabled(
    state: AppState,
    principal: Principal,
    id: String,
    enabled: bool,
) -> ApiResult<Response> {
    principal.require(Scope::TargetsWrite)?;
    let id = parse_id(&id)?;
    let t = state
        .store
        .set_target_enabled(&principal.account, &id, enabled, time::now())
        .await?
        .ok_or(ApiError::NotFound)?;
    if enabled {
        state.wake.now();
    }
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
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    set_enabled(state, principal, id, true).await
}

/// Disable a target: its messages wait, Scheduled, without consuming retries.
#[utoipa::path(
    post, path = "/targets/{targetId}/disable", tag = "targets", params(("targetId" = String, Path)),
    responses((status = 200, body = TargetOut), (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["targets:write"]))
)]
pub async fn disable(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    set_enabled(state, principal, id, false).await
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
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(Scope::TargetsWrite)?;
    let id = parse_id(&id)?;
    match state.store.delete_target(&principal.account, &id).await? {
        DeleteTarget::Deleted => Ok(StatusCode::NO_CONTENT),
        DeleteTarget::NotFound => Err(ApiError::NotFound),
        DeleteTarget::HasPending => Err(ApiError::Conflict(
            "the target still has Scheduled or DeadLetter messages; cancel them first".into(),
        )),
    }
}
