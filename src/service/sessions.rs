//! Portal sessions: signing in with a password, starting a session and
//! ending it. The session's token is a random value the browser keeps; the
//! store keeps only its SHA-256.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use chrono::TimeDelta;
use rand::Rng;
use sha2::{Digest, Sha256};

use super::{Service, ServiceResult};
use crate::{
    auth::secrets,
    store::portal::{SessionRecord, UserRecord},
};

/// What a wrong email costs: the same password check as a right one.
static DUMMY_HASH: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| secrets::hash_secret("not a password anyone has"));

/// A random token for a browser to keep: a session's, or a form's.
pub fn random_token() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    B64URL.encode(bytes)
}

/// What the store keeps of a session's token.
pub fn token_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// A session begun: the token for the browser's cookie, shown this once.
pub struct NewSession {
    pub token: String,
    pub ttl: TimeDelta,
}

impl Service {
    /// The person whose email and password these are. An unknown email
    /// costs the same work as a wrong password, and answers the same.
    pub async fn check_password(
        &self,
        email: &str,
        password: &str,
    ) -> ServiceResult<Option<UserRecord>> {
        // No sign-in has a control character in its email; the store is
        // not asked (PostgreSQL refuses U+0000), the hash is still checked.
        let user = match email.chars().any(char::is_control) {
            true => None,
            false => self.store.find_user(email).await?,
        };
        let hash = user
            .as_ref()
            .map_or_else(|| DUMMY_HASH.clone(), |u| u.password_hash.clone());
        let password = password.to_string();
        let ok = tokio::task::spawn_blocking(move || secrets::verify_secret(&password, &hash))
            .await
            .unwrap_or(false);
        Ok(user.filter(|_| ok))
    }

    /// A session for `user`, for `portal.session_ttl`.
    pub async fn start_session(&self, user: UserRecord) -> ServiceResult<NewSession> {
        let token = random_token();
        let now = self.now();
        let ttl =
            TimeDelta::from_std(self.config.portal.session_ttl).unwrap_or(TimeDelta::hours(12));
        self.store
            .create_session(&SessionRecord {
                token_hash: token_hash(&token),
                user_id: user.id,
                account: user.account,
                email: user.email,
                csrf: random_token(),
                created_at: now,
                expires_at: now + ttl,
                role: user.role,
                time_zone: None,
            })
            .await?;
        Ok(NewSession { token, ttl })
    }

    /// The live session whose token this is, if any.
    pub async fn session(&self, token: &str) -> ServiceResult<Option<SessionRecord>> {
        Ok(self
            .store
            .find_session(&token_hash(token), self.now())
            .await?)
    }

    /// Ends the session whose token this is (none: nothing happens).
    pub async fn end_session(&self, token: &str) -> ServiceResult<()> {
        self.store.delete_session(&token_hash(token)).await?;
        Ok(())
    }
}
