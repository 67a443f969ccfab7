//! Who may call and what they hold: API clients, portal users and their
//! sessions, the people of an account, the token-signing keys.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::ids::AccountId;
use crate::store::{portal, ClientRecord, ClientSummary, ResealPage, SigningKey, StoreResult};

/// Who may call: API clients and their accounts, portal users and their
/// sessions.
#[async_trait]
pub trait IdentityStore: Send + Sync + 'static {
    async fn create_client(&self, client: &ClientRecord) -> StoreResult<()>;

    /// A client that has not been revoked.
    async fn find_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>>;

    async fn count_clients(&self) -> StoreResult<u64>;

    /// Stores `new` as the client's secret hash if it is still `old` and the
    /// client is not revoked; false otherwise.
    async fn replace_client_secret_hash(
        &self,
        client_id: &str,
        old: &str,
        new: &str,
    ) -> StoreResult<bool>;

    /// The clients of `account`, revoked ones too, oldest first.
    async fn list_clients(&self, account: &AccountId) -> StoreResult<Vec<ClientSummary>>;

    /// Revokes a client (again: it keeps its first revocation time); None
    /// when there is no such client.
    async fn revoke_client(
        &self,
        client_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<ClientSummary>>;

    /// The ids of the clients revoked at or after `since`.
    async fn clients_revoked_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<String>>;

    async fn ensure_account(&self, account: &AccountId) -> StoreResult<()>;

    /// False when the email is taken.
    async fn create_user(&self, user: &portal::UserRecord) -> StoreResult<bool>;

    async fn find_user(&self, email: &str) -> StoreResult<Option<portal::UserRecord>>;

    /// Also forgets sessions that have expired.
    async fn create_session(&self, session: &portal::SessionRecord) -> StoreResult<()>;

    /// A session that has not expired.
    async fn find_session(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<portal::SessionRecord>>;

    async fn delete_session(&self, token_hash: &[u8]) -> StoreResult<()>;
}

/// The people of an account: their roles, removal, passwords and
/// invitations. Every change that could leave an account without an admin
/// is refused as a whole (`PeopleChange::LastAdmin`), under a lock on the
/// account so that two admins demoting each other cannot both succeed.
#[async_trait]
pub trait PeopleStore: Send + Sync + 'static {
    /// The account's people, oldest first.
    async fn list_users(&self, account: &AccountId) -> StoreResult<Vec<portal::UserRecord>>;

    async fn set_user_role(
        &self,
        account: &AccountId,
        user_id: &str,
        role: portal::Role,
    ) -> StoreResult<portal::PeopleChange>;

    /// Removes the person and ends their sessions.
    async fn remove_user(
        &self,
        account: &AccountId,
        user_id: &str,
    ) -> StoreResult<portal::PeopleChange>;

    /// A new password hash; every session of the person but `keep` ends.
    /// False when there is no such person.
    async fn set_password(
        &self,
        user_id: &str,
        password_hash: &str,
        keep: &[u8],
    ) -> StoreResult<bool>;

    /// The zone the person's times are shown in (None: the browser's).
    async fn set_time_zone(&self, user_id: &str, zone: Option<&str>) -> StoreResult<()>;

    async fn create_invitation(&self, invitation: &portal::InvitationRecord) -> StoreResult<()>;

    /// The account's invitations that have not expired, oldest first.
    async fn list_invitations(
        &self,
        account: &AccountId,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<portal::InvitationRecord>>;

    /// A live invitation by its token's hash.
    async fn find_invitation(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<portal::InvitationRecord>>;

    /// False when the account has no such invitation.
    async fn revoke_invitation(&self, account: &AccountId, id: &str) -> StoreResult<bool>;

    /// Creates the invited person (the invitation's account, email and role,
    /// with this id and password hash) and deletes the invitation, in one
    /// transaction.
    async fn accept_invitation(
        &self,
        token_hash: &[u8],
        user_id: &str,
        password_hash: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<portal::Acceptance>;
}

/// Secrets at rest: the token-signing keys, and re-sealing stored secrets
/// under the current key.
#[async_trait]
pub trait SecretStore: Send + Sync + 'static {
    /// The keys tokens are signed with, newest first (keys made at one
    /// instant by kid); none until `ensure_signing_key` made the first.
    async fn signing_keys(&self) -> StoreResult<Vec<SigningKey>>;

    /// Makes the first signing key, created at `now`, when there is none;
    /// whether it made one. Instances starting together on one database
    /// may each make one; every key made stays valid.
    async fn ensure_signing_key(&self, now: DateTime<Utc>) -> StoreResult<bool>;

    /// Rotation (`dispatch secrets rotate`): seals again, under the current
    /// key, the secrets of up to `limit` targets whose id follows `after`
    /// and that are stored plain or under another key, in one short
    /// transaction, each row only if it is unchanged since it was read. A row
    /// sealed under a key this store does not have fails the call, naming
    /// the row. Without a key: `NoEncryptionKey`.
    async fn reseal_targets(&self, after: Option<&str>, limit: u32) -> StoreResult<ResealPage>;

    /// As `reseal_targets`, for the token-signing keys (by kid).
    async fn reseal_signing_keys(&self, after: Option<&str>, limit: u32)
        -> StoreResult<ResealPage>;
}
