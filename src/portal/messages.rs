//! Messages: the filtered list and the message page.

use std::collections::HashMap;

use axum::{
    extract::{Path, Query, State},
    response::{Html, IntoResponse, Redirect, Response},
};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use super::{
    layout::{self, Section},
    session::Session,
    targets::{all_targets, destination},
    when, PortalError, PortalResult,
};
use crate::store::portal::Role;
use crate::{
    domain::{
        ids::{MessageId, ScheduleId, TargetId},
        message::{Attempt, Message, State as MsgState},
        retry::AttemptOutcome,
    },
    state::AppState,
    store::{
        portal::{EventKind, MessageEvent},
        MessageFilter,
    },
};

pub use super::actions::{bulk, cancel, redrive, redrive_confirm, reschedule};

const PAGE: u32 = 50;

/// The list's query: filters, search, paging, and a notice after an action.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct ListQuery {
    pub state: String,
    pub target: String,
    /// An orderingKey.
    pub key: String,
    /// A schedule id: the messages of its runs.
    pub schedule: String,
    pub from: String,
    pub to: String,
    pub tz: String,
    pub q: String,
    /// Text the payload holds, searched among a bounded number of messages.
    pub text: String,
    pub cursor: String,
    pub notice: Option<String>,
    pub n: Option<u64>,
}

impl ListQuery {
    /// The filter the query names; a field that does not parse is an error to show.
    pub fn filter(&self) -> Result<MessageFilter, String> {
        let state = match self.state.trim() {
            "" => None,
            s => Some(MsgState::parse(s).ok_or_else(|| format!("`{s}` is not a state"))?),
        };
        let target_id = match self.target.trim() {
            "" => None,
            t => Some(
                t.parse::<TargetId>()
                    .map_err(|_| format!("`{t}` is not a target id"))?,
            ),
        };
        let bound = |s: &str| -> Result<Option<DateTime<Utc>>, String> {
            if s.trim().is_empty() {
                Ok(None)
            } else {
                when::resolve(s, &self.tz, Utc::now()).map(Some)
            }
        };
        Ok(MessageFilter {
            target_id,
            state,
            delivery_from: bound(&self.from)?,
            delivery_to: bound(&self.to)?,
            ordering_key: Some(self.key.trim())
                .filter(|k| !k.is_empty())
                .map(str::to_string),
            schedule_id: match self.schedule.trim() {
                "" => None,
                s => Some(
                    s.parse::<ScheduleId>()
                        .map_err(|_| format!("`{s}` is not a schedule id"))?,
                ),
            },
        })
    }

    /// The query string of the filters (for links that keep them).
    pub fn filter_query(&self) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("state", &self.state),
            ("target", &self.target),
            ("key", &self.key),
            ("schedule", &self.schedule),
            ("from", &self.from),
            ("to", &self.to),
            ("tz", &self.tz),
            ("text", &self.text),
        ] {
            if !v.trim().is_empty() {
                parts.push(format!("{k}={}", layout::encode(v.trim())));
            }
        }
        parts.join("&")
    }
}

