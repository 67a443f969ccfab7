//! A person's own sign-in: their time zone and password, changed; and joining an account
//! through an invitation's link (no session yet: the link's token is the
//! authority, and it works once).

use axum::{
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Redirect, Response},
};
use axum_extra::extract::cookie::CookieJar;
use maud::html;
use serde::Deserialize;

use super::{
    layout::{self, Section},
    session::{check_pre_session_csrf, pre_session_csrf, start_session, Session},
    PortalError, PortalForm, PortalResult,
};
use crate::{
    service::{identities::MIN_PASSWORD, Conflict, ServiceError},
    state::AppState,
    store::portal::InvitationRecord,
};

#[derive(Debug, Deserialize)]
pub struct PasswordForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    current: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    confirm: String,
}

#[derive(Debug, Deserialize)]
pub struct ZoneForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    zone: String,
}

#[derive(Debug, Deserialize)]
pub struct JoinForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    confirm: String,
}

pub async fn page(session: Session, Query(q): Query<layout::NoticeQuery>) -> Html<String> {
    let notice = layout::notice(q.notice.as_deref(), None);
    Html(password_page(&session, notice.as_deref(), None, None).into_string())
}

fn password_page(
    session: &Session,
    notice: Option<&str>,
    error: Option<&str>,
    zone_error: Option<&str>,
) -> maud::Markup {
    let body = html! {
        h1 { "Your account" }
        dl.facts {
            dt { "Email" } dd #account-email { (session.email) }
            dt { "Account" } dd { (session.account) }
            dt { "Role" } dd #account-role { (session.role) }
        }
        section aria-labelledby="zone-heading" {
            h2 #zone-heading { "Time zone" }
            @if let Some(e) = zone_error { p.error role="alert" #zone-error { (e) } }
            form #time-zone method="post" action="/portal/account/zone" {
                (layout::csrf_field(session))
                div.field {
                    label for="zone" { "Show times in" }
                    input #zone name="zone" type="text" list="zones" value=(session.time_zone.as_deref().unwrap_or("")) placeholder="Your browser's zone" aria-describedby="zone-hint" autocomplete="off" spellcheck="false";
                    datalist #zones { option value="UTC" {} option value="Europe/London" {} option value="Europe/Berlin" {} option value="America/New_York" {} option value="America/Los_Angeles" {} option value="Asia/Tokyo" {} }
                    p.hint #zone-hint { "An IANA name such as Europe/Berlin, or UTC. Empty: your browser's zone. Pages show each time in UTC, and in this zone beside it with how long ago or ahead it is." }
                }
                button type="submit" { "Save" }
            }
        }
        section aria-labelledby="password-heading" {
            h2 #password-heading { "Change your password" }
            @if let Some(e) = error { p.error role="alert" #password-error { (e) } }
            form #change-password method="post" action="/portal/account/password" {
                (layout::csrf_field(session))
                div.field { label for="pw-current" { "Current password" } input #pw-current name="current" type="password" required autocomplete="current-password"; }
                div.field { label for="pw-new" { "New password" } input #pw-new name="password" type="password" required minlength=(MIN_PASSWORD) autocomplete="new-password"; }
                div.field { label for="pw-confirm" { "New password, again" } input #pw-confirm name="confirm" type="password" required minlength=(MIN_PASSWORD) autocomplete="new-password"; }
                button type="submit" { "Change password" }
            }
            p { "Your other sessions end when the password changes." }
        }
    };
    layout::page(session, "Your account", Section::Elsewhere, notice, body)
}

/// Every role may change its own password; a refusal shows the form again.
pub async fn change_password(
    State(state): State<AppState>,
    session: Session,
    PortalForm(f): PortalForm<PasswordForm>,
) -> PortalResult<Response> {
    session.check_csrf(&f.csrf)?;
    let again = |msg: &str| {
        (
            StatusCode::BAD_REQUEST,
            Html(password_page(&session, None, Some(msg), None).into_string()),
        )
            .into_response()
    };
    if f.password != f.confirm {
        return Ok(again("The two new passwords differ."));
    }
    match state
        .service
        .change_password(&session.email, &f.current, &f.password, &session.token_hash)
        .await
    {
        Ok(()) => Ok(Redirect::to("/portal/account?notice=password-changed").into_response()),
        Err(ServiceError::Invalid(errors)) => {
            let msg = errors
                .iter()
                .map(|e| match e.field.as_str() {
                    "current" => "The current password is wrong.".to_string(),
                    _ => format!("The new password {}.", e.message),
                })
                .collect::<Vec<_>>()
                .join(" ");
            Ok(again(&msg))
        }
        Err(e) => Err(e.into()),
    }
}

/// The zone the person's times are shown in; a bad name shows the form again.
pub async fn set_zone(
    State(state): State<AppState>,
    session: Session,
    PortalForm(f): PortalForm<ZoneForm>,
) -> PortalResult<Response> {
    session.check_csrf(&f.csrf)?;
    match state.service.set_time_zone(&session.user_id, &f.zone).await {
        Ok(()) => Ok(Redirect::to("/portal/account?notice=zone-saved").into_response()),
        Err(ServiceError::Invalid(_)) => Ok((
            StatusCode::BAD_REQUEST,
            Html(
                password_page(
                    &session,
                    None,
                    None,
                    Some(
                        "That is not a time zone: use an IANA name such as Europe/Berlin, or UTC.",
                    ),
                )
                .into_string(),
            ),
        )
            .into_response()),
        Err(e) => Err(e.into()),
    }
}

/// The invitation's sign-up page.
pub async fn join_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    jar: CookieJar,
    Path(token): Path<String>,
) -> PortalResult<Response> {
    let inv = invitation(&state, &token).await?;
    let (jar, csrf) = pre_session_csrf(&state, &headers, jar);
    Ok((
        jar,
        Html(join_form(&token, &csrf, &inv, None).into_string()),
    )
        .into_response())
}

async fn invitation(state: &AppState, token: &str) -> PortalResult<InvitationRecord> {
    state.service.invitation(token).await.map_err(|e| match e {
        ServiceError::NotFound => PortalError::NotFound,
        other => other.into(),
    })
}

fn join_form(token: &str, csrf: &str, inv: &InvitationRecord, error: Option<&str>) -> maud::Markup {
    layout::bare(
        "Join",
        html! {
            div.signin {
                h1 { "Join " (inv.account) " on Dispatch" }
                p { (inv.invited_by) " invited " strong #join-email { (inv.email) } " as " strong #join-role { (inv.role) } ". Choose a password to sign in with." }
                @if let Some(e) = error { p.error role="alert" #join-error { (e) } }
                form #join method="post" action={ "/portal/invite/" (token) } {
                    input type="hidden" name="csrf" value=(csrf);
                    div.field { label for="join-password" { "Password" } input #join-password name="password" type="password" required minlength=(MIN_PASSWORD) autocomplete="new-password"; }
                    div.field { label for="join-confirm" { "Password, again" } input #join-confirm name="confirm" type="password" required minlength=(MIN_PASSWORD) autocomplete="new-password"; }
                    button type="submit" { "Join" }
                }
            }
        },
    )
}

/// Joins: the person is created with the invitation's role, the invitation
/// is gone, and they are signed in.
pub async fn join(
    State(state): State<AppState>,
    headers: HeaderMap,
    jar: CookieJar,
    Path(token): Path<String>,
    PortalForm(f): PortalForm<JoinForm>,
) -> PortalResult<Response> {
    check_pre_session_csrf(&jar, &f.csrf)?;
    let inv = invitation(&state, &token).await?;
    let again = |msg: &str| {
        (
            StatusCode::BAD_REQUEST,
            Html(join_form(&token, &f.csrf, &inv, Some(msg)).into_string()),
        )
            .into_response()
    };
    if f.password != f.confirm {
        return Ok(again("The two passwords differ."));
    }
    let user = match state.service.accept_invitation(&token, &f.password).await {
        Ok(user) => user,
        Err(ServiceError::Invalid(_)) => {
            return Ok(again(&format!(
                "The password must be at least {MIN_PASSWORD} characters."
            )))
        }
        Err(ServiceError::NotFound) => return Err(PortalError::NotFound),
        Err(ServiceError::Conflict(Conflict::EmailTaken)) => {
            return Err(PortalError::Conflict(
                "A person with this email has a sign-in already: sign in with it.".into(),
            ))
        }
        Err(e) => return Err(e.into()),
    };
    let jar = start_session(&state, &headers, jar, user).await?;
    Ok((jar, Redirect::to("/portal/overview?notice=joined")).into_response())
}
