//! Health, metrics and the fallbacks (the OpenAPI document is in `doc`).

use axum::{
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    Json,
};
use serde_json::json;

use super::{error::ApiError, AppState};

/// 200 while the process runs.
#[utoipa::path(get, path = "/health/live", tag = "operations", responses((status = 200, description = "Alive")))]
pub async fn live() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// 200 when the database answers, else 503.
#[utoipa::path(get, path = "/health/ready", tag = "operations",
    responses((status = 200, description = "Ready"), (status = 503, description = "The database is unreachable")))]
pub async fn ready(State(state): State<AppState>) -> Response {
    match state.service.ping().await {
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
    // The pull targets' depth is read when it is asked for.
    state.service.measure_pull_depth().await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
