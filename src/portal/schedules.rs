//! Recurring schedules (API.md §12): the list with each schedule's next run,
//! a form (create and edit) with a preview of the next five runs, pause,
//! resume and delete. The form becomes the same JSON document the API
//! takes, checked by the same rules; the preview works without script (a
//! button) and, with it, follows what is typed.

use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::{Html, IntoResponse, Redirect, Response},
};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    layout::{self, Section},
    session::{CsrfForm, Session},
    target_form::{field, Field},
    targets::all_targets,
    when, PortalError, PortalForm, PortalResult,
};
use crate::{
    domain::{
        ids::ScheduleId,
        schedule::{Rule, Schedule},
        target::{FieldError, Target},
    },
    state::AppState,
    store::ScheduleCursor,
    wire::schedule as wire,
};

/// Runs the preview shows.
const PREVIEW_RUNS: usize = 5;

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ScheduleForm {
    csrf: String,
    name: String,
    target_id: String,
    /// `cron` or `every`.
    kind: String,
    cron: String,
    every: String,
    time_zone: String,
    payload: String,
    ordering_key: String,
    /// Local date-times in `time_zone`; empty is none.
    start_at: String,
    end_at: String,
    /// The preview button: show the runs, save nothing.
    preview: Option<String>,
}

impl ScheduleForm {
    fn blank() -> Self {
        Self {
            kind: "cron".into(),
            cron: "0 9 * * MON-FRI".into(),
            every: "1h".into(),
            time_zone: "UTC".into(),
            ..Self::default()
        }
    }

    fn of(s: &Schedule) -> Self {
        let local = |t: Option<DateTime<Utc>>| {
            t.map(|t| {
                t.with_timezone(&s.zone)
                    .format("%Y-%m-%dT%H:%M:%S")
                    .to_string()
            })
            .unwrap_or_default()
        };
        Self {
            name: s.name.clone(),
            target_id: s.target_id.to_string(),
            kind: if s.recurrence.cron().is_some() {
                "cron"
            } else {
                "every"
            }
            .into(),
            cron: s.recurrence.cron().unwrap_or("0 9 * * MON-FRI").into(),
            every: s.recurrence.every().unwrap_or("1h").into(),
            time_zone: s.zone.name().into(),
            payload: s.payload.as_str().into(),
            ordering_key: s.ordering_key.clone().unwrap_or_default(),
            start_at: local(s.start_at),
            end_at: local(s.end_at),
            ..Self::default()
        }
    }

    /// The document the API would take, or what is wrong with the times.
    fn document(&self, now: DateTime<Utc>) -> Result<Value, Vec<FieldError>> {
        let mut errors = Vec::new();
        let zone = if self.time_zone.trim().is_empty() {
            "UTC"
        } else {
            self.time_zone.trim()
        };
        if let Err(e) = crate::domain::schedule::parse_zone(zone) {
            // Start and end are read in it: say what is wrong once, where it is.
            return Err(vec![FieldError::new("timeZone", e.0)]);
        }
        let mut instant = |s: &str, name: &str| match s.trim() {
            "" => Value::Null,
            s => match when::resolve(s, &self.time_zone, now) {
                Ok(t) => Value::String(crate::domain::time::format(&t)),
                Err(e) => {
                    errors.push(FieldError::new(name, e));
                    Value::Null
                }
            },
        };
        let start_at = instant(&self.start_at, "startAt");
        let end_at = instant(&self.end_at, "endAt");
        let text = |s: &str| match s.trim() {
            "" => Value::Null,
            s => Value::String(s.to_string()),
        };
        let cron = self.kind == "cron";
        let doc = json!({
            "targetId": self.target_id.trim(),
            "name": self.name.trim(),
            "cron": if cron { text(&self.cron) } else { Value::Null },
            "every": if cron { Value::Null } else { text(&self.every) },
            "timeZone": zone,
            "payload": self.payload,
            "orderingKey": text(&self.ordering_key),
            "startAt": start_at,
            "endAt": end_at,
        });
        if errors.is_empty() {
            Ok(doc)
        } else {
            Err(errors)
        }
    }

