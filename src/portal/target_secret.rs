//! The one page that shows a generated signing secret: post/redirect/get,
//! with the secret carried in a cookie sent only to that page.

use crate::service::Permission;
use axum::{
    extract::{Path, Query, State},
    http::{header, HeaderMap},
    response::{Html, IntoResponse, Redirect, Response},
};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use chrono::Utc;
use maud::{html, Markup};

use super::{
    layout::{self, Section},
    session::Session,
    targets::{load, NoticeQuery},
    PortalResult,
};
use crate::{
    domain::{
        ids::TargetId,
        target::{Target, TargetConfig, WebhookConfig},
    },
    state::AppState,
};

/// The cookie that carries a generated signing secret to the one page that
/// shows it, once.
const SECRET_ONCE: &str = "dispatch_secret_once";

fn secret_path(id: &TargetId) -> String {
    format!("/portal/targets/{id}/secret")
}

/// How long a replaced secret may keep signing: what the rotation form
/// offers and the rotation accepts.
pub(super) const OVERLAPS: [(i64, &str); 4] = [
    (0, "Not at all: replace it now"),
    (3_600, "1 hour"),
    (86_400, "24 hours"),
    (604_800, "7 days"),
];

/// Post/redirect/get for a generated secret: the answer to the form is a
/// redirect (reloading it posts nothing again); the secret rides to the
/// page that shows it in a cookie sent only to that page, for at most five
/// minutes, and removed by it.
pub(super) fn show_once(
    state: &AppState,
    headers: &HeaderMap,
    jar: CookieJar,
    t: &Target,
    notice: &str,
) -> Response {
    let TargetConfig::Webhook(w) = &t.config else {
        unreachable!("only webhooks have signing secrets")
    };
    let cookie = Cookie::build((SECRET_ONCE, w.signing_secret.clone()))
        .path(secret_path(&t.id))
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(super::session::secure(state, headers))
        .max_age(::cookie::time::Duration::minutes(5))
        .build();
    let to = format!("{}?notice={notice}", secret_path(&t.id));
    (jar.add(cookie), Redirect::to(&to)).into_response()
}

/// The page that shows a generated signing secret, once: reloaded (or
/// opened later), it says so and shows nothing.
pub async fn secret(
    State(state): State<AppState>,
    session: Session,
    jar: CookieJar,
    Path(id): Path<String>,
    Query(q): Query<NoticeQuery>,
) -> PortalResult<Response> {
    session.require(Permission::ConfigureTargets)?;
    let t = load(&state, &session, &id).await?;
    let Some(secret) = jar.get(SECRET_ONCE).map(|c| c.value().to_string()) else {
        return Ok(
            Redirect::to(&format!("/portal/targets/{}?notice=secret-shown", t.id)).into_response(),
        );
    };
    let jar = jar.remove(Cookie::build(SECRET_ONCE).path(secret_path(&t.id)));
    let page = secret_page(
        &session,
        &t,
        &secret,
        layout::notice(q.notice.as_deref(), None),
    );
    Ok((
        jar,
        [(header::CACHE_CONTROL, "no-store")],
        Html(page.into_string()),
    )
        .into_response())
}

/// On a webhook's page, for admins: the overlap under way, and the form
/// that rotates the secret.
pub(super) fn rotate_section(session: &Session, t: &Target, w: &WebhookConfig) -> Markup {
    html! {
        section.rotate-secret aria-labelledby="rotate-heading" {
            h2 #rotate-heading { "Signing secret" }
            @if let Some(until) = w.overlap_until(Utc::now()) {
                p #secret-overlap {
                    "Deliveries carry two signatures, by the current secret and by the one it replaced, until "
                    (layout::time(&until)) "."
                }
            } @else {
                p #secret-overlap { "Deliveries carry one signature, by the current secret." }
            }
            form method="post" action={ "/portal/targets/" (t.id) "/rotate-secret" }
                data-confirm={ "Replace the signing secret of " (t.name) "? The new one is shown once." } {
                (layout::csrf_field(session))
                div.field {
                    label for="rotate-overlap" { "The replaced secret keeps signing for" }
                    select #rotate-overlap name="overlap" aria-describedby="rotate-hint" {
                        @for (seconds, label) in OVERLAPS {
                            option value=(seconds) selected[seconds == 86_400] { (label) }
                        }
                    }
                    p.hint #rotate-hint {
                        "Meanwhile every delivery carries both signatures (a Standard Webhooks receiver accepts either), "
                        "so the receiver can move to the new secret without refusing a delivery."
                    }
                }
                button type="submit" #rotate-secret { "Rotate signing secret" }
            }
        }
    }
}

/// The one time a generated signing secret is shown.
fn secret_page(session: &Session, t: &Target, secret: &str, notice: Option<String>) -> Markup {
    let overlap = match &t.config {
        TargetConfig::Webhook(w) => w.overlap_until(Utc::now()),
        _ => None,
    };
    layout::page(
        session,
        "Signing secret",
        Section::Targets,
        notice.as_deref(),
        html! {
            h1 { "Signing secret of " (t.name) }
            div.secret-once role="region" aria-labelledby="secret-heading" {
                h2 #secret-heading { "Signing secret" }
                p { "Your receiver verifies the " code { "webhook-signature" } " header with this secret. "
                    strong { "It is shown this once" } ": copy it now." }
                p.copyable {
                    code #signing-secret { (secret) }
                    (layout::copy_button("signing-secret", "Copy the secret"))
                }
                @if let Some(until) = overlap {
                    p #overlap-until {
                        "The secret it replaced keeps signing beside it until " (layout::time(&until))
                        ": move your receiver to this one before then."
                    }
                }
            }
            p { a.button href={ "/portal/targets/" (t.id) } { "Go to the target" } }
        },
    )
}
