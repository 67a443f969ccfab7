//! Targets: list, create, show (with limits and breaker), edit; the
//! actions on one are in `target_actions`.

use axum::{
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Redirect, Response},
};
use axum_extra::extract::cookie::CookieJar;
use maud::{html, Markup};

use super::{
    layout::{self, Section},
    session::Session,
    target_form::{self, TargetForm},
    target_secret,
    targets::{all_targets, destination, load, NoticeQuery},
    PortalForm, PortalResult,
};
use crate::service::Permission;
use crate::{
    domain::{
        message::State as MsgState,
        target::{
            gate::{period, BreakerState},
            FieldError, Target, TargetConfig,
        },
    },
    service::{targets::TargetChange, ServiceError},
    state::AppState,
    store::MessageFilter,
};

fn kind_label(config: &TargetConfig) -> &'static str {
    match config {
        TargetConfig::Webhook(_) => "Webhook",
        TargetConfig::Sqs(_) => "SQS",
        TargetConfig::Sns(_) => "SNS",
        TargetConfig::Pull(_) => "Pull",
    }
}

fn toggle_form(session: &Session, t: &Target) -> Markup {
    let (action, label) = if t.enabled {
        ("disable", "Disable")
    } else {
        ("enable", "Enable")
    };
    html! {
        form.inline method="post" action={ "/portal/targets/" (t.id) "/" (action) } {
            (layout::csrf_field(session))
            button.secondary type="submit" aria-label={ (label) " " (t.name) } { (label) }
        }
    }
}

