//! The sign-in page: the form, and signing a person in by email and
//! password (rate limited by address and by email).

use axum::{
    extract::{Query, State},
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Redirect, Response},
};
use axum_extra::extract::cookie::CookieJar;
use maud::html;
use serde::Deserialize;

use super::{
    layout,
    session::{check_pre_session_csrf, pre_session_csrf, start_session},
    PortalForm, PortalResult,
};
use crate::{limits::client::ClientIp, state::AppState};

#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
    /// Set by sign-out's redirect.
    signed_out: Option<String>,
}

/// Only paths inside the portal are followed after sign-in.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with("/portal")
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.chars().any(char::is_control) =>
        {
            n.to_string()
        }
        _ => "/portal/overview".to_string(),
    }
}

pub async fn login_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    jar: CookieJar,
    Query(q): Query<LoginQuery>,
) -> Response {
    let (jar, token) = pre_session_csrf(&state, &headers, jar);
    let next = safe_next(q.next.as_deref());
    let notice = q.signed_out.is_some().then_some("You are signed out.");
    let page = login_form(&token, &next, "", None, notice);
    (jar, Html(page.into_string())).into_response()
}

fn login_form(
    csrf: &str,
    next: &str,
    email: &str,
    error: Option<&str>,
    notice: Option<&str>,
) -> maud::Markup {
    layout::bare(
        "Sign in",
        html! {
            div.signin {
                h1 { "Sign in to Dispatch" }
                @if let Some(notice) = notice {
                    p.notice role="status" { (notice) }
                }
                @if let Some(error) = error {
                    p.error role="alert" id="signin-error" { (error) }
                }
                form method="post" action="/portal/login" {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="hidden" name="next" value=(next);
                    label for="email" { "Email" }
                    input id="email" name="email" type="email" autocomplete="username" required value=(email) autofocus[error.is_none()];
                    label for="password" { "Password" }
                    input id="password" name="password" type="password" autocomplete="current-password" required
                        autofocus[error.is_some()] aria-describedby=[error.map(|_| "signin-error")];
                    button type="submit" { "Sign in" }
                }
            }
        },
    )
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    next: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
}

pub async fn login(
    State(state): State<AppState>,
    ClientIp(client): ClientIp,
    headers: HeaderMap,
    jar: CookieJar,
    PortalForm(form): PortalForm<LoginForm>,
) -> PortalResult<Response> {
    check_pre_session_csrf(&jar, &form.csrf)?;
    let email = form.email.trim().to_lowercase();
    let next = safe_next(Some(&form.next));
    let runtime = &state.sign_ins;
    if runtime.by_address.check(&client).is_err() || runtime.by_email.check(&email).is_err() {
        tracing::warn!(address = %client, "portal sign-in rate limited");
        let page = login_form(
            &form.csrf,
            &next,
            &email,
            Some("Too many sign-in attempts. Wait a few minutes, then try again."),
            None,
        );
        return Ok((StatusCode::TOO_MANY_REQUESTS, Html(page.into_string())).into_response());
    }
    let Some(user) = state.service.check_password(&email, &form.password).await? else {
        let page = login_form(
            &form.csrf,
            &next,
            &email,
            Some("The email or the password is wrong."),
            None,
        );
        return Ok((StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response());
    };
    let jar = start_session(&state, &headers, jar, user).await?;
    Ok((jar, Redirect::to(&next)).into_response())
}
