//! The HTTP API: one module per resource, one router.

pub mod batch;
mod doc;
pub mod error;
pub mod extract;
pub mod limits;
pub mod messages;
pub mod oauth;
pub mod ops;
pub mod targets;
pub mod wire;

use std::sync::Arc;

use axum::{
    extract::{DefaultBodyLimit, Request},
    http::HeaderName,
    routing::{get, post},
    Router,
};
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::{
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::TraceLayer,
};

use crate::{auth::tokens::TokenService, config::Config, store::Store};

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub tokens: Arc<TokenService>,
    /// Token request failures and request rates, per client and address.
    pub limits: Arc<limits::ApiLimits>,
    pub config: Arc<Config>,
    /// Wakes this instance's sweeper when something may have fallen due.
    pub wake: Arc<crate::wake::Wake>,
    pub metrics: PrometheusHandle,
    pub portal: Arc<crate::portal::Runtime>,
    /// Single schedule requests, committed together when they arrive together.
    pub inserts: Arc<crate::store::coalesce::Coalescer>,
}

pub fn router(state: AppState) -> Router {
    let request_id = HeaderName::from_static("x-request-id");
    let max_body = state.config.server.max_body_bytes;
    Router::new()
        .route("/oauth/token", post(oauth::token))
        .route("/targets", get(targets::list).post(targets::create))
        .route("/targets/{id}", get(targets::get).patch(targets::patch).delete(targets::delete))
        .route("/targets/{id}/enable", post(targets::enable))
        .route("/targets/{id}/disable", post(targets::disable))
        .route("/messages", get(messages::list).post(messages::create))
        .route("/messages/batch", post(batch::create))
        .route("/messages/{id}", get(messages::get))
        .route("/messages/{id}/attempts", get(messages::attempts))
        .route("/messages/{id}/cancel", post(messages::cancel))
        .route("/messages/{id}/reschedule", post(messages::reschedule))
        .route("/health/live", get(ops::live))
        .route("/health/ready", get(ops::ready))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(ops::openapi))
        .merge(crate::portal::router())
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request| {
                let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("");
                tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
            }),
        )
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}
