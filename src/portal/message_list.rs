//! The messages list: filters, quick ranges, the total (counted to a
//! bound), the bounded payload search, paging and the bulk selection.

use crate::service::Permission;
use std::collections::HashMap;

use axum::{
    extract::{Query, State},
    response::{Html, IntoResponse, Redirect, Response},
};
use maud::{html, Markup};

use super::{
    layout::{self, Section},
    list_query::ListQuery,
    messages::{shown_error, truncate},
    session::Session,
    targets::all_targets,
    PortalError, PortalResult,
};
use crate::{
    domain::{
        ids::{MessageId, TargetId},
        message::{Message, State as MsgState},
        target::Target,
    },
    service::{Reads, ServiceResult},
    state::AppState,
    store::MessageFilter,
};

const PAGE: u32 = 50;

pub async fn list(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<ListQuery>,
) -> PortalResult<Response> {
    let problem = match searched_id(&q) {
        Some(Ok(id)) => return Ok(Redirect::to(&format!("/portal/messages/{id}")).into_response()),
        Some(Err(problem)) => Some(problem),
        None => None,
    };
    let asked = Asked::read(&q, problem)?;
    let found = fetch(session.reads(&state), &asked).await?;
    let searching = asked.searching();
    let notice = layout::notice(q.notice.as_deref(), q.n);
    let filters = q.filter_query();
    let body = html! {
        h1 { "Messages" }
        (filter_form(&q, &found.targets))
        (super::quick::ranges(&q, state.service.now(), session.time_zone.as_deref()))
        @if let Some(problem) = &asked.problem { p.error role="alert" { (problem) } }
        @match found.total {
            Some(total) => (super::quick::total(total)),
            None => (super::quick::search_scope(asked.text, found.messages.len(), found.scanned_to.is_some(), !q.cursor.trim().is_empty())),
        }
        // (Not while searching payloads: the redrive takes every dead letter
        // the filters select, whatever their payload holds.)
        @if asked.filter.state == Some(MsgState::DeadLetter) && !found.messages.is_empty() && !searching && session.may(Permission::ChangeMessages) {
            p { a.button.secondary #redrive-filtered href={ "/portal/messages/redrive?" (filters) } { "Reschedule every dead letter that matches…" } }
        }
        @if found.messages.is_empty() {
            p #no-messages { "No messages match." }
        } @else {
            (bulk_form(&session, &found.messages, &found.targets))
        }
        (pager(&q, &filters, found.next, searching))
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

/// The message id typed in the search box, which opens that message, or
/// why what was typed is none.
fn searched_id(q: &ListQuery) -> Option<Result<MessageId, String>> {
    let search = q.q.trim();
    (!search.is_empty()).then(|| {
        search
            .parse::<MessageId>()
            .map_err(|_| format!("`{search}` is not a message id (DI-M-…)"))
    })
}

/// What the query asks for: the filters, the page, the payload text to
/// search for, and what in it is wrong (shown on the page, not refused).
struct Asked<'q> {
    filter: MessageFilter,
    before: Option<MessageId>,
    text: &'q str,
    problem: Option<String>,
}

impl<'q> Asked<'q> {
    /// Reads the query, after the search box's `problem`. Only a page link
    /// that does not parse is refused.
    fn read(q: &'q ListQuery, mut problem: Option<String>) -> PortalResult<Self> {
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
        Ok(Asked {
            filter,
            before,
            text,
            problem,
        })
    }

    /// Whether the payloads are searched, rather than the messages listed.
    fn searching(&self) -> bool {
        !self.text.is_empty() && self.problem.is_none()
    }
}

/// A page of messages and what is shown beside them.
struct Found {
    messages: Vec<Message>,
    /// Where a search that stopped short stopped.
    scanned_to: Option<MessageId>,
    targets: Vec<Target>,
    /// How many messages match, counted up to a bound; none while searching.
    total: Option<u64>,
    /// Where the next page starts, if there is one.
    next: Option<MessageId>,
}

/// Reads the page (one more message than shown, to know whether another
/// page follows), the targets and the total, all at once.
async fn fetch(reads: Reads<'_>, asked: &Asked<'_>) -> ServiceResult<Found> {
    let searching = asked.searching();
    let page = async {
        if searching {
            let found = reads
                .search_payloads(
                    &asked.filter,
                    asked.before.as_ref(),
                    asked.text,
                    super::quick::SEARCHED,
                    PAGE + 1,
                )
                .await?;
            Ok::<_, crate::service::ServiceError>((found.messages, found.scanned_to))
        } else {
            let listed = reads
                .messages(&asked.filter, asked.before.as_ref(), PAGE + 1)
                .await?;
            Ok((listed, None))
        }
    };
    let total = async {
        match searching {
            true => Ok(None),
            false => reads
                .count_messages_upto(&asked.filter, super::quick::COUNTED + 1)
                .await
                .map(Some),
        }
    };
    let ((mut messages, scanned_to), targets, total) =
        tokio::try_join!(page, all_targets(reads), total)?;
    let next = if messages.len() > PAGE as usize {
        messages.truncate(PAGE as usize);
        messages.last().map(|m| m.id)
    } else {
        // A search that stopped short goes on below what it scanned.
        scanned_to
    };
    Ok(Found {
        messages,
        scanned_to,
        targets,
        total,
        next,
    })
}

/// The filters, as the query set them.
fn filter_form(q: &ListQuery, targets: &[Target]) -> Markup {
    html! {
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
                    @for t in targets { option value=(t.id) selected[q.target == t.id.as_str()] { (t.name) } }
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
    }
}

/// The page's messages, to select for a bulk cancel or reschedule.
fn bulk_form(session: &Session, messages: &[Message], targets: &[Target]) -> Markup {
    let names: HashMap<&TargetId, &str> =
        targets.iter().map(|t| (&t.id, t.name.as_str())).collect();
    html! {
        form #bulk method="post" action="/portal/messages/bulk" {
            (layout::csrf_field(session))
            div.scroll {
                table #messages {
                    caption.visually-hidden { "Messages, newest first" }
                    thead { tr {
                        th scope="col" { input type="checkbox" data-select-all aria-label="Select all on this page"; }
                        th scope="col" { "Message" } th scope="col" { "Target" } th scope="col" { "State" }
                        th scope="col" { "Due" } th scope="col" .num { "Attempts" } th scope="col" { "Last error" }
                    } }
                    tbody {
                        @for m in messages {
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
}

/// Links to the next page and, from a later page, back to the first, with
/// the same `filters`.
fn pager(q: &ListQuery, filters: &str, next: Option<MessageId>, searching: bool) -> Markup {
    html! {
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
    }
}
