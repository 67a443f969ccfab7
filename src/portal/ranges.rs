//! A target's actions over a time range
//! (docs/api.md#bulk-redrive-cancel-and-replay): replay what was delivered
//! between two instants, and cancel what is due between two instants. Each is
//! counted first and done only when confirmed, like the dead-letter redrive
//! form.

use crate::service::Permission;
use axum::{
    extract::{Path, Query, State},
    response::{Html, Redirect},
};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use super::{
    layout::{self, Section},
    session::Session,
    targets::load,
    when, PortalError, PortalForm, PortalResult,
};
use crate::{
    domain::{message::State as MsgState, target::Target},
    state::AppState,
    store::{Bulk, BulkAction, RangeOn},
};

/// Which of the two range actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Replay,
    Cancel,
}

impl Kind {
    fn path(self) -> &'static str {
        match self {
            Kind::Replay => "replay",
            Kind::Cancel => "cancel-range",
        }
    }
}

/// The range (and, for cancel, the state) a form names; on the confirmation
/// page also when to deliver.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct RangeForm {
    csrf: String,
    from: String,
    to: String,
    /// The zone of `from` and `to`.
    #[serde(rename = "rangeTz")]
    range_tz: String,
    /// Cancel only: `Scheduled`, `DeadLetter`, or empty for both.
    state: String,
    /// Replay only: when to deliver, in the zone `tz`; empty is now.
    at: String,
    tz: String,
}

impl RangeForm {
    fn bound(&self, s: &str, now: DateTime<Utc>) -> PortalResult<Option<DateTime<Utc>>> {
        if s.trim().is_empty() {
            return Ok(None);
        }
        when::resolve(s, &self.range_tz, now)
            .map(Some)
            .map_err(PortalError::BadRequest)
    }

    /// The bulk action the form names, for `target`.
    fn bulk(&self, kind: Kind, target: &Target, now: DateTime<Utc>) -> PortalResult<Bulk> {
        let (from, to) = (self.bound(&self.from, now)?, self.bound(&self.to, now)?);
        if let (Some(f), Some(t)) = (from, to) {
            if f >= t {
                return Err(PortalError::BadRequest(
                    "The range is empty: its start must come before its end.".into(),
                ));
            }
        }
        let (action, range_on) = match kind {
            Kind::Replay => {
                if from.is_none() || to.is_none() {
                    return Err(PortalError::BadRequest(
                        "A replay needs both ends of the range: delivered from and before.".into(),
                    ));
                }
                let at = when::resolve(&self.at, &self.tz, now).map_err(PortalError::BadRequest)?;
                (BulkAction::Replay { at }, RangeOn::DeliveredAt)
            }
            Kind::Cancel => {
                let only = match self.state.trim() {
                    "" => None,
                    "Scheduled" => Some(MsgState::Scheduled),
                    "DeadLetter" => Some(MsgState::DeadLetter),
                    s => {
                        return Err(PortalError::BadRequest(format!(
                            "`{s}` cannot be cancelled: choose Scheduled or DeadLetter"
                        )))
                    }
                };
                (BulkAction::Cancel { only }, RangeOn::DeliveryTime)
            }
        };
        Ok(Bulk {
            action,
            target_id: Some(target.id.clone()),
            ids: None,
            range_on,
            from,
            to,
        })
    }
}

/// The target page's section with both forms (they only count; nothing
/// changes before the confirmation page).
pub fn section(t: &Target) -> Markup {
    let range = |kind: Kind, from_label: &str, to_label: &str| {
        let p = kind.path();
        html! {
            div.field { label for={ (p) "-from" } { (from_label) } input id={ (p) "-from" } name="from" type="datetime-local" step="1"; }
            div.field { label for={ (p) "-to" } { (to_label) } input id={ (p) "-to" } name="to" type="datetime-local" step="1"; }
            div.field {
                label for={ (p) "-tz" } { "Time zone" }
                input id={ (p) "-tz" } name="rangeTz" type="text" value="UTC" data-tz autocomplete="off" spellcheck="false";
            }
        }
    };
    html! {
        section aria-labelledby="target-ranges" {
            h2 #target-ranges { "By time range" }
            form.filters #replay-range method="get" action={ "/portal/targets/" (t.id) "/replay" } {
                p { "Replay deliveries between … and …: each message delivered in the range is delivered again, with the same message id." }
                (range(Kind::Replay, "Delivered from", "Delivered before"))
                div.actions { button.secondary type="submit" { "Count deliveries to replay…" } }
            }
            form.filters #cancel-range method="get" action={ "/portal/targets/" (t.id) "/cancel-range" } {
                p { "Cancel messages due between … and … (an empty end is open)." }
                (range(Kind::Cancel, "Due from", "Due before"))
                div.field {
                    label for="cancel-range-state" { "Which" }
                    select #cancel-range-state name="state" {
                        option value="" { "Scheduled and dead letters" }
                        option value="Scheduled" { "Scheduled only" }
                        option value="DeadLetter" { "Dead letters only" }
                    }
                }
                div.actions { button.secondary type="submit" { "Count messages to cancel…" } }
            }
        }
    }
}

