//! Tokens of an external issuer, validated against its JWKS (RS256, ES256).
//!
//! The key set is cached for `jwks_ttl`. Readers never wait on the network
//! for a key they have: a stale set is served while a fetch runs in the
//! background, and for as long as the issuer is down. A token naming a key
//! id the cache does not know (key rotation) waits for a fetch, at most one
//! a second; one fetch runs at a time, and failures back off exponentially.
//! A JWKS larger than `MAX_JWKS_BYTES` is refused.

use std::{
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use jsonwebtoken::{
    decode,
    jwk::{Jwk, JwkSet},
    Algorithm, DecodingKey, Header, Validation,
};
use serde_json::Value;

use super::{Principal, TokenError};
use crate::{
    config::ExternalIssuerConfig,
    domain::{ids::AccountId, scope::known_scopes},
};

const MIN_REFETCH: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

#[derive(Default)]
struct Cache {
    set: Option<Arc<JwkSet>>,
    fetched_at: Option<Instant>,
    /// No fetch starts before this (one a second; later after failures).
    next_fetch: Option<Instant>,
    failures: u32,
}

impl Cache {
    fn may_fetch(&self, now: Instant) -> bool {
        self.next_fetch.is_none_or(|at| at <= now)
    }
}

struct Inner {
    config: ExternalIssuerConfig,
    http: reqwest::Client,
    cache: RwLock<Cache>,
    /// Held by the one fetch under way.
    fetching: tokio::sync::Mutex<()>,
}

pub struct ExternalIssuer {
    inner: Arc<Inner>,
}

fn find(set: &JwkSet, kid: Option<&str>) -> Option<Jwk> {
    match kid {
        Some(kid) => set.find(kid).cloned(),
        None if set.keys.len() == 1 => set.keys.first().cloned(),
        None => None,
    }
}

impl Inner {
    async fn download(&self) -> Result<JwkSet, String> {
        let mut response = self
            .http
            .get(&self.config.jwks_url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("JWKS unavailable: {e}"))?;
        let too_large = || format!("JWKS larger than {MAX_JWKS_BYTES} bytes");
        if response
            .content_length()
            .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("JWKS unreadable: {e}"))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| format!("JWKS unreadable: {e}"))
    }

    /// Fetches the set, with `fetching` held, and caches it (or the failure).
    async fn fetch(&self) {
        let now = Instant::now();
        self.cache.write().expect("jwks lock").next_fetch = Some(now + MIN_REFETCH);
        let result = self.download().await;
        let mut cache = self.cache.write().expect("jwks lock");
        match result {
            Ok(set) => {
                cache.set = Some(Arc::new(set));
                cache.fetched_at = Some(Instant::now());
                cache.failures = 0;
            }
            Err(e) => {
                cache.failures = cache.failures.saturating_add(1);
                let backoff = MIN_REFETCH
                    .saturating_mul(1 << cache.failures.min(6))
                    .min(MAX_BACKOFF);
                cache.next_fetch = Some(Instant::now() + backoff);
                tracing::warn!(error = %e, failures = cache.failures, "JWKS fetch failed; keeping the keys we have");
            }
        }
    }
}

impl ExternalIssuer {
    pub fn new(config: ExternalIssuerConfig) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .expect("a TLS-capable HTTP client builds");
        Self {
            inner: Arc::new(Inner {
                config,
                http,
                cache: RwLock::new(Cache::default()),
                fetching: tokio::sync::Mutex::new(()),
            }),
        }
    }

    async fn key(&self, kid: Option<&str>) -> Result<Jwk, TokenError> {
        let unknown = || TokenError::Invalid("unknown key id".into());
        let (found, stale, may_fetch) = {
            let cache = self.inner.cache.read().expect("jwks lock");
            let now = Instant::now();
            let stale = cache
                .fetched_at
                .is_none_or(|at| now.duration_since(at) >= self.inner.config.jwks_ttl);
            let found = cache.set.as_deref().and_then(|set| find(set, kid));
            (found, stale, cache.may_fetch(now))
        };
        if let Some(jwk) = found {
            if stale && may_fetch {
                self.refresh_in_background();
            }
            return Ok(jwk);
        }
        if !may_fetch {
            return Err(unknown());
        }
        // Wait for the fetch under way, if any, then look again.
        let _one = self.inner.fetching.lock().await;
        let may_fetch = {
            let cache = self.inner.cache.read().expect("jwks lock");
            if let Some(jwk) = cache.set.as_deref().and_then(|set| find(set, kid)) {
                return Ok(jwk);
            }
            cache.may_fetch(Instant::now())
        };
        if !may_fetch {
            return Err(unknown());
        }
        self.inner.fetch().await;
        let cache = self.inner.cache.read().expect("jwks lock");
        cache
            .set
            .as_deref()
            .and_then(|set| find(set, kid))
            .ok_or_else(unknown)
    }

    fn refresh_in_background(&self) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            if let Ok(_one) = inner.fetching.try_lock() {
                let due = inner
                    .cache
                    .read()
                    .expect("jwks lock")
                    .may_fetch(Instant::now());
                if due {
                    inner.fetch().await;
                }
            }
        });
    }

    pub async fn validate(&self, token: &str, header: &Header) -> Result<Principal, TokenError> {
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(TokenError::Invalid("unsupported algorithm".into()));
        }
        let jwk = self.key(header.kid.as_deref()).await?;
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|e| TokenError::Invalid(format!("bad JWK: {e}")))?;
        let mut validation = Validation::new(header.alg);
        let config = &self.inner.config;
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.validate_nbf = true;
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = decode::<Value>(token, &key, &validation)
            .map_err(|e| TokenError::Invalid(e.to_string()))?;
        let claims = data.claims;
        let account = claims
            .get(&config.account_claim)
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| {
                TokenError::Invalid(format!("token has no `{}` claim", config.account_claim))
            })?
            .to_string();
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let scopes = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => {
                known_scopes(s.split_whitespace())
            }
            (None, Some(Value::Array(items))) => {
                known_scopes(items.iter().filter_map(Value::as_str))
            }
            _ => Vec::new(),
        };
        Ok(Principal {
            account: AccountId::from_trusted(account),
            subject,
            scopes,
        })
    }
}