pub async fn list(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<ListQuery>,
) -> PortalResult<Response> {
    let search = q.q.trim();
    let mut problem = None;
    if !search.is_empty() {
        match search.parse::<MessageId>() {
            Ok(id) => return Ok(Redirect::to(&format!("/portal/messages/{id}")).into_response()),
            Err(_) => problem = Some(format!("`{search}` is not a message id (DI-M-…)")),
        }
    }
    let filter = match q.filter() {
        Ok(f) => f,
        Err(e) => {
            problem = Some(e);
            MessageFilter::default()
        }
    };
    let before = match q.cursor.trim() {
        "" => None,
        c => Some(
            c.parse::<MessageId>()
                .map_err(|_| PortalError::BadRequest("the page link is not valid".into()))?,
        ),
    };
    let text = q.text.trim();
    if text.chars().count() > super::quick::SEARCH_CHARS {
        problem = Some(format!(
            "Search for at most {} characters of payload.",
            super::quick::SEARCH_CHARS
        ));
    }
    let searching = !text.is_empty() && problem.is_none();
    let page = async {
        if searching {
            let found = state
                .store
                .search_payloads(
                    &session.account,
                    &filter,
                    before.as_ref(),
                    text,
                    super::quick::SEARCHED,
                    PAGE + 1,
                )
                .await?;
            Ok::<_, crate::store::StoreError>((found.messages, found.scanned_to))
        } else {
            let listed = state
                .store
                .list_messages(&session.account, &filter, before.as_ref(), PAGE + 1)
                .await?;
            Ok((listed, None))
        }
    };
    let total = async {
        match searching {
            true => Ok(None),
            false => state
                .store
                .count_messages_upto(&session.account, &filter, super::quick::COUNTED + 1)
                .await
                .map(Some),
        }
    };
    let ((mut messages, scanned_to), targets, total) =
        tokio::try_join!(page, all_targets(&state, &session.account), total)?;
    let next = if messages.len() > PAGE as usize {
        messages.truncate(PAGE as usize);
        messages.last().map(|m| m.id)
    } else {
        // A search that stopped short goes on below what it scanned.
        scanned_to
    };
    let names: HashMap<&TargetId, &str> =
        targets.iter().map(|t| (&t.id, t.name.as_str())).collect();
    let notice = layout::notice(q.notice.as_deref(), q.n);
    let filters = q.filter_query();
    let body = html! {
        h1 { "Messages" }
        form.filters method="get" action="/portal/messages" role="search" aria-label="Filter messages" {
            div.field {
                label for="f-state" { "State" }
                select #f-state name="state" {
                    option value="" { "Any" }
                    @for s in MsgState::ALL { option value=(s.as_str()) selected[q.state == s.as_str()] { (layout::state_label(s)) } }
                }
            }
            div.field {
                label for="f-target" { "Target" }
                select #f-target name="target" {
                    option value="" { "Any" }
                    @for t in &targets { option value=(t.id) selected[q.target == t.id.as_str()] { (t.name) } }
                }
            }
            div.field {
                label for="f-key" { "Ordering key" }
                input #f-key name="key" type="text" value=(q.key) spellcheck="false" autocomplete="off";
            }
            div.field {
                label for="f-from" { "Due from" }
                input #f-from name="from" type="datetime-local" step="1" value=(q.from);
            }
            div.field {
                label for="f-to" { "Due before" }
                input #f-to name="to" type="datetime-local" step="1" value=(q.to);
            }
            div.field {
                label for="f-tz" { "Time zone" }
                input #f-tz name="tz" type="text" value=(if q.tz.is_empty() { "UTC" } else { &q.tz }) data-tz data-keep[!q.tz.is_empty()] list="time-zones-f";
                datalist #time-zones-f { option value="UTC" {} }
            }
            div.field {
                label for="f-q" { "Message id" }
                input #f-q name="q" type="search" placeholder="DI-M-…" value=(q.q) spellcheck="false";
            }
            div.field {
                label for="f-text" { "Payload contains" }
                input #f-text name="text" type="search" value=(q.text) spellcheck="false" aria-describedby="f-text-hint"
                    maxlength=(super::quick::SEARCH_CHARS);
                p.hint #f-text-hint { (super::quick::searched_words()) }
            }
            div.actions { button type="submit" { "Show" } a href="/portal/messages" { "Clear" } }
        }
        (super::quick::ranges(&q, state.service.now(), session.time_zone.as_deref()))
        @if let Some(problem) = &problem { p.error role="alert" { (problem) } }
        @match total {
            Some(total) => (super::quick::total(total)),
            None => (super::quick::search_scope(text, messages.len(), scanned_to.is_some(), !q.cursor.trim().is_empty())),
        }
        @if filter.state == Some(MsgState::DeadLetter) && !messages.is_empty() && session.may(Role::Operator) {
            p { a.button.secondary #redrive-filtered href={ "/portal/messages/redrive?" (filters) } { "Reschedule every dead letter that matches…" } }
        }
        @if messages.is_empty() {
            p #no-messages { "No messages match." }
        } @else {
            form #bulk method="post" action="/portal/messages/bulk" {
                (layout::csrf_field(&session))
                div.scroll {
                    table #messages {
                        caption.visually-hidden { "Messages, newest first" }
                        thead { tr {
                            th scope="col" { input type="checkbox" data-select-all aria-label="Select all on this page"; }
                            th scope="col" { "Message" } th scope="col" { "Target" } th scope="col" { "State" }
                            th scope="col" { "Due" } th scope="col" .num { "Attempts" } th scope="col" { "Last error" }
                        } }
                        tbody {
                            @for m in &messages {
                                tr data-message=(m.id) data-state=(m.state.as_str()) {
                                    td { input type="checkbox" name="ids" value=(m.id) aria-label={ "Select " (m.id) }; }
                                    th scope="row" { a href={ "/portal/messages/" (m.id) } { code { (m.id) } } }
                                    td { (names.get(&m.target_id).copied().unwrap_or(m.target_id.as_str())) }
                                    td { (layout::state_badge(m.state)) }
                                    td { (layout::time(&m.delivery_time)) }
                                    td.num { (m.attempt_count) }
                                    td.wrap { @if let Some(e) = shown_error(m) { (truncate(e, 80)) } }
                                }
                            }
                        }
                    }
                }
                div.actions {
                    button.secondary type="submit" name="action" value="cancel" { "Cancel selected…" }
                    button.secondary type="submit" name="action" value="redrive" { "Reschedule selected dead letters…" }
                }
            }
        }
        @if next.is_some() || !q.cursor.trim().is_empty() {
            nav.pager aria-label="Pages" {
                // A later page leads back to the first, with the same filters.
                @if !q.cursor.trim().is_empty() {
                    a #newest-page href={ "/portal/messages" @if !filters.is_empty() { "?" (filters) } } { "← Newest messages" }
                    " "
                }
                @if let Some(next) = next {
                    a #next-page href={ "/portal/messages?" (filters) @if !filters.is_empty() { "&" } "cursor=" (next) } {
                        @if searching { "Search older messages →" } @else { "Older messages →" }
                    }
                }
            }
        }
    };
    Ok(Html(
        layout::page(
            &session,
            "Messages",
            Section::Messages,
            notice.as_deref(),
            body,
        )
        .into_string(),
    )
    .into_response())
}

