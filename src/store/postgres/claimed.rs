//! Handing out claimed rows: each row's target opened once a claim, a row
//! that cannot be read dead-lettered, one sealed under a key this instance
//! lacks left leased for another.

use std::{collections::HashMap, sync::Arc};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{rows::*, PgStore};
use crate::{
    domain::{
        ids::{EventId, MessageId, TargetId},
        target::TargetConfig,
    },
    store::{sealed::open_config, sql::dead::dead_letter_unreadable, *},
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
        let mut unreadable: Vec<(Uuid, String)> = Vec::new();
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
                    unreadable.push((id, error_chain(e)));
                    continue;
                }
            };
            let read = || -> StoreResult<Claimed> {
                Ok(Claimed {
                    id: MessageId(r.id),
                    account: AccountId::from_trusted(r.account),
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
                Err(e) => unreadable.push((id, e.to_string())),
            }
        }
        report_left_leased(unopened);
        if !unreadable.is_empty() {
            let mut tx = crate::store::sql::Tx::Postgres(self.begin().await?);
            dead_letter_unreadable(self, &mut tx, &unreadable, token, now).await?;
            tx.commit().await?;
        }
        Ok(claimed)
    }
}
