//! `POST /oauth/token`: the client credentials grant (RFC 6749 §4.4).

use std::{net::IpAddr, time::Duration};

use axum::{
    body::Bytes,
    extract::{rejection::BytesRejection, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use base64::{engine::general_purpose::STANDARD as B64, Engine};

use crate::{
    auth::TokenError,
    domain::scope::parse_scopes,
    limits::{client::ClientIp, retry_after_secs},
    state::AppState,
    store::ClientRecord,
    wire::{OAuthErrorOut, TokenForm, TokenOut},
};

struct OAuthError {
    status: StatusCode,
    error: &'static str,
    description: String,
    basic_challenge: bool,
    /// Whole seconds, with 429.
    retry_after: Option<u64>,
}

impl OAuthError {
    fn new(status: StatusCode, error: &'static str, description: impl Into<String>) -> Self {
        Self {
            status,
            error,
            description: description.into(),
            basic_challenge: false,
            retry_after: None,
        }
    }

    /// 429: too many failed attempts for this client id or from this address.
    fn held_back(wait: Duration) -> Self {
        let secs = retry_after_secs(wait);
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "slow_down",
            format!("too many failed attempts; try again in {secs} s"),
        );
        e.retry_after = Some(secs);
        e
    }

    fn invalid_request(description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", description)
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let body = OAuthErrorOut {
            error: self.error,
            error_description: Some(self.description),
        };
        let mut response = (self.status, Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            let challenge = if self.basic_challenge {
                "Basic realm=\"dispatch\""
            } else {
                "Bearer realm=\"dispatch\""
            };
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        response
    }
}

/// Issue an access token.
///
/// Client id and secret by HTTP Basic, or as `client_id`/`client_secret` form fields.
#[utoipa::path(
    post, path = "/oauth/token", tag = "auth",
    request_body(content = TokenForm, content_type = "application/x-www-form-urlencoded", description = "grant_type=client_credentials&scope=..."),
    responses(
        (status = 200, description = "An access token", body = TokenOut),
        (status = 400, description = "invalid_request, unsupported_grant_type or invalid_scope", body = OAuthErrorOut),
        (status = 401, description = "invalid_client: an unknown, revoked or wrongly authenticated client", body = OAuthErrorOut),
        (status = 429, description = "slow_down: too many failed attempts for this client id (`auth.token_attempts` in `auth.token_window`) or from this address (five times as many); see Retry-After",
            body = OAuthErrorOut, headers(("Retry-After" = u64, description = "Seconds to wait"))),
    )
)]
pub async fn token(
    State(state): State<AppState>,
    ClientIp(client): ClientIp,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Some(wait) = state.limits.token_address_held(client) {
        tracing::warn!(address = %client, "token requests from this address held back");
        return OAuthError::held_back(wait).into_response();
    }
    // The body as an OAuth error too: over the limit, too slow, unreadable.
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            let (status, description) = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the request body is over the limit",
                )
            } else if crate::serve::timed_out(&rejection) {
                (
                    StatusCode::REQUEST_TIMEOUT,
                    "the request body did not arrive in time",
                )
            } else {
                (
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                )
            };
            return OAuthError::new(status, "invalid_request", description).into_response();
        }
    };
    match issue(&state, client, &headers, &body).await {
        Ok(token) => {
            let mut response = Json(token).into_response();
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
                .headers_mut()
                .insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
            response
        }
        Err(e) => e.into_response(),
    }
}

