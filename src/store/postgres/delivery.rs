//! The sweeper's and retention's side of the PostgreSQL store: claims with
//! leases, batched recording, batched purges.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{map_err, millis_i64, rows::*, PgStore};
use crate::{
    domain::ids::{MessageId, TargetId},
    store::*,
};

/// How a claim leases the messages of its `due` CTE ($1 now, $3 the lease
/// in ms, $4 the lease token) and what it returns of them: one text for
/// every claim. It follows the `WITH` list, ending it with `heal`: a
/// message whose flags its target's batches have not set yet
/// (`sql::targets::align_flags`: of a target just disabled, or just given
/// or relieved of a gate) takes them now and is not leased, so that no
/// claim picks it again nor sends it past its target's gate.
macro_rules! lease_due {
    () => {
        ", heal AS ( \
           UPDATE messages m SET paused = NOT t.enabled, gated = t.gated FROM due, targets t \
           WHERE m.id = due.id AND t.id = m.target_id AND (NOT t.enabled OR m.gated <> t.gated)) \
         UPDATE messages m SET claim_at = $1 + make_interval(secs => $3::double precision / 1000), \
           lease_token = $4 \
         FROM due, targets t WHERE m.id = due.id AND t.id = m.target_id AND t.enabled AND m.gated = t.gated \
         RETURNING m.id, m.account, m.target_id, t.kind, t.config, t.secrets_key_id, t.sealed_secrets, m.payload, \
           m.delivery_time, m.attempt_count, m.ladder_attempts, m.updated_at AS scheduled_at, m.gated, m.ordering_key, m.event_id, m.event_type"
    };
}

/// What a claim checks again of the messages it picked, as it locks them:
/// still scheduled, claimable, and as due as when picked (a claim by
/// another instance moves `claim_at`). Written so that no index on
/// `claim_at` serves it (`IS NOT TRUE` does not imply the partial indexes'
/// `NOT paused`): the picked ids are looked up by primary key whatever the
/// statistics say. Right after a burst is inserted, before the table is
/// analyzed, PostgreSQL took the due index for it and compared every due row
/// with every picked id (600 ms for 273 rows; 18 ms this way).
macro_rules! recheck_picked {
    () => {
        "m.state = 'Scheduled' AND m.paused IS NOT TRUE AND m.gated IS NOT TRUE AND m.held IS NOT TRUE AND m.pull IS NOT TRUE \
         AND m.claim_at = pick.claim_at"
    };
}

#[async_trait]
impl DeliveryStore for PgStore {
    async fn claim_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> StoreResult<Vec<Claimed>> {
        let token = self.lease_token();
        let rows: Vec<ClaimRow> = sqlx::query_as(concat!(
            "WITH due AS ( \
               SELECT id FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at <= $1 \
               ORDER BY claim_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
             ",
            lease_due!()
        ))
        .bind(now)
        .bind(i64::from(limit))
        .bind(millis_i64(lease))
        .bind(token)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        self.open_claimed(rows, token, now).await
    }

