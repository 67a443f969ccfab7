//! Sessions and CSRF: who a request is (`Session`), starting and ending a
//! session, and the tokens that tie forms to it (the sign-in page is in
//! `sign_in`).

use axum::{
    extract::{FromRequestParts, State},
    http::{request::Parts, HeaderMap},
    response::{IntoResponse, Redirect, Response},
};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use chrono::{DateTime, TimeDelta, Utc};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::{PortalError, PortalForm, PortalResult};
use crate::service::{
    sessions::{random_token, NewSession},
    Actor, Permission, Reads, ServiceResult,
};
use crate::{
    auth::secrets,
    domain::ids::AccountId,
    state::AppState,
    store::portal::{Role, UserRecord},
};

pub const SESSION_COOKIE: &str = "dispatch_session";
const LOGIN_COOKIE: &str = "dispatch_login";

pub fn hash_password(password: &str) -> String {
    secrets::hash_secret(password)
}

fn same(a: &str, b: &str) -> bool {
    !a.is_empty() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Cookies are Secure when configured so, or when a proxy in front says the
/// browser came over HTTPS.
pub(super) fn secure(state: &AppState, headers: &HeaderMap) -> bool {
    state.config.portal.secure_cookies
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

fn cookie(name: &'static str, value: String, secure: bool, max_age: TimeDelta) -> Cookie<'static> {
    Cookie::build((name, value))
        .path("/portal")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .max_age(::cookie::time::Duration::seconds(max_age.num_seconds()))
        .build()
}

/// A signed-in person. Extracting it from a request without a live session
/// answers with a redirect to the sign-in page.
#[derive(Debug, Clone)]
pub struct Session {
    pub account: AccountId,
    pub user_id: String,
    pub email: String,
    pub csrf: String,
    /// As it is now: a changed role applies at the next request.
    pub role: Role,
    /// The SHA-256 of the session's token.
    pub token_hash: Vec<u8>,
    /// The zone the person chose for times; None: the browser's.
    pub time_zone: Option<String>,
    /// The person, as the use cases' actor: they decide what the role
    /// allows.
    actor: Actor,
}

impl Session {
    /// Every state-changing form carries the session's token.
    pub fn check_csrf(&self, sent: &str) -> PortalResult<()> {
        if same(sent, &self.csrf) {
            Ok(())
        } else {
            Err(PortalError::Csrf)
        }
    }

    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    /// What the person may read of the account.
    pub fn reads<'a>(&'a self, state: &'a AppState) -> Reads<'a> {
        state.service.reads(&self.actor)
    }

    /// Whether the person may do what needs `permission` (what a page offers).
    pub fn may(&self, permission: Permission) -> bool {
        self.actor().may(permission)
    }

    /// Refuses (403, nothing changes) what the person may not do, before a
    /// page reads its form; the use case decides again.
    pub fn require(&self, permission: Permission) -> PortalResult<()> {
        Ok(self.actor().allow(permission).map(|_| ())?)
    }

    /// An action's two checks: the form came from this session, and the
    /// person may do it.
    pub fn authorize(&self, sent_csrf: &str, needed: Permission) -> PortalResult<()> {
        self.check_csrf(sent_csrf)?;
        self.require(needed)
    }
}

pub enum SessionRejection {
    SignIn(String),
    Error(PortalError),
}

impl IntoResponse for SessionRejection {
    fn into_response(self) -> Response {
        match self {
            SessionRejection::SignIn(next) => {
                let next: String = url::form_urlencoded::byte_serialize(next.as_bytes()).collect();
                let to = format!("/portal/login?next={next}");
                Redirect::to(&to).into_response()
            }
            SessionRejection::Error(e) => e.into_response(),
        }
    }
}

impl FromRequestParts<AppState> for Session {
    type Rejection = SessionRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let next = if parts.method == axum::http::Method::GET {
            parts
                .uri
                .path_and_query()
                .map_or("/portal/overview".to_string(), |p| p.to_string())
        } else {
            "/portal/overview".to_string()
        };
        match Session::find(state, &parts.headers).await {
            Ok(Some(s)) => Ok(s),
            Ok(None) => Err(SessionRejection::SignIn(next)),
            Err(e) => Err(SessionRejection::Error(e.into())),
        }
    }
}

impl Session {
    /// The live session the request's cookie names, if any.
    pub async fn find(state: &AppState, headers: &HeaderMap) -> ServiceResult<Option<Session>> {
        let jar = CookieJar::from_headers(headers);
        let Some(token) = jar.get(SESSION_COOKIE).map(|c| c.value().to_string()) else {
            return Ok(None);
        };
        let record = state.service.session(&token).await?;
        Ok(record.map(|s| Session {
            actor: Actor::person(s.account.clone(), &s.user_id, s.role),
            account: s.account,
            user_id: s.user_id,
            email: s.email,
            csrf: s.csrf,
            role: s.role,
            token_hash: s.token_hash,
            time_zone: s.time_zone,
        }))
    }
}

/// A form sent before there is a session (sign-in, joining by invitation)
/// carries a token tied to a cookie of its own: another site cannot send
/// it (and so cannot sign a browser in to an account of its choosing).
pub(super) fn pre_session_csrf(
    state: &AppState,
    headers: &HeaderMap,
    jar: CookieJar,
) -> (CookieJar, String) {
    let token = random_token();
    let jar = jar.add(cookie(
        LOGIN_COOKIE,
        token.clone(),
        secure(state, headers),
        TimeDelta::hours(1),
    ));
    (jar, token)
}

/// Refuses a pre-session form whose token is not its cookie's.
pub(super) fn check_pre_session_csrf(jar: &CookieJar, sent: &str) -> PortalResult<()> {
    let expected = jar
        .get(LOGIN_COOKIE)
        .map(|c| c.value().to_string())
        .unwrap_or_default();
    if same(sent, &expected) {
        Ok(())
    } else {
        Err(PortalError::Csrf)
    }
}

/// Signs `user` in: a new session, its cookie set (and the sign-in form's removed).
pub(super) async fn start_session(
    state: &AppState,
    headers: &HeaderMap,
    jar: CookieJar,
    user: UserRecord,
) -> PortalResult<CookieJar> {
    let NewSession { token, ttl } = state.service.start_session(user).await?;
    let secure = secure(state, headers);
    Ok(jar
        .remove(Cookie::build(LOGIN_COOKIE).path("/portal"))
        .add(cookie(SESSION_COOKIE, token, secure, ttl)))
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

pub async fn logout(
    State(state): State<AppState>,
    session: Session,
    jar: CookieJar,
    PortalForm(form): PortalForm<CsrfForm>,
) -> PortalResult<Response> {
    session.check_csrf(&form.csrf)?;
    if let Some(token) = jar.get(SESSION_COOKIE).map(|c| c.value().to_string()) {
        state.service.end_session(&token).await?;
    }
    let jar = jar.remove(Cookie::build(SESSION_COOKIE).path("/portal"));
    Ok((jar, Redirect::to("/portal/login?signed_out=1")).into_response())
}

/// A new portal user, created at `now` (tests and the benchmark store one
/// directly).
pub fn new_user(account: &str, email: &str, password: &str, now: DateTime<Utc>) -> UserRecord {
    crate::service::identities::new_user(&AccountId::from_trusted(account), email, password, now)
}
