//! Tokens of an external issuer, validated against its JWKS (RS256, ES256).
//! The key set is cached for `jwks_ttl` and fetched again when a token names
//! a key id the cache does not know (key rotation), at most once a second.

use std::time::{Duration, Instant};

use jsonwebtoken::{
    decode,
    jwk::{Jwk, JwkSet},
    Algorithm, DecodingKey, Header, Validation,
};
use serde_json::Value;
use tokio::sync::Mutex;

use super::{tokens::TokenError, Principal, SCOPES};
use crate::config::ExternalIssuerConfig;

const MIN_REFETCH: Duration = Duration::from_secs(1);

pub struct ExternalIssuer {
    config: ExternalIssuerConfig,
    http: reqwest::Client,
    cache: Mutex<Option<(JwkSet, Instant)>>,
}

impl ExternalIssuer {
    pub fn new(config: ExternalIssuerConfig) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .expect("a TLS-capable HTTP client builds");
        Self {
            config,
            http,
            cache: Mutex::new(None),
        }
    }

    async fn fetch(&self) -> Result<JwkSet, TokenError> {
        let response = self
            .http
            .get(&self.config.jwks_url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| TokenError::Invalid(format!("JWKS unavailable: {e}")))?;
        response
            .json::<JwkSet>()
            .await
            .map_err(|e| TokenError::Invalid(format!("JWKS unreadable: {e}")))
    }

    async fn key(&self, kid: Option<&str>) -> Result<Jwk, TokenError> {
        let mut cache = self.cache.lock().await;
        let find = |set: &JwkSet| match kid {
            Some(kid) => set.find(kid).cloned(),
            None if set.keys.len() == 1 => set.keys.first().cloned(),
            None => None,
        };
        if let Some((set, fetched)) = cache.as_ref() {
            let fresh = fetched.elapsed() < self.config.jwks_ttl;
            if let Some(jwk) = find(set).filter(|_| fresh) {
                return Ok(jwk);
            }
            if fresh && fetched.elapsed() < MIN_REFETCH {
                return Err(TokenError::Invalid("unknown key id".into()));
            }
        }
        let set = self.fetch().await?;
        let jwk = find(&set);
        *cache = Some((set, Instant::now()));
        jwk.ok_or_else(|| TokenError::Invalid("unknown key id".into()))
    }

    pub async fn validate(&self, token: &str, header: &Header) -> Result<Principal, TokenError> {
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(TokenError::Invalid("unsupported algorithm".into()));
        }
        let jwk = self.key(header.kid.as_deref()).await?;
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|e| TokenError::Invalid(format!("bad JWK: {e}")))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.validate_nbf = true;
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = decode::<Value>(token, &key, &validation)
            .map_err(|e| TokenError::Invalid(e.to_string()))?;
        let claims = data.claims;
        let account = claims
            .get(&self.config.account_claim)
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| {
                TokenError::Invalid(format!(
                    "token has no `{}` claim",
                    self.config.account_claim
                ))
            })?
            .to_string();
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut scopes: Vec<String> = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => {
                s.split_whitespace().map(String::from).collect()
            }
            (None, Some(Value::Array(items))) => items
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        };
        scopes.retain(|s| SCOPES.contains(&s.as_str()));
        Ok(Principal {
            account,
            subject,
            scopes,
        })
    }
}
