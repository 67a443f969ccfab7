//! The HTTP API: one module per resource, one router.

pub mod batch;
pub mod body;
pub mod bulk;
mod doc;
pub mod edge;
pub mod error;
pub mod events;
pub mod extract;
pub mod messages;
pub mod oauth;
pub mod ops;
pub mod pull;
pub mod schedules;
pub mod targets;

use axum::{
    routing::{get, post},
    Router,
};

use crate::state::AppState;

/// The API's routes; `app` adds the portal's, the fallbacks and the layers.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/oauth/token", post(oauth::token))
        .route("/targets", get(targets::list).post(targets::create))
        .route(
            "/targets/{id}",
            get(targets::get)
                .patch(targets::patch)
                .delete(targets::delete),
        )
        .route("/targets/{id}/enable", post(targets::enable))
        .route("/targets/{id}/disable", post(targets::disable))
        .route("/targets/{id}/rotate-secret", post(targets::rotate_secret))
        .route("/targets/{id}/receive", post(pull::receive))
        .route("/targets/{id}/ack", post(pull::ack))
        .route("/targets/{id}/nack", post(pull::nack))
        .route("/targets/{id}/visibility", post(pull::visibility))
        .route("/messages", get(messages::list).post(messages::create))
        .route("/messages/batch", post(batch::create))
        .route("/messages/redrive", post(bulk::redrive))
        .route("/messages/cancel", post(bulk::cancel))
        .route("/messages/replay", post(bulk::replay))
        .route("/messages/{id}", get(messages::get))
        .route("/messages/{id}/attempts", get(messages::attempts))
        .route("/messages/{id}/cancel", post(messages::cancel))
        .route("/messages/{id}/reschedule", post(messages::reschedule))
        .route("/schedules", get(schedules::list).post(schedules::create))
        .route(
            "/schedules/{id}",
            get(schedules::get)
                .patch(schedules::patch)
                .delete(schedules::delete),
        )
        .route("/schedules/{id}/pause", post(schedules::pause))
        .route("/schedules/{id}/resume", post(schedules::resume))
        .route(
            "/subscriptions",
            get(events::list_subscriptions).post(events::create_subscription),
        )
        .route(
            "/subscriptions/{id}",
            get(events::get_subscription)
                .patch(events::patch_subscription)
                .delete(events::delete_subscription),
        )
        .route("/events", get(events::list_events).post(events::publish))
        .route("/events/replay", post(events::replay))
        .route("/events/{id}", get(events::get_event))
        .route("/health/live", get(ops::live))
        .route("/health/ready", get(ops::ready))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(doc::openapi))
}
