//! Messages: the message page (the list is in `message_list`).

use crate::service::Permission;
use axum::{
    extract::{Path, Query, State},
    response::Html,
};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use super::{
    layout::{self, Section},
    session::Session,
    targets::destination,
    when, PortalError, PortalResult,
};
use crate::{
    domain::{
        ids::MessageId,
        message::{Attempt, Message, State as MsgState},
        retry::AttemptOutcome,
        target::Target,
    },
    service::{Reads, ServiceResult},
    state::AppState,
    store::portal::{EventKind, MessageEvent},
};

/// A message page watches (reloads until settled) only a delivery due
/// within this long.
pub const WATCH_AHEAD: chrono::TimeDelta = chrono::TimeDelta::minutes(2);

pub(super) fn truncate(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ShowQuery {
    notice: Option<String>,
    watch: Option<String>,
}

/// The last error, while it still tells something: a delivered message's
/// earlier failures are in its attempts, not its summary.
pub(super) fn shown_error(m: &Message) -> Option<&str> {
    match m.state {
        MsgState::Delivered => None,
        _ => m.last_error.as_deref(),
    }
}

pub async fn load(state: &AppState, session: &Session, id: &str) -> PortalResult<Message> {
    let id: MessageId = id.parse().map_err(|_| PortalError::NotFound)?;
    session
        .reads(state)
        .message(&id)
        .await?
        .ok_or(PortalError::NotFound)
}

pub async fn show(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<ShowQuery>,
) -> PortalResult<Html<String>> {
    let m = load(&state, &session, &id).await?;
    let Around {
        attempts,
        events,
        target,
        waits_for,
    } = read_around(session.reads(&state), &m).await?;
    let notice = layout::notice(q.notice.as_deref(), None);
    let actionable = m.state.can_cancel_or_reschedule();
    let due = m.next_attempt_at.unwrap_or(m.delivery_time);
    let watching = q.watch.is_some()
        && m.state == MsgState::Scheduled
        && due <= state.service.now() + WATCH_AHEAD;
    let body = html! {
        div.heading {
            h1 { "Message " code.id #message-id { (m.id) } }
            (layout::copy_button("message-id", "Copy the message id"))
            (layout::state_badge(m.state))
        }
        @if watching { p.watch data-watch role="status" { "Waiting for the delivery… this page refreshes by itself. " a href={ "/portal/messages/" (m.id) } { "Refresh" } } }
        (facts(&m, target.as_ref(), waits_for.as_ref()))
        @if actionable && session.may(Permission::ChangeMessages) {
            (actions(&session, &m))
        }
        section aria-labelledby="payload-heading" {
            h2 #payload-heading { "Payload" }
            pre.payload #payload { (pretty(m.payload.as_str())) }
        }
        section aria-labelledby="history-heading" {
            h2 #history-heading { "History" }
            ol.history #history { @for (at, what) in history(&m, &attempts, &events) { li { (layout::time(&at)) " " (what) } } }
        }
        section aria-labelledby="attempts-heading" {
            h2 #attempts-heading { "Attempts" }
            @if attempts.is_empty() { p { "No attempts yet." } } @else { (attempts_table(&attempts)) }
        }
    };
    Ok(Html(
        layout::page(
            &session,
            "Message",
            Section::Messages,
            notice.as_deref(),
            body,
        )
        .into_string(),
    ))
}

/// What the page shows beside the message.
struct Around {
    attempts: Vec<Attempt>,
    events: Vec<MessageEvent>,
    target: Option<Target>,
    /// The message of its key that it waits for: a keyed message that is
    /// Scheduled but not its key's head waits for the head.
    waits_for: Option<MessageId>,
}

/// Reads what the page shows beside the message, all at once.
async fn read_around(reads: Reads<'_>, m: &Message) -> ServiceResult<Around> {
    let head = async {
        match (&m.ordering_key, m.state) {
            (Some(key), MsgState::Scheduled) => reads.key_head(&m.target_id, key).await,
            _ => Ok(None),
        }
    };
    let (attempts, events, target, head) = tokio::try_join!(
        reads.attempts(&m.id, None, 1000),
        reads.events(&m.id),
        reads.target(&m.target_id),
        head,
    )?;
    Ok(Around {
        attempts: attempts.unwrap_or_default(),
        events,
        target,
        waits_for: head.filter(|head| *head != m.id),
    })
}

/// The message's facts: state, target, times, key, schedule, last error.
fn facts(m: &Message, target: Option<&Target>, waits_for: Option<&MessageId>) -> Markup {
    html! {
        dl.facts #message-facts {
            dt { "State" } dd #message-state { (m.state.as_str()) }
            dt { "Target" } dd {
                @match target {
                    Some(t) => { a href={ "/portal/targets/" (t.id) } { (t.name) } " " small { code { (destination(&t.config)) } } }
                    None => code { (m.target_id) }
                }
            }
            dt { "Due" } dd { (layout::time(&m.delivery_time)) }
            @if let Some(key) = &m.ordering_key {
                dt { "Ordering key" } dd #ordering-key {
                    a href={ "/portal/messages?target=" (m.target_id) "&key=" (layout::encode(key)) } { code { (key) } }
                    @if let Some(head) = waits_for {
                        br; span #waiting-for { "Waiting for " a href={ "/portal/messages/" (head) } { code { (head) } } " of the same key" }
                    }
                }
            }
            @if let Some(s) = &m.schedule_id {
                dt { "Schedule" } dd #schedule { "A run of " a href={ "/portal/schedules/" (s) } { code { (s) } } }
            }
            dt { "Next attempt" } dd { (layout::opt_time(m.next_attempt_at.as_ref())) }
            dt { "Attempts" } dd { (m.attempt_count) }
            dt { "Created" } dd { (layout::time(&m.created_at)) }
            dt { "Updated" } dd { (layout::time(&m.updated_at)) }
            @if let Some(t) = &m.delivered_at { dt { "Delivered" } dd { (layout::time(t)) } }
            @if let Some(t) = &m.cancelled_at { dt { "Cancelled" } dd { (layout::time(t)) } }
            @if let Some(t) = &m.dead_lettered_at { dt { "Dead-lettered" } dd { (layout::time(t)) } }
            @if let Some(e) = shown_error(m) { dt { "Last error" } dd.wrap { (e) } }
        }
    }
}

