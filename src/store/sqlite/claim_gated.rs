//! The claim of gated messages in the embedded SQLite store
//! (docs/api.md#flow-control-and-fairness; the rest of what gates do is
//! written once for both databases, in `store::sql::gates`). Its one writer serialises claims,
//! so a claim reads each gate, counts the attempts in flight and takes what
//! the gate admits in one transaction; the indexes on gated messages bound
//! what it reads by what it takes.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{map_err, rows::*, SqliteStore};
use crate::store::{sql::gates::GateBackend, *};

type LiteGateRow = GateRow<String, i64>;

const GATE_COLUMNS: &str =
    "t.id, t.account, t.config, t.breaker_state, t.consecutive_failures, t.open_until, t.cooldown_ms, t.flow_starts";

fn json(text: String) -> serde_json::Value {
    serde_json::from_str(&text).unwrap_or_default()
}

fn time(ms: i64) -> Option<DateTime<Utc>> {
    Some(from_ms(ms))
}

#[async_trait]
impl GateBackend for SqliteStore {
    async fn claim_gated_messages(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        shares: &ClaimShares,
    ) -> StoreResult<GatedClaim> {
        // Without gated messages due, one index read and no write.
        let (first,): (Option<i64>,) = sqlx::query_as(
            "SELECT min(claim_at) FROM messages WHERE state = 'Scheduled' AND paused = 0 AND gated = 1 AND held = 0",
        )
        .fetch_one(&self.reader)
        .await
        .map_err(map_err)?;
        match first.map(from_ms) {
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
        let rows: Vec<LiteGateRow> = sqlx::query_as(&format!(
            "SELECT {GATE_COLUMNS} FROM targets t \
             JOIN (SELECT target_id, min(claim_at) AS head FROM messages \
                   WHERE state = 'Scheduled' AND paused = 0 AND gated = 1 AND held = 0 AND claim_at <= ?1 \
                   GROUP BY target_id) h ON h.target_id = t.id \
             WHERE t.gated = 1 ORDER BY h.head"
        ))
        .bind(ms(now))
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        let mut gates = Vec::with_capacity(rows.len());
        for row in rows {
            let account = AccountId::from_trusted(row.account.clone());
            let (id, gate) = row.into_gate(json, time);
            let (n,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM messages WHERE target_id = ?1 AND state = 'Scheduled' AND gated = 1 \
                   AND lease_token IS NOT NULL AND claim_at > ?2",
            )
            .bind(id.as_str())
            .bind(ms(now))
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
            gates.push((id, account, gate, u32::try_from(n).unwrap_or(u32::MAX)));
        }
        let mut planned = plan(gates, now, limit, shares);
        let token = self.lease_token();
        let lease_end = ms(now) + i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2);
        let mut rows: Vec<ClaimRow> = Vec::new();
        let mut changes = Vec::new();
        for p in planned.iter_mut().filter(|p| p.admit.n > 0) {
            let taken: Vec<ClaimRow> = sqlx::query_as(
                "UPDATE messages SET claim_at = ?2, lease_token = ?3 WHERE id IN ( \
                   SELECT id FROM messages WHERE target_id = ?4 AND state = 'Scheduled' AND paused = 0 \
                     AND gated = 1 AND held = 0 AND claim_at <= ?1 ORDER BY claim_at LIMIT ?5) \
                 RETURNING id, account, target_id, payload, delivery_time, attempt_count, \
                   ladder_attempts, updated_at AS scheduled_at, gated, ordering_key, event_id, event_type",
            )
            .bind(ms(now))
            .bind(lease_end)
            .bind(token.to_string())
            .bind(p.target_id.as_str())
            .bind(i64::from(p.admit.n))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
            let n = u32::try_from(taken.len()).unwrap_or(u32::MAX);
            rows.extend(taken);
            if n == 0 {
                continue;
            }
            if let Some(change) = p.gate.started(now, n, p.admit.probe) {
                changes.push((p.target_id.clone(), change));
            }
            sqlx::query("UPDATE targets SET flow_starts = ?2, breaker_state = ?3 WHERE id = ?1")
                .bind(p.target_id.as_str())
                .bind(starts_to_text(&p.gate.starts))
                .bind(p.gate.health.state.as_str())
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        let (reopens, waits_for_attempts) = reopening(&planned, now);
        let (later,): (Option<i64>,) = sqlx::query_as(
            "SELECT min(claim_at) FROM messages WHERE state = 'Scheduled' AND paused = 0 AND gated = 1 AND held = 0 \
               AND claim_at > ?1",
        )
        .bind(ms(now))
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
        let claimed = self.open_claimed(tx, rows, token, now).await?;
        Ok(GatedClaim {
            claimed,
            changes,
            next: [reopens, later.map(from_ms)].into_iter().flatten().min(),
            waits_for_attempts,
        })
    }
}
