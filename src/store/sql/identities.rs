//! Identities, once for both databases: OAuth clients (listing, revocation,
//! the replacement of a secret's stored hash) with their accounts, and the
//! portal's users and sessions.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{
    encode::IsNull,
    error::BoxDynError,
    postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef},
    sqlite::{SqliteArgumentValue, SqliteTypeInfo, SqliteValueRef},
    Decode, Encode, Postgres, Sqlite, Type,
};

use super::{
    accounts::insert_account,
    people::{insert_user, user_from_row, UserRow, USER_COLUMNS},
    At, Backend, Db, Tx,
};
use crate::{
    domain::{
        ids::AccountId,
        scope::{known_scopes, Scope},
    },
    store::{portal::*, ClientRecord, ClientSummary, IdentityStore, StoreError, StoreResult},
};

/// A client's scopes by name: `text[]` in PostgreSQL, a JSON array (text)
/// in SQLite, read as stored and then known (`read`).
enum Scopes {
    List(Vec<String>),
    Json(String),
}

impl Scopes {
    fn of(scopes: &[Scope]) -> Self {
        Scopes::List(scopes.iter().map(|s| s.as_str().to_string()).collect())
    }

    fn list(self) -> StoreResult<Vec<String>> {
        match self {
            Scopes::List(l) => Ok(l),
            Scopes::Json(s) => {
                serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(format!("scopes: {e}")))
            }
        }
    }

    /// The client's scopes, each once, in the order stored. Dispatch only
    /// stores scopes it knows; a name it does not know (a row changed by
    /// hand, or by another version) is left out with a warning, as a token
    /// request always left it out: it grants nothing.
    fn read(self, client_id: &str) -> StoreResult<Vec<Scope>> {
        let names = self.list()?;
        for unknown in names.iter().filter(|n| n.parse::<Scope>().is_err()) {
            tracing::warn!(client_id, scope = %unknown, "a stored client has an unknown scope; it is left out");
        }
        Ok(known_scopes(names.iter().map(String::as_str)))
    }
}

impl Type<Postgres> for Scopes {
    fn type_info() -> PgTypeInfo {
        <Vec<String> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Vec<String> as Type<Postgres>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Postgres> for Scopes {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        match self {
            Scopes::List(l) => <Vec<String> as Encode<'q, Postgres>>::encode_by_ref(l, buf),
            Scopes::Json(s) => {
                let l: Vec<String> = serde_json::from_str(s)?;
                <Vec<String> as Encode<'q, Postgres>>::encode(l, buf)
            }
        }
    }
}

impl<'r> Decode<'r, Postgres> for Scopes {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Scopes::List(<Vec<String> as Decode<'r, Postgres>>::decode(
            value,
        )?))
    }
}

impl Type<Sqlite> for Scopes {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Sqlite> for Scopes {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        let text = match self {
            Scopes::List(l) => serde_json::to_string(l)?,
            Scopes::Json(s) => s.clone(),
        };
        <String as Encode<'q, Sqlite>>::encode(text, buf)
    }
}

impl<'r> Decode<'r, Sqlite> for Scopes {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Scopes::Json(<String as Decode<'r, Sqlite>>::decode(value)?))
    }
}

type SummaryRow = (String, AccountId, String, Scopes, At, Option<At>);

const SUMMARY_COLUMNS: &str = "client_id, account, name, scopes, created_at, revoked_at";

fn summary(
    (client_id, account, name, scopes, created_at, revoked_at): SummaryRow,
) -> StoreResult<ClientSummary> {
    Ok(ClientSummary {
        scopes: scopes.read(&client_id)?,
        client_id,
        account,
        name,
        created_at: created_at.into(),
        revoked_at: revoked_at.map(Into::into),
    })
}

type SessionRow = (
    Vec<u8>,
    String,
    AccountId,
    String,
    String,
    At,
    At,
    String,
    Option<String>,
);

fn session_from_row(r: SessionRow) -> StoreResult<SessionRecord> {
    let (token_hash, user_id, account, email, csrf, created_at, expires_at, role, time_zone) = r;
    Ok(SessionRecord {
        token_hash,
        user_id,
        account,
        email,
        csrf,
        created_at: created_at.into(),
        expires_at: expires_at.into(),
        role: Role::from_stored(&role)?,
        time_zone,
    })
}

