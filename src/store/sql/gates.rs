//! Gated targets (docs/api.md#flow-control-and-fairness) once for both
//! databases: ended attempts learnt by their targets' breakers, and a
//! breaker closed by hand. The claim of gated messages stays each
//! database's own (`GateBackend::claim_gated_messages`): PostgreSQL locks
//! the gates it claims from with `SKIP LOCKED`, so that instances claim side
//! by side, and takes from all of them in one statement over arrays; SQLite's
//! one writer reads and takes gate by gate. The two share no statement.

use std::{collections::HashMap, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::{
    events::{publish_told, subscribes_to},
    own::Own,
    pg_err,
    rows::{TargetRow, TARGET_COLUMNS},
    At, Keeps, Tx,
};
use crate::{
    domain::{
        ids::{AccountId, TargetId},
        target::{
            gate::{BreakerChange, BreakerState, Health},
            Target,
        },
        told::{breaker_event, TARGET_PATTERNS},
    },
    store::{
        closed_from, learn, outcomes_by_target, ClaimShares, GateRow, GateStore, GatedClaim,
        StoreResult, RESET_HEALTH,
    },
};

/// What a backend adds to its database for gated targets.
#[async_trait]
pub(in crate::store) trait GateBackend: Keeps {
    /// `GateStore::claim_gated`, the database's own way (see this module).
    async fn claim_gated_messages(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        shares: &ClaimShares,
    ) -> StoreResult<GatedClaim>;
}

type Row = GateRow<Json<Value>, At>;

const GATE_COLUMNS: &str =
    "t.id, t.account, t.config, t.breaker_state, CAST(t.consecutive_failures AS bigint) AS consecutive_failures, \
     t.open_until, t.cooldown_ms, t.flow_starts";

/// The gated targets among `ids` (in id order), locked where rows are
/// locked. PostgreSQL reads them in one statement, the ids bound as an
/// array, and locks them in its order of ids; SQLite binds no arrays and
/// reads them one by one, in `ids`' order.
async fn gated_targets(tx: &mut Tx, ids: Vec<&str>) -> StoreResult<Vec<Row>> {
    match &mut *tx {
        Tx::Postgres(pg) => sqlx::query_as(&format!(
            "SELECT {GATE_COLUMNS} FROM targets t WHERE t.id = ANY($1) AND t.gated \
             ORDER BY t.id FOR NO KEY UPDATE OF t"
        ))
        .bind(ids)
        .fetch_all(&mut **pg)
        .await
        .map_err(pg_err),
        Tx::Sqlite(_) => {
            let mut rows = Vec::with_capacity(ids.len());
            for id in ids {
                let row: Option<Row> = tx
                    .sql(format!(
                        "SELECT {GATE_COLUMNS} FROM targets t WHERE t.id = $1 AND t.gated = 1"
                    ))
                    .bind(id)
                    .fetch_optional()
                    .await?;
                rows.extend(row);
            }
            Ok(rows)
        }
    }
}

async fn write_health(tx: &mut Tx, id: &TargetId, h: &Health) -> StoreResult<()> {
    tx.sql(
        "UPDATE targets SET breaker_state = $2, consecutive_failures = $3, open_until = $4, cooldown_ms = $5 \
         WHERE id = $1",
    )
    .bind(id.as_str())
    .bind(h.state.as_str())
    .bind(i32::try_from(h.consecutive_failures).unwrap_or(i32::MAX))
    .bind(h.open_until.map(At))
    .bind(i64::try_from(h.cooldown_ms).unwrap_or(i64::MAX))
    .execute()
    .await?;
    Ok(())
}

#[async_trait]
impl<B: GateBackend + Own> GateStore for B {
    async fn claim_gated(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        shares: &ClaimShares,
    ) -> StoreResult<GatedClaim> {
        self.claim_gated_messages(now, limit, lease, shares).await
    }

    async fn record_health(
        &self,
        ended: &[(TargetId, Option<bool>)],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<(TargetId, BreakerChange)>> {
        let by_target = outcomes_by_target(ended);
        let mut tx = self.db().begin().await?;
        let rows = gated_targets(&mut tx, by_target.keys().copied().collect()).await?;
        let mut changes = Vec::new();
        let mut left = Vec::new();
        for row in rows {
            let (id, mut gate) = row.into_gate(|c| c.0, |t| Some(t.0));
            let outcomes = by_target.get(id.as_str()).map_or(&[][..], Vec::as_slice);
            if learn(&id, &mut gate, outcomes, now, &mut changes, &mut left) {
                write_health(&mut tx, &id, &gate.health).await?;
            }
        }
        tell_breakers(self, &mut tx, &changes, &left, now).await?;
        tx.commit().await?;
        Ok(changes)
    }

    async fn reset_health(
        &self,
        account: &AccountId,
        id: &TargetId,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(Target, Option<BreakerChange>)>> {
        let mut tx = self.db().begin().await?;
        let lock = tx.for_no_key_update();
        let was: Option<(String,)> = tx
            .sql(format!(
                "SELECT breaker_state FROM targets WHERE id = $1 AND account = $2{lock}"
            ))
            .bind(id.as_str())
            .bind(account)
            .fetch_optional()
            .await?;
        let Some((was,)) = was else {
            return Ok(None);
        };
        let row: TargetRow = tx
            .sql(format!(
                "{RESET_HEALTH} WHERE id = $1 RETURNING {TARGET_COLUMNS}"
            ))
            .bind(id.as_str())
            .fetch_one()
            .await?;
        let change = closed_from(&was);
        let target = row.into_target(self.sealer())?;
        if let Some(c) = change {
            self.notify_if_soon(&mut tx, now, now).await?;
            tell_breakers(self, &mut tx, &[(id.clone(), c)], &[target.health], now).await?;
        }
        tx.commit().await?;
        Ok(Some((target, change)))
    }
}

/// Tells, inside `tx`, the breakers that opened or closed, to the accounts
/// that subscribe to such events (read only when some breaker changed);
/// `left` is the health each change left, one for one.
pub(super) async fn tell_breakers<B: Own>(
    store: &B,
    tx: &mut Tx,
    changes: &[(TargetId, BreakerChange)],
    left: &[Health],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let told: Vec<(&TargetId, BreakerChange, &Health)> = changes
        .iter()
        .zip(left)
        .filter(|((_, c), _)| c.to != BreakerState::HalfOpen)
        .map(|((id, c), h)| (id, *c, h))
        .collect();
    if told.is_empty() {
        return Ok(());
    }
    let mut stmt = tx.sql(format!(
        "SELECT id, account FROM targets WHERE {} AND id IN (",
        subscribes_to("targets.account", &TARGET_PATTERNS)
    ));
    for (i, (id, ..)) in told.iter().enumerate() {
        if i > 0 {
            stmt.push(", ");
        }
        stmt.push_bind(id.as_str().to_string());
    }
    stmt.push(")");
    let accounts: HashMap<String, String> = stmt
        .fetch_all::<(String, String)>()
        .await?
        .into_iter()
        .collect();
    let events = told
        .into_iter()
        .filter_map(|(id, change, health)| {
            let account = AccountId::from_trusted(accounts.get(id.as_str())?.clone());
            breaker_event(&account, id, change, health, now)
        })
        .collect();
    publish_told(store, tx, events).await?;
    Ok(())
}
