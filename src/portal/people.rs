//! The account's people, for its admins: who they are and their roles, a
//! role changed, a person removed, invitations (a one-time sign-up link,
//! shown once by post/redirect/get) made and revoked.

use crate::service::Permission;
use axum::{
    extract::{Path, Query, State},
    http::{header, HeaderMap},
    response::{Html, IntoResponse, Redirect, Response},
};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use maud::{html, Markup};
use serde::Deserialize;

use super::{
    layout::{self, Section},
    session::{secure, CsrfForm, Session},
    PortalError, PortalForm, PortalResult,
};
use crate::{
    service::{Conflict, ServiceError},
    state::AppState,
    store::portal::Role,
};

/// The cookie that carries a new invitation's link to the one page that
/// shows it, once.
const LINK_ONCE: &str = "dispatch_invite_once";
const INVITED: &str = "/portal/people/invited";

#[derive(Debug, Deserialize)]
pub struct InviteForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    role: String,
}

#[derive(Debug, Deserialize)]
pub struct RoleForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    role: String,
}

fn role_from_form(s: &str) -> PortalResult<Role> {
    Role::parse(s)
        .ok_or_else(|| PortalError::BadRequest("role must be viewer, operator or admin".into()))
}

/// A refusal about people, in the portal's words.
fn refused(e: ServiceError) -> PortalError {
    match e {
        ServiceError::Conflict(Conflict::LastAdmin) => PortalError::Conflict(
            "That would leave the account without an admin. Make another person an admin first."
                .into(),
        ),
        ServiceError::Conflict(Conflict::EmailTaken) => PortalError::Conflict(
            "A person with this email has a sign-in in this account already.".into(),
        ),
        other => other.into(),
    }
}