/// Reschedule (or deliver now) and cancel, for a message that still can be.
fn actions(session: &Session, m: &Message) -> Markup {
    html! {
        section.actions-box aria-labelledby="actions-heading" {
            h2 #actions-heading { "Actions" }
            form method="post" action={ "/portal/messages/" (m.id) "/reschedule" } {
                (layout::csrf_field(session))
                (when::picker_at("reschedule-at", "Deliver at", "Now its due time. The retry ladder starts over.", Some(m.delivery_time)))
                button type="submit" #reschedule { "Reschedule" }
                " "
                button type="submit" name="now" value="1" formnovalidate #reschedule-now { "Deliver now" }
            }
            form method="post" action={ "/portal/messages/" (m.id) "/cancel" } data-confirm="Cancel this message? It will not be delivered." {
                (layout::csrf_field(session))
                button.danger type="submit" #cancel { "Cancel message" }
            }
        }
    }
}

/// Every attempt: its outcome, status, duration, error and response.
fn attempts_table(attempts: &[Attempt]) -> Markup {
    html! {
        div.scroll {
            table #attempts {
                thead { tr {
                    th scope="col" .num { "#" } th scope="col" { "Started" } th scope="col" { "Outcome" }
                    th scope="col" .num { "Status" } th scope="col" .num { "Duration" } th scope="col" { "Error" } th scope="col" { "Response" }
                } }
                tbody {
                    @for a in attempts {
                        tr data-outcome=(a.outcome.as_str()) {
                            td.num { (a.attempt) }
                            td { (layout::time(&a.started_at)) }
                            td { (outcome(a.outcome)) }
                            td.num { @if let Some(s) = a.status_code { (s) } @else { "—" } }
                            td.num { (a.duration_ms) " ms" }
                            td.wrap {
                                @if let Some(e) = &a.error { (e) }
                                @if let Some(w) = a.retry_after_ms {
                                    br; small data-retry-after-ms=(w) { "Retry-After: the next attempt waited " (w) " ms" }
                                }
                            }
                            td.wrap { @if let Some(b) = a.response_body.as_deref().filter(|b| !b.is_empty()) {
                                details { summary { (truncate(b, 40)) } pre { (b) } }
                            } }
                        }
                    }
                }
            }
        }
    }
}

fn outcome(o: AttemptOutcome) -> &'static str {
    match o {
        AttemptOutcome::Success => "Delivered",
        AttemptOutcome::RetryableFailure => "Failed, will retry",
        AttemptOutcome::NonRetryableFailure => "Failed, no retry",
        AttemptOutcome::Received => "Received by a consumer",
    }
}

/// JSON payloads are shown indented; anything else as sent.
fn pretty(payload: &str) -> String {
    serde_json::from_str::<serde_json::Value>(payload)
        .ok()
        .filter(|v| v.is_object() || v.is_array())
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| payload.to_string())
}

/// Creation, every attempt, every manual action and the final state, in time order.
fn history(
    m: &Message,
    attempts: &[Attempt],
    events: &[MessageEvent],
) -> Vec<(DateTime<Utc>, Markup)> {
    let mut h: Vec<(DateTime<Utc>, Markup)> = vec![(m.created_at, html! { "Created: scheduled" })];
    for a in attempts {
        h.push((a.finished_at, html! {
            "Attempt " (a.attempt) ": " (outcome(a.outcome))
            @if let Some(s) = a.status_code { " (" (s) ")" }
            @if let Some(e) = a.error.as_deref().filter(|_| a.outcome != AttemptOutcome::Success) { " — " (truncate(e, 120)) }
        }));
    }
    for e in events {
        h.push((
            e.at,
            match e.kind {
                EventKind::Cancelled => {
                    html! { "Cancelled (was " (layout::state_label(e.from)) ")" }
                }
                EventKind::Rescheduled => html! {
                    "Rescheduled (was " (layout::state_label(e.from)) ") for "
                    @if let Some(t) = &e.delivery_time { (layout::time(t)) }
                },
                EventKind::DeadLettered => html! {
                    "Dead letter" @if let Some(d) = &e.detail { ": " (truncate(d, 120)) }
                },
            },
        ));
    }
    if let Some(t) = m.delivered_at {
        h.push((t, html! { "Delivered" }));
    }
    if m.cancelled_at.is_some() && !events.iter().any(|e| e.kind == EventKind::Cancelled) {
        h.push((
            m.cancelled_at.unwrap_or(m.updated_at),
            html! { "Cancelled" },
        ));
    }
    h.sort_by_key(|(at, _)| *at);
    h
}
