//! Replaying published events to one target from its page
//! (docs/api.md#the-archive-and-replay): a new subscriber catches up. As
//! with the other range actions, the form only counts; the confirmation
//! page replays.

use axum::{
    extract::{Path, Query, State},
    response::{Html, Redirect},
};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::json;

use super::{
    layout::{self, Section},
    session::Session,
    targets::load,
    when, PortalError, PortalForm, PortalResult,
};
use crate::{
    domain::{event::pattern_texts, target::Target, time},
    service::{Permission, ServiceError},
    state::AppState,
    wire::{
        event::{parse_replay, EventReplayIn, EventReplaySpec},
        Field,
    },
};

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct EventReplayForm {
    csrf: String,
    from: String,
    to: String,
    /// The zone of `from` and `to`.
    #[serde(rename = "rangeTz")]
    range_tz: String,
    /// Patterns separated by spaces or commas; empty: the target's subscriptions'.
    types: String,
    /// When to deliver, in the zone `tz`; empty is now.
    at: String,
    tz: String,
}

impl EventReplayForm {
    /// The replay the form names, read by the API's rules.
    fn spec(&self, t: &Target, now: DateTime<Utc>) -> PortalResult<EventReplaySpec> {
        let instant = |s: &str, tz: &str| -> PortalResult<Field<String>> {
            if s.trim().is_empty() {
                return Ok(Field::Missing);
            }
            let at = when::resolve(s, tz, now).map_err(PortalError::BadRequest)?;
            Ok(Field::Valid(time::format(&at)))
        };
        let types: Vec<_> = self
            .types
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .map(|t| json!(t))
            .collect();
        let input = EventReplayIn {
            target_id: Field::Valid(t.id.to_string()),
            from: instant(&self.from, &self.range_tz)?,
            to: instant(&self.to, &self.range_tz)?,
            types: if types.is_empty() {
                Field::Missing
            } else {
                Field::Valid(types)
            },
            delivery_time: instant(&self.at, &self.tz)?,
        };
        Ok(parse_replay(input).map_err(ServiceError::Invalid)?)
    }
}

/// The form on the target's page.
pub fn section(t: &Target) -> Markup {
    html! {
        section aria-labelledby="target-event-replay" {
        h2 #target-event-replay { "Replay events" }
        form.filters #replay-events method="get" action={ "/portal/targets/" (t.id) "/replay-events" } {
            p { "Catch up on events published between … and …: each event whose type matches becomes a new message to this target." }
            div.field { label for="replay-events-from" { "Published from" } input #replay-events-from name="from" type="datetime-local" step="1" required; }
            div.field { label for="replay-events-to" { "Published before" } input #replay-events-to name="to" type="datetime-local" step="1" required; }
            div.field {
                label for="replay-events-tz" { "Time zone" }
                input #replay-events-tz name="rangeTz" type="text" value="UTC" data-tz autocomplete="off" spellcheck="false";
            }
            div.field {
                label for="replay-events-types" { "Types" }
                input #replay-events-types name="types" type="text" autocomplete="off" spellcheck="false" placeholder="order.*"
                    aria-describedby="replay-events-types-hint";
                small #replay-events-types-hint { "Empty: the patterns of this target's enabled subscriptions." }
            }
            div.actions { button.secondary type="submit" { "Count events to replay…" } }
        }
        }
    }
}

pub async fn confirm(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<EventReplayForm>,
) -> PortalResult<Html<String>> {
    session.require(Permission::ChangeMessages)?;
    let t = load(&state, &session, &id).await?;
    let spec = q.spec(&t, state.service.now())?;
    let max = state.service.config().bulk.max;
    let count = state
        .service
        .count_replay(session.actor(), &spec, max.saturating_add(1))
        .await?;
    let back = format!("/portal/targets/{}", t.id);
    let types = match &spec.types {
        Some(p) => pattern_texts(p).join(" "),
        None => "its subscriptions' patterns".into(),
    };
    let body = html! {
        h1 { "Replay events" }
        @if count > max {
            p.error #confirm-count role="alert" {
                "More than " (max) " events are in this range (bulk.max): narrow it. "
                a href=(back) { "Back to the target" }
            }
        } @else {
            p #confirm-count {
                strong { (count) } " " (if count == 1 { "event" } else { "events" })
                " published in [" (layout::time(&spec.from)) ", " (layout::time(&spec.to)) ") matching "
                code { (types) } " will each become a new message to " a href=(back) { (t.name) } "."
            }
            @if count == 0 {
                p { "Nothing to do. " a href=(back) { "Back to the target" } }
            } @else {
                form method="post" action={ "/portal/targets/" (t.id) "/replay-events" } {
                    (layout::csrf_field(&session))
                    @for (name, value) in [("from", &q.from), ("to", &q.to), ("rangeTz", &q.range_tz), ("types", &q.types)] {
                        input type="hidden" name=(name) value=(value);
                    }
                    (when::picker("replay-events-at", "Deliver at", "Empty: now."))
                    div.actions {
                        button type="submit" #confirm { "Yes, replay " (count) }
                        a href=(back) { "No, go back" }
                    }
                }
            }
        }
    };
    Ok(Html(
        layout::page(&session, "Replay events", Section::Targets, None, body).into_string(),
    ))
}

pub async fn replay(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<EventReplayForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ChangeMessages)?;
    let t = load(&state, &session, &id).await?;
    let spec = f.spec(&t, state.service.now())?;
    let n = state.service.replay_events(session.actor(), spec).await?;
    Ok(Redirect::to(&format!(
        "/portal/targets/{}?notice=events-replayed&n={n}",
        t.id
    )))
}
