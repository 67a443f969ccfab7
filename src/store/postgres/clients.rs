//! OAuth clients in the PostgreSQL store: listing, revocation, and the
//! replacement of a secret's stored hash.

use chrono::{DateTime, Utc};

use super::{map_err, PgStore};
use crate::store::*;

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

impl PgStore {
    pub(super) async fn replace_secret_hash(
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

    pub(super) async fn clients_of(&self, account: &str) -> StoreResult<Vec<ClientSummary>> {
        let rows: Vec<SummaryRow> = sqlx::query_as(&format!(
            "SELECT {SUMMARY_COLUMNS} FROM clients WHERE account = $1 ORDER BY created_at, client_id"
        ))
        .bind(account)
        .fetch_all(self.pool())
        .await
        .map_err(map_err)?;
        Ok(rows.into_iter().map(summary).collect())
    }

    pub(super) async fn revoke(
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

    pub(super) async fn revoked_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT client_id FROM clients WHERE revoked_at >= $1")
                .bind(since)
                .fetch_all(self.pool())
                .await
                .map_err(map_err)?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}