#[async_trait]
impl<B: Backend> IdentityStore for B {
    async fn create_client(&self, c: &ClientRecord) -> StoreResult<()> {
        let mut tx = self.db().begin().await?;
        let postgres = matches!(tx, Tx::Postgres(_));
        // Created now by this server's clock, as every other time it
        // writes, not by the database's (PostgreSQL's `DEFAULT now()`): a
        // client's `createdAt` compares with the times around it.
        let now = Utc::now();
        insert_account(|sql| tx.sql(sql), postgres, &c.account, now)
            .execute()
            .await?;
        tx.sql(
            "INSERT INTO clients (client_id, account, name, secret_hash, scopes, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&c.client_id)
        .bind(&c.account)
        .bind(&c.name)
        .bind(&c.secret_hash)
        .bind(Scopes::of(&c.scopes))
        .bind(At(now))
        .execute()
        .await?;
        tx.commit().await
    }

    async fn find_client(&self, client_id: &str) -> StoreResult<Option<ClientRecord>> {
        let row: Option<(String, AccountId, String, String, Scopes)> = self
            .db()
            .read(
                "SELECT client_id, account, name, secret_hash, scopes FROM clients \
                 WHERE client_id = $1 AND revoked_at IS NULL",
            )
            .bind(client_id)
            .fetch_optional()
            .await?;
        row.map(|(client_id, account, name, secret_hash, scopes)| {
            Ok(ClientRecord {
                scopes: scopes.read(&client_id)?,
                client_id,
                account,
                name,
                secret_hash,
            })
        })
        .transpose()
    }

    async fn count_clients(&self) -> StoreResult<u64> {
        let (n,): (i64,) = self
            .db()
            .read("SELECT count(*) FROM clients")
            .fetch_one()
            .await?;
        Ok(n.max(0) as u64)
    }

    async fn replace_client_secret_hash(
        &self,
        client_id: &str,
        old: &str,
        new: &str,
    ) -> StoreResult<bool> {
        let done = self
            .db()
            .write(
                "UPDATE clients SET secret_hash = $3 \
                 WHERE client_id = $1 AND secret_hash = $2 AND revoked_at IS NULL",
            )
            .bind(client_id)
            .bind(old)
            .bind(new)
            .execute()
            .await?;
        Ok(done == 1)
    }

    async fn list_clients(&self, account: &AccountId) -> StoreResult<Vec<ClientSummary>> {
        let rows: Vec<SummaryRow> = self
            .db()
            .read(format!(
                "SELECT {SUMMARY_COLUMNS} FROM clients WHERE account = $1 \
                 ORDER BY created_at, client_id"
            ))
            .bind(account)
            .fetch_all()
            .await?;
        rows.into_iter().map(summary).collect()
    }

    async fn revoke_client(
        &self,
        client_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<ClientSummary>> {
        let row: Option<SummaryRow> = self
            .db()
            .write(format!(
                "UPDATE clients SET revoked_at = COALESCE(revoked_at, $2) WHERE client_id = $1 \
                 RETURNING {SUMMARY_COLUMNS}"
            ))
            .bind(client_id)
            .bind(At(now))
            .fetch_optional()
            .await?;
        row.map(summary).transpose()
    }

    async fn clients_revoked_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<String>> {
        let rows: Vec<(String,)> = self
            .db()
            .read("SELECT client_id FROM clients WHERE revoked_at >= $1")
            .bind(At(since))
            .fetch_all()
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn ensure_account(&self, account: &AccountId) -> StoreResult<()> {
        let db = self.db();
        let postgres = matches!(db, Db::Postgres(_));
        insert_account(|sql| db.write(sql), postgres, account, Utc::now())
            .execute()
            .await?;
        Ok(())
    }

    async fn create_user(&self, u: &UserRecord) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        let postgres = matches!(tx, Tx::Postgres(_));
        insert_account(|sql| tx.sql(sql), postgres, &u.account, u.created_at)
            .execute()
            .await?;
        let created = insert_user(tx.conn(), u).await?;
        tx.commit().await?;
        Ok(created)
    }

    async fn find_user(&self, email: &str) -> StoreResult<Option<UserRecord>> {
        let row: Option<UserRow> = self
            .db()
            .read(format!(
                "SELECT {USER_COLUMNS} FROM portal_users WHERE email = $1"
            ))
            .bind(email)
            .fetch_optional()
            .await?;
        row.map(user_from_row).transpose()
    }

    async fn create_session(&self, s: &SessionRecord) -> StoreResult<()> {
        let mut tx = self.db().begin().await?;
        tx.sql("DELETE FROM portal_sessions WHERE expires_at < $1")
            .bind(At(s.created_at))
            .execute()
            .await?;
        tx.sql(
            "INSERT INTO portal_sessions (token_hash, user_id, account, email, csrf, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&s.token_hash)
        .bind(&s.user_id)
        .bind(&s.account)
        .bind(&s.email)
        .bind(&s.csrf)
        .bind(At(s.created_at))
        .bind(At(s.expires_at))
        .execute()
        .await?;
        tx.commit().await
    }

    async fn find_session(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<SessionRecord>> {
        let row: Option<SessionRow> = self
            .db()
            .read(
                "SELECT s.token_hash, s.user_id, s.account, s.email, s.csrf, s.created_at, s.expires_at, \
                   u.role, u.time_zone \
                 FROM portal_sessions s JOIN portal_users u ON u.id = s.user_id \
                 WHERE s.token_hash = $1 AND s.expires_at > $2",
            )
            .bind(token_hash)
            .bind(At(now))
            .fetch_optional()
            .await?;
        row.map(session_from_row).transpose()
    }

    async fn delete_session(&self, token_hash: &[u8]) -> StoreResult<()> {
        self.db()
            .write("DELETE FROM portal_sessions WHERE token_hash = $1")
            .bind(token_hash)
            .execute()
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_scopes_are_read_in_order_and_unknown_ones_left_out() {
        let stored = Scopes::Json(r#"["targets:read", "admin", "messages:write"]"#.into());
        assert_eq!(
            stored.read("dc_1").unwrap(),
            [Scope::TargetsRead, Scope::MessagesWrite]
        );
        let stored = Scopes::List(vec!["messages:read".into(), "messages:read".into()]);
        assert_eq!(stored.read("dc_1").unwrap(), [Scope::MessagesRead]);
        assert!(Scopes::Json("not json".into()).read("dc_1").is_err());
    }
}
