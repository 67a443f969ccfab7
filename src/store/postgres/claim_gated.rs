//! The claim of gated messages in the PostgreSQL store
//! (docs/api.md#flow-control-and-fairness; the rest of what gates do is
//! written once for both databases, in `store::sql::gates`). A claim locks
//! the rows of the gated targets that have due messages (SKIP LOCKED:
//! another instance claiming one of them skips it), then, in a fresh
//! statement that sees every lease committed before the lock was granted,
//! counts their attempts in flight and takes what each gate admits. The index on leased gated messages
//! bounds the count by the parallelism, and the per-target index bounds the
//! claim by what it takes: a held-back backlog is never read.

use std::{collections::HashMap, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::{map_err, millis_i64, rows::*, PgStore};
use crate::{
    domain::{
        ids::{AccountId, TargetId},
        target::gate::{BreakerChange, Gate},
    },
    store::{gates::Planned, sql::gates::GateBackend, *},
};

type PgGateRow = GateRow<Value, DateTime<Utc>>;

const GATE_COLUMNS: &str =
    "t.id, t.account, t.config, t.breaker_state, t.consecutive_failures::bigint AS consecutive_failures, \
     t.open_until, t.cooldown_ms, t.flow_starts";

#[async_trait]
impl GateBackend for PgStore {
    async fn claim_gated_messages(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        shares: &ClaimShares,
    ) -> StoreResult<GatedClaim> {
        // Without gated messages due, one index probe and no transaction.
        match first_gated_due(&self.pool).await? {
            None => return Ok(GatedClaim::default()),
            Some(at) if at > now || limit == 0 => {
                return Ok(GatedClaim {
                    next: Some(at),
                    ..GatedClaim::default()
                })
            }
            Some(_) => {}
        }
        let mut tx = self.begin().await?;
        let gates = lock_due_gates(&mut tx, now).await?;
        let gates = count_in_flight(&mut tx, gates, now).await?;
        let mut planned = plan(gates, now, limit, shares);
        let token = self.lease_token();
        let rows = lease_admitted(&mut tx, &planned, now, limit, lease, token).await?;
        let changes = record_starts(&mut tx, &mut planned, &rows, now).await?;
        let (reopens, waits_for_attempts) = reopening(&planned, now);
        let later = next_gated_due_after(&mut tx, now).await?;
        tx.commit().await.map_err(map_err)?;
        let claimed = self.open_claimed(rows, token, now).await?;
        Ok(GatedClaim {
            claimed,
            changes,
            next: [reopens, later].into_iter().flatten().min(),
            waits_for_attempts,
        })
    }
}

/// The earliest claim time of a gated message waiting to be claimed.
async fn first_gated_due(pool: &PgPool) -> StoreResult<Option<DateTime<Utc>>> {
    let (first,): (Option<DateTime<Utc>>,) = sqlx::query_as(
        "SELECT min(claim_at) FROM messages WHERE state = 'Scheduled' AND NOT paused AND gated AND NOT held",
    )
    .fetch_one(pool)
    .await
    .map_err(map_err)?;
    Ok(first)
}

/// Locks the gated targets that have a message due, oldest due first,
/// skipping those another instance's claim holds; reads their gates.
async fn lock_due_gates(
    tx: &mut Transaction<'static, Postgres>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<(TargetId, AccountId, Gate)>> {
    let rows: Vec<PgGateRow> = sqlx::query_as(&format!(
        "SELECT {GATE_COLUMNS} FROM targets t \
         CROSS JOIN LATERAL (SELECT m.claim_at FROM messages m WHERE m.target_id = t.id \
           AND m.state = 'Scheduled' AND NOT m.paused AND m.gated AND NOT m.held AND m.claim_at <= $1 \
           ORDER BY m.claim_at LIMIT 1) head \
         WHERE t.gated AND t.enabled ORDER BY head.claim_at FOR NO KEY UPDATE OF t SKIP LOCKED"
    ))
    .bind(now)
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let account = AccountId::from_trusted(r.account.clone());
            let (id, gate) = r.into_gate(|c| c, Some);
            (id, account, gate)
        })
        .collect())
}

