//! The people of an account in SQLite: roles, removal, passwords and
//! invitations. The store's one writing connection decides changes that
//! could leave an account without an admin one at a time.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    identities::{insert_user, user_from_row, UserRow},
    map_err,
    rows::{from_ms, ms},
    SqliteStore,
};
use crate::store::{portal::*, *};

type InvitationRow = (String, Vec<u8>, String, String, String, String, i64, i64);

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
        created_at: from_ms(created_at),
        expires_at: from_ms(expires_at),
    })
}

type Tx = sqlx::Transaction<'static, sqlx::Sqlite>;

/// The person's role in the account (inside the writer's transaction); None when the
/// account has no such person.
async fn lock_and_find(tx: &mut Tx, account: &str, user_id: &str) -> StoreResult<Option<Role>> {
    let role: Option<(String,)> =
        sqlx::query_as("SELECT role FROM portal_users WHERE id = ?1 AND account = ?2")
            .bind(user_id)
            .bind(account)
            .fetch_optional(&mut **tx)
            .await
            .map_err(map_err)?;
    role.map(|(r,)| Role::from_stored(&r)).transpose()
}

async fn admins(tx: &mut Tx, account: &str) -> StoreResult<i64> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM portal_users WHERE account = ?1 AND role = 'admin'")
            .bind(account)
            .fetch_one(&mut **tx)
            .await
            .map_err(map_err)?;
    Ok(n)
}

#[async_trait]
impl PeopleStore for SqliteStore {
    async fn list_users(&self, account: &str) -> StoreResult<Vec<UserRecord>> {
        let rows: Vec<UserRow> = sqlx::query_as(
            "SELECT id, account, email, password_hash, created_at, role FROM portal_users \
             WHERE account = ?1 ORDER BY created_at, id",
        )
        .bind(account)
        .fetch_all(&self.reader)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(user_from_row).collect()
    }

    async fn set_user_role(
        &self,
        account: &str,
        user_id: &str,
        role: Role,
    ) -> StoreResult<PeopleChange> {
        let mut tx = self.begin().await?;
        let Some(was) = lock_and_find(&mut tx, account, user_id).await? else {
            return Ok(PeopleChange::NotFound);
        };
        if was == Role::Admin && role != Role::Admin && admins(&mut tx, account).await? <= 1 {
            return Ok(PeopleChange::LastAdmin);
        }
        sqlx::query("UPDATE portal_users SET role = ?3 WHERE id = ?1 AND account = ?2")
            .bind(user_id)
            .bind(account)
            .bind(role.as_str())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(PeopleChange::Done)
    }

    async fn remove_user(&self, account: &str, user_id: &str) -> StoreResult<PeopleChange> {
        let mut tx = self.begin().await?;
        let Some(was) = lock_and_find(&mut tx, account, user_id).await? else {
            return Ok(PeopleChange::NotFound);
        };
        if was == Role::Admin && admins(&mut tx, account).await? <= 1 {
            return Ok(PeopleChange::LastAdmin);
        }
        // Sessions go with the person (ON DELETE CASCADE).
        sqlx::query("DELETE FROM portal_users WHERE id = ?1 AND account = ?2")
            .bind(user_id)
            .bind(account)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(PeopleChange::Done)
    }

    async fn set_password(
        &self,
        user_id: &str,
        password_hash: &str,
        keep: &[u8],
    ) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let n = sqlx::query("UPDATE portal_users SET password_hash = ?2 WHERE id = ?1")
            .bind(user_id)
            .bind(password_hash)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        sqlx::query("DELETE FROM portal_sessions WHERE user_id = ?1 AND token_hash <> ?2")
            .bind(user_id)
            .bind(keep)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(n == 1)
    }

    async fn set_time_zone(&self, user_id: &str, zone: Option<&str>) -> StoreResult<()> {
        sqlx::query("UPDATE portal_users SET time_zone = ?2 WHERE id = ?1")
            .bind(user_id)
            .bind(zone)
            .execute(&self.writer)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn create_invitation(&self, i: &InvitationRecord) -> StoreResult<()> {
        sqlx::query(&format!(
            "INSERT INTO portal_invitations ({INVITATION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
        ))
        .bind(&i.id)
        .bind(&i.token_hash)
        .bind(&i.account)
        .bind(&i.email)
        .bind(i.role.as_str())
        .bind(&i.invited_by)
        .bind(ms(i.created_at))
        .bind(ms(i.expires_at))
        .execute(&self.writer)
        .await
        .map_err(map_err)?;
        Ok(())
    }

    async fn list_invitations(
        &self,
        account: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<InvitationRecord>> {
        let rows: Vec<InvitationRow> = sqlx::query_as(&format!(
            "SELECT {INVITATION_COLUMNS} FROM portal_invitations \
             WHERE account = ?1 AND expires_at > ?2 ORDER BY created_at, id"
        ))
        .bind(account)
        .bind(ms(now))
        .fetch_all(&self.reader)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(invitation).collect()
    }

    async fn find_invitation(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<InvitationRecord>> {
        let row: Option<InvitationRow> = sqlx::query_as(&format!(
            "SELECT {INVITATION_COLUMNS} FROM portal_invitations WHERE token_hash = ?1 AND expires_at > ?2"
        ))
        .bind(token_hash)
        .bind(ms(now))
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        row.map(invitation).transpose()
    }

    async fn revoke_invitation(&self, account: &str, id: &str) -> StoreResult<bool> {
        let n = sqlx::query("DELETE FROM portal_invitations WHERE id = ?1 AND account = ?2")
            .bind(id)
            .bind(account)
            .execute(&self.writer)
            .await
            .map_err(map_err)?
            .rows_affected();
        Ok(n == 1)
    }

    async fn accept_invitation(
        &self,
        token_hash: &[u8],
        user_id: &str,
        password_hash: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Acceptance> {
        let mut tx = self.begin().await?;
        let row: Option<InvitationRow> = sqlx::query_as(&format!(
            "SELECT {INVITATION_COLUMNS} FROM portal_invitations \
             WHERE token_hash = ?1 AND expires_at > ?2"
        ))
        .bind(token_hash)
        .bind(ms(now))
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
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
        if !insert_user(&mut tx, &user).await? {
            return Ok(Acceptance::EmailTaken);
        }
        sqlx::query("DELETE FROM portal_invitations WHERE id = ?1")
            .bind(&inv.id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(Acceptance::Joined(user))
    }
}
