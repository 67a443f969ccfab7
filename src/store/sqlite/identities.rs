//! Identities in the SQLite store: OAuth clients (listing, revocation, the
//! replacement of a secret's stored hash) with their accounts, and the
//! portal's users and sessions.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{map_err, rows::*, SqliteStore};
use crate::store::{
    portal::*,
    sql::{
        people::{insert_user, user_from_row, UserRow},
        Conn,
    },
    *,
};

type SummaryRow = (String, String, String, String, i64, Option<i64>);

const SUMMARY_COLUMNS: &str = "client_id, account, name, scopes, created_at, revoked_at";

fn summary(
    (client_id, account, name, scopes, created_at, revoked_at): SummaryRow,
) -> StoreResult<ClientSummary> {
    Ok(ClientSummary {
        client_id,
        account,
        name,
        scopes: serde_json::from_str(&scopes)
            .map_err(|e| StoreError::Corrupt(format!("scopes: {e}")))?,
        created_at: from_ms(created_at),
        revoked_at: revoked_at.map(from_ms),
    })
}

type SessionRow = (
    Vec<u8>,
    String,
    String,
    String,
    String,
    i64,
    i64,
    String,
    Option<String>,
);

#[async_trait]
impl IdentityStore for SqliteStore {
    async fn create_client(&self, c: &ClientRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        let now = ms(Utc::now());
        sqlx::query("INSERT INTO accounts (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING")
            .bind(&c.account)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query(
            "INSERT INTO clients (client_id, account, name, secret_hash, scopes, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(&c.client_id)
        .bind(&c.account)
        .bind(&c.name)
        .bind(&c.secret_hash)
        .bind(serde_json::to_string(&c.scopes).expect("scopes serialize"))
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)
    }

    async fn find_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>> {
        let row: Option<(String, String, String, String, String)> = sqlx::query_as(
            "SELECT client_id, account, name, secret_hash, scopes FROM clients WHERE client_id = ? AND revoked_at IS NULL",
        )
        .bind(client_id)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        row.map(|(client_id, account, name, secret_hash, scopes)| {
            let scopes = serde_json::from_str(&scopes)
                .map_err(|e| StoreError::Corrupt(format!("scopes: {e}")))?;
            Ok(ClientRecord {
                client_id,
                account,
                name,
                secret_hash,
                scopes,
            })
        })
        .transpose()
    }

    async fn count_clients(&self) -> StoreResult<u64> {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM clients")
            .fetch_one(&self.reader)
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
            "UPDATE clients SET secret_hash = ? \
             WHERE client_id = ? AND secret_hash = ? AND revoked_at IS NULL",
        )
        .bind(new)
        .bind(client_id)
        .bind(old)
        .execute(&self.writer)
        .await
        .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    async fn list_clients(&self, account: &str) -> StoreResult<Vec<ClientSummary>> {
        let rows: Vec<SummaryRow> = sqlx::query_as(&format!(
            "SELECT {SUMMARY_COLUMNS} FROM clients WHERE account = ? ORDER BY created_at, client_id"
        ))
        .bind(account)
        .fetch_all(&self.reader)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(summary).collect()
    }

    async fn revoke_client(
        &self,
        client_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<ClientSummary>> {
        let row: Option<SummaryRow> = sqlx::query_as(&format!(
            "UPDATE clients SET revoked_at = COALESCE(revoked_at, ?) WHERE client_id = ? \
             RETURNING {SUMMARY_COLUMNS}"
        ))
        .bind(ms(now))
        .bind(client_id)
        .fetch_optional(&self.writer)
        .await
        .map_err(map_err)?;
        row.map(summary).transpose()
    }

    async fn clients_revoked_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT client_id FROM clients WHERE revoked_at >= ?")
                .bind(ms(since))
                .fetch_all(&self.reader)
                .await
                .map_err(map_err)?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn ensure_account(&self, account: &str) -> StoreResult<()> {
        sqlx::query("INSERT INTO accounts (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING")
            .bind(account)
            .bind(ms(Utc::now()))
            .execute(&self.writer)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn create_user(&self, u: &UserRecord) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO accounts (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING")
            .bind(&u.account)
            .bind(ms(u.created_at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let created = insert_user(Conn::from(&mut *tx), u).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(created)
    }

    async fn find_user(&self, email: &str) -> StoreResult<Option<UserRecord>> {
        let row: Option<UserRow> = sqlx::query_as(
            "SELECT id, account, email, password_hash, created_at, role FROM portal_users WHERE email = ?",
        )
        .bind(email)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        row.map(user_from_row).transpose()
    }

    async fn create_session(&self, s: &SessionRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM portal_sessions WHERE expires_at < ?")
            .bind(ms(s.created_at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query(
            "INSERT INTO portal_sessions (token_hash, user_id, account, email, csrf, created_at, expires_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.token_hash)
        .bind(&s.user_id)
        .bind(&s.account)
        .bind(&s.email)
        .bind(&s.csrf)
        .bind(ms(s.created_at))
        .bind(ms(s.expires_at))
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
             WHERE s.token_hash = ? AND s.expires_at > ?",
        )
        .bind(token_hash)
        .bind(ms(now))
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        row.map(
            |(
                token_hash,
                user_id,
                account,
                email,
                csrf,
                created_at,
                expires_at,
                role,
                time_zone,
            )| {
                Ok(SessionRecord {
                    token_hash,
                    user_id,
                    account,
                    email,
                    csrf,
                    created_at: from_ms(created_at),
                    expires_at: from_ms(expires_at),
                    role: Role::from_stored(&role)?,
                    time_zone,
                })
            },
        )
        .transpose()
    }

    async fn delete_session(&self, token_hash: &[u8]) -> StoreResult<()> {
        sqlx::query("DELETE FROM portal_sessions WHERE token_hash = ?")
            .bind(token_hash)
            .execute(&self.writer)
            .await
            .map_err(map_err)?;
        Ok(())
    }
}