/// Adds to each locked gate its attempts in flight (on any instance), read
/// after the lock so that every lease committed before it is counted.
async fn count_in_flight(
    tx: &mut Transaction<'static, Postgres>,
    gates: Vec<(TargetId, AccountId, Gate)>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<(TargetId, AccountId, Gate, u32)>> {
    let ids: Vec<&str> = gates.iter().map(|(id, _, _)| id.as_str()).collect();
    let in_flight: HashMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT target_id, count(*) FROM messages WHERE target_id = ANY($1) AND state = 'Scheduled' \
           AND gated AND lease_token IS NOT NULL AND claim_at > $2 GROUP BY target_id",
    )
    .bind(&ids)
    .bind(now)
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)?
    .into_iter()
    .collect();
    Ok(gates
        .into_iter()
        .map(|(id, account, gate)| {
            let n = in_flight.get(id.as_str()).copied().unwrap_or(0);
            (id, account, gate, u32::try_from(n).unwrap_or(u32::MAX))
        })
        .collect())
}

/// Leases what the plan admits of each target (its oldest due first), at
/// most `limit` in all.
async fn lease_admitted(
    tx: &mut Transaction<'static, Postgres>,
    planned: &[Planned],
    now: DateTime<Utc>,
    limit: u32,
    lease: Duration,
    token: Uuid,
) -> StoreResult<Vec<ClaimRow>> {
    let (want_ids, want_n): (Vec<&str>, Vec<i32>) = planned
        .iter()
        .filter(|p| p.admit.n > 0)
        .map(|p| {
            (
                p.target_id.as_str(),
                i32::try_from(p.admit.n).unwrap_or(i32::MAX),
            )
        })
        .unzip();
    if want_ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(concat!(
        "WITH due AS ( \
           SELECT d.id FROM unnest($5::text[], $6::int[]) AS w(target_id, n) \
           CROSS JOIN LATERAL (SELECT m.id FROM messages m WHERE m.target_id = w.target_id \
             AND m.state = 'Scheduled' AND NOT m.paused AND m.gated AND NOT m.held AND m.claim_at <= $1 \
             ORDER BY m.claim_at LIMIT w.n FOR UPDATE SKIP LOCKED) d LIMIT $2) \
         ",
        lease_due!()
    ))
    .bind(now)
    .bind(i64::from(limit))
    .bind(millis_i64(lease))
    .bind(token)
    .bind(&want_ids)
    .bind(&want_n)
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)
}

/// Counts what each gate started (`rows`, the messages leased) in its
/// flow-control window and its breaker, and stores both; answers the
/// breakers whose probe starts now.
async fn record_starts(
    tx: &mut Transaction<'static, Postgres>,
    planned: &mut [Planned],
    rows: &[ClaimRow],
    now: DateTime<Utc>,
) -> StoreResult<Vec<(TargetId, BreakerChange)>> {
    let mut taken: HashMap<&str, u32> = HashMap::new();
    for r in rows {
        *taken.entry(r.target_id.as_str()).or_default() += 1;
    }
    let mut changes = Vec::new();
    let (mut upd_ids, mut upd_starts, mut upd_states) = (Vec::new(), Vec::new(), Vec::new());
    for p in planned.iter_mut() {
        let n = taken.get(p.target_id.as_str()).copied().unwrap_or(0);
        if n == 0 {
            continue;
        }
        if let Some(change) = p.gate.started(now, n, p.admit.probe) {
            changes.push((p.target_id.clone(), change));
        }
        upd_ids.push(p.target_id.as_str().to_string());
        upd_starts.push(starts_to_text(&p.gate.starts));
        upd_states.push(p.gate.health.state.as_str());
    }
    if !upd_ids.is_empty() {
        sqlx::query(
            "UPDATE targets t SET flow_starts = u.starts, breaker_state = u.state \
             FROM unnest($1::text[], $2::text[], $3::text[]) AS u(id, starts, state) WHERE t.id = u.id",
        )
        .bind(&upd_ids)
        .bind(&upd_starts)
        .bind(&upd_states)
        .execute(&mut **tx)
        .await
        .map_err(map_err)?;
    }
    Ok(changes)
}

/// The earliest claim time of a gated message not yet due.
async fn next_gated_due_after(
    tx: &mut Transaction<'static, Postgres>,
    now: DateTime<Utc>,
) -> StoreResult<Option<DateTime<Utc>>> {
    let (later,): (Option<DateTime<Utc>>,) = sqlx::query_as(
        "SELECT min(claim_at) FROM messages WHERE state = 'Scheduled' AND NOT paused AND gated AND NOT held AND claim_at > $1",
    )
    .bind(now)
    .fetch_one(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(later)
}
