//! What went wrong, as a page: inside the portal's shell, with its header
//! and navigation when the browser has a session, bare otherwise.

use axum::{
    extract::{Request, State},
    http::{header, StatusCode},
    middleware::Next,
    response::{Html, IntoResponse, Response},
};
use maud::{html, Markup};

use super::{
    layout::{self, Section},
    session::Session,
    PortalError,
};
use crate::state::AppState;

/// An error page's words, kept on the response so that `with_navigation`
/// can put them in the signed-in shell.
#[derive(Debug, Clone)]
struct ErrorPage {
    status: StatusCode,
    title: &'static str,
    detail: String,
}

impl ErrorPage {
    fn of(e: &PortalError) -> Self {
        let (status, title, detail) = match e {
            PortalError::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                "There is nothing here, or it belongs to another account.".to_string(),
            ),
            PortalError::BadRequest(msg) => (StatusCode::BAD_REQUEST, "Cannot do that", msg.clone()),
            PortalError::Conflict(msg) => (StatusCode::CONFLICT, "Cannot do that now", msg.clone()),
            PortalError::Csrf => (
                StatusCode::FORBIDDEN,
                "The form has expired",
                "This form was not sent from a page of your current session. Go back, reload the page and try again."
                    .to_string(),
            ),
            PortalError::Forbidden(msg) => (StatusCode::FORBIDDEN, "Not allowed", msg.clone()),
            PortalError::Store(e) if e.is_unavailable() => (
                StatusCode::SERVICE_UNAVAILABLE,
                "The database is unavailable",
                "Dispatch cannot reach its database right now. Try again in a moment.".to_string(),
            ),
            PortalError::Store(e) => {
                tracing::error!(error = %e, "portal page failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "The page could not be shown. The error was logged.".to_string(),
                )
            }
        };
        Self {
            status,
            title,
            detail,
        }
    }

    fn body(&self) -> Markup {
        html! {
            h1 { (self.title) }
            p #error-detail { (self.detail) }
            p { a href="/portal/overview" { "Back to the overview" } }
        }
    }
}

impl IntoResponse for PortalError {
    fn into_response(self) -> Response {
        let page = ErrorPage::of(&self);
        let html = layout::bare(page.title, page.body()).into_string();
        let mut res = (page.status, Html(html)).into_response();
        res.extensions_mut().insert(page);
        res
    }
}

/// Puts an error page of a signed-in person in the shell every other page
/// has (header, navigation, sign-out), so that nobody is left at a dead end.
pub async fn with_navigation(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let headers = req.headers().clone();
    let res = next.run(req).await;
    let Some(page) = res.extensions().get::<ErrorPage>().cloned() else {
        return res;
    };
    let Ok(Some(session)) = Session::find(&state, &headers).await else {
        return res;
    };
    let html = layout::page(&session, page.title, Section::Elsewhere, None, page.body());
    let (mut parts, _) = res.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Html(html.into_string()).into_response().into_body())
}
