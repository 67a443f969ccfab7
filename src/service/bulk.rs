//! Bulk redrive, cancel and replay
//! (docs/api.md#bulk-redrive-cancel-and-replay), for the API and the portal.

use super::{
    access::{Actor, Permission},
    Service, ServiceError, ServiceResult,
};
use crate::{
    domain::message::State,
    store::{Bulk, BulkAction},
    sweeper::ahead::Fence,
};

/// Messages a bulk action changes in one transaction: deliveries (which
/// record their results in transactions of their own) never wait long.
pub const BULK_BATCH: u32 = 1000;

/// Ids one call may list.
pub const BULK_IDS_MAX: usize = 1000;

impl Service {
    /// Applies a bulk action, one batch at a time; how many messages it
    /// changed. A call matching more than `bulk.max` messages changes
    /// nothing; an unknown or foreign target is an error naming `targetId`.
    pub async fn bulk(&self, actor: &Actor, bulk: &Bulk) -> ServiceResult<u64> {
        let account = actor.allow(Permission::ChangeMessages)?;
        if let Some(target) = &bulk.target_id {
            if self.store.get_target(account, target).await?.is_none() {
                return Err(ServiceError::field("targetId", "is not a known target"));
            }
        }
        let max = self.config.bulk.max;
        let matched = self
            .store
            .bulk_count(account, bulk, max.saturating_add(1), self.now())
            .await?;
        if matched > max {
            return Err(ServiceError::field(
                "",
                format!(
                    "the filter matches more than {max} messages (bulk.max); narrow it (targetId, from, to)"
                ),
            ));
        }
        // A redrive or replay makes what it matches scheduled again.
        if bulk.action.to_state() == State::Scheduled {
            self.room_for_scheduled(account, matched).await?;
        }
        // Messages this instance holds ahead of their time go back to the
        // store first, and no more are claimed ahead while the cancel runs:
        // a cancel wins over an attempt not yet started.
        let cancels_scheduled = matches!(bulk.action, BulkAction::Cancel { .. })
            && bulk.action.states().contains(&State::Scheduled);
        let _fence = if cancels_scheduled {
            let (fence, held) = self.held.fence(Fence::Account(account.clone())).await;
            let back: Vec<_> = held.into_iter().map(|c| (c.id, c.lease_token)).collect();
            self.give_back(&back).await?;
            Some(fence)
        } else {
            None
        };
        let mut changed = 0;
        let mut after = None;
        // Messages that come to match while the call runs are taken too,
        // but never more than bulk.max in all.
        while changed < max {
            let batch = self
                .store
                .bulk_batch(account, bulk, after.as_ref(), BULK_BATCH, self.now())
                .await?;
            changed += batch.changed;
            if let (Some(at), true) = (bulk.action.at(), batch.changed > 0) {
                // Due messages go at once, and a key's next message with them.
                self.wake.due(at);
            } else if matches!(bulk.action, BulkAction::Cancel { .. }) && batch.changed > 0 {
                self.wake.now();
            }
            if batch.scanned < BULK_BATCH {
                break;
            }
            after = batch.last;
        }
        Ok(changed)
    }
}
