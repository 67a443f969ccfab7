//! The actions on one target: enable and disable, close an open breaker,
//! send a test message (with a payload the person types), rotate the
//! signing secret, delete.

use crate::service::Permission;
use axum::{
    extract::{Path, State},
    http::HeaderMap,
    response::{Redirect, Response},
};
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;

use super::{session::Session, target_secret::OVERLAPS, PortalError, PortalForm, PortalResult};
use crate::{
    domain::ids::TargetId,
    service::{Conflict, ServiceError},
    state::AppState,
};

use super::session::CsrfForm;

#[derive(Debug, Deserialize)]
pub struct TestForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    payload: String,
}

/// Closes an open breaker by hand: its waiting messages go at once.
pub async fn reset_breaker(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::OperateTargets)?;
    let id: TargetId = id.parse().map_err(|_| PortalError::NotFound)?;
    state.service.reset_health(session.actor(), &id).await?;
    Ok(Redirect::to(&format!(
        "/portal/targets/{id}?notice=breaker-closed"
    )))
}

async fn set_enabled(
    state: AppState,
    session: Session,
    id: String,
    csrf: &str,
    enabled: bool,
) -> PortalResult<Redirect> {
    session.authorize(csrf, Permission::ConfigureTargets)?;
    let id: TargetId = id.parse().map_err(|_| PortalError::NotFound)?;
    state
        .service
        .set_target_enabled(session.actor(), &id, enabled)
        .await?;
    let notice = if enabled { "enabled" } else { "disabled" };
    Ok(Redirect::to(&format!(
        "/portal/targets/{id}?notice={notice}"
    )))
}

pub async fn enable(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    set_enabled(state, session, id, &f.csrf, true).await
}

pub async fn disable(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    set_enabled(state, session, id, &f.csrf, false).await
}

/// Schedules a message due now (the typed payload, or a small one that
/// names no person: the receiver is another party) and shows it, so its
/// outcome can be watched.
pub async fn send_test(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<TestForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::OperateTargets)?;
    let id: TargetId = id.parse().map_err(|_| PortalError::NotFound)?;
    let payload = Some(f.payload).filter(|p| !p.trim().is_empty());
    let m = state
        .service
        .send_test(session.actor(), &id, payload)
        .await?;
    Ok(Redirect::to(&format!(
        "/portal/messages/{}?notice=test&watch=1",
        m.id
    )))
}

#[derive(Debug, Deserialize)]
pub struct RotateForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    overlap: String,
}

/// A fresh signing secret, shown once; the replaced one keeps signing
/// beside it for the overlap chosen, so the receiver can switch.
pub async fn rotate_secret(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    jar: CookieJar,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<RotateForm>,
) -> PortalResult<Response> {
    session.authorize(&f.csrf, Permission::ConfigureTargets)?;
    let id: TargetId = id.parse().map_err(|_| PortalError::NotFound)?;
    let seconds = f
        .overlap
        .parse::<i64>()
        .ok()
        .filter(|s| OVERLAPS.iter().any(|(o, _)| o == s))
        .ok_or_else(|| {
            PortalError::BadRequest(
                "Choose how long the replaced secret keeps signing: none, 1 hour, 24 hours or 7 days."
                    .into(),
            )
        })?;
    let saved = state
        .service
        .rotate_signing_secret(session.actor(), &id, chrono::TimeDelta::seconds(seconds))
        .await?;
    Ok(super::target_secret::show_once(
        &state,
        &headers,
        jar,
        &saved.target,
        "rotated",
    ))
}

/// Deletes the target; while it still has messages to deliver, says what
/// to do first (the contract's 409).
pub async fn delete(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ConfigureTargets)?;
    let id: TargetId = id.parse().map_err(|_| PortalError::NotFound)?;
    match state.service.delete_target(session.actor(), &id).await {
        Ok(()) => Ok(Redirect::to("/portal/targets?notice=target-deleted")),
        Err(ServiceError::Conflict(Conflict::TargetInUse)) => Err(PortalError::Conflict(
            "The target still has Scheduled messages or dead letters. Cancel them first \
             (the target page's \"Cancel messages in a range\" does it at once), and pause or \
             delete its schedules, whose next runs are made a few seconds ahead; then delete it."
                .into(),
        )),
        Err(e) => Err(e.into()),
    }
}
