//! Recurring schedules (docs/api.md#recurring-schedules): the list with each schedule's next run,
//! a form (create and edit) with a preview of the next five runs, pause,
//! resume and delete. The form becomes the same JSON document the API
//! takes, checked by the same rules; the preview works without script (a
//! button) and, with it, follows what is typed.

use crate::service::Permission;
use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::{Html, IntoResponse, Redirect, Response},
};
use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::{
    layout::{self, Section},
    schedule_form::{form, in_zone, preview_section, rule_text, ScheduleForm},
    session::{CsrfForm, Session},
    targets::all_targets,
    PortalError, PortalForm, PortalResult,
};
use crate::{
    domain::{
        ids::ScheduleId,
        schedule::Schedule,
        target::{FieldError, Target},
    },
    state::AppState,
    store::ScheduleCursor,
    wire::schedule as wire,
};

fn form_page(session: &Session, title: &str, body: Markup, status: StatusCode) -> Response {
    (
        status,
        Html(layout::page(session, title, Section::Schedules, None, body).into_string()),
    )
        .into_response()
}

fn notice(code: Option<&str>) -> Option<&'static str> {
    Some(match code? {
        "created" => "The schedule was created.",
        "saved" => "The schedule was saved: its runs go on from now under its new rule.",
        "paused" => "The schedule is paused: no runs until it is resumed.",
        "resumed" => "The schedule is resumed: runs go on from now; those missed are not made up.",
        "deleted" => "The schedule was deleted. The messages of its past runs stay.",
        _ => return None,
    })
}

