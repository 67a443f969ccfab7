//! Targets, once for both databases: create, read, list, change,
//! enable/disable (pausing and resuming their messages), delete.
//!
//! A change that moves a target's waiting messages is decided on its row:
//! PostgreSQL locks it (`FOR UPDATE`, which conflicts with the `KEY SHARE`
//! lock a concurrent schedule takes), SQLite's one writer orders it against
//! concurrent schedules. On PostgreSQL an enable or disable holds the row
//! only to flip it; the messages follow in short batches (`align_flags`),
//! so that no insert, of this account or another, waits while a target with
//! a million messages changes. PostgreSQL also tells other instances when
//! messages may fall due at once (`Keeps::notify_if_soon`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::{
    accounts::insert_account,
    gates::tell_breakers,
    limits::{room_for, Rows},
    own::Own,
    rows::{TargetRow, TARGET_COLUMNS},
    At, Keeps, Tx, Uid,
};
use crate::store::{
    gates::closed_from, sealed::seal_config, AccountId, DeleteTarget, StoreResult, Target,
    TargetCursor, TargetId, TargetStore,
};
use uuid::Uuid;

/// Whether deleting a target deletes its messages by itself. PostgreSQL's
/// messages lost their foreign key to the target (their inserts check it),
/// so the delete removes them; SQLite's key cascades.
fn deletes_messages_itself(tx: &Tx) -> bool {
    matches!(tx, Tx::Postgres(_))
}

#[async_trait]
impl<B: Own> TargetStore for B {
    async fn insert_target(&self, t: &Target) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        let postgres = matches!(tx, Tx::Postgres(_));
        insert_account(|sql| tx.sql(sql), postgres, &t.account, t.created_at)
            .execute()
            .await?;
        room_for(self, &mut tx, &t.account, Rows::Targets, 1).await?;
        let stored = seal_config(self.sealer(), t.id.as_str(), &t.config);
        let inserted = tx
            .sql(
                "INSERT INTO targets (id, account, name, kind, enabled, config, secrets_key_id, sealed_secrets, \
                   created_at, updated_at, gated) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (id) DO NOTHING",
            )
            .bind(t.id.as_str())
            .bind(&t.account)
            .bind(&t.name)
            .bind(t.config.kind())
            .bind(t.enabled)
            .bind(Json(&stored.config))
            .bind(stored.key_id())
            .bind(stored.sealed_bytes())
            .bind(At(t.created_at))
            .bind(At(t.updated_at))
            .bind(t.config.limits().gated())
            .execute()
            .await?
            == 1;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn get_target(&self, account: &AccountId, id: &TargetId) -> StoreResult<Option<Target>> {
        let row: Option<TargetRow> = self
            .db()
            .read(format!(
                "SELECT {TARGET_COLUMNS} FROM targets WHERE id = $1 AND account = $2"
            ))
            .bind(id.as_str())
            .bind(account)
            .fetch_optional()
            .await?;
        row.map(|r| r.into_target(self.sealer())).transpose()
    }

