//! Targets in the PostgreSQL store: create, read, list, change, enable/disable
//! (pausing and resuming their messages), delete.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{map_err, rows::*, PgStore};
use crate::store::{sealed::seal_config, *};

#[async_trait]
impl TargetStore for PgStore {
    async fn insert_target(&self, t: &Target) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(&t.account)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let stored = seal_config(self.sealer(), t.id.as_str(), &t.config);
        let inserted = sqlx::query(
            "INSERT INTO targets (id, account, name, kind, enabled, config, secrets_key_id, sealed_secrets, \
               created_at, updated_at, gated) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (id) DO NOTHING",
        )
        .bind(t.id.as_str())
        .bind(&t.account)
        .bind(&t.name)
        .bind(t.config.kind())
        .bind(t.enabled)
        .bind(&stored.config)
        .bind(stored.key_id())
        .bind(stored.sealed_bytes())
        .bind(t.created_at)
        .bind(t.updated_at)
        .bind(t.config.limits().gated())
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected()
            == 1;
        tx.commit().await.map_err(map_err)?;
        Ok(inserted)
    }

    async fn get_target(&self, account: &str, id: &TargetId) -> StoreResult<Option<Target>> {
        let row: Option<TargetRow> = sqlx::query_as(&format!(
            "SELECT {TARGET_COLUMNS} FROM targets WHERE id = $1 AND account = $2"
        ))
        .bind(id.as_str())
        .bind(account)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(|r| r.into_target(self.sealer())).transpose()
    }

    async fn list_targets(
        &self,
        account: &str,
        after: Option<&TargetCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Target>> {
        // Newest first; the cursor is the last target of the previous page.
        let rows: Vec<TargetRow> = sqlx::query_as(&format!(
            "SELECT {TARGET_COLUMNS} FROM targets WHERE account = $1 \
             AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3)) \
             ORDER BY created_at DESC, id DESC LIMIT $4"
        ))
        .bind(account)
        .bind(after.map(|c| c.created_at))
        .bind(after.map(|c| c.id.as_str()).unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter()
            .map(|r| r.into_target(self.sealer()))
            .collect()
    }

    async fn update_target(&self, t: &Target) -> StoreResult<Option<Target>> {
        let stored = seal_config(self.sealer(), t.id.as_str(), &t.config);
        let limits = t.config.limits();
        let mut tx = self.begin().await?;
        // FOR UPDATE conflicts with the KEY SHARE lock a concurrent schedule
        // takes, so a message scheduled meanwhile is gated (or not) correctly.
        let locked: Option<(bool,)> =
            sqlx::query_as("SELECT gated FROM targets WHERE id = $1 AND account = $2 FOR UPDATE")
                .bind(t.id.as_str())
                .bind(&t.account)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
        let Some((was_gated,)) = locked else {
            return Ok(None);
        };
        // A breaker taken away forgets its state; one kept keeps it. A rate
        // kept counts what has just started.
        let row: TargetRow = sqlx::query_as(&format!(
            "UPDATE targets SET name = $3, config = $4, secrets_key_id = $5, sealed_secrets = $6, \
               updated_at = $7, gated = $8, \
               breaker_state = CASE WHEN $9 THEN breaker_state ELSE 'closed' END, \
               consecutive_failures = CASE WHEN $9 THEN consecutive_failures ELSE 0 END, \
               open_until = CASE WHEN $9 THEN open_until END, \
               cooldown_ms = CASE WHEN $9 THEN cooldown_ms END, \
               flow_starts = CASE WHEN $10 THEN flow_starts ELSE '[]' END \
             WHERE id = $1 AND account = $2 \
             RETURNING {TARGET_COLUMNS}"
        ))
        .bind(t.id.as_str())
        .bind(&t.account)
        .bind(&t.name)
        .bind(&stored.config)
        .bind(stored.key_id())
        .bind(stored.sealed_bytes())
        .bind(t.updated_at)
        .bind(limits.gated())
        .bind(limits.breaker.is_some())
        .bind(limits.flow.is_some_and(|f| f.rate.is_some()))
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        if was_gated != limits.gated() {
            // Its waiting messages move between the claims at once.
            sqlx::query("UPDATE messages SET gated = $2 WHERE target_id = $1 AND state = 'Scheduled' AND gated <> $2")
                .bind(t.id.as_str())
                .bind(limits.gated())
                .persistent(false)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            self.notify_if_soon(&mut tx, t.updated_at, t.updated_at)
                .await?;
        }
        let target = row.into_target(self.sealer())?;
        tx.commit().await.map_err(map_err)?;
        Ok(Some(target))
    }

    async fn set_target_enabled(
        &self,
        account: &str,
        id: &TargetId,
        enabled: bool,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Target>> {
        let mut tx = self.begin().await?;
        // FOR UPDATE conflicts with the KEY SHARE lock a concurrent schedule
        // takes, so a message scheduled meanwhile is paused (or not) correctly.
        let locked: Option<(bool,)> =
            sqlx::query_as("SELECT enabled FROM targets WHERE id = $1 AND account = $2 FOR UPDATE")
                .bind(id.as_str())
                .bind(account)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
        let Some((was_enabled,)) = locked else {
            return Ok(None);
        };
        let row: TargetRow = sqlx::query_as(&format!(
            "UPDATE targets SET enabled = $2, updated_at = CASE WHEN enabled = $2 THEN updated_at ELSE $3 END \
             WHERE id = $1 RETURNING {TARGET_COLUMNS}"
        ))
        .bind(id.as_str())
        .bind(enabled)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        if was_enabled != enabled {
            sqlx::query("UPDATE messages SET paused = $2 WHERE target_id = $1 AND state = 'Scheduled' AND paused <> $2")
                .bind(id.as_str())
                .bind(!enabled)
                .persistent(false)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            if enabled {
                self.notify_if_soon(&mut tx, now, now).await?;
            }
        }
        // Read before commit: a row this instance cannot open changes nothing.
        let target = row.into_target(self.sealer())?;
        tx.commit().await.map_err(map_err)?;
        Ok(Some(target))
    }

    async fn delete_target(&self, account: &str, id: &TargetId) -> StoreResult<DeleteTarget> {
        let mut tx = self.begin().await?;
        let exists: Option<(String,)> =
            sqlx::query_as("SELECT id FROM targets WHERE id = $1 AND account = $2 FOR UPDATE")
                .bind(id.as_str())
                .bind(account)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
        if exists.is_none() {
            return Ok(DeleteTarget::NotFound);
        }
        let pending: (bool,) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE target_id = $1 AND state IN ('Scheduled', 'DeadLetter'))",
        )
        .bind(id.as_str())
        .persistent(false)
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        if pending.0 {
            return Ok(DeleteTarget::HasPending);
        }
        // No foreign key cascades (the inserts check the target): its
        // delivered and cancelled messages go here, their attempts and
        // events with them. New ones wait for the row's lock, then find no
        // target.
        sqlx::query("DELETE FROM messages WHERE target_id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query("DELETE FROM targets WHERE id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(DeleteTarget::Deleted)
    }
}
