//! One error type for the API, rendered as RFC 9457 problem+json. It never
//! carries internals: driver errors are logged, not shown.

use crate::{
    domain::target::FieldError,
    service::ServiceError,
    store::StoreError,
    wire::problem::{Problem, ProblemField},
};
use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("invalid request")]
    Validation(Vec<FieldError>),
    #[error("{0}")]
    BadRequest(String),
    /// No token, or (`invalid_token`) a token that is invalid or expired.
    #[error("authentication required")]
    Unauthorized { invalid_token: bool },
    #[error("missing scope {0}")]
    Forbidden(&'static str),
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    Conflict(String),
    /// An account limit (its configuration key is in the detail).
    #[error("{0}")]
    Quota(crate::domain::limits::OverLimit),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("request body too large")]
    PayloadTooLarge,
    /// The body did not arrive within `server.body_timeout`.
    #[error("request timeout")]
    RequestTimeout,
    #[error("unsupported media type")]
    UnsupportedMediaType(&'static str),
    /// Over `api.rate_limit`; retry after this many seconds.
    #[error("rate limited")]
    RateLimited { retry_after: u64 },
    #[error("service unavailable")]
    Unavailable,
    #[error("internal error")]
    Internal,
}

impl ApiError {
    pub fn field(field: &str, message: impl Into<String>) -> Self {
        ApiError::Validation(vec![FieldError::new(field, message)])
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::Validation(_) | ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) | ApiError::Quota(_) => StatusCode::CONFLICT,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn slug_title_detail(&self) -> (&'static str, &'static str, String) {
        match self {
            ApiError::Validation(errors) => (
                "validation",
                "Invalid request",
                match errors.as_slice() {
                    [one] if one.field.is_empty() => one.message.clone(),
                    [one] => format!("{} {}", one.field, one.message),
                    _ => format!("{} fields are invalid", errors.len()),
                },
            ),
            ApiError::BadRequest(d) => ("bad-request", "Bad request", d.clone()),
            ApiError::Unauthorized {
                invalid_token: false,
            } => (
                "unauthorized",
                "Unauthorized",
                "a bearer access token is required".into(),
            ),
            ApiError::Unauthorized {
                invalid_token: true,
            } => (
                "invalid-token",
                "Unauthorized",
                "the access token is invalid or expired".into(),
            ),
            ApiError::Forbidden(scope) => (
                "insufficient-scope",
                "Forbidden",
                format!("the access token lacks the scope {scope}"),
            ),
            ApiError::NotFound => ("not-found", "Not found", "no such resource".into()),
            ApiError::Conflict(d) => ("conflict", "Conflict", d.clone()),
            ApiError::Quota(over) => ("quota", "Account limit reached", over.to_string()),
            ApiError::MethodNotAllowed => (
                "method-not-allowed",
                "Method not allowed",
                "this method is not allowed on this path".into(),
            ),
            ApiError::PayloadTooLarge => (
                "payload-too-large",
                "Payload too large",
                "the request body is over the limit".into(),
            ),
            ApiError::RequestTimeout => (
                "request-timeout",
                "Request timeout",
                "the request body did not arrive in time".into(),
            ),
            ApiError::UnsupportedMediaType(expected) => (
                "unsupported-media-type",
                "Unsupported media type",
                format!("the body must be {expected}"),
            ),
            ApiError::RateLimited { retry_after } => (
                "rate-limited",
                "Too many requests",
                format!(
                    "this client is over its rate of requests a second; retry in {retry_after} s"
                ),
            ),
            ApiError::Unavailable => (
                "unavailable",
                "Service unavailable",
                "the database is unreachable; try again shortly".into(),
            ),
            ApiError::Internal => (
                "internal",
                "Internal error",
                "an unexpected error occurred".into(),
            ),
        }
    }
}

impl ApiError {
    /// The RFC 9457 body of this error.
    pub fn problem(&self) -> Problem {
        let status = self.status();
        let (slug, title, detail) = self.slug_title_detail();
        let errors = match &self {
            ApiError::Validation(errors) => Some(
                errors
                    .iter()
                    .map(|e| ProblemField {
                        field: e.field.clone(),
                        message: e.message.clone(),
                    })
                    .collect(),
            ),
            _ => None,
        };
        Problem {
            kind: format!("https://dispatch.dev/problems/{slug}"),
            title: title.into(),
            status: status.as_u16(),
            detail,
            errors,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = self.problem();
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        match &self {
            ApiError::Unauthorized {
                invalid_token: false,
            } => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"dispatch\""),
                );
            }
            ApiError::Unauthorized {
                invalid_token: true,
            } => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(
                        "Bearer realm=\"dispatch\", error=\"invalid_token\", \
                         error_description=\"the access token is invalid or expired\"",
                    ),
                );
            }
            ApiError::Forbidden(scope) => {
                if let Ok(v) = HeaderValue::from_str(&format!(
                    "Bearer realm=\"dispatch\", error=\"insufficient_scope\", scope=\"{scope}\""
                )) {
                    headers.insert(header::WWW_AUTHENTICATE, v);
                }
            }
            ApiError::RateLimited { retry_after } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
            }
            ApiError::Unavailable => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Quota(over) => ApiError::Quota(over),
            e if e.is_invalid_text() => ApiError::field(
                "",
                "a value holds a character that cannot be stored (U+0000)",
            ),
            e if e.is_unavailable() => {
                tracing::warn!(error = %e, "database unavailable");
                ApiError::Unavailable
            }
            other => {
                tracing::error!(error = ?other, "store error");
                ApiError::Internal
            }
        }
    }
}

impl From<Vec<FieldError>> for ApiError {
    fn from(errors: Vec<FieldError>) -> Self {
        ApiError::Validation(errors)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Invalid(errors) => ApiError::Validation(errors),
            // A client lacks a scope; what no client may do names none.
            ServiceError::Forbidden(refusal) => {
                ApiError::Forbidden(refusal.needed.scope().map_or("none", |s| s.as_str()))
            }
            ServiceError::NotFound => ApiError::NotFound,
            ServiceError::Conflict(c) => ApiError::Conflict(c.to_string()),
            ServiceError::Quota(over) => ApiError::Quota(over),
            ServiceError::Store(e) => e.into(),
            ServiceError::IdsExhausted => {
                tracing::error!("no free id after several tries");
                ApiError::Internal
            }
        }
    }
}
