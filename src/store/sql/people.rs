//! The people of an account: roles, removal, passwords and invitations,
//! once for both databases. A change that could leave an account without
//! an admin is decided one at a time: PostgreSQL locks the account's row
//! first, SQLite's one writer runs such changes one after another.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{At, Backend, Conn, Tx};
use crate::{
    domain::ids::AccountId,
    store::{portal::*, PeopleStore, StoreResult},
};

/// A person's row: id, account, email, password hash, created at, role.
pub(in crate::store) type UserRow = (String, AccountId, String, String, At, String);

pub(in crate::store) const USER_COLUMNS: &str =
    "id, account, email, password_hash, created_at, role";

pub(in crate::store) fn user_from_row(
    (id, account, email, password_hash, created_at, role): UserRow,
) -> StoreResult<UserRecord> {
    Ok(UserRecord {
        id,
        account,
        email,
        password_hash,
        role: Role::from_stored(&role)?,
        created_at: created_at.into(),
    })
}

/// Inserts a person; false when the email is taken.
pub(in crate::store) async fn insert_user(conn: Conn<'_>, u: &UserRecord) -> StoreResult<bool> {
    let n = conn
        .sql(format!(
            "INSERT INTO portal_users ({USER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (email) DO NOTHING"
        ))
        .bind(&u.id)
        .bind(&u.account)
        .bind(&u.email)
        .bind(&u.password_hash)
        .bind(At(u.created_at))
        .bind(u.role.as_str())
        .execute()
        .await?;
    Ok(n == 1)
}

type InvitationRow = (String, Vec<u8>, AccountId, String, String, String, At, At);

const INVITATION_COLUMNS: &str =
    "id, token_hash, account, email, role, invited_by, created_at, expires_at";

fn invitation(r: InvitationRow) -> StoreResult<InvitationRecord> {
    let (id, token_hash, account, email, role, invited_by, created_at, expires_at) = r;
    Ok(InvitationRecord {
        id,
        token_hash,
        account,
        email,
        role: Role::from_stored(&role)?,
        invited_by,
        created_at: created_at.into(),
        expires_at: expires_at.into(),
    })
}

/// Locks the account where rows are locked, and reads the person's role
/// there; None when the account has no such person.
async fn lock_and_find(
    tx: &mut Tx,
    account: &AccountId,
    user_id: &str,
) -> StoreResult<Option<Role>> {
    if tx.locks_rows() {
        tx.sql("SELECT 1 FROM accounts WHERE name = $1 FOR UPDATE")
            .bind(account)
            .execute()
            .await?;
    }
    let role: Option<(String,)> = tx
        .sql("SELECT role FROM portal_users WHERE id = $1 AND account = $2")
        .bind(user_id)
        .bind(account)
        .fetch_optional()
        .await?;
    role.map(|(r,)| Role::from_stored(&r)).transpose()
}

async fn admins(tx: &mut Tx, account: &AccountId) -> StoreResult<i64> {
    let (n,): (i64,) = tx
        .sql("SELECT count(*) FROM portal_users WHERE account = $1 AND role = 'admin'")
        .bind(account)
        .fetch_one()
        .await?;
    Ok(n)
}

#[async_trait]
impl<B: Backend> PeopleStore for B {
    async fn list_users(&self, account: &AccountId) -> StoreResult<Vec<UserRecord>> {
        let rows: Vec<UserRow> = self
            .db()
            .read(format!(
                "SELECT {USER_COLUMNS} FROM portal_users WHERE account = $1 ORDER BY created_at, id"
            ))
            .bind(account)
            .fetch_all()
            .await?;
        rows.into_iter().map(user_from_row).collect()
    }

    async fn set_user_role(
        &self,
        account: &AccountId,
        user_id: &str,
        role: Role,
    ) -> StoreResult<PeopleChange> {
        let mut tx = self.db().begin().await?;
        let Some(was) = lock_and_find(&mut tx, account, user_id).await? else {
            return Ok(PeopleChange::NotFound);
        };
        if was == Role::Admin && role != Role::Admin && admins(&mut tx, account).await? <= 1 {
            return Ok(PeopleChange::LastAdmin);
        }
        tx.sql("UPDATE portal_users SET role = $3 WHERE id = $1 AND account = $2")
            .bind(user_id)
            .bind(account)
            .bind(role.as_str())
            .execute()
            .await?;
        tx.commit().await?;
        Ok(PeopleChange::Done)
    }