pub async fn list(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<layout::NoticeQuery>,
) -> PortalResult<Html<String>> {
    let now = state.service.now();
    let mut all = Vec::new();
    let mut after: Option<ScheduleCursor> = None;
    loop {
        let page = session
            .reads(&state)
            .schedules(None, after.as_ref(), 1000, now)
            .await?;
        let done = page.len() < 1000;
        after = page.last().map(ScheduleCursor::after);
        all.extend(page);
        if done {
            break;
        }
    }
    let targets = all_targets(session.reads(&state)).await?;
    let target_name = |s: &Schedule| {
        targets
            .iter()
            .find(|t| t.id == s.target_id)
            .map_or(s.target_id.to_string(), |t| t.name.clone())
    };
    let body = html! {
        div.heading {
            h1 { "Schedules" }
            @if session.may(Permission::ChangeMessages) { a.button href="/portal/schedules/new" { "New schedule" } }
        }
        @if all.is_empty() {
            p { "No schedules yet. A schedule sends a message to a target on a cron expression or every fixed period." }
        } @else {
            div.scroll {
                table #schedules {
                    thead { tr {
                        th scope="col" { "Name" } th scope="col" { "Target" } th scope="col" { "Runs" }
                        th scope="col" { "Next run" } th scope="col" { "Status" }
                        @if session.may(Permission::ChangeMessages) { th scope="col" { span.visually-hidden { "Actions" } } }
                    } }
                    tbody {
                        @for s in &all {
                            tr data-schedule=(s.id) {
                                th scope="row" { a href={ "/portal/schedules/" (s.id) } {
                                    @if s.name.is_empty() { (s.id) } @else { (s.name) } } }
                                td { a href={ "/portal/targets/" (s.target_id) } { (target_name(s)) } }
                                td { (rule_text(s)) }
                                td { @match s.next_run(now) { Some(t) => (in_zone(&t, s.zone)), None => span.none { "—" } } }
                                td { @if s.paused { span.off { "Paused" } } @else { "Active" } }
                                @if session.may(Permission::ChangeMessages) { td { (toggle(&session, s)) } }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(Html(
        layout::page(
            &session,
            "Schedules",
            Section::Schedules,
            notice(q.notice.as_deref()),
            body,
        )
        .into_string(),
    ))
}

fn toggle(session: &Session, s: &Schedule) -> Markup {
    let (action, label) = if s.paused {
        ("resume", "Resume")
    } else {
        ("pause", "Pause")
    };
    html! {
        form.inline method="post" action={ "/portal/schedules/" (s.id) "/" (action) } {
            (layout::csrf_field(session))
            button.secondary type="submit" aria-label={ (label) " " (s.name) } { (label) }
        }
    }
}

pub async fn new(State(state): State<AppState>, session: Session) -> PortalResult<Response> {
    session.require(Permission::ChangeMessages)?;
    let targets = all_targets(session.reads(&state)).await?;
    let mut f = ScheduleForm::blank();
    f.target_id = targets
        .first()
        .map(|t| t.id.to_string())
        .unwrap_or_default();
    let body = html! {
        h1 { "New schedule" }
        @if targets.is_empty() {
            p { "A schedule sends to a target: " a href="/portal/targets/new" { "create a target" } " first." }
        } @else {
            (form(&session, "/portal/schedules", &f, &targets, &[], state.service.now()))
        }
    };
    Ok(form_page(&session, "New schedule", body, StatusCode::OK))
}

pub async fn create(
    State(state): State<AppState>,
    session: Session,
    PortalForm(f): PortalForm<ScheduleForm>,
) -> PortalResult<Response> {
    session.authorize(&f.csrf, Permission::ChangeMessages)?;
    let now = state.service.now();
    let targets = all_targets(session.reads(&state)).await?;
    let again = |errors: &[FieldError], status| {
        let body = html! {
            h1 { "New schedule" }
            (form(&session, "/portal/schedules", &f, &targets, errors, now))
        };
        form_page(&session, "New schedule", body, status)
    };
    if f.preview.is_some() {
        return Ok(again(&[], StatusCode::OK));
    }
    let spec = match f.document(now).and_then(|d| wire::parse(&d)) {
        Ok(spec) => spec,
        Err(errors) => return Ok(again(&errors, StatusCode::BAD_REQUEST)),
    };
    match state.service.create_schedule(session.actor(), spec).await {
        Ok(s) => {
            Ok(Redirect::to(&format!("/portal/schedules/{}?notice=created", s.id)).into_response())
        }
        Err(crate::service::ServiceError::Invalid(errors)) => {
            Ok(again(&errors, StatusCode::BAD_REQUEST))
        }
        Err(e) => Err(e.into()),
    }
}

async fn load(state: &AppState, session: &Session, id: &str) -> PortalResult<Schedule> {
    let id: ScheduleId = id.parse().map_err(|_| PortalError::NotFound)?;
    session
        .reads(state)
        .schedule(&id, state.service.now())
        .await?
        .ok_or(PortalError::NotFound)
}

fn show_page(
    session: &Session,
    s: &Schedule,
    f: &ScheduleForm,
    targets: &[Target],
    errors: &[FieldError],
    notice_text: Option<&str>,
    now: DateTime<Utc>,
) -> Markup {
    let title = if s.name.is_empty() {
        s.id.to_string()
    } else {
        s.name.clone()
    };
    let body = html! {
        div.heading {
            h1 { (title) }
            @if session.may(Permission::ChangeMessages) { (toggle(session, s)) }
        }
        dl.facts {
            dt { "Id" } dd { code { (s.id) } }
            dt { "Runs" } dd { (rule_text(s)) }
            dt { "Status" } dd { @if s.paused { span.off { "Paused" } } @else { "Active" } }
            dt { "Next run" } dd { @match s.next_run(now) { Some(t) => (in_zone(&t, s.zone)), None => span.none { "—" } } }
            dt { "Last run" } dd { @match s.last_run_at { Some(t) => (in_zone(&t, s.zone)), None => span.none { "—" } } }
            dt { "Messages" } dd { a href={ "/portal/messages?schedule=" (s.id) } { "The messages of its runs" } }
        }
        // Viewers read; operators change (the server checks each action).
        @if session.may(Permission::ChangeMessages) {
            h2 { "Edit" }
            (form(session, &format!("/portal/schedules/{}", s.id), f, targets, errors, now))
            form.inline method="post" action={ "/portal/schedules/" (s.id) "/delete" }
                data-confirm="Delete this schedule? The messages of its past runs stay." {
                (layout::csrf_field(session))
                button.danger type="submit" { "Delete schedule" }
            }
        } @else {
            dl.facts {
                dt { "Target" } dd { a href={ "/portal/targets/" (s.target_id) } {
                    (targets.iter().find(|t| t.id == s.target_id).map_or(s.target_id.to_string(), |t| t.name.clone())) } }
                dt { "Payload" } dd { pre.payload { (s.payload.as_str()) } }
            }
        }
    };
    layout::page(session, &title, Section::Schedules, notice_text, body)
}

pub async fn show(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<layout::NoticeQuery>,
) -> PortalResult<Html<String>> {
    let s = load(&state, &session, &id).await?;
    let targets = all_targets(session.reads(&state)).await?;
    let page = show_page(
        &session,
        &s,
        &ScheduleForm::of(&s),
        &targets,
        &[],
        notice(q.notice.as_deref()),
        state.service.now(),
    );
    Ok(Html(page.into_string()))
}

pub async fn update(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<ScheduleForm>,
) -> PortalResult<Response> {
    session.authorize(&f.csrf, Permission::ChangeMessages)?;
    let s = load(&state, &session, &id).await?;
    let now = state.service.now();
    let targets = all_targets(session.reads(&state)).await?;
    let again = |errors: &[FieldError], status: StatusCode| {
        let page = show_page(&session, &s, &f, &targets, errors, None, now);
        (status, Html(page.into_string())).into_response()
    };
    if f.preview.is_some() {
        return Ok(again(&[], StatusCode::OK));
    }
    let doc = match f.document(now) {
        Ok(doc) => doc,
        Err(errors) => return Ok(again(&errors, StatusCode::BAD_REQUEST)),
    };
    match state
        .service
        .update_schedule(session.actor(), &s.id, &doc)
        .await
    {
        Ok(saved) => Ok(
            Redirect::to(&format!("/portal/schedules/{}?notice=saved", saved.id)).into_response(),
        ),
        Err(crate::service::ServiceError::Invalid(errors)) => {
            Ok(again(&errors, StatusCode::BAD_REQUEST))
        }
        Err(e) => Err(e.into()),
    }
}

async fn set_paused(
    state: AppState,
    session: Session,
    id: String,
    csrf: &str,
    paused: bool,
) -> PortalResult<Redirect> {
    session.authorize(csrf, Permission::ChangeMessages)?;
    let id: ScheduleId = id.parse().map_err(|_| PortalError::NotFound)?;
    state
        .service
        .set_schedule_paused(session.actor(), &id, paused)
        .await?;
    let notice = if paused { "paused" } else { "resumed" };
    Ok(Redirect::to(&format!(
        "/portal/schedules/{id}?notice={notice}"
    )))
}

pub async fn pause(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    set_paused(state, session, id, &f.csrf, true).await
}

pub async fn resume(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    set_paused(state, session, id, &f.csrf, false).await
}

pub async fn delete(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ChangeMessages)?;
    let id: ScheduleId = id.parse().map_err(|_| PortalError::NotFound)?;
    state.service.delete_schedule(session.actor(), &id).await?;
    Ok(Redirect::to("/portal/schedules?notice=deleted"))
}

/// The preview section alone, for the script that follows the form.
pub async fn preview(
    State(state): State<AppState>,
    _session: Session,
    Query(f): Query<ScheduleForm>,
) -> Html<String> {
    Html(preview_section(&f, state.service.now()).into_string())
}
