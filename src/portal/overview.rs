//! The overview: counts by state per target, the last 24 hours, lag and dead letters.

use axum::{extract::State, response::Html};
use chrono::TimeDelta;
use maud::html;

use super::{
    charts,
    layout::{self, Section},
    session::Session,
    targets::all_targets,
    PortalResult,
};
use crate::{domain::message::State as MsgState, state::AppState};

pub async fn page(
    State(state): State<AppState>,
    session: Session,
    axum::extract::Query(q): axum::extract::Query<layout::NoticeQuery>,
) -> PortalResult<Html<String>> {
    let now = state.service.now();
    let since = now - TimeDelta::hours(24);
    let (overview, targets, activity) = tokio::try_join!(
        session.reads(&state).overview(since, now),
        all_targets(session.reads(&state)),
        session.reads(&state).activity(charts::window_start(now)),
    )?;
    let dead_waiting = overview.total(MsgState::DeadLetter);
    let body = html! {
        h1 { "Overview" }
        section.tiles aria-label="The last 24 hours" {
            div.tile {
                span.label { "Delivered, last 24 h" }
                span.value #delivered-24h { (overview.delivered) }
            }
            div.tile {
                span.label { "Failed attempts, last 24 h" }
                span.value #failed-24h { (overview.failed_attempts) }
            }
            div.tile {
                span.label { "Dead-lettered, last 24 h" }
                span.value #dead-lettered-24h { (overview.dead_lettered) }
            }
            div.tile.warn[dead_waiting > 0] {
                span.label { "Dead letters waiting" }
                a.value #dead-waiting href="/portal/messages?state=DeadLetter" { (dead_waiting) }
            }
            div.tile.warn[overview.oldest_due.as_ref().is_some_and(|(_, at)| now - *at > TimeDelta::seconds(5))] {
                span.label { "Lag (oldest due message)" }
                @match &overview.oldest_due {
                    Some((id, at)) => {
                        a.value #lag href={ "/portal/messages/" (id) } { (layout::duration(now - *at)) }
                    }
                    None => span.value #lag { "none due" }
                }
            }
        }
        section aria-labelledby="charts-heading" {
            h2 #charts-heading { "The last 24 hours, per hour (UTC)" }
            div.charts {
                (charts::bars("delivered-chart", "Delivered", "delivered", "bar delivered", &activity.hours, now, |h| h.delivered))
                (charts::bars("failed-chart", "Failed attempts", "failed attempts", "bar failed", &activity.hours, now, |h| h.failed))
                (charts::bars("dead-chart", "Dead-lettered", "dead letters", "bar dead", &activity.hours, now, |h| h.dead_lettered))
                (charts::lateness(&activity.hours, now))
            }
        }
        section aria-labelledby="by-target" {
            h2 #by-target { "Messages by target" }
            @if targets.is_empty() {
                p { "No targets yet. " a href="/portal/targets/new" { "Create one" } " to start scheduling messages." }
            } @else {
                div.scroll {
                    table {
                        thead { tr {
                            th scope="col" { "Target" }
                            th scope="col" { "Status" }
                            th scope="col" .num { abbr title="Of the attempts that ended in the last 24 hours, the share that delivered" { "Success, 24 h" } }
                            @for s in MsgState::ALL { th scope="col" .num { (label(s)) } }
                        } }
                        tbody {
                            @for t in &targets {
                                tr {
                                    th scope="row" { a href={ "/portal/targets/" (t.id) } { (t.name) } }
                                    td { @if t.enabled { "Enabled" } @else { span.off { "Disabled" } } }
                                    td.num data-success-rate=(t.id) {
                                        @match activity.by_target.get(&t.id).and_then(|a| a.success_rate()) {
                                            Some(r) => (format!("{:.1} %", r * 100.0)),
                                            None => span.none { "—" },
                                        }
                                    }
                                    @for s in MsgState::ALL {
                                        td.num {
                                            a href={ "/portal/messages?target=" (t.id) "&state=" (s.as_str()) }
                                              aria-label={ (label(s)) " messages of " (t.name) } {
                                                (overview.count(&t.id, s))
                                            }
                                        }
                                    }
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
            "Overview",
            Section::Overview,
            layout::notice(q.notice.as_deref(), None).as_deref(),
            body,
        )
        .into_string(),
    ))
}

fn label(s: MsgState) -> &'static str {
    match s {
        MsgState::Scheduled => "Scheduled",
        MsgState::Delivered => "Delivered",
        MsgState::Cancelled => "Cancelled",
        MsgState::DeadLetter => "Dead letters",
    }
}