pub async fn list(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<layout::NoticeQuery>,
) -> PortalResult<Html<String>> {
    session.require(Permission::ManagePeople)?;
    let now = state.service.now();
    let reads = session.reads(&state);
    let (people, invitations) = tokio::try_join!(reads.people(), reads.invitations(now))?;
    let body = html! {
        h1 { "People" }
        p { "Viewers read everything of the account; operators also cancel, reschedule, redrive and replay messages, send test messages and manage schedules; admins also manage targets and people." }
        div.scroll {
            table #people {
                thead { tr { th scope="col" { "Email" } th scope="col" { "Role" } th scope="col" { "Since" } th scope="col" { "Remove" } } }
                tbody {
                    @for p in &people {
                        tr data-email=(p.email) {
                            th scope="row" { (p.email) @if p.id == session.user_id { " (you)" } }
                            td {
                                form.inline method="post" action={ "/portal/people/" (p.id) "/role" } {
                                    (layout::csrf_field(&session))
                                    label.visually-hidden for={ "role-" (p.id) } { "Role of " (p.email) }
                                    (role_select(&format!("role-{}", p.id), p.role))
                                    button type="submit" { "Change" }
                                }
                            }
                            td { (layout::time(&p.created_at)) }
                            td {
                                form.inline method="post" action={ "/portal/people/" (p.id) "/remove" } {
                                    (layout::csrf_field(&session))
                                    button.danger type="submit" aria-label={ "Remove " (p.email) } { "Remove" }
                                }
                            }
                        }
                    }
                }
            }
        }
        section aria-labelledby="invite-heading" {
            h2 #invite-heading { "Invite a person" }
            p { "The invitation is a sign-up link, shown once, that works for 7 days. Send it to the person yourself." }
            form #invite method="post" action="/portal/people/invite" {
                (layout::csrf_field(&session))
                div.field { label for="invite-email" { "Email" } input #invite-email name="email" type="email" required autocomplete="off"; }
                div.field { label for="invite-role" { "Role" } (role_select("invite-role", Role::Viewer)) }
                button type="submit" { "Invite" }
            }
        }
        @if !invitations.is_empty() {
            section aria-labelledby="pending-heading" {
                h2 #pending-heading { "Pending invitations" }
                div.scroll {
                    table #invitations {
                        thead { tr { th scope="col" { "Email" } th scope="col" { "Role" } th scope="col" { "Invited by" } th scope="col" { "Expires" } th scope="col" { "Revoke" } } }
                        tbody {
                            @for i in &invitations {
                                tr data-email=(i.email) {
                                    th scope="row" { (i.email) }
                                    td { (i.role) }
                                    td { (i.invited_by) }
                                    td { (layout::time(&i.expires_at)) }
                                    td {
                                        form.inline method="post" action={ "/portal/people/invitations/" (i.id) "/revoke" } {
                                            (layout::csrf_field(&session))
                                            button type="submit" aria-label={ "Revoke the invitation of " (i.email) } { "Revoke" }
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
    let notice = layout::notice(q.notice.as_deref(), None);
    Ok(Html(
        layout::page(&session, "People", Section::People, notice.as_deref(), body).into_string(),
    ))
}

fn role_select(id: &str, current: Role) -> Markup {
    html! {
        select id=(id) name="role" {
            @for r in Role::ALL { option value=(r.as_str()) selected[r == current] { (r.as_str()) } }
        }
    }
}

pub async fn invite(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    jar: CookieJar,
    PortalForm(f): PortalForm<InviteForm>,
) -> PortalResult<Response> {
    session.authorize(&f.csrf, Permission::ManagePeople)?;
    let role = role_from_form(&f.role)?;
    let new = state
        .service
        .invite(session.actor(), &session.email, &f.email, role)
        .await
        .map_err(refused)?;
    let scheme = if secure(&state, &headers) {
        "https"
    } else {
        "http"
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let link = format!("{scheme}://{host}/portal/invite/{}", new.token);
    let cookie = Cookie::build((LINK_ONCE, format!("{}|{link}", new.record.email)))
        .path(INVITED)
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure(&state, &headers))
        .max_age(::cookie::time::Duration::minutes(5))
        .build();
    Ok((jar.add(cookie), Redirect::to(INVITED)).into_response())
}

/// The one time an invitation's link is shown.
pub async fn invited(session: Session, jar: CookieJar) -> PortalResult<Response> {
    session.require(Permission::ManagePeople)?;
    let Some((email, link)) = jar.get(LINK_ONCE).and_then(|c| {
        c.value()
            .split_once('|')
            .map(|(e, l)| (e.to_string(), l.to_string()))
    }) else {
        return Ok(Redirect::to("/portal/people?notice=link-shown").into_response());
    };
    let jar = jar.remove(Cookie::build(LINK_ONCE).path(INVITED));
    let body = html! {
        h1 { "Invitation for " (email) }
        div.secret-once role="region" aria-labelledby="link-heading" {
            h2 #link-heading { "Sign-up link" }
            p { "Send this link to " (email) ". With it they choose a password and join the account. "
                strong { "It is shown this once" } " and works for 7 days." }
            p.invite-link.copyable { code #invite-link { (link) } (layout::copy_button("invite-link", "Copy the link")) }
        }
        p { a.button href="/portal/people" { "Back to people" } }
    };
    let page = layout::page(&session, "Invitation", Section::People, None, body);
    Ok((
        jar,
        [(header::CACHE_CONTROL, "no-store")],
        Html(page.into_string()),
    )
        .into_response())
}

pub async fn set_role(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<RoleForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ManagePeople)?;
    let role = role_from_form(&f.role)?;
    state
        .service
        .set_role(session.actor(), &id, role)
        .await
        .map_err(refused)?;
    Ok(Redirect::to("/portal/people?notice=role-changed"))
}

pub async fn remove(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ManagePeople)?;
    state
        .service
        .remove_person(session.actor(), &id)
        .await
        .map_err(refused)?;
    Ok(Redirect::to("/portal/people?notice=removed"))
}

pub async fn revoke(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ManagePeople)?;
    state
        .service
        .revoke_invitation(session.actor(), &id)
        .await?;
    Ok(Redirect::to("/portal/people?notice=revoked"))
}