async fn issue(
    state: &AppState,
    address: IpAddr,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<TokenOut, OAuthError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type
        .to_ascii_lowercase()
        .starts_with("application/x-www-form-urlencoded")
    {
        return Err(OAuthError::invalid_request(
            "the body must be application/x-www-form-urlencoded",
        ));
    }
    let mut form: Vec<(String, String)> = url::form_urlencoded::parse(body).into_owned().collect();
    let mut field = |name: &str| -> Result<Option<String>, OAuthError> {
        let mut values = form.iter().filter(|(k, _)| k == name);
        let first = values.next().map(|(_, v)| v.clone());
        if values.next().is_some() {
            return Err(OAuthError::invalid_request(format!("{name} is repeated")));
        }
        form.retain(|(k, _)| k != name);
        Ok(first)
    };
    let grant_type = field("grant_type")?;
    let scope = field("scope")?;
    let form_id = field("client_id")?;
    let form_secret = field("client_secret")?;

    let basic = basic_credentials(headers)?;
    let used_basic = basic.is_some();
    let (client_id, secret) = match (basic, form_id, form_secret) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(OAuthError::invalid_request(
                "use one client authentication method, not two",
            ))
        }
        (Some(creds), None, None) => creds,
        (None, Some(id), Some(secret)) => (id, secret),
        (None, _, _) => {
            state.limits.token_failed(None, address);
            state.service.token_failed(None, address).await;
            let mut e = OAuthError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "client authentication is required",
            );
            e.basic_challenge = true;
            return Err(e);
        }
    };
    let Some(grant_type) = grant_type else {
        return Err(OAuthError::invalid_request("grant_type is required"));
    };

    if let Some(wait) = state.limits.token_client_held(&client_id) {
        tracing::warn!(client_id, "token requests for this client held back");
        return Err(OAuthError::held_back(wait));
    }
    // What every instance counted.
    if let Some(wait) = state.service.token_held(&client_id, address).await {
        tracing::warn!(client_id, %address, "token requests held back");
        return Err(OAuthError::held_back(wait));
    }
    let Some(client) = authenticate(state, &client_id, secret).await? else {
        state.limits.token_failed(Some(&client_id), address);
        state.service.token_failed(Some(&client_id), address).await;
        let mut e = OAuthError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "client authentication failed",
        );
        e.basic_challenge = used_basic;
        return Err(e);
    };
    if grant_type != "client_credentials" {
        return Err(OAuthError::new(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "only client_credentials is supported",
        ));
    }
    let granted = client.scopes.clone();
    let scopes = match scope.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => granted,
        Some(requested) => {
            let requested = parse_scopes(requested).map_err(|unknown| {
                OAuthError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_scope",
                    format!("unknown scope {unknown}"),
                )
            })?;
            if let Some(missing) = requested.iter().find(|s| !granted.contains(s)) {
                return Err(OAuthError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_scope",
                    format!("scope {missing} is not granted to this client"),
                ));
            }
            requested
        }
    };
    let issued = state
        .tokens
        .issue(&client, &scopes)
        .await
        .map_err(|e| match e {
            TokenError::Invalid(_) | TokenError::Unavailable(_) => unavailable(),
        })?;
    Ok(TokenOut {
        access_token: issued.access_token,
        token_type: "Bearer",
        expires_in: issued.expires_in,
        scope: issued.scope,
    })
}

fn unavailable() -> OAuthError {
    OAuthError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "temporarily_unavailable",
        "try again shortly",
    )
}

/// The client, if `secret` is its secret (see `Service::authenticate_client`).
async fn authenticate(
    state: &AppState,
    client_id: &str,
    secret: String,
) -> Result<Option<ClientRecord>, OAuthError> {
    state
        .service
        .authenticate_client(client_id, secret)
        .await
        .map_err(|_| unavailable())
}

/// HTTP Basic credentials; id and secret are form-urlencoded inside (RFC 6749 §2.3.1).
fn basic_credentials(headers: &HeaderMap) -> Result<Option<(String, String)>, OAuthError> {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(None);
    };
    let Some((scheme, encoded)) = value.split_once(' ') else {
        return Ok(None);
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Ok(None);
    }
    let bad = || {
        let mut e = OAuthError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "malformed Basic credentials",
        );
        e.basic_challenge = true;
        e
    };
    let decoded = B64.decode(encoded.trim()).map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let (id, secret) = decoded.split_once(':').ok_or_else(bad)?;
    let unescape = |s: &str| {
        url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
    };
    Ok(Some((
        unescape(id).ok_or_else(bad)?,
        unescape(secret).ok_or_else(bad)?,
    )))
}
