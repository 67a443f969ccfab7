//! The page shell and the small pieces every page uses.

use crate::service::Permission;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use super::session::Session;
use crate::domain::message::State;

/// A page for a signed-in person: navigation, sign-out, an optional notice.
pub fn page(
    session: &Session,
    title: &str,
    current: Section,
    notice: Option<&str>,
    body: Markup,
) -> Markup {
    shell(
        title,
        session.time_zone.as_deref(),
        html! {
            header.top {
                a.brand href="/portal/overview" { "Dispatch" }
                nav aria-label="Main" {
                    ul {
                        (nav_item("/portal/overview", "Overview", current == Section::Overview))
                        (nav_item("/portal/targets", "Targets", current == Section::Targets))
                        (nav_item("/portal/messages", "Messages", current == Section::Messages))
                        (nav_item("/portal/schedules", "Schedules", current == Section::Schedules))
                        (nav_item("/portal/events", "Events", current == Section::Events))
                        @if session.may(Permission::ManagePeople) {
                            (nav_item("/portal/people", "People", current == Section::People))
                        }
                    }
                }
                div.who {
                    span.account title="Account" { (session.account) }
                    a.email #account-link href="/portal/account" title="Your account and password" { (session.email) }
                    span.role #my-role { (session.role) }
                    form method="post" action="/portal/logout" {
                        (csrf_field(session))
                        button.link type="submit" { "Sign out" }
                    }
                }
            }
            main #main tabindex="-1" {
                @if let Some(notice) = notice {
                    p.notice role="status" { (notice) }
                }
                (body)
            }
        },
    )
}

/// A page outside a session (sign-in, errors).
pub fn bare(title: &str, body: Markup) -> Markup {
    shell(title, None, html! { main #main tabindex="-1" { (body) } })
}

/// `zone`: the person's chosen zone for times, which the script shows them
/// in (otherwise the browser's).
fn shell(title: &str, zone: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Dispatch" }
                link rel="stylesheet" href="/portal/static/portal.css";
                link rel="icon" href="/portal/static/icon.svg" type="image/svg+xml";
                script src="/portal/static/portal.js" defer {}
            }
            body data-zone=[zone] {
                a.skip href="#main" { "Skip to the content" }
                (body)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Targets,
    Messages,
    Schedules,
    Events,
    People,
    /// A page of no section (an error, the person's own account).
    Elsewhere,
}

fn nav_item(href: &str, label: &str, current: bool) -> Markup {
    html! {
        li {
            @if current {
                a href=(href) aria-current="page" { (label) }
            } @else {
                a href=(href) { (label) }
            }
        }
    }
}

pub fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// `2026-11-30 09:12:03.123 UTC`, in a `<time>` element.
pub fn time(t: &DateTime<Utc>) -> Markup {
    let machine = crate::domain::time::format(t);
    html! { time datetime=(machine) data-local { (t.format("%Y-%m-%d %H:%M:%S%.3f UTC")) } }
}

/// A button that copies the text of the element with id `target`, and
/// says so; shown only where script runs (without it the text is there to
/// select by hand).
pub fn copy_button(target: &str, label: &str) -> Markup {
    html! {
        button.copy.secondary type="button" data-copy=(target) aria-label=(label) hidden { "Copy" }
        span.copy-status role="status" {}
    }
}

pub fn opt_time(t: Option<&DateTime<Utc>>) -> Markup {
    match t {
        Some(t) => time(t),
        None => html! { span.none { "—" } },
    }
}

pub fn state_badge(state: State) -> Markup {
    let class = match state {
        State::Scheduled => "badge scheduled",
        State::Delivered => "badge delivered",
        State::Cancelled => "badge cancelled",
        State::DeadLetter => "badge dead",
    };
    html! { span class=(class) data-state=(state.as_str()) { (state_label(state)) } }
}

/// A state as people read it (badges, filters); the API's name is `as_str`.
pub fn state_label(state: State) -> &'static str {
    match state {
        State::Scheduled => "Scheduled",
        State::Delivered => "Delivered",
        State::Cancelled => "Cancelled",
        State::DeadLetter => "Dead letter",
    }
}

/// A duration in words, for lag and ages: `42 ms`, `3.2 s`, `5 min`, `2 h 10 min`.
pub fn duration(d: chrono::TimeDelta) -> String {
    let ms = d.num_milliseconds().max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min", ms / 60_000),
        _ => format!("{} h {} min", ms / 3_600_000, (ms % 3_600_000) / 60_000),
    }
}

/// Percent-encodes a query value.
pub fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A notice named in the query string after an action, so that no text a
/// link carries is ever shown as if the portal said it.
/// A page's `?notice=` (what the action that led to it did).
#[derive(Debug, Default, serde::Deserialize)]
pub struct NoticeQuery {
    pub notice: Option<String>,
}

pub fn notice(code: Option<&str>, n: Option<u64>) -> Option<String> {
    let n = n.unwrap_or(0);
    let plural = |one: &str, many: &str| {
        if n == 1 {
            one.to_string()
        } else {
            many.to_string()
        }
    };
    Some(match code? {
        "cancelled" => "The message was cancelled.".into(),
        "rescheduled" => "The message was rescheduled.".into(),
        "created" => "The target was created.".into(),
        "saved" => "The target was saved.".into(),
        "rotated" => "The signing secret was replaced.".into(),
        "secret-shown" => "The signing secret was shown once and is not shown again.".into(),
        "enabled" => "The target is enabled: its messages are delivered again.".into(),
        "breaker-closed" => "The circuit breaker is closed: waiting messages go now.".into(),
        "disabled" => "The target is disabled: its messages wait until it is enabled.".into(),
        "test" => "A test message was scheduled for now.".into(),
        "target-deleted" => "The target was deleted.".into(),
        "role-changed" => "The role was changed.".into(),
        "removed" => "The person was removed; their sessions have ended.".into(),
        "revoked" => "The invitation was revoked: its link no longer works.".into(),
        "link-shown" => "The invitation's link was shown once and is not shown again.".into(),
        "zone-saved" => "Times are shown in the zone you chose.".into(),
        "password-changed" => "Your password was changed; your other sessions have ended.".into(),
        "joined" => "Welcome: you have joined the account.".into(),
        "bulk-cancelled" => format!("{n} {} cancelled.", plural("message was", "messages were")),
        "redriven" => format!(
            "{n} dead {} rescheduled.",
            plural("letter was", "letters were")
        ),
        "subscribed" => "The subscription was added: matching events now reach this target.".into(),
        "dead-letters-told" => {
            "Dead letters are now told: each one becomes a message to the target you chose.".into()
        }
        "subscription-saved" => "The subscription was saved.".into(),
        "subscription-enabled" => "The subscription is enabled.".into(),
        "subscription-disabled" => {
            "The subscription is disabled: events no longer reach this target through it.".into()
        }
        "subscription-deleted" => "The subscription was deleted.".into(),
        "events-replayed" => format!(
            "{n} {} made into messages to this target.",
            plural("event was", "events were")
        ),
        "replayed" => format!(
            "{n} {} scheduled to be delivered again.",
            plural("message was", "messages were")
        ),
        _ => return None,
    })
}
