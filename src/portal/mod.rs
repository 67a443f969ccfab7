//! The portal: server-rendered pages under `/portal` for people who inspect,
//! cancel, reschedule and redrive messages and manage targets.
//!
//! Sign-in is a form; the session is an HttpOnly, SameSite=Strict cookie
//! holding a random token whose SHA-256 is stored. Every form carries the
//! session's CSRF token. Pages are plain HTML (maud) with a little optional
//! JavaScript; nothing is fetched from elsewhere.

mod account;
mod actions;
mod charts;
mod error_page;
mod event_replay;
mod events;
mod layout;
mod list_query;
mod message_list;
mod messages;
mod overview;
mod people;
mod quick;
mod ranges;
mod schedule_form;
mod schedules;
mod session;
mod sign_in;
mod subscriptions;
mod target_actions;
mod target_form;
mod target_pages;
mod target_secret;
mod targets;
mod when;

use axum::{
    extract::Request,
    http::{header, HeaderValue},
    middleware::{self, Next},
    response::{IntoResponse, Redirect, Response},
    routing::{any, get, post},
    Router,
};

use crate::{state::AppState, store::StoreError};

use crate::service::{Conflict, ServiceError};
pub use session::{hash_password, new_user};

pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route(
            "/portal",
            get(|| async { Redirect::to("/portal/overview") }),
        )
        .route(
            "/portal/",
            get(|| async { Redirect::to("/portal/overview") }),
        )
        .route(
            "/portal/login",
            get(sign_in::login_page).post(sign_in::login),
        )
        .route("/portal/logout", post(session::logout))
        .route("/portal/overview", get(overview::page))
        .route(
            "/portal/targets",
            get(target_pages::list).post(target_pages::create),
        )
        .route("/portal/targets/new", get(target_pages::new))
        .route(
            "/portal/targets/{id}",
            get(target_pages::show).post(target_pages::update),
        )
        .route("/portal/targets/{id}/edit", get(target_pages::edit))
        .route("/portal/targets/{id}/secret", get(target_secret::secret))
        .route("/portal/targets/{id}/enable", post(target_actions::enable))
        .route(
            "/portal/targets/{id}/disable",
            post(target_actions::disable),
        )
        .route("/portal/targets/{id}/test", post(target_actions::send_test))
        .route("/portal/targets/{id}/delete", post(target_actions::delete))
        .route(
            "/portal/targets/{id}/rotate-secret",
            post(target_actions::rotate_secret),
        )
        .route(
            "/portal/targets/{id}/reset-breaker",
            post(target_actions::reset_breaker),
        )
        .route(
            "/portal/targets/{id}/replay",
            get(ranges::replay_confirm).post(ranges::replay),
        )
        .route(
            "/portal/targets/{id}/cancel-range",
            get(ranges::cancel_confirm).post(ranges::cancel),
        )
        .route(
            "/portal/targets/{id}/replay-events",
            get(event_replay::confirm).post(event_replay::replay),
        )
        .route(
            "/portal/targets/{id}/subscriptions",
            post(subscriptions::create),
        )
        .route(
            "/portal/targets/{id}/notify-dead-letters",
            post(subscriptions::notify_dead_letters),
        )
        .route("/portal/subscriptions/{id}", post(subscriptions::update))
        .route(
            "/portal/subscriptions/{id}/enable",
            post(subscriptions::enable),
        )
        .route(
            "/portal/subscriptions/{id}/disable",
            post(subscriptions::disable),
        )
        .route(
            "/portal/subscriptions/{id}/delete",
            post(subscriptions::delete),
        )
        .route("/portal/events", get(events::list))
        .route("/portal/events/{id}", get(events::show))
        .route("/portal/messages", get(message_list::list))
        .route("/portal/messages/bulk", post(actions::bulk))
        .route(
            "/portal/messages/redrive",
            get(actions::redrive_confirm).post(actions::redrive),
        )
        .route("/portal/messages/{id}", get(messages::show))
        .route("/portal/messages/{id}/cancel", post(actions::cancel))
        .route(
            "/portal/messages/{id}/reschedule",
            post(actions::reschedule),
        )
        .route(
            "/portal/schedules",
            get(schedules::list).post(schedules::create),
        )
        .route("/portal/schedules/new", get(schedules::new))
        .route("/portal/schedules/preview", get(schedules::preview))
        .route(
            "/portal/schedules/{id}",
            get(schedules::show).post(schedules::update),
        )
        .route("/portal/schedules/{id}/pause", post(schedules::pause))
        .route("/portal/schedules/{id}/resume", post(schedules::resume))
        .route("/portal/schedules/{id}/delete", post(schedules::delete))
        .route("/portal/people", get(people::list))
        .route("/portal/people/invite", post(people::invite))
        .route("/portal/people/invited", get(people::invited))
        .route("/portal/people/{id}/role", post(people::set_role))
        .route("/portal/people/{id}/remove", post(people::remove))
        .route(
            "/portal/people/invitations/{id}/revoke",
            post(people::revoke),
        )
        .route("/portal/account", get(account::page))
        .route("/portal/account/password", post(account::change_password))
        .route("/portal/account/zone", post(account::set_zone))
        .route(
            "/portal/invite/{token}",
            get(account::join_page).post(account::join),
        )
        .route("/portal/static/portal.css", get(css))
        .route("/portal/static/portal.js", get(js))
        .route("/portal/static/icon.svg", get(icon))
        .route("/favicon.ico", get(icon))
        .route("/portal/{*rest}", any(|| async { PortalError::NotFound }))
        .layer(middleware::from_fn_with_state(
            state,
            error_page::with_navigation,
        ))
        .layer(middleware::from_fn(security_headers))
}