    async fn remove_user(&self, account: &AccountId, user_id: &str) -> StoreResult<PeopleChange> {
        let mut tx = self.db().begin().await?;
        let Some(was) = lock_and_find(&mut tx, account, user_id).await? else {
            return Ok(PeopleChange::NotFound);
        };
        if was == Role::Admin && admins(&mut tx, account).await? <= 1 {
            return Ok(PeopleChange::LastAdmin);
        }
        // Sessions go with the person (ON DELETE CASCADE).
        tx.sql("DELETE FROM portal_users WHERE id = $1 AND account = $2")
            .bind(user_id)
            .bind(account)
            .execute()
            .await?;
        tx.commit().await?;
        Ok(PeopleChange::Done)
    }

    async fn set_password(
        &self,
        user_id: &str,
        password_hash: &str,
        keep: &[u8],
    ) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        let n = tx
            .sql("UPDATE portal_users SET password_hash = $2 WHERE id = $1")
            .bind(user_id)
            .bind(password_hash)
            .execute()
            .await?;
        tx.sql("DELETE FROM portal_sessions WHERE user_id = $1 AND token_hash <> $2")
            .bind(user_id)
            .bind(keep)
            .execute()
            .await?;
        tx.commit().await?;
        Ok(n == 1)
    }

    async fn set_time_zone(&self, user_id: &str, zone: Option<&str>) -> StoreResult<()> {
        self.db()
            .write("UPDATE portal_users SET time_zone = $2 WHERE id = $1")
            .bind(user_id)
            .bind(zone)
            .execute()
            .await?;
        Ok(())
    }

    async fn create_invitation(&self, i: &InvitationRecord) -> StoreResult<()> {
        self.db()
            .write(format!(
                "INSERT INTO portal_invitations ({INVITATION_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
            ))
            .bind(&i.id)
            .bind(&i.token_hash)
            .bind(&i.account)
            .bind(&i.email)
            .bind(i.role.as_str())
            .bind(&i.invited_by)
            .bind(At(i.created_at))
            .bind(At(i.expires_at))
            .execute()
            .await?;
        Ok(())
    }

    async fn list_invitations(
        &self,
        account: &AccountId,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<InvitationRecord>> {
        let rows: Vec<InvitationRow> = self
            .db()
            .read(format!(
                "SELECT {INVITATION_COLUMNS} FROM portal_invitations \
                 WHERE account = $1 AND expires_at > $2 ORDER BY created_at, id"
            ))
            .bind(account)
            .bind(At(now))
            .fetch_all()
            .await?;
        rows.into_iter().map(invitation).collect()
    }

    async fn find_invitation(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<InvitationRecord>> {
        let row: Option<InvitationRow> = self
            .db()
            .read(format!(
                "SELECT {INVITATION_COLUMNS} FROM portal_invitations \
                 WHERE token_hash = $1 AND expires_at > $2"
            ))
            .bind(token_hash)
            .bind(At(now))
            .fetch_optional()
            .await?;
        row.map(invitation).transpose()
    }

    async fn revoke_invitation(&self, account: &AccountId, id: &str) -> StoreResult<bool> {
        let n = self
            .db()
            .write("DELETE FROM portal_invitations WHERE id = $1 AND account = $2")
            .bind(id)
            .bind(account)
            .execute()
            .await?;
        Ok(n == 1)
    }

    async fn accept_invitation(
        &self,
        token_hash: &[u8],
        user_id: &str,
        password_hash: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Acceptance> {
        let mut tx = self.db().begin().await?;
        let lock = tx.for_update();
        let row: Option<InvitationRow> = tx
            .sql(format!(
                "SELECT {INVITATION_COLUMNS} FROM portal_invitations \
                 WHERE token_hash = $1 AND expires_at > $2{lock}"
            ))
            .bind(token_hash)
            .bind(At(now))
            .fetch_optional()
            .await?;
        let Some(inv) = row.map(invitation).transpose()? else {
            return Ok(Acceptance::Gone);
        };
        let user = UserRecord {
            id: user_id.to_string(),
            account: inv.account,
            email: inv.email,
            password_hash: password_hash.to_string(),
            role: inv.role,
            created_at: now,
        };
        if !insert_user(tx.conn(), &user).await? {
            return Ok(Acceptance::EmailTaken);
        }
        tx.sql("DELETE FROM portal_invitations WHERE id = $1")
            .bind(&inv.id)
            .execute()
            .await?;
        tx.commit().await?;
        Ok(Acceptance::Joined(user))
    }
}