    async fn claim_due_shared(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        shares: &ClaimShares,
    ) -> StoreResult<Vec<Claimed>> {
        let token = self.lease_token();
        let full: Vec<&str> = shares.full().map(TargetId::as_str).collect();
        let full_accounts: Vec<&str> = shares.full_accounts().map(AccountId::as_str).collect();
        let (room_ids, room): (Vec<&str>, Vec<i32>) = shares
            .room
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(t, n)| (t.as_str(), i32::try_from(*n).unwrap_or(i32::MAX)))
            .unzip();
        let (account_ids, account_room): (Vec<&str>, Vec<i32>) = shares
            .accounts
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(a, n)| (a.as_str(), i32::try_from(*n).unwrap_or(i32::MAX)))
            .unzip();
        // Round robin over the targets among the oldest due messages (a
        // window of a few claims' worth), the oldest due after that window
        // and the newest (one claim's worth each), each target taking its
        // share; a target with no room left is not read past its index
        // entries. The other two are there for a backlog due at one instant
        // (a burst, a redrive) whose receiver answers quickly: it fills the
        // oldest window and has room again before another target's message
        // is due, which then fell due after it and would wait for all of it.
        // The newest alone is not enough: while another target's messages
        // keep falling due, its newest go and the ones just before them
        // wait; the window after the oldest hands them out in order. The
        // picks go round robin over the accounts (`an`), and within an
        // account round robin over its targets (`rn`).
        let rows: Vec<ClaimRow> = sqlx::query_as(concat!(
            "WITH oldest AS ( \
               SELECT id, account, target_id, claim_at FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at <= $1 \
                 AND NOT (target_id = ANY($5)) AND NOT (account = ANY($10)) \
               ORDER BY claim_at LIMIT $6), \
             cand AS ( \
               SELECT * FROM oldest \
               UNION \
               (SELECT id, account, target_id, claim_at FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at <= $1 \
                 AND NOT (target_id = ANY($5)) AND NOT (account = ANY($10)) \
                 AND claim_at > (SELECT max(claim_at) FROM oldest) \
               ORDER BY claim_at LIMIT $2) \
               UNION \
               (SELECT id, account, target_id, claim_at FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at <= $1 \
                 AND NOT (target_id = ANY($5)) AND NOT (account = ANY($10)) \
               ORDER BY claim_at DESC LIMIT $2)), \
             ranked AS ( \
               SELECT c.id, c.account, c.claim_at, COALESCE(r.room, $7) AS room, \
                 row_number() OVER (PARTITION BY c.target_id ORDER BY c.claim_at) AS rn \
               FROM cand c LEFT JOIN unnest($8::text[], $9::int[]) AS r(target_id, room) \
                 ON r.target_id = c.target_id), \
             fair AS ( \
               SELECT k.id, k.claim_at, COALESCE(a.room, $11) AS room, \
                 row_number() OVER (PARTITION BY k.account ORDER BY k.rn, k.claim_at) AS an \
               FROM ranked k LEFT JOIN unnest($12::text[], $13::int[]) AS a(account, room) \
                 ON a.account = k.account \
               WHERE k.rn <= k.room), \
             pick AS (SELECT id, claim_at FROM fair WHERE an <= room ORDER BY an, claim_at LIMIT $2), \
             due AS ( \
               SELECT m.id FROM pick JOIN messages m ON m.id = pick.id \
               WHERE ", recheck_picked!(), " FOR UPDATE OF m SKIP LOCKED) \
             ",
            lease_due!()
        ),
        )
        .bind(now)
        .bind(i64::from(limit))
        .bind(millis_i64(lease))
        .bind(token)
        .bind(&full)
        .bind(i64::from(limit.saturating_mul(CLAIM_WINDOW)))
        .bind(i32::try_from(shares.per_target).unwrap_or(i32::MAX))
        .bind(&room_ids)
        .bind(&room)
        .bind(&full_accounts)
        .bind(i32::try_from(shares.per_account).unwrap_or(i32::MAX))
        .bind(&account_ids)
        .bind(&account_room)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        self.open_claimed(rows, token, now).await
    }

    async fn claim_ahead(
        &self,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
        lease: Duration,
        full: &[TargetId],
        fenced: &[AccountId],
    ) -> StoreResult<Vec<Claimed>> {
        if limit == 0 || until <= now {
            return Ok(Vec::new());
        }
        let token = self.lease_token();
        let full: Vec<&str> = full.iter().map(TargetId::as_str).collect();
        let fenced: Vec<&str> = fenced.iter().map(AccountId::as_str).collect();
        // The lease runs from the due time: `claim_at` moves on by the lease,
        // so the message is claimable again (by any instance) once its
        // attempt would have ended, had this instance gone.
        let rows: Vec<ClaimRow> = sqlx::query_as(concat!(
            "WITH cand AS ( \
               SELECT id, target_id, claim_at FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND lease_token IS NULL \
                 AND ordering_key IS NULL AND claim_at > $1 AND claim_at <= $5 AND NOT (target_id = ANY($6)) \
                 AND NOT (account = ANY($8)) \
               ORDER BY claim_at LIMIT $7), \
             pick AS ( \
               SELECT id, claim_at FROM (SELECT id, claim_at, \
                 row_number() OVER (PARTITION BY target_id ORDER BY claim_at) AS rn FROM cand) r \
               ORDER BY rn, claim_at LIMIT $2), \
             due AS ( \
               SELECT m.id FROM pick JOIN messages m ON m.id = pick.id \
               WHERE ", recheck_picked!(), " AND m.lease_token IS NULL \
               FOR UPDATE OF m SKIP LOCKED), \
             heal AS ( \
               UPDATE messages m SET paused = NOT t.enabled, gated = t.gated FROM due, targets t \
               WHERE m.id = due.id AND t.id = m.target_id AND (NOT t.enabled OR m.gated <> t.gated)) \
             UPDATE messages m SET claim_at = m.claim_at + make_interval(secs => $3::double precision / 1000), \
               lease_token = $4 \
             FROM due, targets t WHERE m.id = due.id AND t.id = m.target_id AND t.enabled AND m.gated = t.gated \
             RETURNING m.id, m.account, m.target_id, t.kind, t.config, t.secrets_key_id, t.sealed_secrets, m.payload, \
               m.delivery_time, m.attempt_count, m.ladder_attempts, m.updated_at AS scheduled_at, m.gated, m.ordering_key, m.event_id, m.event_type, \
               m.claim_at - make_interval(secs => $3::double precision / 1000) AS due_at",
        ))
        .bind(now)
        .bind(i64::from(limit))
        .bind(millis_i64(lease))
        .bind(token)
        .bind(until)
        .bind(&full)
        .bind(i64::from(limit.saturating_mul(CLAIM_WINDOW)))
        .bind(&fenced)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        self.open_claimed(rows, token, now).await
    }

    async fn next_due_except(
        &self,
        full: &[TargetId],
        full_accounts: &[AccountId],
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let full: Vec<&str> = full.iter().map(TargetId::as_str).collect();
        let full_accounts: Vec<&str> = full_accounts.iter().map(AccountId::as_str).collect();
        let row: Option<(DateTime<Utc>,)> = sqlx::query_as(
            "SELECT claim_at FROM messages WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at IS NOT NULL \
               AND NOT (target_id = ANY($1)) AND NOT (account = ANY($2)) ORDER BY claim_at LIMIT 1",
        )
        .bind(&full)
        .bind(&full_accounts)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(|r| r.0))
    }

    async fn next_due(&self) -> StoreResult<Option<DateTime<Utc>>> {
        let row: Option<(DateTime<Utc>,)> = sqlx::query_as(
            "SELECT claim_at FROM messages WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at IS NOT NULL \
             ORDER BY claim_at LIMIT 1",
        )
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(|r| r.0))
    }

    async fn record(&self, results: &[Recorded], now: DateTime<Utc>) -> StoreResult<u64> {
        // The results of messages made from Dispatch's own events are
        // recorded in a transaction of their own. It locks the keys of those
        // messages and tells nothing; the other transaction locks its
        // messages' keys, then the keys of the events it tells, which are the
        // keys of such messages. Together, no transaction holds a key of a
        // told message while it waits for another.
        if results.iter().any(|r| r.told) && results.iter().any(|r| !r.told) {
            let (told, rest): (Vec<Recorded>, Vec<Recorded>) =
                results.iter().cloned().partition(|r| r.told);
            return Ok(self.record_apart(&told, now).await? + self.record_apart(&rest, now).await?);
        }
        self.record_apart(results, now).await
    }

    async fn release(&self, leases: &[(MessageId, Uuid)]) -> StoreResult<u64> {
        if leases.is_empty() {
            return Ok(0);
        }
        let (ids, tokens): (Vec<Uuid>, Vec<Uuid>) = leases.iter().map(|(id, t)| (id.0, *t)).unzip();
        let done = sqlx::query(
            "UPDATE messages m SET claim_at = COALESCE(m.next_attempt_at, m.delivery_time), lease_token = NULL \
             FROM unnest($1::uuid[], $2::uuid[]) AS r(id, token) \
             WHERE m.id = r.id AND m.lease_token = r.token AND m.state = 'Scheduled'",
        )
        .bind(&ids)
        .bind(&tokens)
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    async fn purge_expired(&self, c: &Cutoffs, batch: u32) -> StoreResult<Purged> {
        let batch = i64::from(batch);
        let mut messages = 0;
        for (state, column, cutoff) in [
            ("Delivered", "delivered_at", c.delivered_before),
            ("Cancelled", "cancelled_at", c.cancelled_before),
            ("DeadLetter", "dead_lettered_at", c.dead_letters_before),
        ] {
            messages += sqlx::query(&format!(
                "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE state = '{state}' \
                 AND {column} < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
            ))
            .bind(cutoff)
            .bind(batch)
            .persistent(false)
            .execute(&self.pool)
            .await
            .map_err(map_err)?
            .rows_affected();
        }
        let attempts = sqlx::query(
            "DELETE FROM attempts WHERE (message_id, attempt) IN (SELECT message_id, attempt FROM attempts \
             WHERE outcome NOT IN ('Success', 'Received') AND finished_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(c.failed_attempts_before)
        .bind(batch)
        .persistent(false)
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected();
        let idempotency_keys = sqlx::query(
            "DELETE FROM idempotency_keys WHERE (account, key) IN (SELECT account, key FROM idempotency_keys \
             WHERE created_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(c.idempotency_before)
        .bind(batch)
        .persistent(false)
        .execute(&self.pool)
        .await
        .map_err(map_err)?
        .rows_affected();
        Ok(Purged {
            messages,
            attempts,
            idempotency_keys,
            events: 0,
        })
    }
}
