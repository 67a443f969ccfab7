//! Identities in the PostgreSQL store: OAuth clients (listing, revocation,
//! the replacement of a secret's stored hash) with their accounts, and the
//! portal's users and sessions.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{map_err, PgStore};
use crate::store::{
    portal::*,
    sql::{
        people::{insert_user, user_from_row, UserRow},
        Conn,
    },
    *,
};

type SummaryRow = (
    String,
    String,
    String,
    Vec<String>,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
);

const SUMMARY_COLUMNS: &str = "client_id, account, name, scopes, created_at, revoked_at";

fn summary(
    (client_id, account, name, scopes, created_at, revoked_at): SummaryRow,
) -> ClientSummary {
    ClientSummary {
        client_id,
        account,
        name,
        scopes,
        created_at,
        revoked_at,
    }
}

type SessionRow = (
    Vec<u8>,
    String,
    String,
    String,
    String,
    DateTime<Utc>,
    DateTime<Utc>,
    String,
    Option<String>,
);

#[async_trait]
impl IdentityStore for PgStore {
    async fn create_client(&self, c: &ClientRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(&c.account)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        // Created now by this server's clock, as every other time it
        // writes, not by the database's (`DEFAULT now()`): a client's
        // `createdAt` compares with the times around it.
        sqlx::query(
            "INSERT INTO clients (client_id, account, name, secret_hash, scopes, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&c.client_id)
        .bind(&c.account)
        .bind(&c.name)
        .bind(&c.secret_hash)
        .bind(&c.scopes)
        .bind(Utc::now())
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)
    }

    async fn find_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>> {
        let row: Option<(String, String, String, String, Vec<String>)> =
            sqlx::query_as("SELECT client_id, account, name, secret_hash, scopes FROM clients WHERE client_id = $1 AND revoked_at IS NULL")
                .bind(client_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?;
        Ok(row.map(
            |(client_id, account, name, secret_hash, scopes)| ClientRecord {
                client_id,
                account,
                name,
                secret_hash,
                scopes,
            },
        ))
    }

    async fn count_clients(&self) -> StoreResult<u64> {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM clients")
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(n.max(0) as u64)
    }

    async fn replace_client_secret_hash(
        &self,
        client_id: &str,
        old: &str,
        new: &str,
    ) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE clients SET secret_hash = $3 \
             WHERE client_id = $1 AND secret_hash = $2 AND revoked_at IS NULL",
        )
        .bind(client_id)
        .bind(old)
        .bind(new)
        .execute(self.pool())
        .await
        .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    async fn list_clients(&self, account: &str) -> StoreResult<Vec<ClientSummary>> {
        let rows: Vec<SummaryRow> = sqlx::query_as(&format!(
            "SELECT {SUMMARY_COLUMNS} FROM clients WHERE account = $1 ORDER BY created_at, client_id"
        ))
        .bind(account)
        .fetch_all(self.pool())
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(summary).collect())
    }

    async fn revoke_client(
        &self,
        client_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<ClientSummary>> {
        let row: Option<SummaryRow> = sqlx::query_as(&format!(
            "UPDATE clients SET revoked_at = COALESCE(revoked_at, $2) WHERE client_id = $1 \
             RETURNING {SUMMARY_COLUMNS}"
        ))
        .bind(client_id)
        .bind(now)
        .fetch_optional(self.pool())
        .await
        .map_err(map_err)?;
        Ok(row.map(summary))
    }

    async fn clients_revoked_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT client_id FROM clients WHERE revoked_at >= $1")
                .bind(since)
                .fetch_all(self.pool())
                .await
                .map_err(map_err)?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn ensure_account(&self, account: &str) -> StoreResult<()> {
        sqlx::query("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(account)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn create_user(&self, u: &UserRecord) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(&u.account)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let created = insert_user(Conn::from(&mut *tx), u).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(created)
    }

    async fn find_user(&self, email: &str) -> StoreResult<Option<UserRecord>> {
        let row: Option<UserRow> = sqlx::query_as(
            "SELECT id, account, email, password_hash, created_at, role FROM portal_users WHERE email = $1",
        )
        .bind(email)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(user_from_row).transpose()
    }

    async fn create_session(&self, s: &SessionRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM portal_sessions WHERE expires_at < $1")
            .bind(s.created_at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query(
            "INSERT INTO portal_sessions (token_hash, user_id, account, email, csrf, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&s.token_hash)
        .bind(&s.user_id)
        .bind(&s.account)
        .bind(&s.email)
        .bind(&s.csrf)
        .bind(s.created_at)
        .bind(s.expires_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)
    }

    async fn find_session(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<SessionRecord>> {
        let row: Option<SessionRow> = sqlx::query_as(
            "SELECT s.token_hash, s.user_id, s.account, s.email, s.csrf, s.created_at, s.expires_at, u.role, u.time_zone \
             FROM portal_sessions s JOIN portal_users u ON u.id = s.user_id \
             WHERE s.token_hash = $1 AND s.expires_at > $2",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(session_from_row).transpose()
    }

    async fn delete_session(&self, token_hash: &[u8]) -> StoreResult<()> {
        sqlx::query("DELETE FROM portal_sessions WHERE token_hash = $1")
            .bind(token_hash)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }
}

fn session_from_row(r: SessionRow) -> StoreResult<SessionRecord> {
    let (token_hash, user_id, account, email, csrf, created_at, expires_at, role, time_zone) = r;
    Ok(SessionRecord {
        token_hash,
        user_id,
        account,
        email,
        csrf,
        created_at,
        expires_at,
        role: Role::from_stored(&role)?,
        time_zone,
    })
}
