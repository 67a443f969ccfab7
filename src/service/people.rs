//! The people of an account: invitations, roles, removal and passwords.
//! The portal is the door; every rule lives here.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64URL, Engine};
use chrono::TimeDelta;
use rand::Rng;
use sha2::{Digest, Sha256};

use super::{
    access::{Actor, Permission},
    identities::{check_password, plausible_email},
    Conflict, Service, ServiceError, ServiceResult,
};
use crate::{
    auth::secrets,
    domain::ids::uuid_v7_at,
    store::portal::{Acceptance, InvitationRecord, PeopleChange, Role, UserRecord},
};

/// How long an invitation's link works.
pub const INVITATION_TTL: TimeDelta = TimeDelta::days(7);

/// A new invitation, and the token its link carries, which is shown this once.
#[derive(Debug)]
pub struct NewInvitation {
    pub record: InvitationRecord,
    pub token: String,
}

/// The SHA-256 of an invitation's token: all that is kept of it.
pub fn invitation_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

fn people_change(c: PeopleChange) -> ServiceResult<()> {
    match c {
        PeopleChange::Done => Ok(()),
        PeopleChange::NotFound => Err(ServiceError::NotFound),
        PeopleChange::LastAdmin => Err(ServiceError::Conflict(Conflict::LastAdmin)),
    }
}

impl Service {
    /// Invites `email` into `account` with `role`; `by` is the admin's email.
    pub async fn invite(
        &self,
        actor: &Actor,
        by: &str,
        email: &str,
        role: Role,
    ) -> ServiceResult<NewInvitation> {
        let account = actor.allow(Permission::ManagePeople)?;
        let email = plausible_email(email)?;
        // A sign-in of another account is as if absent: the invitation is
        // made, and its acceptance finds the email taken (told only to
        // whoever reads that email).
        if self
            .store
            .find_user(&email)
            .await?
            .is_some_and(|u| &u.account == account)
        {
            return Err(ServiceError::Conflict(Conflict::EmailTaken));
        }
        let token = B64URL.encode(rand::rng().random::<[u8; 32]>());
        let now = self.now();
        let record = InvitationRecord {
            id: uuid_v7_at(now).to_string(),
            token_hash: invitation_hash(&token),
            account: account.clone(),
            email,
            role,
            invited_by: by.to_string(),
            created_at: now,
            expires_at: now + INVITATION_TTL,
        };
        self.store.create_invitation(&record).await?;
        Ok(NewInvitation { record, token })
    }

    /// The live invitation a link's token names.
    pub async fn invitation(&self, token: &str) -> ServiceResult<InvitationRecord> {
        self.store
            .find_invitation(&invitation_hash(token), self.now())
            .await?
            .ok_or(ServiceError::NotFound)
    }

    /// The invited person chooses a password and joins.
    pub async fn accept_invitation(
        &self,
        token: &str,
        password: &str,
    ) -> ServiceResult<UserRecord> {
        check_password(password)?;
        let hash = secrets::hash_secret(password);
        let now = self.now();
        let id = uuid_v7_at(now).to_string();
        match self
            .store
            .accept_invitation(&invitation_hash(token), &id, &hash, now)
            .await?
        {
            Acceptance::Joined(user) => Ok(user),
            Acceptance::Gone => Err(ServiceError::NotFound),
            Acceptance::EmailTaken => Err(ServiceError::Conflict(Conflict::EmailTaken)),
        }
    }

    pub async fn revoke_invitation(&self, actor: &Actor, id: &str) -> ServiceResult<()> {
        let account = actor.allow(Permission::ManagePeople)?;
        if self.store.revoke_invitation(account, id).await? {
            Ok(())
        } else {
            Err(ServiceError::NotFound)
        }
    }

    pub async fn set_role(&self, actor: &Actor, user_id: &str, role: Role) -> ServiceResult<()> {
        let account = actor.allow(Permission::ManagePeople)?;
        people_change(self.store.set_user_role(account, user_id, role).await?)
    }

    /// Removes a person and ends their sessions.
    pub async fn remove_person(&self, actor: &Actor, user_id: &str) -> ServiceResult<()> {
        let account = actor.allow(Permission::ManagePeople)?;
        people_change(self.store.remove_user(account, user_id).await?)
    }

    /// The zone a person's times are shown in: an IANA name, or empty for
    /// the browser's.
    pub async fn set_time_zone(&self, user_id: &str, zone: &str) -> ServiceResult<()> {
        let zone = zone.trim();
        let zone = if zone.is_empty() {
            None
        } else {
            let tz: chrono_tz::Tz = zone.parse().map_err(|_| {
                ServiceError::field(
                    "zone",
                    "must be an IANA time zone, such as Europe/Berlin or UTC",
                )
            })?;
            Some(tz.name())
        };
        self.store.set_time_zone(user_id, zone).await?;
        Ok(())
    }

    /// A person's new password, given the current one; their other
    /// sessions end (the one `keep` names stays).
    pub async fn change_password(
        &self,
        email: &str,
        current: &str,
        new: &str,
        keep: &[u8],
    ) -> ServiceResult<()> {
        let user = self
            .store
            .find_user(email)
            .await?
            .ok_or(ServiceError::NotFound)?;
        let (current, stored) = (current.to_string(), user.password_hash.clone());
        let right = tokio::task::spawn_blocking(move || secrets::verify_secret(&current, &stored))
            .await
            .unwrap_or(false);
        if !right {
            return Err(ServiceError::field(
                "current",
                "is not your current password",
            ));
        }
        check_password(new)?;
        let hash = secrets::hash_secret(new);
        if self.store.set_password(&user.id, &hash, keep).await? {
            Ok(())
        } else {
            Err(ServiceError::NotFound)
        }
    }
}