    async fn list_targets(
        &self,
        account: &AccountId,
        after: Option<&TargetCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Target>> {
        // Newest first; the cursor is the last target of the previous page.
        let rows: Vec<TargetRow> = self
            .db()
            .read(format!(
                "SELECT {TARGET_COLUMNS} FROM targets WHERE account = $1 \
                 AND ($2 IS NULL OR (created_at, id) < ($2, $3)) \
                 ORDER BY created_at DESC, id DESC LIMIT $4"
            ))
            .bind(account)
            .bind(after.map(|c| At(c.created_at)))
            .bind(after.map(|c| c.id.as_str()).unwrap_or(""))
            .bind(i64::from(limit))
            .fetch_all()
            .await?;
        rows.into_iter()
            .map(|r| r.into_target(self.sealer()))
            .collect()
    }

    async fn update_target(&self, t: &Target) -> StoreResult<Option<Target>> {
        let stored = seal_config(self.sealer(), t.id.as_str(), &t.config);
        let limits = t.config.limits();
        let mut tx = self.db().begin().await?;
        let lock = tx.for_update();
        let before: Option<(bool, String)> = tx
            .sql(format!(
                "SELECT gated, breaker_state FROM targets WHERE id = $1 AND account = $2{lock}"
            ))
            .bind(t.id.as_str())
            .bind(&t.account)
            .fetch_optional()
            .await?;
        let Some((was_gated, was_breaker)) = before else {
            return Ok(None);
        };
        // A breaker taken away forgets its state; one kept keeps it. A rate
        // kept counts what has just started.
        let row: TargetRow = tx
            .sql(format!(
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
            .bind(Json(&stored.config))
            .bind(stored.key_id())
            .bind(stored.sealed_bytes())
            .bind(At(t.updated_at))
            .bind(limits.gated())
            .bind(limits.breaker.is_some())
            .bind(limits.flow.is_some_and(|f| f.rate.is_some()))
            .fetch_one()
            .await?;
        let regated = was_gated != limits.gated();
        let side_by_side = tx.locks_rows();
        if regated && side_by_side {
            // The messages follow in batches once this commits.
            tx.sql("UPDATE targets SET align_seq = align_seq + 1 WHERE id = $1")
                .bind(t.id.as_str())
                .execute()
                .await?;
        } else if regated {
            // One writer: its waiting messages move between the claims at once.
            tx.sql(
                "UPDATE messages SET gated = $2 \
                 WHERE target_id = $1 AND state = 'Scheduled' AND gated <> $2",
            )
            .bind(t.id.as_str())
            .bind(limits.gated())
            .replanned()
            .execute()
            .await?;
            self.notify_if_soon(&mut tx, t.updated_at, t.updated_at)
                .await?;
        }
        let target = row.into_target(self.sealer())?;
        // A breaker taken away while open has closed: told as any closing.
        let closed = limits
            .breaker
            .is_none()
            .then(|| closed_from(&was_breaker))
            .flatten();
        if let Some(change) = closed {
            tell_breakers(
                self,
                &mut tx,
                &[(t.id.clone(), change)],
                &[target.health],
                t.updated_at,
            )
            .await?;
        }
        tx.commit().await?;
        if regated && side_by_side {
            align_or_leave(self, t.id.as_str(), t.updated_at).await;
        }
        Ok(Some(target))
    }

    async fn set_target_enabled(
        &self,
        account: &AccountId,
        id: &TargetId,
        enabled: bool,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Target>> {
        let mut tx = self.db().begin().await?;
        // Where writers run side by side, the row lock waits for the inserts
        // under way for this target (they hold its key) and makes the next
        // ones wait, for this short transaction only: every message inserted
        // after it reads the new `enabled`, and the ones before it are
        // committed when the batches below look for them.
        let side_by_side = tx.locks_rows();
        let lock = tx.for_update();
        let before: Option<(bool,)> = tx
            .sql(format!(
                "SELECT enabled FROM targets WHERE id = $1 AND account = $2{lock}"
            ))
            .bind(id.as_str())
            .bind(account)
            .fetch_optional()
            .await?;
        let Some((was_enabled,)) = before else {
            return Ok(None);
        };
        let row: TargetRow = tx
            .sql(format!(
                "UPDATE targets SET enabled = $2, \
                   updated_at = CASE WHEN enabled = $2 THEN updated_at ELSE $3 END \
                 WHERE id = $1 RETURNING {TARGET_COLUMNS}"
            ))
            .bind(id.as_str())
            .bind(enabled)
            .bind(At(now))
            .fetch_one()
            .await?;
        let flipped = was_enabled != enabled;
        if flipped && side_by_side {
            // The messages follow in batches once this commits.
            tx.sql("UPDATE targets SET align_seq = align_seq + 1 WHERE id = $1")
                .bind(id.as_str())
                .execute()
                .await?;
        } else if flipped {
            // One writer: the messages change in the same transaction.
            tx.sql(
                "UPDATE messages SET paused = $2 \
                 WHERE target_id = $1 AND state = 'Scheduled' AND paused <> $2",
            )
            .bind(id.as_str())
            .bind(!enabled)
            .replanned()
            .execute()
            .await?;
            if enabled {
                self.notify_if_soon(&mut tx, now, now).await?;
            }
        }
        // Read before commit: a row this instance cannot open changes nothing.
        let target = row.into_target(self.sealer())?;
        tx.commit().await?;
        if flipped && side_by_side {
            align_or_leave(self, id.as_str(), now).await;
        }
        Ok(Some(target))
    }

    async fn align_targets(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        if !matches!(self.db().dialect(), super::dialect::Dialect::Postgres) {
            return Ok(0);
        }
        let pending: Vec<(String,)> = self
            .db()
            .read("SELECT id FROM targets WHERE align_seq > aligned_seq LIMIT 100")
            .fetch_all()
            .await?;
        for (id,) in &pending {
            align_flags(self, id, now).await?;
        }
        Ok(pending.len() as u64)
    }

    async fn delete_target(&self, account: &AccountId, id: &TargetId) -> StoreResult<DeleteTarget> {
        let mut tx = self.db().begin().await?;
        let lock = tx.for_update();
        let exists: Option<(String,)> = tx
            .sql(format!(
                "SELECT id FROM targets WHERE id = $1 AND account = $2{lock}"
            ))
            .bind(id.as_str())
            .bind(account)
            .fetch_optional()
            .await?;
        if exists.is_none() {
            return Ok(DeleteTarget::NotFound);
        }
        let (pending,): (bool,) = tx
            .sql(
                "SELECT EXISTS (SELECT 1 FROM messages \
                 WHERE target_id = $1 AND state IN ('Scheduled', 'DeadLetter'))",
            )
            .bind(id.as_str())
            .replanned()
            .fetch_one()
            .await?;
        if pending {
            return Ok(DeleteTarget::HasPending);
        }
        if deletes_messages_itself(&tx) {
            // Its delivered and cancelled messages go here, their attempts
            // and events with them. New ones wait for the row's lock, then
            // find no target.
            tx.sql("DELETE FROM messages WHERE target_id = $1")
                .bind(id.as_str())
                .execute()
                .await?;
        }
        tx.sql("DELETE FROM targets WHERE id = $1")
            .bind(id.as_str())
            .execute()
            .await?;
        tx.commit().await?;
        Ok(DeleteTarget::Deleted)
    }
}

/// `align_flags` after a change that committed: should the batches fail
/// (the database went away), the change stands, a claim never sends what
/// it should not, and the retention pass finishes them.
async fn align_or_leave<B: Keeps>(store: &B, target: &str, now: DateTime<Utc>) {
    if let Err(e) = align_flags(store, target, now).await {
        tracing::warn!(error = %e, target_id = target, "the target changed; its messages follow with the next retention pass");
    }
}

/// Messages sought by the batches of `align_flags` in one transaction.
const ALIGN_BATCH: i64 = 1000;

/// PostgreSQL: brings the `paused` and `gated` flags of a target's
/// Scheduled messages in line with the target's `enabled` and `gated`, a
/// batch of messages a transaction (in the order of their ids), so that no
/// transaction holds many of them, and none holds the target's row. Each
/// batch reads the target as it is then: batches of two changes in a row
/// both end at the last. Marks the changes it saw done (`aligned_seq`),
/// unless the target is gone.
pub(crate) async fn align_flags<B: Keeps>(
    store: &B,
    target: &str,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let db = store.db();
    let seen: Option<(i64,)> = db
        .read("SELECT align_seq FROM targets WHERE id = $1")
        .bind(target)
        .fetch_optional()
        .await?;
    let Some((seen,)) = seen else {
        return Ok(());
    };
    // Every message inserted before the target's row changed was committed
    // when it changed (the change waited for their inserts), so has an id
    // no greater than this; every one inserted since read the new row and
    // needs nothing. The batches stop here, however fast the target's
    // account keeps posting to it.
    let last: Option<(Uid,)> = db
        .read(
            "SELECT id FROM messages WHERE target_id = $1 AND state = 'Scheduled' \
             ORDER BY id DESC LIMIT 1",
        )
        .bind(target)
        .fetch_optional()
        .await?;
    let Some((upto,)) = last else {
        return mark_aligned(store, target, seen).await;
    };
    let mut after = Uid(Uuid::nil());
    loop {
        let mut tx = db.begin().await?;
        let (scanned, last, changed, enabled): (i64, Option<Uid>, i64, Option<bool>) = tx
            .sql(
                "WITH t AS (SELECT enabled, gated FROM targets WHERE id = $1), \
                 scan AS (SELECT id, paused, gated FROM messages \
                   WHERE target_id = $1 AND state = 'Scheduled' AND id > $2 AND id <= $4 \
                   ORDER BY id LIMIT $3), \
                 upd AS (UPDATE messages m SET paused = NOT t.enabled, gated = t.gated FROM scan, t \
                   WHERE m.id = scan.id AND (scan.paused = t.enabled OR scan.gated <> t.gated) \
                     AND m.state = 'Scheduled' RETURNING 1) \
                 SELECT (SELECT count(*) FROM scan), (SELECT id FROM scan ORDER BY id DESC LIMIT 1), \
                   (SELECT count(*) FROM upd), (SELECT enabled FROM t)",
            )
            .bind(target)
            .bind(after)
            .bind(ALIGN_BATCH)
            .bind(upto)
            .fetch_one()
            .await?;
        if enabled == Some(true) && changed > 0 {
            // Waiting messages go: other instances' sweepers are woken.
            store.notify_if_soon(&mut tx, now, now).await?;
        }
        tx.commit().await?;
        match last {
            Some(last) if scanned == ALIGN_BATCH && enabled.is_some() => after = last,
            _ => break,
        }
    }
    mark_aligned(store, target, seen).await
}

/// The target's changes up to `seen` are followed by its messages.
async fn mark_aligned<B: Keeps>(store: &B, target: &str, seen: i64) -> StoreResult<()> {
    store
        .db()
        .write("UPDATE targets SET aligned_seq = GREATEST(aligned_seq, $2) WHERE id = $1")
        .bind(target)
        .bind(seen)
        .execute()
        .await?;
    Ok(())
}
