//! Who may use Dispatch: API clients and portal users.

use super::{Conflict, Service, ServiceError, ServiceResult};
use crate::{
    auth::secrets::{self, ClientSecretCheck},
    domain::{
        ids::{uuid_v7_at, AccountId},
        scope::Scope,
    },
    store::{
        portal::{Role, UserRecord},
        ClientRecord, ClientSummary, Resealed,
    },
};

/// Rows re-encrypted per transaction when secrets are resealed: short, so
/// that instances keep serving.
pub const RESEAL_BATCH: u32 = 100;

/// A new client: its record, and its secret, which is shown this once.
#[derive(Debug)]
pub struct NewClient {
    pub record: ClientRecord,
    pub secret: String,
}

/// The shortest password a person may choose.
pub const MIN_PASSWORD: usize = 12;

impl Service {
    /// A client of `account` with these scopes (every scope when empty).
    pub async fn create_client(
        &self,
        account: &AccountId,
        name: &str,
        scopes: &[Scope],
    ) -> ServiceResult<NewClient> {
        let scopes = if scopes.is_empty() {
            &Scope::ALL[..]
        } else {
            scopes
        };
        let (client_id, secret) = secrets::generate_client_credentials();
        let record = ClientRecord {
            client_id,
            account: account.clone(),
            name: name.to_string(),
            secret_hash: secrets::hash_client_secret(&secret),
            scopes: scopes.to_vec(),
        };
        self.store.create_client(&record).await?;
        Ok(NewClient { record, secret })
    }

    /// The client, if `secret` is its secret. An unknown (or revoked) client
    /// id costs the same work as a wrong secret, and answers the same. A
    /// secret still stored in its slow form is checked off the async
    /// threads, and its fast form stored for the next request.
    pub async fn authenticate_client(
        &self,
        client_id: &str,
        secret: String,
    ) -> ServiceResult<Option<ClientRecord>> {
        // No client id holds a control character; the store is not asked
        // (PostgreSQL refuses U+0000), and the failure counts as any other.
        let found = match client_id.chars().any(char::is_control) {
            true => None,
            false => self.store.find_client(client_id).await?,
        };
        let Some(client) = found else {
            secrets::verify_against_nothing(&secret);
            return Ok(None);
        };
        let stored = client.secret_hash.clone();
        let check = if secrets::is_slow_hash(&stored) {
            tokio::task::spawn_blocking(move || secrets::verify_client_secret(&secret, &stored))
                .await
                .unwrap_or(ClientSecretCheck::Wrong)
        } else {
            secrets::verify_client_secret(&secret, &stored)
        };
        if let ClientSecretCheck::RightUpgrade(fast) = &check {
            let replaced = self
                .store
                .replace_client_secret_hash(client_id, &client.secret_hash, fast)
                .await;
            if let Err(e) = replaced {
                tracing::warn!(error = %e, client_id, "could not store the fast form of a secret hash");
            }
        }
        Ok(check.is_right().then_some(client))
    }

    /// Whether any client exists, in any account: none on a first start.
    pub async fn has_clients(&self) -> ServiceResult<bool> {
        Ok(self.store.count_clients().await? > 0)
    }

    /// An account's clients, revoked ones too (no secrets, no hashes).
    pub async fn clients(&self, account: &AccountId) -> ServiceResult<Vec<ClientSummary>> {
        Ok(self.store.list_clients(account).await?)
    }

    /// Revokes a client: its token requests are refused at once, the tokens
    /// it holds within seconds on every instance. Unknown: `NotFound`.
    pub async fn revoke_client(&self, client_id: &str) -> ServiceResult<ClientSummary> {
        self.store
            .revoke_client(client_id, self.now())
            .await?
            .ok_or(ServiceError::NotFound)
    }

    /// Re-encrypts every stored secret under the configured key, a batch a
    /// transaction, while instances keep serving.
    pub async fn reseal_secrets(&self) -> ServiceResult<Resealed> {
        Ok(crate::store::reseal_all(self.store.as_ref(), RESEAL_BATCH).await?)
    }

    /// A portal user of `account` with `role`; emails are unique across accounts.
    pub async fn create_user(
        &self,
        account: &AccountId,
        email: &str,
        password: &str,
        role: Role,
    ) -> ServiceResult<UserRecord> {
        let email = plausible_email(email)?;
        check_password(password)?;
        let mut user = new_user(account, &email, password, self.now());
        user.role = role;
        if !self.store.create_user(&user).await? {
            return Err(ServiceError::Conflict(Conflict::EmailTaken));
        }
        Ok(user)
    }
}

/// The email lower-cased, if it looks like one.
pub(super) fn plausible_email(email: &str) -> ServiceResult<String> {
    let email = email.trim().to_lowercase();
    let plausible = email.len() <= 254
        // U+FFFD stands where bytes that were not UTF-8 were decoded.
        && !email
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == char::REPLACEMENT_CHARACTER)
        && email
            .split_once('@')
            .is_some_and(|(l, d)| !l.is_empty() && !d.is_empty());
    if plausible {
        Ok(email)
    } else {
        Err(ServiceError::field(
            "email",
            "must be an email address, such as ops@example.com",
        ))
    }
}

pub(super) fn check_password(password: &str) -> ServiceResult<()> {
    if password.chars().count() < MIN_PASSWORD {
        return Err(ServiceError::field(
            "password",
            format!("must be at least {MIN_PASSWORD} characters"),
        ));
    }
    Ok(())
}

/// A user record (an admin) with a fresh id and the password's hash.
pub fn new_user(
    account: &AccountId,
    email: &str,
    password: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> UserRecord {
    UserRecord {
        id: uuid_v7_at(now).to_string(),
        account: account.clone(),
        email: email.trim().to_lowercase(),
        password_hash: secrets::hash_secret(password),
        role: Role::Admin,
        created_at: now,
    }
}