async fn css() -> Response {
    static_asset("text/css; charset=utf-8", include_str!("assets/portal.css"))
}

async fn js() -> Response {
    static_asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/portal.js"),
    )
}

/// The portal's icon (also at `/favicon.ico`, where browsers ask first).
async fn icon() -> Response {
    static_asset("image/svg+xml", include_str!("assets/icon.svg"))
}

fn static_asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// Pages are never cached, never framed, and run only this origin's script.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// What can go wrong on a page, shown as a page of its own.
#[derive(Debug, thiserror::Error)]
pub enum PortalError {
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Conflict(String),
    #[error("the form has expired")]
    Csrf,
    /// The person's role does not allow the action.
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type PortalResult<T> = Result<T, PortalError>;

/// A use case's refusal, in the portal's words.
impl From<ServiceError> for PortalError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Invalid(errors) => PortalError::BadRequest(
                errors
                    .iter()
                    .map(|e| format!("{} {}", e.field, e.message).trim().to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            ServiceError::Forbidden(refusal) => PortalError::Forbidden(match refusal.role {
                Some(role) => format!(
                    "Your role, {role}, does not allow this: it needs the {} role. \
                     An admin of the account can change your role.",
                    refusal.needed.role()
                ),
                None => refusal.to_string(),
            }),
            ServiceError::NotFound => PortalError::NotFound,
            ServiceError::Conflict(Conflict::WrongState { state, action }) => {
                PortalError::Conflict(format!(
                    "The message is {}: only Scheduled messages and dead letters can be {action}.",
                    state.as_str()
                ))
            }
            ServiceError::Conflict(Conflict::InFlight { .. }) => PortalError::Conflict(
                "An attempt to deliver the message is under way. Wait a moment and try again."
                    .into(),
            ),
            ServiceError::Conflict(other) => PortalError::Conflict(other.to_string()),
            ServiceError::Quota(over) => PortalError::Conflict(format!(
                "The account is at its limit of {} {}. Delete some first, or ask the \
                 operator to raise {}.",
                over.max,
                over.limit.counts(),
                over.limit.key()
            )),
            ServiceError::Store(e) => PortalError::Store(e),
            ServiceError::IdsExhausted => {
                PortalError::BadRequest("an id collided; send the form again".into())
            }
        }
    }
}

/// A form body; one that cannot be read is answered with a portal page.
pub struct PortalForm<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for PortalForm<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = PortalError;

    async fn from_request(req: Request, state: &S) -> Result<Self, PortalError> {
        axum_extra::extract::Form::<T>::from_request(req, state)
            .await
            .map(|f| PortalForm(f.0))
            .map_err(|e| {
                PortalError::BadRequest(format!(
                    "The form could not be read ({e}). Go back, reload the page and try again."
                ))
            })
    }
}
