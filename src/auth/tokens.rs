//! Access tokens: HS256 JWTs this server issues (keys shared by every
//! instance through the store) and, optionally, an external issuer's tokens.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use jsonwebtoken::{
    decode, decode_header, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation,
};
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, RwLock};

use super::{jwks::ExternalIssuer, revocations::Revocations, Principal, TokenError};
use crate::{
    config::AuthConfig,
    domain::{
        ids::AccountId,
        scope::{join_scopes, known_scopes, Scope},
    },
    store::{ClientRecord, SigningKey, Store, StoreError},
};

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    iss: String,
    aud: String,
    sub: String,
    account: String,
    scope: String,
    iat: i64,
    nbf: i64,
    exp: i64,
    jti: String,
}

/// Tokens naming a key we do not know make us reload the keys (another
/// instance may have made one) at most this often, whoever sends them.
const MIN_RELOAD: Duration = Duration::from_secs(1);

pub struct TokenService {
    store: Arc<dyn Store>,
    keys: RwLock<Vec<SigningKey>>,
    /// When the keys were last reloaded; held while a reload is under way,
    /// so that concurrent requests wait for it rather than reload too.
    last_reload: Mutex<Option<Instant>>,
    reloads: AtomicU64,
    revocations: Revocations,
    issuer: String,
    audience: String,
    ttl: Duration,
    external: Option<ExternalIssuer>,
}

pub struct IssuedToken {
    pub access_token: String,
    pub expires_in: u64,
    pub scope: String,
}

impl TokenService {
    /// Starts issuing and validating tokens: makes the first signing key
    /// when the store has none (created at `now`), then loads the keys.
    /// Afterwards the keys are only read.
    pub async fn new(
        store: Arc<dyn Store>,
        config: &AuthConfig,
        now: DateTime<Utc>,
    ) -> Result<Self, StoreError> {
        store.ensure_signing_key(now).await?;
        let keys = store.signing_keys().await?;
        let revocations = Revocations::load(store.clone(), config.token_ttl).await?;
        Ok(Self {
            store,
            keys: RwLock::new(keys),
            last_reload: Mutex::new(None),
            reloads: AtomicU64::new(0),
            revocations,
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            ttl: config.token_ttl,
            external: config.external.clone().map(ExternalIssuer::new),
        })
    }

    pub async fn issue(
        &self,
        client: &ClientRecord,
        scopes: &[Scope],
    ) -> Result<IssuedToken, TokenError> {
        let keys = self.keys.read().await;
        let key = keys
            .first()
            .ok_or_else(|| TokenError::Invalid("no signing key".into()))?;
        let now = chrono::Utc::now().timestamp();
        let scope = join_scopes(scopes);
        let claims = Claims {
            iss: self.issuer.clone(),
            aud: self.audience.clone(),
            sub: client.client_id.clone(),
            account: client.account.to_string(),
            scope: scope.clone(),
            iat: now,
            // A little in the past, so that an instance whose clock runs
            // behind the issuer's accepts the token at once.
            nbf: now - 30,
            exp: now + self.ttl.as_secs() as i64,
            jti: uuid::Uuid::new_v4().to_string(),
        };
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(key.kid.clone());
        let access_token = encode(&header, &claims, &EncodingKey::from_secret(&key.secret))
            .map_err(|e| TokenError::Invalid(e.to_string()))?;
        Ok(IssuedToken {
            access_token,
            expires_in: self.ttl.as_secs(),
            scope,
        })
    }

    pub async fn validate(&self, token: &str) -> Result<Principal, TokenError> {
        let header =
            decode_header(token).map_err(|_| TokenError::Invalid("malformed token".into()))?;
        if header.alg == Algorithm::HS256 {
            return self.validate_own(token, header.kid.as_deref()).await;
        }
        match &self.external {
            Some(external) => external.validate(token, &header).await,
            None => Err(TokenError::Invalid("unsupported algorithm".into())),
        }
    }

    async fn validate_own(&self, token: &str, kid: Option<&str>) -> Result<Principal, TokenError> {
        let kid = kid.ok_or_else(|| TokenError::Invalid("token has no kid".into()))?;
        let secret = match self.known_key(kid).await {
            Some(secret) => secret,
            None => self.reload_for(kid).await?,
        };
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.validate_nbf = true;
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = decode::<Claims>(token, &DecodingKey::from_secret(&secret), &validation)
            .map_err(|e| TokenError::Invalid(e.to_string()))?;
        let c = data.claims;
        if self.revocations.is_revoked(&c.sub).await {
            return Err(TokenError::Invalid("the client was revoked".into()));
        }
        Ok(Principal {
            account: AccountId::from_trusted(c.account),
            subject: c.sub,
            scopes: known_scopes(c.scope.split_whitespace()),
        })
    }

    async fn known_key(&self, kid: &str) -> Option<Vec<u8>> {
        self.keys
            .read()
            .await
            .iter()
            .find(|k| k.kid == kid)
            .map(|k| k.secret.clone())
    }

    /// Another instance may have created a key since we loaded ours: read
    /// them again, unless a reload ended less than `MIN_RELOAD` ago.
    async fn reload_for(&self, kid: &str) -> Result<Vec<u8>, TokenError> {
        let unknown = || TokenError::Invalid("unknown key".into());
        let mut last = self.last_reload.lock().await;
        // It may have come with the reload we waited for.
        if let Some(secret) = self.known_key(kid).await {
            return Ok(secret);
        }
        if last.is_some_and(|at| at.elapsed() < MIN_RELOAD) {
            return Err(unknown());
        }
        self.reloads.fetch_add(1, Ordering::Relaxed);
        let fresh = self.store.signing_keys().await;
        *last = Some(Instant::now());
        let fresh = fresh.map_err(TokenError::Unavailable)?;
        let secret = fresh
            .iter()
            .find(|k| k.kid == kid)
            .map(|k| k.secret.clone());
        *self.keys.write().await = fresh;
        secret.ok_or_else(unknown)
    }

    /// How many times the signing keys were reloaded for an unknown key id.
    pub fn key_reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }
}
