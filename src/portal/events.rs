//! Events (docs/api.md#events-and-subscriptions): the recent events of the
//! account, newest first, by type, each with the targets it reached and
//! where its messages stand; and one event's page with its payload.

use std::collections::HashMap;

use axum::{
    extract::{Path, Query, State},
    response::Html,
};
use maud::{html, Markup};
use serde::Deserialize;

use super::{
    layout::{self, Section},
    messages::truncate,
    session::Session,
    targets::all_targets,
    PortalError, PortalResult,
};
use crate::{
    domain::{
        event::{EventType, Reached},
        ids::{EventId, TargetId},
    },
    state::AppState,
    store::{EventCursor, EventQuery, EventView},
};

/// Events on one page of the list.
const PAGE: u32 = 50;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct EventsQuery {
    #[serde(rename = "type")]
    ty: String,
    cursor: String,
}

/// The name of each of the account's targets, to show where events went.
async fn target_names(
    state: &AppState,
    session: &Session,
) -> PortalResult<HashMap<TargetId, String>> {
    Ok(all_targets(session.reads(state))
        .await?
        .into_iter()
        .map(|t| (t.id, t.name))
        .collect())
}

/// One message an event made: its target's name and its state (or that
/// retention removed it).
fn reached(r: &Reached, names: &HashMap<TargetId, String>) -> Markup {
    let name = names
        .get(&r.target_id)
        .map_or(r.target_id.as_str(), String::as_str);
    html! {
        li data-message=(r.message_id) {
            a href={ "/portal/targets/" (r.target_id) } { (name) } " "
            @match r.state {
                Some(s) => a href={ "/portal/messages/" (r.message_id) } { (layout::state_badge(s)) },
                None => span.off { "removed by retention" },
            }
        }
    }
}

pub async fn list(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<EventsQuery>,
) -> PortalResult<Html<String>> {
    let ty = q.ty.trim();
    let mut problem = None;
    let query = EventQuery {
        ty: match ty {
            "" => None,
            t => match EventType::parse(t) {
                Ok(t) => Some(t.as_str().to_string()),
                Err(e) => {
                    problem = Some(format!("`{t}` {e}."));
                    None
                }
            },
        },
        ..EventQuery::default()
    };
    let after = match q.cursor.trim() {
        "" => None,
        c => Some(
            EventCursor::decode(c)
                .ok_or_else(|| PortalError::BadRequest("the page link is not valid".into()))?,
        ),
    };
    let events = if problem.is_some() {
        Vec::new()
    } else {
        session
            .reads(&state)
            .published_events(&query, after.as_ref(), PAGE)
            .await?
    };
    let names = target_names(&state, &session).await?;
    let next = (events.len() as u32 == PAGE)
        .then(|| events.last().map(|v| EventCursor::after(&v.event).encode()))
        .flatten();
    let body = html! {
        h1 { "Events" }
        p.hint { "Events published to the account, newest first. Each became one message to every target subscribed to its type." }
        form.filters #event-filters method="get" action="/portal/events" role="search" {
            div.field {
                label for="event-type" { "Type" }
                input #event-type name="type" type="text" value=(ty) placeholder="order.created"
                    autocomplete="off" spellcheck="false" aria-invalid=[problem.as_ref().map(|_| "true")];
                @if let Some(p) = &problem { span.error role="alert" { (p) } }
            }
            div.actions { button.secondary type="submit" { "Show" } @if !ty.is_empty() { a href="/portal/events" { "All types" } } }
        }
        @if events.is_empty() {
            p #no-events { @if ty.is_empty() { "No events yet." } @else { "No events of this type." } }
        } @else {
            div.scroll {
                table #events {
                    thead { tr {
                        th scope="col" { "Published" } th scope="col" { "Type" } th scope="col" { "Reached" }
                    } }
                    tbody { @for v in &events { (row(v, &names)) } }
                }
            }
        }
        @if next.is_some() || !q.cursor.trim().is_empty() {
            nav.pages aria-label="Pages" {
                @if !q.cursor.trim().is_empty() { a href={ "/portal/events?type=" (ty) } { "Newest" } }
                @if let Some(next) = next { " " a #next-page href={ "/portal/events?type=" (ty) "&cursor=" (next) } { "Older" } }
            }
        }
    };
    Ok(Html(
        layout::page(&session, "Events", Section::Events, None, body).into_string(),
    ))
}

fn row(v: &EventView, names: &HashMap<TargetId, String>) -> Markup {
    let e = &v.event;
    html! {
        tr data-event=(e.id) {
            td { a href={ "/portal/events/" (e.id) } { (layout::time(&e.created_at)) } }
            td { code { (e.ty.as_str()) } }
            td {
                @if v.messages.is_empty() {
                    span.off { "no subscribed target" }
                } @else {
                    ul.plain.reached { @for r in &v.messages { (reached(r, names)) } }
                }
            }
        }
    }
}

pub async fn show(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
) -> PortalResult<Html<String>> {
    let id: EventId = id.parse().map_err(|_| PortalError::NotFound)?;
    let v = session
        .reads(&state)
        .published_event(&id)
        .await?
        .ok_or(PortalError::NotFound)?;
    let names = target_names(&state, &session).await?;
    let e = &v.event;
    let title = format!("Event {}", e.ty.as_str());
    let body = html! {
        h1 { "Event " code { (e.ty.as_str()) } }
        dl.facts {
            dt { "Event id" } dd.copyable { code #event-id { (e.id) } (layout::copy_button("event-id", "Copy the event id")) }
            dt { "Type" } dd { a href={ "/portal/events?type=" (e.ty.as_str()) } { code { (e.ty.as_str()) } } }
            dt { "Published" } dd { (layout::time(&e.created_at)) }
            dt { "Due" } dd { (layout::time(&e.delivery_time)) }
            dt { "Ordering key" } dd { @match &e.ordering_key { Some(k) => code { (k.as_str()) }, None => "None" } }
        }
        section aria-labelledby="event-messages" {
            h2 #event-messages { "Targets reached" }
            @if v.messages.is_empty() {
                p { "No enabled subscription matched its type when it was published: it made no message. A replay can still deliver it to a target." }
            } @else {
                ul.plain #reached { @for r in &v.messages { (reached(r, &names)) } }
            }
        }
        section aria-labelledby="event-payload" {
            h2 #event-payload { "Payload" }
            pre.payload { (truncate(e.payload.as_str(), 20_000)) }
        }
    };
    Ok(Html(
        layout::page(&session, &title, Section::Events, None, body).into_string(),
    ))
}