fn truncate(s: &str, n: usize) -> String {
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
fn shown_error(m: &Message) -> Option<&str> {
    match m.state {
        MsgState::Delivered => None,
        _ => m.last_error.as_deref(),
    }
}

pub async fn load(state: &AppState, session: &Session, id: &str) -> PortalResult<Message> {
    let id: MessageId = id.parse().map_err(|_| PortalError::NotFound)?;
    state
        .store
        .get_message(&session.account, &id)
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
    // A keyed message that is Scheduled but not its key's head waits for it.
    let head = async {
        match (&m.ordering_key, m.state) {
            (Some(key), MsgState::Scheduled) => {
                state
                    .store
                    .key_head(&session.account, &m.target_id, key)
                    .await
            }
            _ => Ok(None),
        }
    };
    let (attempts, events, target, head) = tokio::try_join!(
        state
            .store
            .list_attempts(&session.account, &m.id, None, 1000),
        state.store.list_events(&session.account, &m.id),
        state.store.get_target(&session.account, &m.target_id),
        head,
    )?;
    let attempts = attempts.unwrap_or_default();
    let waits_for = head.filter(|head| *head != m.id);
    let notice = layout::notice(q.notice.as_deref(), None);
    let actionable = m.state.can_cancel_or_reschedule();
    let due = m.next_attempt_at.unwrap_or(m.delivery_time);
    let watching = q.watch.is_some()
        && m.state == MsgState::Scheduled
        && due <= state.service.now() + super::actions::WATCH_AHEAD;
    let body = html! {
        div.heading {
            h1 { "Message " code.id #message-id { (m.id) } }
            (layout::copy_button("message-id", "Copy the message id"))
            (layout::state_badge(m.state))
        }
        @if watching { p.watch data-watch role="status" { "Waiting for the delivery… this page refreshes by itself. " a href={ "/portal/messages/" (m.id) } { "Refresh" } } }
        dl.facts #message-facts {
            dt { "State" } dd #message-state { (m.state.as_str()) }
            dt { "Target" } dd {
                @match &target {
                    Some(t) => { a href={ "/portal/targets/" (t.id) } { (t.name) } " " small { code { (destination(&t.config)) } } }
                    None => code { (m.target_id) }
                }
            }
            dt { "Due" } dd { (layout::time(&m.delivery_time)) }
            @if let Some(key) = &m.ordering_key {
                dt { "Ordering key" } dd #ordering-key {
                    a href={ "/portal/messages?target=" (m.target_id) "&key=" (layout::encode(key)) } { code { (key) } }
                    @if let Some(head) = &waits_for {
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
            @if let Some(e) = shown_error(&m) { dt { "Last error" } dd.wrap { (e) } }
        }
        @if actionable && session.may(Role::Operator) {
            section.actions-box aria-labelledby="actions-heading" {
                h2 #actions-heading { "Actions" }
                form method="post" action={ "/portal/messages/" (m.id) "/reschedule" } {
                    (layout::csrf_field(&session))
                    (when::picker_at("reschedule-at", "Deliver at", "Now its due time. The retry ladder starts over.", Some(m.delivery_time)))
                    button type="submit" #reschedule { "Reschedule" }
                    " "
                    button type="submit" name="now" value="1" formnovalidate #reschedule-now { "Deliver now" }
                }
                form method="post" action={ "/portal/messages/" (m.id) "/cancel" } data-confirm="Cancel this message? It will not be delivered." {
                    (layout::csrf_field(&session))
                    button.danger type="submit" #cancel { "Cancel message" }
                }
            }
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
            @if attempts.is_empty() { p { "No attempts yet." } } @else {
                div.scroll {
                    table #attempts {
                        thead { tr {
                            th scope="col" .num { "#" } th scope="col" { "Started" } th scope="col" { "Outcome" }
                            th scope="col" .num { "Status" } th scope="col" .num { "Duration" } th scope="col" { "Error" } th scope="col" { "Response" }
                        } }
                        tbody {
                            @for a in &attempts {
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

fn outcome(o: AttemptOutcome) -> &'static str {
    match o {
        AttemptOutcome::Success => "Delivered",
        AttemptOutcome::RetryableFailure => "Failed, will retry",
        AttemptOutcome::NonRetryableFailure => "Failed, no retry",
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