    /// The next runs from now, or what is wrong with the rule.
    fn preview(&self, now: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>, Vec<FieldError>> {
        let mut doc = self.document(now)?;
        // The preview needs no target.
        doc["targetId"] = json!("DI-T-0000000000");
        if doc["payload"].as_str().is_none_or(str::is_empty) {
            doc["payload"] = json!("-");
        }
        let spec = wire::parse(&doc)?;
        let rule = Rule {
            recurrence: spec.recurrence,
            zone: spec.zone,
            anchor: spec.start_at.unwrap_or(now),
            end_at: spec.end_at,
        };
        let mut runs = Vec::new();
        let mut next = rule.first_from(now);
        while let Some(t) = next.filter(|_| runs.len() < PREVIEW_RUNS) {
            runs.push(t);
            next = rule.after(t);
        }
        Ok(runs)
    }
}

/// `2027-03-08 09:30:00 Asia/Tokyo`, with UTC beside it and, by script, the
/// reader's own zone.
fn in_zone(t: &DateTime<Utc>, zone: Tz) -> Markup {
    let machine = crate::domain::time::format(t);
    html! {
        time datetime=(machine) data-local {
            (t.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S")) " " (zone.name())
        }
        @if zone != Tz::UTC {
            " " small.utc { "(" (t.format("%H:%M:%S UTC")) ")" }
        }
    }
}

fn rule_text(s: &Schedule) -> Markup {
    html! {
        @if let Some(c) = s.recurrence.cron() { code { (c) } }
        @if let Some(e) = s.recurrence.every() { "every " code { (e) } }
        " in " (s.zone.name())
    }
}

fn runs_list(result: &Result<Vec<DateTime<Utc>>, Vec<FieldError>>, zone: &str) -> Markup {
    let zone: Tz = zone.trim().parse().unwrap_or(Tz::UTC);
    html! {
        @match result {
            Ok(runs) if runs.is_empty() => p { "No run is left: the schedule has ended." }
            Ok(runs) => ol.runs { @for t in runs { li { (in_zone(t, zone)) } } }
            Err(errors) => ul.error { @for e in errors { li { code { (e.field) } " " (e.message) } } }
        }
    }
}

/// The preview's part of the page, which the script replaces as one types.
fn preview_section(f: &ScheduleForm, now: DateTime<Utc>) -> Markup {
    html! {
        section #preview aria-live="polite" aria-labelledby="preview-title" {
            h2 #preview-title { "Next " (PREVIEW_RUNS) " runs" }
            (runs_list(&f.preview(now), &f.time_zone))
        }
    }
}

fn form(
    session: &Session,
    action: &str,
    f: &ScheduleForm,
    targets: &[Target],
    errors: &[FieldError],
    now: DateTime<Utc>,
) -> Markup {
    let input = |name, label, value, hint, kind| {
        field(
            Field {
                name,
                label,
                value,
                hint,
                kind,
            },
            errors,
        )
    };
    html! {
        form.schedule-form method="post" action=(action) novalidate data-schedule-form {
            (layout::csrf_field(session))
            @if !errors.is_empty() {
                div.error-summary role="alert" tabindex="-1" {
                    h2 { "The schedule was not saved" }
                    ul { @for e in errors { li { code { (e.field) } " " (e.message) } } }
                }
            }
            (input("name", "Name", &f.name, None, "text"))
            div.field {
                label for="f-targetId" { "Target" }
                select #f-targetId name="targetId" {
                    @for t in targets {
                        option value=(t.id) selected[t.id.as_str() == f.target_id] { (t.name) " (" (t.id) ")" }
                    }
                }
                @if let Some(e) = errors.iter().find(|e| e.field == "targetId") { span.error { (e.message) } }
            }
            fieldset.kinds {
                legend { "Runs" }
                label { input type="radio" name="kind" value="cron" checked[f.kind == "cron"]; " By a cron expression" }
                label { input type="radio" name="kind" value="every" checked[f.kind != "cron"]; " Every fixed period" }
            }
            (input("cron", "Cron expression", &f.cron,
                Some("Five fields: minute hour day-of-month month day-of-week, e.g. 30 9 * * MON-FRI. Used when runs are by a cron expression."), "text"))
            (input("every", "Every", &f.every,
                Some("At least 1s: 30s, 15m, 1h, 1h 30m. Used when runs are every fixed period."), "text"))
            (input("timeZone", "Time zone", &f.time_zone,
                Some("An IANA name such as Europe/Stockholm; cron times and the start and end are read in it."), "text"))
            (input("startAt", "Start", &f.start_at, Some("Optional: no run before it (in the time zone above)."), "datetime-local"))
            (input("endAt", "End", &f.end_at, Some("Optional: no run after it."), "datetime-local"))
            (input("payload", "Payload", &f.payload, Some("Each run's message carries it."), "textarea"))
            (input("orderingKey", "Ordering key", &f.ordering_key, Some("Optional: runs go one at a time, in order."), "text"))
            (preview_section(f, now))
            div.actions {
                button #save-schedule type="submit" { "Save schedule" }
                button.secondary type="submit" name="preview" value="1" { "Preview runs" }
                a href="/portal/schedules" { "Cancel" }
            }
        }
    }
}

