//! OAuth clients in the SQLite store: listing, revocation, and the
//! replacement of a secret's stored hash.

use chrono::{DateTime, Utc};

use super::{map_err, rows::*, SqliteStore};
use crate::store::*;

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

impl SqliteStore {
    pub(super) async fn replace_secret_hash(
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

    pub(super) async fn clients_of(&self, account: &str) -> StoreResult<Vec<ClientSummary>> {
        let rows: Vec<SummaryRow> = sqlx::query_as(&format!(
            "SELECT {SUMMARY_COLUMNS} FROM clients WHERE account = ? ORDER BY created_at, client_id"
        ))
        .bind(account)
        .fetch_all(&self.reader)
        .await
        .map_err(map_err)?;
        rows.into_iter().map(summary).collect()
    }

    pub(super) async fn revoke(
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

    pub(super) async fn revoked_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT client_id FROM clients WHERE revoked_at >= ?")
                .bind(ms(since))
                .fetch_all(&self.reader)
                .await
                .map_err(map_err)?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}
