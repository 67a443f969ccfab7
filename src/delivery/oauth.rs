//! OAuth 2 client credentials for webhook receivers: a token per target,
//! cached until shortly before it expires, fetched by one request at a time
//! and shared by every concurrent delivery.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU16, Ordering},
        Arc,
    },
    time::Duration,
};

use oauth2::{
    basic::{BasicClient, BasicErrorResponseType},
    ClientId, ClientSecret, RequestTokenError, Scope, TokenResponse, TokenUrl,
};
use tokio::{sync::Mutex, time::Instant};

use crate::domain::{retry::AttemptOutcome, target::OAuthClientCredentials};

/// How long a token without `expires_in` is reused.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

/// The most of a token endpoint's answer that is read: a token response is
/// a few hundred bytes, and a receiver must not make us buffer more.
pub const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// Why the token request itself failed.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("the token endpoint answered more than {MAX_TOKEN_RESPONSE} bytes")]
    TooLarge,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    token_url: String,
    client_id: String,
    client_secret: String,
    scopes: Vec<String>,
}

struct Cached {
    token: String,
    refresh_at: Instant,
}

/// Why no token could be had; the attempt fails with this outcome.
#[derive(Debug, Clone)]
pub struct TokenFailure {
    pub outcome: AttemptOutcome,
    pub error: String,
}

pub struct ReceiverTokens {
    http: reqwest::Client,
    cache: std::sync::Mutex<HashMap<Key, Arc<Mutex<Option<Cached>>>>>,
}

impl ReceiverTokens {
    pub fn new(http: reqwest::Client) -> Self {
        Self {
            http,
            cache: Default::default(),
        }
    }

    fn slot(&self, auth: &OAuthClientCredentials) -> Arc<Mutex<Option<Cached>>> {
        let key = Key {
            token_url: auth.token_url.clone(),
            client_id: auth.client_id.clone(),
            client_secret: auth.client_secret.clone(),
            scopes: auth.scopes.clone(),
        };
        self.cache
            .lock()
            .expect("token cache lock")
            .entry(key)
            .or_default()
            .clone()
    }

    /// A valid token. With `stale`, the receiver refused that token: fetch a
    /// new one unless another delivery already did.
    pub async fn token(
        &self,
        auth: &OAuthClientCredentials,
        stale: Option<&str>,
        timeout: Duration,
    ) -> Result<String, TokenFailure> {
        let slot = self.slot(auth);
        let mut cached = slot.lock().await;
        if let Some(c) = cached.as_ref() {
            let refused = stale.is_some_and(|s| s == c.token);
            if !refused && Instant::now() < c.refresh_at {
                return Ok(c.token.clone());
            }
        }
        let (token, lifetime) = self.fetch(auth, timeout).await?;
        // Refresh a little before expiry: a tenth of the lifetime, at most 30 s.
        let margin = (lifetime / 10).min(Duration::from_secs(30));
        *cached = Some(Cached {
            token: token.clone(),
            refresh_at: Instant::now() + lifetime - margin,
        });
        Ok(token)
    }

    async fn fetch(
        &self,
        auth: &OAuthClientCredentials,
        timeout: Duration,
    ) -> Result<(String, Duration), TokenFailure> {
        let token_url = TokenUrl::new(auth.token_url.clone()).map_err(|e| TokenFailure {
            outcome: AttemptOutcome::NonRetryableFailure,
            error: format!("token endpoint URL is invalid: {e}"),
        })?;
        let client = BasicClient::new(ClientId::new(auth.client_id.clone()))
            .set_client_secret(ClientSecret::new(auth.client_secret.clone()))
            .set_token_uri(token_url);
        let status = Arc::new(AtomicU16::new(0));
        let http = {
            let (client, status) = (self.http.clone(), status.clone());
            move |request: oauth2::HttpRequest| {
                let (client, status) = (client.clone(), status.clone());
                async move {
                    let mut request = reqwest::Request::try_from(request)?;
                    *request.timeout_mut() = Some(timeout);
                    let response = client.execute(request).await?;
                    status.store(response.status().as_u16(), Ordering::Relaxed);
                    let mut builder = axum::http::Response::builder().status(response.status());
                    for (name, value) in response.headers() {
                        builder = builder.header(name, value);
                    }
                    let body = read_capped(response).await?;
                    Ok::<_, FetchError>(
                        builder
                            .body(body)
                            .expect("a response rebuilt from valid parts"),
                    )
                }
            }
        };
        let result = client
            .exchange_client_credentials()
            .add_scopes(auth.scopes.iter().cloned().map(Scope::new))
            .request_async(&http)
            .await;
        let status = status.load(Ordering::Relaxed);
        let refused_client = matches!(status, 400 | 401);
        match result {
            Ok(token) => {
                let lifetime = token
                    .expires_in()
                    .unwrap_or(DEFAULT_LIFETIME)
                    .max(Duration::from_secs(1));
                Ok((token.access_token().secret().clone(), lifetime))
            }
            Err(RequestTokenError::ServerResponse(r)) => {
                let non_retryable = refused_client
                    || matches!(
                        r.error(),
                        BasicErrorResponseType::InvalidClient
                            | BasicErrorResponseType::UnauthorizedClient
                            | BasicErrorResponseType::InvalidGrant
                            | BasicErrorResponseType::InvalidScope
                            | BasicErrorResponseType::InvalidRequest
                            | BasicErrorResponseType::UnsupportedGrantType
                    );
                Err(TokenFailure {
                    outcome: if non_retryable {
                        AttemptOutcome::NonRetryableFailure
                    } else {
                        AttemptOutcome::RetryableFailure
                    },
                    error: format!("token endpoint refused: {} (HTTP {status})", r.error()),
                })
            }
            Err(RequestTokenError::Request(e)) => Err(match super::guard::find_refusal(&e) {
                Some(refused) => TokenFailure {
                    outcome: AttemptOutcome::NonRetryableFailure,
                    error: format!("token endpoint {refused}"),
                },
                None => TokenFailure {
                    outcome: AttemptOutcome::RetryableFailure,
                    error: format!("token endpoint unreachable: {e}"),
                },
            }),
            Err(e) => Err(TokenFailure {
                outcome: if refused_client {
                    AttemptOutcome::NonRetryableFailure
                } else {
                    AttemptOutcome::RetryableFailure
                },
                error: format!("token endpoint failed (HTTP {status}): {e}"),
            }),
        }
    }
}

/// The response body, refused past `MAX_TOKEN_RESPONSE` bytes.
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, FetchError> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_TOKEN_RESPONSE as u64)
    {
        return Err(FetchError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_TOKEN_RESPONSE {
            return Err(FetchError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