pub async fn replay_confirm(
    state: State<AppState>,
    session: Session,
    id: Path<String>,
    q: Query<RangeForm>,
) -> PortalResult<Html<String>> {
    confirm(Kind::Replay, state, session, id, q).await
}

pub async fn cancel_confirm(
    state: State<AppState>,
    session: Session,
    id: Path<String>,
    q: Query<RangeForm>,
) -> PortalResult<Html<String>> {
    confirm(Kind::Cancel, state, session, id, q).await
}

/// How many messages the range holds, and the button that acts on them.
async fn confirm(
    kind: Kind,
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<RangeForm>,
) -> PortalResult<Html<String>> {
    session.require(Permission::ChangeMessages)?;
    let t = load(&state, &session, &id).await?;
    let now = state.service.now();
    let bulk = q.bulk(kind, &t, now)?;
    let max = state.service.config().bulk.max;
    let count = session
        .reads(&state)
        .bulk_count(&bulk, max.saturating_add(1), now)
        .await?;
    let (title, what, verb) = match kind {
        Kind::Replay => (
            "Replay deliveries",
            if count == 1 { "delivered message" } else { "delivered messages" },
            "will be delivered again with the same message id, each with a fresh retry ladder; their earlier attempts stay.",
        ),
        Kind::Cancel => (
            "Cancel messages",
            if count == 1 { "message" } else { "messages" },
            "will be cancelled. One whose attempt is under way is left to finish.",
        ),
    };
    let back = format!("/portal/targets/{}", t.id);
    let body = html! {
        h1 { (title) }
        @if count > max {
            p.error #confirm-count role="alert" {
                "More than " (max) " messages are in this range (bulk.max): narrow it. "
                a href=(back) { "Back to the target" }
            }
        } @else {
            p #confirm-count {
                strong { (count) } " " (what) " of " a href=(back) { (t.name) }
                " in the range " (range_text(&bulk)) " " (verb)
            }
            @if count == 0 {
                p { "Nothing to do. " a href=(back) { "Back to the target" } }
            } @else {
                form method="post" action={ "/portal/targets/" (t.id) "/" (kind.path()) } {
                    (layout::csrf_field(&session))
                    @for (name, value) in [("from", &q.from), ("to", &q.to), ("rangeTz", &q.range_tz), ("state", &q.state)] {
                        input type="hidden" name=(name) value=(value);
                    }
                    @if kind == Kind::Replay { (when::picker("replay-at", "Deliver at", "Empty: now.")) }
                    div.actions {
                        @match kind {
                            Kind::Replay => button type="submit" #confirm { "Yes, replay " (count) },
                            Kind::Cancel => button.danger type="submit" #confirm { "Yes, cancel " (count) },
                        }
                        a href=(back) { "No, go back" }
                    }
                }
            }
        }
    };
    Ok(Html(
        layout::page(&session, title, Section::Targets, None, body).into_string(),
    ))
}

fn range_text(bulk: &Bulk) -> Markup {
    html! {
        "["
        @match &bulk.from { Some(t) => (layout::time(t)), None => "the beginning" }
        ", "
        @match &bulk.to { Some(t) => (layout::time(t)), None => "the end" }
        ")"
    }
}

pub async fn replay(
    state: State<AppState>,
    session: Session,
    id: Path<String>,
    f: PortalForm<RangeForm>,
) -> PortalResult<Redirect> {
    act(Kind::Replay, state, session, id, f).await
}

pub async fn cancel(
    state: State<AppState>,
    session: Session,
    id: Path<String>,
    f: PortalForm<RangeForm>,
) -> PortalResult<Redirect> {
    act(Kind::Cancel, state, session, id, f).await
}

async fn act(
    kind: Kind,
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<RangeForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ChangeMessages)?;
    let t = load(&state, &session, &id).await?;
    let bulk = f.bulk(kind, &t, state.service.now())?;
    let n = state.service.bulk(session.actor(), &bulk).await?;
    let notice = match kind {
        Kind::Replay => "replayed",
        Kind::Cancel => "bulk-cancelled",
    };
    Ok(Redirect::to(&format!(
        "/portal/targets/{}?notice={notice}&n={n}",
        t.id
    )))
}
