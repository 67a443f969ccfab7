//! A target's subscriptions (docs/api.md#events-and-subscriptions), on the
//! target's page: the list for everyone who may read targets; add, change
//! the patterns and name, enable, disable and delete for those who may
//! configure them. Each form becomes the document the API takes, checked by
//! the same rules.

use axum::{
    extract::{Path, State},
    response::Redirect,
};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    layout,
    session::{CsrfForm, Session},
    targets::load,
    PortalError, PortalForm, PortalResult,
};
use crate::{
    domain::{
        event::{pattern_texts, Subscription},
        ids::SubscriptionId,
        target::Target,
        told,
    },
    service::{Permission, ServiceError},
    state::AppState,
    wire::event::parse_subscription,
};

/// The most subscriptions a target's page lists.
pub const SHOWN: u32 = 100;

/// The add and change forms: patterns as typed (separated by spaces,
/// commas or lines) and a name.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct SubscriptionForm {
    csrf: String,
    name: String,
    types: String,
}

impl SubscriptionForm {
    fn types(&self) -> Vec<Value> {
        self.types
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .map(|t| json!(t))
            .collect()
    }
}

/// The target page's section.
pub fn section(session: &Session, t: &Target, subs: &[Subscription]) -> Markup {
    let configure = session.may(Permission::ConfigureTargets);
    html! {
        section #subscriptions aria-labelledby="subscriptions-heading" {
            h2 #subscriptions-heading { "Subscriptions" }
            p.hint {
                "Each event whose type one of these patterns matches becomes one message to this target: "
                "an exact type (" code { "order.created" } "), a family (" code { "order.*" } ", at any depth) "
                "or " code { "*" } " (every type but Dispatch's own). "
                a href="/portal/events" { "Recent events" }
            }
            @if subs.is_empty() {
                p #no-subscriptions { "None: this target gets only the messages sent to it by id." }
            } @else {
                div.scroll {
                    table #subscription-list {
                        thead { tr {
                            th scope="col" { "Name" } th scope="col" { "Types" } th scope="col" { "Status" }
                            @if configure { th scope="col" { span.visually-hidden { "Actions" } } }
                        } }
                        tbody {
                            @for s in subs {
                                tr data-subscription=(s.id) {
                                    th scope="row" { @if s.name.is_empty() { span.off { "(no name)" } } @else { (s.name) } }
                                    td.wrap { @for (i, p) in pattern_texts(&s.types).iter().enumerate() { @if i > 0 { " " } code { (p) } } }
                                    td { @if s.enabled { "Enabled" } @else { span.off { "Disabled" } } }
                                    @if configure { td { (row_actions(session, s)) } }
                                }
                            }
                        }
                    }
                }
                @if subs.len() as u32 >= SHOWN {
                    p.hint { "The first " (SHOWN) " are shown; the API lists them all." }
                }
            }
            @if configure {
                form #add-subscription method="post" action={ "/portal/targets/" (t.id) "/subscriptions" } {
                    (layout::csrf_field(session))
                    h3 { "Subscribe this target" }
                    div.field {
                        label for="sub-types" { "Types" }
                        input #sub-types name="types" type="text" required autocomplete="off" spellcheck="false"
                            placeholder="order.created invoice.*" aria-describedby="sub-types-hint";
                        small #sub-types-hint { "1 to 100 patterns, separated by spaces or commas." }
                    }
                    div.field {
                        label for="sub-name" { "Name" }
                        input #sub-name name="name" type="text" autocomplete="off";
                    }
                    div.actions { button type="submit" { "Add subscription" } }
                }
            }
        }
    }
}

/// Where the account's dead letters are told: its enabled subscriptions
/// that match `dispatch.message.dead_lettered`, each with its target's name;
/// and, for those who may configure targets, the targets to choose from.
pub struct DeadLettersTold {
    pub to: Vec<(Subscription, String)>,
    pub choices: Vec<Target>,
}

/// The most targets and subscriptions read for the dead-letter section.
const TOLD_READ: u32 = 1000;

pub async fn dead_letters_told(
    state: &AppState,
    session: &Session,
) -> PortalResult<DeadLettersTold> {
    let reads = session.reads(state);
    let (subs, targets) = tokio::try_join!(
        reads.subscriptions(None, None, TOLD_READ),
        session.reads(state).targets(None, TOLD_READ)
    )?;
    let name_of = |id: &str| {
        targets
            .iter()
            .find(|t| t.id.as_str() == id)
            .map_or_else(|| id.to_string(), |t| t.name.clone())
    };
    let to = subs
        .into_iter()
        .filter(|s| s.enabled && s.types.iter().any(|p| p.matches(told::DEAD_LETTERED)))
        .map(|s| {
            let name = name_of(s.target_id.as_str());
            (s, name)
        })
        .collect();
    let choices = if session.may(Permission::ConfigureTargets) {
        targets
    } else {
        Vec::new()
    };
    Ok(DeadLettersTold { to, choices })
}

