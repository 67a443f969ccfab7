//! Health, metrics, the OpenAPI document and the fallbacks.

use axum::{
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    Json,
};
use serde_json::json;
use utoipa::{
    openapi::security::{Http, HttpAuthScheme, SecurityScheme},
    Modify, OpenApi,
};

use super::{
    doc::{CommonResponses, Links},
    error::ApiError,
    AppState,
};

/// 200 while the process runs.
#[utoipa::path(get, path = "/health/live", tag = "operations", responses((status = 200, description = "Alive")))]
pub async fn live() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// 200 when the database answers, else 503.
#[utoipa::path(get, path = "/health/ready", tag = "operations",
    responses((status = 200, description = "Ready"), (status = 503, description = "The database is unreachable")))]
pub async fn ready(State(state): State<AppState>) -> Response {
    match state.store.ping().await {
        Ok(()) => Json(json!({"status": "ok"})).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            ApiError::Unavailable.into_response()
        }
    }
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document")))]
pub async fn openapi() -> Response {
    static DOCUMENT: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    Json(DOCUMENT.get_or_init(super::doc::document)).into_response()
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.bearer_format = Some("JWT".into());
        http.description =
            Some("An access token from POST /oauth/token (client credentials grant)".into());
        components.add_security_scheme("bearer", SecurityScheme::Http(http));
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Dispatch", description = "Scheduled delivery to webhooks, Amazon SQS and Amazon SNS, with a retry ladder and dead letters."),
    paths(
        super::oauth::token,
        super::targets::create, super::targets::list, super::targets::get, super::targets::patch,
        super::targets::enable, super::targets::disable, super::targets::rotate_secret, super::targets::delete,
        super::messages::create, super::batch::create, super::messages::list, super::messages::get, super::messages::attempts,
        super::messages::cancel, super::messages::reschedule,
        super::bulk::redrive, super::bulk::cancel, super::bulk::replay,
        super::schedules::create, super::schedules::list, super::schedules::get, super::schedules::patch,
        super::schedules::pause, super::schedules::resume, super::schedules::delete,
        live, ready, metrics, openapi,
    ),
    components(schemas(super::batch::BatchMessageIn)),
    modifiers(&BearerAuth, &CommonResponses, &Links),
    tags(
        (name = "auth", description = "OAuth 2 client credentials"),
        (name = "targets", description = "Where messages go"),
        (name = "messages", description = "What is delivered, and when"),
        (name = "schedules", description = "Recurring schedules: one message per run"),
        (name = "operations", description = "Health, metrics, this document"),
    )
)]
pub struct ApiDoc;
