//! What the portal changes on messages: cancel, reschedule, and the bulk
//! actions (cancel a selection; reschedule a selection or every matching dead
//! letter), each confirmed with a count first.

use crate::service::Permission;
use axum::{
    extract::{Path, Query, State},
    response::{Html, IntoResponse, Redirect, Response},
};
use maud::html;
use serde::Deserialize;

use super::{
    layout::{self, Section},
    list_query::ListQuery,
    messages::{load, WATCH_AHEAD},
    session::Session,
    when, PortalError, PortalForm, PortalResult,
};
use crate::{
    domain::{ids::MessageId, message::State as MsgState},
    state::AppState,
    store::MessageFilter,
};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ActionForm {
    csrf: String,
    at: String,
    tz: String,
    /// Set by the "Deliver now" button.
    now: Option<String>,
}

pub async fn cancel(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<ActionForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ChangeMessages)?;
    let m = load(&state, &session, &id).await?;
    state.service.cancel(session.actor(), &m.id).await?;
    Ok(Redirect::to(&format!(
        "/portal/messages/{}?notice=cancelled",
        m.id
    )))
}

pub async fn reschedule(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<ActionForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ChangeMessages)?;
    let m = load(&state, &session, &id).await?;
    let now = state.service.now();
    // An empty field is not "now": that takes its own button.
    let at = if f.now.is_some() {
        now
    } else if f.at.trim().is_empty() {
        return Err(PortalError::BadRequest(
            "Choose when to deliver it, or press Deliver now.".into(),
        ));
    } else {
        when::resolve(&f.at, &f.tz, now).map_err(PortalError::BadRequest)?
    };
    let m = state.service.reschedule(session.actor(), &m.id, at).await?;
    // The page watches only a delivery that is about to happen.
    let watch = if m.delivery_time <= now + WATCH_AHEAD {
        "&watch=1"
    } else {
        ""
    };
    Ok(Redirect::to(&format!(
        "/portal/messages/{}?notice=rescheduled{watch}",
        m.id
    )))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct BulkForm {
    csrf: String,
    action: String,
    ids: Vec<String>,
    /// Set on the confirmation page's button.
    confirmed: Option<String>,
    at: String,
    tz: String,
}

/// Cancel, or reschedule the dead letters among, the selected messages.
pub async fn bulk(
    State(state): State<AppState>,
    session: Session,
    PortalForm(f): PortalForm<BulkForm>,
) -> PortalResult<Response> {
    session.authorize(&f.csrf, Permission::ChangeMessages)?;
    let ids: Vec<MessageId> = f
        .ids
        .iter()
        .filter_map(|s| s.parse().ok())
        .take(1000)
        .collect();
    if ids.is_empty() {
        return Err(PortalError::BadRequest(
            "No messages were selected. Go back and tick some first.".into(),
        ));
    }
    let redrive = match f.action.as_str() {
        "cancel" => false,
        "redrive" => true,
        _ => {
            return Err(PortalError::BadRequest(
                "Choose cancel or reschedule.".into(),
            ))
        }
    };
    // What the selection holds now: only these can be acted on.
    let mut eligible = Vec::new();
    for id in &ids {
        if let Some(m) = session.reads(&state).message(id).await? {
            let fits = if redrive {
                m.state == MsgState::DeadLetter
            } else {
                m.state.can_cancel_or_reschedule()
            };
            if fits {
                eligible.push(m.id);
            }
        }
    }
    if f.confirmed.is_none() {
        let (title, verb) = if redrive {
            ("Reschedule dead letters", "reschedule")
        } else {
            ("Cancel messages", "cancel")
        };
        let body = html! {
            h1 { (title) }
            p #confirm-count { "You selected " (ids.len()) " " (if ids.len() == 1 { "message" } else { "messages" }) "; "
               strong { (eligible.len()) } " can be " (if redrive { "rescheduled" } else { "cancelled" }) "." }
            @if eligible.is_empty() {
                p { "Nothing to do. " a href="/portal/messages" { "Back to the messages" } }
            } @else {
                form method="post" action="/portal/messages/bulk" {
                    (layout::csrf_field(&session))
                    input type="hidden" name="action" value=(f.action);
                    input type="hidden" name="confirmed" value="yes";
                    @for id in &eligible { input type="hidden" name="ids" value=(id); }
                    @if redrive { (when::picker("bulk-at", "Deliver at", "Empty: now. Each retry ladder starts over.")) }
                    div.actions {
                        button.danger[!redrive] type="submit" #confirm { "Yes, " (verb) " " (eligible.len()) }
                        a href="/portal/messages" { "No, go back" }
                    }
                }
            }
        };
        return Ok(Html(
            layout::page(&session, title, Section::Messages, None, body).into_string(),
        )
        .into_response());
    }
    let done = if redrive {
        let at =
            when::resolve(&f.at, &f.tz, state.service.now()).map_err(PortalError::BadRequest)?;
        state
            .service
            .redrive(
                session.actor(),
                &MessageFilter::default(),
                Some(&eligible),
                at,
            )
            .await?
    } else {
        state
            .service
            .cancel_many(session.actor(), &eligible)
            .await?
    };
    let notice = if redrive {
        "redriven"
    } else {
        "bulk-cancelled"
    };
    Ok(Redirect::to(&format!("/portal/messages?notice={notice}&n={done}")).into_response())
}