/// "Notify me of dead letters": where they are told, or a one-click
/// subscription of a chosen target to them.
pub fn dead_letters_section(session: &Session, t: &Target, told: &DeadLettersTold) -> Markup {
    html! {
        section #dead-letters aria-labelledby="dead-letters-heading" {
            h2 #dead-letters-heading { "Dead letter notifications" }
            @if told.to.is_empty() {
                p #dead-letters-untold { "Nobody is told when a message of this account becomes a dead letter." }
            } @else {
                p #dead-letters-told {
                    "Each dead letter of this account becomes a "
                    code { (told::DEAD_LETTERED) } " event, sent to: "
                    @for (i, (s, name)) in told.to.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href={ "/portal/targets/" (s.target_id) "#subscriptions" } data-told-to=(s.target_id) { (name) }
                    }
                    "."
                }
            }
            @if !told.choices.is_empty() {
                form #notify-dead-letters method="post" action={ "/portal/targets/" (t.id) "/notify-dead-letters" } {
                    (layout::csrf_field(session))
                    div.field {
                        label for="notify-to" { "Send them to" }
                        select #notify-to name="to" {
                            @for c in &told.choices {
                                option value=(c.id) selected[c.id == t.id] { (c.name) }
                            }
                        }
                    }
                    div.actions { button type="submit" #notify-dead-letters-button { "Notify me of dead letters" } }
                }
            }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NotifyForm {
    csrf: String,
    to: String,
}

/// Subscribes the chosen target to the account's dead letters.
pub async fn notify_dead_letters(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<NotifyForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ConfigureTargets)?;
    let page = load(&state, &session, &id).await?;
    let to = load(&state, &session, &f.to).await?;
    // A second click (or a target told already) makes no second subscription.
    let told_already = session
        .reads(&state)
        .subscriptions(Some(&to.id), None, SHOWN)
        .await?
        .iter()
        .any(|s| s.enabled && s.types.iter().any(|p| p.matches(told::DEAD_LETTERED)));
    if !told_already {
        let doc = json!({"targetId": to.id.as_str(), "types": [told::DEAD_LETTERED],
                         "name": "Dead letters"});
        let spec = parse_subscription(&doc).map_err(ServiceError::Invalid)?;
        state
            .service
            .create_subscription(session.actor(), spec)
            .await?;
    }
    Ok(Redirect::to(&format!(
        "/portal/targets/{}?notice=dead-letters-told#dead-letters",
        page.id
    )))
}

fn row_actions(session: &Session, s: &Subscription) -> Markup {
    let base = format!("/portal/subscriptions/{}", s.id);
    let (toggle, toggle_label) = if s.enabled {
        ("disable", "Disable")
    } else {
        ("enable", "Enable")
    };
    html! {
        details.edit-subscription {
            summary { "Edit" }
            form method="post" action=(base) {
                (layout::csrf_field(session))
                div.field {
                    label for={ "types-" (s.id) } { "Types" }
                    input id={ "types-" (s.id) } name="types" type="text" required autocomplete="off" spellcheck="false"
                        value=(pattern_texts(&s.types).join(" "));
                }
                div.field {
                    label for={ "name-" (s.id) } { "Name" }
                    input id={ "name-" (s.id) } name="name" type="text" autocomplete="off" value=(s.name);
                }
                button type="submit" { "Save" }
            }
        }
        form.inline method="post" action={ (base) "/" (toggle) } {
            (layout::csrf_field(session))
            button.secondary type="submit" aria-label={ (toggle_label) " the subscription to " (pattern_texts(&s.types).join(" ")) } { (toggle_label) }
        }
        form.inline method="post" action={ (base) "/delete" } data-confirm="Delete this subscription? Messages already made stay." {
            (layout::csrf_field(session))
            button.danger type="submit" aria-label={ "Delete the subscription to " (pattern_texts(&s.types).join(" ")) } { "Delete" }
        }
    }
}

fn back(s: &Subscription, notice: &str) -> Redirect {
    Redirect::to(&format!(
        "/portal/targets/{}?notice={notice}#subscriptions",
        s.target_id
    ))
}

fn subscription_id(id: &str) -> PortalResult<SubscriptionId> {
    id.parse().map_err(|_| PortalError::NotFound)
}

pub async fn create(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<SubscriptionForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ConfigureTargets)?;
    let t = load(&state, &session, &id).await?;
    let doc = json!({"targetId": t.id.as_str(), "types": f.types(), "name": f.name.trim()});
    let spec = parse_subscription(&doc).map_err(ServiceError::Invalid)?;
    let s = state
        .service
        .create_subscription(session.actor(), spec)
        .await?;
    Ok(back(&s, "subscribed"))
}

pub async fn update(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<SubscriptionForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ConfigureTargets)?;
    let patch = json!({"types": f.types(), "name": f.name.trim()});
    let s = state
        .service
        .update_subscription(session.actor(), &subscription_id(&id)?, &patch)
        .await?;
    Ok(back(&s, "subscription-saved"))
}

pub async fn enable(
    state: State<AppState>,
    session: Session,
    id: Path<String>,
    f: PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    set_enabled(state, session, id, f, true).await
}

pub async fn disable(
    state: State<AppState>,
    session: Session,
    id: Path<String>,
    f: PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    set_enabled(state, session, id, f, false).await
}

async fn set_enabled(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
    enabled: bool,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ConfigureTargets)?;
    let s = state
        .service
        .update_subscription(
            session.actor(),
            &subscription_id(&id)?,
            &json!({ "enabled": enabled }),
        )
        .await?;
    Ok(back(
        &s,
        if enabled {
            "subscription-enabled"
        } else {
            "subscription-disabled"
        },
    ))
}

pub async fn delete(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    PortalForm(f): PortalForm<CsrfForm>,
) -> PortalResult<Redirect> {
    session.authorize(&f.csrf, Permission::ConfigureTargets)?;
    let id = subscription_id(&id)?;
    let s = session
        .reads(&state)
        .subscription(&id)
        .await?
        .ok_or(PortalError::NotFound)?;
    state
        .service
        .delete_subscription(session.actor(), &id)
        .await?;
    Ok(back(&s, "subscription-deleted"))
}
