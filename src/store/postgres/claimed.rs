//! Handing out claimed rows: each row's target opened once a claim, a row
//! that cannot be read dead-lettered, one sealed under a key this instance
//! lacks left leased for another.

use std::{collections::HashMap, sync::Arc};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{map_err, ordering, rows::*, PgStore};
use crate::{
    domain::{
        ids::{EventId, MessageId, TargetId},
        target::TargetConfig,
    },
    store::{sealed::open_config, *},
};

impl PgStore {
    /// Opens the claimed rows' targets and hands out the messages; a row that
    /// cannot be read is dead-lettered, one sealed under a key this instance
    /// lacks stays leased for another.
    pub(super) async fn open_claimed(
        &self,
        rows: Vec<ClaimRow>,
        token: Uuid,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Claimed>> {
        let mut claimed = Vec::with_capacity(rows.len());
        let (mut bad_ids, mut bad_reasons) = (Vec::new(), Vec::new());
        // Each message carries its target's row; a target is opened once a claim.
        let mut configs: HashMap<String, Result<Arc<TargetConfig>, StoreError>> = HashMap::new();
        let mut unopened: Vec<String> = Vec::new();
        for r in rows {
            let id = r.id;
            let config = configs.entry(r.target_id.clone()).or_insert_with(|| {
                open_config(
                    self.sealer(),
                    &r.target_id,
                    &r.kind,
                    r.config,
                    r.secrets_key_id.as_deref(),
                    r.sealed_secrets.as_deref(),
                )
                .map(Arc::new)
            });
            let target = match config {
                Ok(c) => c.clone(),
                // Sealed under a key this instance lacks: leave the message
                // leased, for an instance that has the key once the lease ends.
                Err(e) if e.is_unknown_key() => {
                    unopened.push(r.target_id);
                    continue;
                }
                Err(e) => {
                    bad_ids.push(id);
                    bad_reasons.push(error_chain(e));
                    continue;
                }
            };
            let read = || -> StoreResult<Claimed> {
                Ok(Claimed {
                    id: MessageId(r.id),
                    target,
                    target_id: TargetId::from_trusted(r.target_id),
                    payload: payload_from_bytes(r.payload)?.into_inner(),
                    delivery_time: r.delivery_time,
                    scheduled_at: r.scheduled_at,
                    attempt_count: r.attempt_count.max(0) as u32,
                    ladder_attempts: r.ladder_attempts.max(0) as u32,
                    lease_token: token,
                    gated: r.gated,
                    ordering_key: r.ordering_key,
                    event_id: r.event_id.map(EventId),
                    event_type: r.event_type,
                    due_at: r.due_at,
                })
            };
            match read() {
                Ok(c) => claimed.push(c),
                Err(e) => {
                    bad_ids.push(id);
                    bad_reasons.push(e.to_string());
                }
            }
        }
        report_left_leased(unopened);
        if !bad_ids.is_empty() {
            // A row that cannot be read cannot be delivered: dead-letter it,
            // saying why, rather than let it hold the batch's lease forever.
            tracing::error!(
                count = bad_ids.len(),
                "dead-lettering messages whose stored data is unreadable"
            );
            let mut tx = self.begin().await?;
            let keys = ordering::keys_of(&mut tx, &bad_ids).await?;
            ordering::lock_keys(&mut tx, &keys).await?;
            sqlx::query(
                "WITH dead AS ( \
                   UPDATE messages m SET state = 'DeadLetter', dead_lettered_at = $3, next_attempt_at = NULL, \
                     claim_at = NULL, lease_token = NULL, last_error = u.reason, updated_at = $3 \
                   FROM unnest($1::uuid[], $2::text[]) AS u(id, reason) WHERE m.id = u.id AND m.lease_token = $4 \
                   RETURNING m.id, m.account, u.reason) \
                 INSERT INTO message_events (message_id, at, kind, from_state, account, detail) \
                 SELECT id, $3, 'DeadLettered', 'Scheduled', account, reason FROM dead",
            )
            .bind(&bad_ids)
            .bind(&bad_reasons)
            .bind(now)
            .bind(token)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
            ordering::settle_keys(&mut tx, &keys).await?;
            tx.commit().await.map_err(map_err)?;
        }
        Ok(claimed)
    }
}
