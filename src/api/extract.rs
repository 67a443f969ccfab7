//! Extractors that turn requests into checked inputs, answering problem+json
//! on every failure.

use std::collections::HashMap;

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::{header, request::Parts, StatusCode},
};
use serde_json::Value;

use super::{error::ApiError, AppState};
use crate::{
    auth::{Principal, TokenError},
    domain::target::FieldError,
    service::{Actor, IdempotencyKey},
};

/// A JSON body (`application/json` or any `+json` type) parsed into a Value.
pub struct JsonBody(pub Value);

fn is_json_content_type(parts: &axum::http::HeaderMap) -> bool {
    let Some(ct) = parts
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = json_bytes(req, state).await?;
        json_object(&bytes).map(JsonBody)
    }
}

/// The bytes of a JSON body (`application/json` or any `+json` type), not
/// yet parsed: 415 for another type, 413 over the size limit, 400 if empty.
pub async fn json_bytes(req: Request, state: &AppState) -> Result<Bytes, ApiError> {
    if !is_json_content_type(req.headers()) {
        return Err(ApiError::UnsupportedMediaType("application/json"));
    }
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else if crate::serve::timed_out(&rejection) {
            ApiError::RequestTimeout
        } else {
            ApiError::BadRequest("the request body could not be read".into())
        }
    })?;
    if bytes.is_empty() {
        return Err(ApiError::field("", "a JSON body is required"));
    }
    Ok(bytes)
}

/// A body's bytes as a JSON object.
pub fn json_object(bytes: &[u8]) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::field("", format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::field("", "the body must be a JSON object"));
    }
    Ok(value)
}

/// A valid bearer token, within its client's `api.rate_limit`.
impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(ApiError::Unauthorized {
                invalid_token: false,
            });
        };
        let value = value.to_str().map_err(|_| ApiError::Unauthorized {
            invalid_token: true,
        })?;
        let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(ApiError::Unauthorized {
                invalid_token: false,
            });
        }
        let token = token.trim();
        if token.is_empty() {
            return Err(ApiError::Unauthorized {
                invalid_token: true,
            });
        }
        match state.tokens.validate(token).await {
            Ok(principal) => {
                state
                    .limits
                    .request(&principal.account, &principal.subject)
                    .map_err(|wait| ApiError::RateLimited {
                        retry_after: crate::limits::retry_after_secs(wait),
                    })?;
                Ok(principal)
            }
            Err(TokenError::Invalid(reason)) => {
                tracing::debug!(%reason, "token refused");
                Err(ApiError::Unauthorized {
                    invalid_token: true,
                })
            }
            Err(TokenError::Unavailable(e)) => Err(e.into()),
        }
    }
}

/// The client behind a valid bearer token, as the use cases' actor: they
/// decide what its scopes allow.
impl FromRequestParts<AppState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Principal::from_request_parts(parts, state)
            .await
            .map(|p| Actor::client(&p))
    }
}

/// Query parameters, parsed by hand so that every problem is a clear 400.
pub struct QueryParams(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        Ok(QueryParams(
            url::form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
        ))
    }
}

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 1000;

impl QueryParams {
    /// A parameter as sent, empty or not: a filter sent empty (`state=`)
    /// names no value the document allows, so it answers 400.
    pub fn sent(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// `limit`, 1 to 1000; 50 when absent. An empty `limit=` is not a number: 400.
    pub fn limit(&self) -> Result<u32, ApiError> {
        match self.0.get("limit") {
            None => Ok(DEFAULT_LIMIT),
            Some(s) => match s.parse::<u32>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
                _ => Err(ApiError::field(
                    "limit",
                    format!("must be an integer from 1 to {MAX_LIMIT}"),
                )),
            },
        }
    }

    /// The cursor, if any: the `nextCursor` of the page before, as issued
    /// (each list says its form in the document: a message id, an attempt
    /// number, `<created-at ms>.<target id>`).
    pub fn cursor(&self) -> Result<Option<String>, ApiError> {
        Ok(self.get("cursor").map(str::to_string))
    }

    /// For a list that names every problem of its query at once: `limit`
    /// (50 when absent), its problem added to `errors`.
    pub fn limit_noting(&self, errors: &mut Vec<crate::domain::target::FieldError>) -> u32 {
        self.limit().unwrap_or_else(|e| {
            if let ApiError::Validation(mut v) = e {
                errors.append(&mut v);
            }
            DEFAULT_LIMIT
        })
    }

    /// The cursor as `decode` reads it; one it cannot read (not issued by
    /// this service) is a problem added to `errors`.
    pub fn cursor_noting<T>(
        &self,
        errors: &mut Vec<crate::domain::target::FieldError>,
        decode: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let c = self.get("cursor")?;
        let decoded = decode(c);
        if decoded.is_none() {
            errors.push(crate::domain::target::FieldError::new(
                "cursor",
                "is not a cursor this service issued",
            ));
        }
        decoded
    }
}

/// A page's `nextCursor`: what the next page continues after.
pub fn encode_cursor(s: &str) -> String {
    s.to_string()
}

/// The `Idempotency-Key` header (docs/api.md#idempotency-keys), if sent; one
/// that breaks the rule is noted in `errors`, to be answered with the body's.
pub fn idempotency_key(
    headers: &axum::http::HeaderMap,
    errors: &mut Vec<FieldError>,
) -> Option<IdempotencyKey> {
    match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(k)) => IdempotencyKey::parse(k)
            .map_err(|rule| errors.push(FieldError::new("Idempotency-Key", rule)))
            .ok(),
        Some(Err(_)) => {
            errors.push(FieldError::new("Idempotency-Key", IdempotencyKey::RULE));
            None
        }
    }
}

/// A resource's answer: `out` with `status`, and for a create (201) its
/// `Location`.
pub fn resource(
    status: StatusCode,
    out: impl serde::Serialize,
    location: impl FnOnce() -> String,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if status == StatusCode::CREATED {
        (status, [(header::LOCATION, location())], axum::Json(out)).into_response()
    } else {
        (status, axum::Json(out)).into_response()
    }
}

/// What a create under an idempotency key answers: `status` and `body` as
/// first given, `Location: {collection}/{id}` with the id the body holds in
/// `id_field`, and `Idempotent-Replayed: true` when it is given again.
pub fn created(
    status: u16,
    body: crate::store::ResponseJson,
    collection: &str,
    id_field: &str,
    replayed: bool,
) -> axum::response::Response {
    use axum::{http::HeaderValue, response::IntoResponse};
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::CREATED);
    let id = serde_json::from_str::<HashMap<&str, &serde_json::value::RawValue>>(body.get())
        .ok()
        .and_then(|fields| {
            fields
                .get(id_field)
                .map(|v| v.get().trim_matches('"').to_string())
        });
    let location = id.and_then(|id| HeaderValue::from_str(&format!("{collection}/{id}")).ok());
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(location) = location {
        response.headers_mut().insert(header::LOCATION, location);
    }
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}