fn form_page(session: &Session, title: &str, body: Markup, status: StatusCode) -> Response {
    (
        status,
        Html(layout::page(session, title, Section::Schedules, None, body).into_string()),
    )
        .into_response()
}

#[derive(Debug, Default, Deserialize)]
pub struct NoticeQuery {
    notice: Option<String>,
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
    Query(q): Query<NoticeQuery>,
) -> PortalResult<Html<String>> {
    let now = state.service.now();
    let mut all = Vec::new();
    let mut after: Option<ScheduleCursor> = None;
    loop {
        let page = state
            .store
            .list_schedules(&session.account, None, after.as_ref(), 1000, now)
            .await?;
        let done = page.len() < 1000;
        after = page.last().map(ScheduleCursor::after);
        all.extend(page);
        if done {
            break;
        }
    }
    let targets = all_targets(&state, &session.account).await?;
    let target_name = |s: &Schedule| {
        targets
            .iter()
            .find(|t| t.id == s.target_id)
            .map_or(s.target_id.to_string(), |t| t.name.clone())
    };
    let body = html! {
        div.heading {
            h1 { "Schedules" }
            a.button href="/portal/schedules/new" { "New schedule" }
        }
        @if all.is_empty() {
            p { "No schedules yet. A schedule sends a message to a target on a cron expression or every fixed period." }
        } @else {
            div.scroll {
                table #schedules {
                    thead { tr {
                        th scope="col" { "Name" } th scope="col" { "Target" } th scope="col" { "Runs" }
                        th scope="col" { "Next run" } th scope="col" { "Status" }
                        th scope="col" { span.visually-hidden { "Actions" } }
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
                                td { (toggle(&session, s)) }
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
    let targets = all_targets(&state, &session.account).await?;
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
    session.check_csrf(&f.csrf)?;
    let now = state.service.now();
    let targets = all_targets(&state, &session.account).await?;
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
    match state.service.create_schedule(&session.account, spec).await {
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
    state
        .store
        .get_schedule(&session.account, &id, state.service.now())
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
            (toggle(session, s))
        }
        dl.facts {
            dt { "Id" } dd { code { (s.id) } }
            dt { "Runs" } dd { (rule_text(s)) }
            dt { "Status" } dd { @if s.paused { span.off { "Paused" } } @else { "Active" } }
            dt { "Next run" } dd { @match s.next_run(now) { Some(t) => (in_zone(&t, s.zone)), None => span.none { "—" } } }
            dt { "Last run" } dd { @match s.last_run_at { Some(t) => (in_zone(&t, s.zone)), None => span.none { "—" } } }
            dt { "Messages" } dd { a href={ "/portal/messages?schedule=" (s.id) } { "The messages of its runs" } }
        }
        h2 { "Edit" }
        (form(session, &format!("/portal/schedules/{}", s.id), f, targets, errors, now))
        form.inline method="post" action={ "/portal/schedules/" (s.id) "/delete" }
            data-confirm="Delete this schedule? The messages of its past runs stay." {
            (layout::csrf_field(session))
            button.danger type="submit" { "Delete schedule" }
        }
    };
    layout::page(session, &title, Section::Schedules, notice_text, body)
}

pub async fn show(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<NoticeQuery>,
) -> PortalResult<Html<String>> {
    let s = load(&state, &session, &id).await?;
    let targets = all_targets(&state, &session.account).await?;
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
    session.check_csrf(&f.csrf)?;
    let s = load(&state, &session, &id).await?;
    let now = state.service.now();
    let targets = all_targets(&state, &session.account).await?;
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
        .update_schedule(&session.account, &s.id, &doc)
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
    session.check_csrf(csrf)?;
    let id: ScheduleId = id.parse().map_err(|_| PortalError::NotFound)?;
    state
        .service
        .set_schedule_paused(&session.account, &id, paused)
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
    session.check_csrf(&f.csrf)?;
    let id: ScheduleId = id.parse().map_err(|_| PortalError::NotFound)?;
    state.service.delete_schedule(&session.account, &id).await?;
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