pub async fn list(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<NoticeQuery>,
) -> PortalResult<Html<String>> {
    let targets = all_targets(session.reads(&state)).await?;
    let notice = layout::notice(q.notice.as_deref(), q.n);
    let body = html! {
        div.heading {
            h1 { "Targets" }
            a.button href="/portal/targets/new" { "New target" }
        }
        @if targets.is_empty() {
            p { "No targets yet." }
        } @else {
            div.scroll {
                table #targets {
                    thead { tr {
                        th scope="col" { "Name" } th scope="col" { "Type" } th scope="col" { "Destination" }
                        th scope="col" { "Status" } th scope="col" { span.visually-hidden { "Actions" } }
                    } }
                    tbody {
                        @for t in &targets {
                            tr data-target=(t.id) {
                                th scope="row" { a href={ "/portal/targets/" (t.id) } { (t.name) } }
                                td { (kind_label(&t.config)) }
                                td.wrap { code { (destination(&t.config)) } }
                                td { @if t.enabled { "Enabled" } @else { span.off { "Disabled" } } }
                                td { (toggle_form(&session, t)) }
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
            "Targets",
            Section::Targets,
            notice.as_deref(),
            body,
        )
        .into_string(),
    ))
}

fn form_page(
    session: &Session,
    title: &str,
    action: &str,
    f: &TargetForm,
    errors: &[FieldError],
    editing: bool,
) -> Markup {
    layout::page(
        session,
        title,
        Section::Targets,
        None,
        html! {
            h1 { (title) }
            form.target-form method="post" action=(action) novalidate {
                (target_form::fields(session, f, errors, editing))
                div.actions {
                    button type="submit" { @if editing { "Save" } @else { "Create target" } }
                    a href="/portal/targets" { "Cancel" }
                }
            }
        },
    )
}

pub async fn new(session: Session, Query(q): Query<NoticeQuery>) -> PortalResult<Html<String>> {
    session.require(Permission::ConfigureTargets)?;
    let kind = q
        .kind
        .as_deref()
        .filter(|k| ["webhook", "sqs", "sns", "pull"].contains(k))
        .unwrap_or("webhook");
    Ok(Html(
        form_page(
            &session,
            "New target",
            "/portal/targets",
            &TargetForm::blank(kind),
            &[],
            false,
        )
        .into_string(),
    ))
}

fn invalid(
    session: &Session,
    title: &str,
    action: &str,
    f: &TargetForm,
    errors: &[FieldError],
    editing: bool,
) -> Response {
    let page = form_page(session, title, action, f, errors, editing);
    (StatusCode::BAD_REQUEST, Html(page.into_string())).into_response()
}

pub async fn create(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    jar: CookieJar,
    PortalForm(f): PortalForm<TargetForm>,
) -> PortalResult<Response> {
    session.authorize(&f.csrf, Permission::ConfigureTargets)?;
    let action = "/portal/targets";
    let spec = match f
        .to_document(false)
        .and_then(|doc| crate::wire::target::parse(&doc))
    {
        Ok(spec) => spec,
        Err(errors) => return Ok(invalid(&session, "New target", action, &f, &errors, false)),
    };
    let saved = match state.service.create_target(session.actor(), spec).await {
        Ok(saved) => saved,
        Err(ServiceError::Invalid(errors)) => {
            return Ok(invalid(&session, "New target", action, &f, &errors, false))
        }
        Err(e) => return Err(e.into()),
    };
    let t = saved.target;
    if saved.generated_secret {
        return Ok(target_secret::show_once(
            &state, &headers, jar, &t, "created",
        ));
    }
    Ok(Redirect::to(&format!("/portal/targets/{}?notice=created", t.id)).into_response())
}

pub async fn show(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<NoticeQuery>,
) -> PortalResult<Html<String>> {
    let t = load(&state, &session, &id).await?;
    let count = |s: MsgState| {
        let filter = MessageFilter {
            target_id: Some(t.id.clone()),
            state: Some(s),
            ..MessageFilter::default()
        };
        let reads = session.reads(&state);
        async move { reads.count_messages(&filter).await }
    };
    let (scheduled, dead, subs) = tokio::try_join!(
        count(MsgState::Scheduled),
        count(MsgState::DeadLetter),
        session
            .reads(&state)
            .subscriptions(Some(&t.id), None, super::subscriptions::SHOWN)
    )?;
    let told = super::subscriptions::dead_letters_told(&state, &session).await?;
    // A pull target's queue (its consumers receive from it).
    let depth = match t.config.pull() {
        Some(_) => Some(state.service.pull_depth(session.actor(), &t.id).await?),
        None => None,
    };
    let notice = layout::notice(q.notice.as_deref(), q.n);
    let public = t.config.to_public_json();
    let body = html! {
        div.heading {
            h1 { (t.name) }
            @if session.may(Permission::ConfigureTargets) {
                a.button.secondary href={ "/portal/targets/" (t.id) "/edit" } { "Edit" }
            }
        }
        dl.facts {
            dt { "Target id" } dd.copyable { code #target-id { (t.id) } (layout::copy_button("target-id", "Copy the target id")) }
            dt { "Type" } dd { (kind_label(&t.config)) }
            dt { "Status" } dd #target-status { @if t.enabled { "Enabled" } @else { span.off { "Disabled" } } }
            dt { "Destination" } dd.wrap { code { (destination(&t.config)) } }
            @if depth.is_none() {
                dt { "Limits" } dd #target-limits { (limits_text(&t)) }
                dt { "Circuit breaker" } dd #target-health { (health_text(&t)) }
            }
            dt { "Created" } dd { (layout::time(&t.created_at)) }
            dt { "Updated" } dd { (layout::time(&t.updated_at)) }
        }
        details {
            summary { "Configuration (secrets hidden)" }
            pre { (serde_json::to_string_pretty(&public).unwrap_or_default()) }
        }
        @if let Some(d) = &depth {
            section aria-labelledby="target-queue" {
                h2 #target-queue { "Queue" }
                p.hint { "Consumers receive these messages over the API (" code { "POST /targets/" (t.id) "/receive" } ") and acknowledge what they handled." }
                dl.facts {
                    dt { "Receivable now" } dd #queue-due { (d.due) }
                    dt { "Received, not yet acknowledged" } dd #queue-hidden { (d.hidden) }
                    dt { "Due later, or waiting behind their key" } dd #queue-later { (d.later) }
                    dt { "Dead letters" } dd #queue-dead { (d.dead) }
                    dt { "Oldest receivable" } dd #queue-oldest {
                        @match d.oldest_due {
                            Some(at) => { (age(state.service.now() - at)) " old (due " (layout::time(&at)) ")" }
                            None => "none",
                        }
                    }
                    dt { "Receives" } dd #queue-receives { (d.receives) " (each is an attempt of its message)" }
                }
            }
        }
        section.actions-row aria-label="Actions" {
            @if session.may(Permission::ConfigureTargets) { (toggle_form(&session, &t)) }
            @if t.config.limits().breaker.is_some() && t.health.state != BreakerState::Closed && session.may(Permission::OperateTargets) {
                form.inline method="post" action={ "/portal/targets/" (t.id) "/reset-breaker" } {
                    (layout::csrf_field(&session))
                    button type="submit" #reset-breaker { "Close the breaker now" }
                }
            }
        }
        @if session.may(Permission::OperateTargets) {
            section.test-message aria-labelledby="test-heading" {
                h2 #test-heading { "Test message" }
                form method="post" action={ "/portal/targets/" (t.id) "/test" } {
                    (layout::csrf_field(&session))
                    div.field {
                        label for="test-payload" { "Payload" }
                        textarea #test-payload name="payload" rows="4" spellcheck="false" aria-describedby="test-payload-hint" {}
                        p.hint #test-payload-hint { "Empty sends " code { "{\"test\": true, …}" } ". Due now; the page shows how it went." }
                    }
                    button type="submit" #send-test { "Send test message" }
                }
            }
        }
        @if let (TargetConfig::Webhook(w), true) = (&t.config, session.may(Permission::ConfigureTargets)) {
            (super::target_secret::rotate_section(&session, &t, w))
        }
        @if session.may(Permission::ConfigureTargets) {
            section.danger-zone aria-labelledby="delete-heading" {
                h2 #delete-heading { "Delete this target" }
                p { "A target can be deleted once it has no Scheduled messages and no dead letters (cancel them first) and its schedules are paused or deleted. Delivered and cancelled messages go with it." }
                form method="post" action={ "/portal/targets/" (t.id) "/delete" } data-confirm={ "Delete the target " (t.name) "? This cannot be undone." } {
                    (layout::csrf_field(&session))
                    button.danger type="submit" #delete-target { "Delete target" }
                }
            }
        }
        section aria-labelledby="target-messages" {
            h2 #target-messages { "Messages" }
            ul.plain {
                li { a href={ "/portal/messages?target=" (t.id) "&state=Scheduled" } { (scheduled) " scheduled" } }
                li {
                    a href={ "/portal/messages?target=" (t.id) "&state=DeadLetter" } { (dead) (if dead == 1 { " dead letter" } else { " dead letters" }) }
                    @if dead > 0 {
                        " · " a #redrive-target href={ "/portal/messages/redrive?target=" (t.id) } { "Reschedule all dead letters…" }
                    }
                }
                li { a href={ "/portal/messages?target=" (t.id) } { "All messages of this target" } }
            }
        }
        (super::subscriptions::section(&session, &t, &subs))
        (super::subscriptions::dead_letters_section(&session, &t, &told))
        @if session.may(Permission::ChangeMessages) {
            (super::ranges::section(&t))
            (super::event_replay::section(&t))
        }
    };
    Ok(Html(
        layout::page(&session, &t.name, Section::Targets, notice.as_deref(), body).into_string(),
    ))
}

pub async fn edit(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
) -> PortalResult<Html<String>> {
    session.require(Permission::ConfigureTargets)?;
    let t = load(&state, &session, &id).await?;
    let action = format!("/portal/targets/{}", t.id);
    Ok(Html(
        form_page(
            &session,
            &format!("Edit {}", t.name),
            &action,
            &TargetForm::from_target(&t),
            &[],
            true,
        )
        .into_string(),
    ))
}

pub async fn update(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    jar: CookieJar,
    Path(id): Path<String>,
    PortalForm(mut f): PortalForm<TargetForm>,
) -> PortalResult<Response> {
    session.authorize(&f.csrf, Permission::ConfigureTargets)?;
    let current = load(&state, &session, &id).await?;
    f.kind = current.config.kind().to_string();
    let title = format!("Edit {}", current.name);
    let action = format!("/portal/targets/{}", current.id);
    let doc = match f.to_document(true) {
        Ok(doc) => doc,
        Err(errors) => return Ok(invalid(&session, &title, &action, &f, &errors, true)),
    };
    // The form holds every field: a secret not shown as *** was typed in.
    let saved = match state
        .service
        .update_target(session.actor(), &current.id, TargetChange::Replace(&doc))
        .await
    {
        Ok(saved) => saved,
        Err(ServiceError::Invalid(errors)) => {
            return Ok(invalid(&session, &title, &action, &f, &errors, true))
        }
        Err(e) => return Err(e.into()),
    };
    if saved.generated_secret {
        return Ok(target_secret::show_once(
            &state,
            &headers,
            jar,
            &saved.target,
            "saved",
        ));
    }
    Ok(Redirect::to(&format!("/portal/targets/{}?notice=saved", current.id)).into_response())
}

/// What the target's `flowControl` allows, in words.
/// A duration as people read it: `42 s`, `5 min`, `3 h`, `2 d`.
fn age(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        s if s < 120 => format!("{s} s"),
        s if s < 7_200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3_600),
        s => format!("{} d", s / 86_400),
    }
}

fn limits_text(t: &Target) -> String {
    let Some(flow) = t.config.limits().flow else {
        return "None".into();
    };
    let mut parts = Vec::new();
    if let Some(p) = flow.parallelism {
        parts.push(format!("at most {p} in flight"));
    }
    if let Some(r) = flow.rate {
        parts.push(format!(
            "at most {r} started per {}",
            period::format(flow.period_ms)
        ));
    }
    if parts.is_empty() {
        "None".into()
    } else {
        parts.join(" · ")
    }
}

fn health_text(t: &Target) -> Markup {
    let Some(b) = t.config.limits().breaker else {
        return html! { "Off" };
    };
    let h = &t.health;
    let setting = format!(
        "opens after {} retryable failures in a row; cooldown {}",
        b.failures,
        period::format(b.cooldown_ms)
    );
    html! {
        @match h.state {
            BreakerState::Closed => { "Closed" }
            BreakerState::Open => {
                span.off data-breaker="open" { "Open" }
                @if let Some(until) = h.open_until { " until " (layout::time(&until)) }
            }
            BreakerState::HalfOpen => { span.off data-breaker="halfOpen" { "Half open: a probe is under way" } }
        }
        " (" (h.consecutive_failures) " failures in a row; " (setting) ")"
    }
}