/// How many dead letters match the filter, and the form to reschedule them all.
pub async fn redrive_confirm(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<ListQuery>,
) -> PortalResult<Html<String>> {
    session.require(Permission::ChangeMessages)?;
    let filter = dead_letters(&q)?;
    let count = session.reads(&state).count_messages(&filter).await?;
    let target = match &filter.target_id {
        Some(id) => Some(
            session
                .reads(&state)
                .target(id)
                .await?
                .ok_or(PortalError::NotFound)?,
        ),
        None => None,
    };
    let body = html! {
        h1 { "Reschedule dead letters" }
        p #confirm-count {
            strong { (count) } " dead " (if count == 1 { "letter" } else { "letters" })
            @if let Some(t) = &target { " of " a href={ "/portal/targets/" (t.id) } { (t.name) } }
            @if filter.delivery_from.is_some() || filter.delivery_to.is_some() { " in the chosen time range" }
            " will be scheduled again, each with a fresh retry ladder."
        }
        @if count > 0 {
            form method="post" action="/portal/messages/redrive" {
                (layout::csrf_field(&session))
                @for (name, value) in [("target", &q.target), ("from", &q.from), ("to", &q.to), ("filterTz", &q.tz)] {
                    input type="hidden" name=(name) value=(value);
                }
                (when::picker("redrive-at", "Deliver at", "Empty: now."))
                div.actions {
                    button type="submit" #confirm { "Yes, reschedule " (count) }
                    a href="/portal/messages?state=DeadLetter" { "No, go back" }
                }
            }
        }
    };
    Ok(Html(
        layout::page(
            &session,
            "Reschedule dead letters",
            Section::Messages,
            None,
            body,
        )
        .into_string(),
    ))
}

fn dead_letters(q: &ListQuery) -> PortalResult<MessageFilter> {
    let mut filter = q.filter().map_err(PortalError::BadRequest)?;
    filter.state = Some(MsgState::DeadLetter);
    Ok(filter)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RedriveForm {
    csrf: String,
    target: String,
    from: String,
    to: String,
    /// The zone of `from` and `to`.
    #[serde(rename = "filterTz")]
    filter_tz: String,
    /// When to deliver, in the zone `tz`.
    at: String,
    tz: String,
}

pub async fn redrive(
    State(state): State<AppState>,
    session: Session,
    PortalForm(f): PortalForm<RedriveForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ChangeMessages)?;
    let q = ListQuery {
        target: f.target.clone(),
        from: f.from,
        to: f.to,
        tz: f.filter_tz,
        ..ListQuery::default()
    };
    let filter = dead_letters(&q)?;
    if let Some(id) = &filter.target_id {
        session
            .reads(&state)
            .target(id)
            .await?
            .ok_or(PortalError::NotFound)?;
    }
    let at = when::resolve(&f.at, &f.tz, state.service.now()).map_err(PortalError::BadRequest)?;
    let n = state
        .service
        .redrive(session.actor(), &filter, None, at)
        .await?;
    let target = if f.target.is_empty() {
        String::new()
    } else {
        format!("&target={}", layout::encode(&f.target))
    };
    Ok(Redirect::to(&format!(
        "/portal/messages?notice=redriven&n={n}{target}"
    )))
}
