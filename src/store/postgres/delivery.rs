//! The sweeper's and retention's side of the PostgreSQL store: claims with
//! leases, batched recording, batched purges.

use std::{borrow::Cow, time::Duration};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{postgres::PgArguments, query::QueryAs, Postgres};
use uuid::Uuid;

use super::{map_err, millis_i64, ordering, rows::*, PgStore};
use crate::{
    domain::ids::{MessageId, TargetId},
    store::{ordering::distinct_keys, *},
};

/// How a claim leases the messages of its `due` CTE ($1 now, $3 the lease
/// in ms, $4 the lease token) and what it returns of them: one text for
/// both claims.
macro_rules! lease_due {
    () => {
        "UPDATE messages m SET claim_at = $1 + make_interval(secs => $3::double precision / 1000), \
           lease_token = $4 \
         FROM due, targets t WHERE m.id = due.id AND t.id = m.target_id \
         RETURNING m.id, m.target_id, t.kind, t.config, t.secrets_key_id, t.sealed_secrets, m.payload, \
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
        let token = Uuid::new_v4();
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
        let token = Uuid::new_v4();
        let full: Vec<&str> = shares.full().map(TargetId::as_str).collect();
        let (room_ids, room): (Vec<&str>, Vec<i32>) = shares
            .room
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(t, n)| (t.as_str(), i32::try_from(*n).unwrap_or(i32::MAX)))
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
        // wait; the window after the oldest hands them out in order.
        let rows: Vec<ClaimRow> = sqlx::query_as(concat!(
            "WITH oldest AS ( \
               SELECT id, target_id, claim_at FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at <= $1 AND NOT (target_id = ANY($5)) \
               ORDER BY claim_at LIMIT $6), \
             cand AS ( \
               SELECT * FROM oldest \
               UNION \
               (SELECT id, target_id, claim_at FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at <= $1 AND NOT (target_id = ANY($5)) \
                 AND claim_at > (SELECT max(claim_at) FROM oldest) \
               ORDER BY claim_at LIMIT $2) \
               UNION \
               (SELECT id, target_id, claim_at FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at <= $1 AND NOT (target_id = ANY($5)) \
               ORDER BY claim_at DESC LIMIT $2)), \
             ranked AS ( \
               SELECT c.id, c.claim_at, COALESCE(r.room, $7) AS room, \
                 row_number() OVER (PARTITION BY c.target_id ORDER BY c.claim_at) AS rn \
               FROM cand c LEFT JOIN unnest($8::text[], $9::int[]) AS r(target_id, room) \
                 ON r.target_id = c.target_id), \
             pick AS (SELECT id, claim_at FROM ranked WHERE rn <= room ORDER BY rn, claim_at LIMIT $2), \
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
    ) -> StoreResult<Vec<Claimed>> {
        if limit == 0 || until <= now {
            return Ok(Vec::new());
        }
        let token = Uuid::new_v4();
        let full: Vec<&str> = full.iter().map(TargetId::as_str).collect();
        // The lease runs from the due time: `claim_at` moves on by the lease,
        // so the message is claimable again (by any instance) once its
        // attempt would have ended, had this instance gone.
        let rows: Vec<ClaimRow> = sqlx::query_as(concat!(
            "WITH cand AS ( \
               SELECT id, target_id, claim_at FROM messages \
               WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND lease_token IS NULL \
                 AND ordering_key IS NULL AND claim_at > $1 AND claim_at <= $5 AND NOT (target_id = ANY($6)) \
               ORDER BY claim_at LIMIT $7), \
             pick AS ( \
               SELECT id, claim_at FROM (SELECT id, claim_at, \
                 row_number() OVER (PARTITION BY target_id ORDER BY claim_at) AS rn FROM cand) r \
               ORDER BY rn, claim_at LIMIT $2), \
             due AS ( \
               SELECT m.id FROM pick JOIN messages m ON m.id = pick.id \
               WHERE ", recheck_picked!(), " AND m.lease_token IS NULL \
               FOR UPDATE OF m SKIP LOCKED) \
             UPDATE messages m SET claim_at = m.claim_at + make_interval(secs => $3::double precision / 1000), \
               lease_token = $4 \
             FROM due, targets t WHERE m.id = due.id AND t.id = m.target_id \
             RETURNING m.id, m.target_id, t.kind, t.config, t.secrets_key_id, t.sealed_secrets, m.payload, \
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
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        self.open_claimed(rows, token, now).await
    }

    async fn next_due_except(&self, full: &[TargetId]) -> StoreResult<Option<DateTime<Utc>>> {
        let full: Vec<&str> = full.iter().map(TargetId::as_str).collect();
        let row: Option<(DateTime<Utc>,)> = sqlx::query_as(
            "SELECT claim_at FROM messages WHERE state = 'Scheduled' AND NOT paused AND NOT gated AND NOT held AND NOT pull AND claim_at IS NOT NULL \
               AND NOT (target_id = ANY($1)) ORDER BY claim_at LIMIT 1",
        )
        .bind(&full)
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

impl PgStore {
    /// `DeliveryStore::record` of results that go in one transaction.
    async fn record_apart(&self, results: &[Recorded], now: DateTime<Utc>) -> StoreResult<u64> {
        if results.is_empty() {
            return Ok(0);
        }
        let columns = RecordColumns::of(results);
        let query = columns.statement(now);
        // A result for a message with an orderingKey may hand its key to the
        // next message: under the key's lock, taken before the row's.
        let keys = distinct_keys(
            results
                .iter()
                .filter_map(|r| r.key.as_ref().map(|(t, k)| (t.as_str(), k.as_str()))),
        );
        let mut tx = self.begin().await?;
        if !keys.is_empty() {
            ordering::lock_keys(&mut tx, &keys).await?;
        }
        let rows: Vec<ToldRow> = query.fetch_all(&mut *tx).await.map_err(map_err)?;
        let recorded = rows.first().map_or(0, |r| r.written) as u64;
        if !keys.is_empty() {
            ordering::settle_keys(&mut tx, &keys).await?;
        }
        // What happened to the messages of accounts that subscribe to
        // Dispatch's own events, published in this same transaction.
        let told: Vec<_> = rows
            .into_iter()
            .filter_map(|row| {
                let id = row.id?;
                let r = results.iter().find(|r| r.id.0 == id)?;
                let about = crate::domain::told::About {
                    account: AccountId::from_trusted(row.account?),
                    message: MessageId(id),
                    target: TargetId::from_trusted(row.target_id?),
                    event: row
                        .event_id
                        .map(crate::domain::ids::EventId)
                        .zip(row.event_type),
                    ordering_key: row.ordering_key,
                };
                Some(crate::store::rules::happenings(r, &about, row.last_error))
            })
            .flatten()
            .collect();
        if told.is_empty() {
            tx.commit().await.map_err(map_err)?;
            return Ok(recorded);
        }
        let mut tx = crate::store::sql::Tx::Postgres(tx);
        crate::store::sql::events::tell(self, &mut tx, &told, now).await?;
        tx.commit().await?;
        Ok(recorded)
    }
}

/// What `record` binds, gathered in one pass over the results: one row per
/// message for the update and one row per attempt for the insert.
struct RecordColumns<'a> {
    results: ResultColumns,
    attempts: AttemptColumns<'a>,
}

/// A row per message: what its update sets.
struct ResultColumns {
    ids: Vec<Uuid>,
    tokens: Vec<Uuid>,
    counts: Vec<i32>,
    states: Vec<&'static str>,
    next_at: Vec<Option<DateTime<Utc>>>,
    ladder: Vec<i32>,
    finished: Vec<DateTime<Utc>>,
    last_errors: Vec<Option<String>>,
}

/// A row per attempt. Attempts belong to the claim that made them (its
/// lease token): a stale claim's rows never land beside a fresh one's.
struct AttemptColumns<'a> {
    ids: Vec<Uuid>,
    tokens: Vec<Uuid>,
    numbers: Vec<i32>,
    started: Vec<DateTime<Utc>>,
    finished: Vec<DateTime<Utc>>,
    durations: Vec<i64>,
    outcomes: Vec<&'static str>,
    codes: Vec<Option<i32>>,
    errors: Vec<Option<Cow<'a, str>>>,
    bodies: Vec<Option<Cow<'a, str>>>,
    waits: Vec<Option<i64>>,
}

impl<'a> RecordColumns<'a> {
    fn of(results: &'a [Recorded]) -> Self {
        let n = results.len();
        let mut columns = RecordColumns {
            results: ResultColumns::with_capacity(n),
            attempts: AttemptColumns::with_capacity(n),
        };
        for r in results {
            columns.results.push(r);
            for a in &r.attempts {
                columns.attempts.push(r, a);
            }
        }
        columns
    }

    /// The one statement that records the results: updates the messages
    /// still under these leases, enters the dead letters in their history
    /// and inserts the attempts of the messages it updated.
    fn statement(&self, now: DateTime<Utc>) -> QueryAs<'_, Postgres, ToldRow, PgArguments> {
        let (m, a) = (&self.results, &self.attempts);
        sqlx::query_as(
            "WITH input AS ( \
               SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[], $5::timestamptz[], \
                 $6::int[], $7::timestamptz[], $8::text[]) \
               AS i(id, token, attempt_count, new_state, next_at, ladder_attempts, finished_at, last_error)), \
             upd AS ( \
               UPDATE messages m SET state = i.new_state, next_attempt_at = i.next_at, claim_at = i.next_at, \
                 lease_token = NULL, attempt_count = GREATEST(m.attempt_count, i.attempt_count), \
                 ladder_attempts = i.ladder_attempts, \
                 delivered_at = CASE WHEN i.new_state = 'Delivered' THEN i.finished_at ELSE m.delivered_at END, \
                 dead_lettered_at = CASE WHEN i.new_state = 'DeadLetter' THEN i.finished_at \
                   ELSE m.dead_lettered_at END, \
                 last_error = COALESCE(i.last_error, m.last_error), \
                 updated_at = $18 \
               FROM input i WHERE m.id = i.id AND m.lease_token = i.token AND m.state = 'Scheduled' \
               RETURNING m.id, i.token, m.account, m.target_id, m.state, m.dead_lettered_at, m.last_error, \
                 m.event_id, m.event_type, m.ordering_key), \
             told AS ( \
               SELECT a.account FROM (SELECT DISTINCT account FROM upd) a \
               WHERE EXISTS (SELECT 1 FROM subscription_patterns p JOIN subscriptions s ON s.id = p.subscription_id \
                 WHERE p.account = a.account AND p.pattern = ANY($21) AND s.enabled)), \
             dead AS ( \
               INSERT INTO message_events (message_id, at, kind, from_state, account, detail) \
               SELECT id, dead_lettered_at, 'DeadLettered', 'Scheduled', account, last_error \
               FROM upd WHERE state = 'DeadLetter'), \
             ins AS (INSERT INTO attempts (message_id, attempt, started_at, finished_at, duration_ms, outcome, \
               status_code, error, response_body, account, retry_after_ms, target_id) \
             SELECT a.message_id, a.attempt, a.started_at, a.finished_at, a.duration_ms, a.outcome, \
               a.status_code, a.error, a.response_body, u.account, a.retry_after_ms, u.target_id \
             FROM unnest($9::uuid[], $10::int[], $11::timestamptz[], $12::timestamptz[], \
               $13::bigint[], $14::text[], $15::int[], $16::text[], $17::text[], $19::uuid[], \
               $20::bigint[]) \
               AS a(message_id, attempt, started_at, finished_at, duration_ms, outcome, status_code, error, \
                 response_body, token, retry_after_ms) \
             JOIN upd u ON u.id = a.message_id AND u.token = a.token \
             ON CONFLICT (message_id, attempt) DO NOTHING RETURNING 1) \
             SELECT (SELECT count(*) FROM ins) AS written, u.id, u.account, u.target_id, u.event_id, \
               u.event_type, u.ordering_key, u.last_error \
             FROM (SELECT 1) one LEFT JOIN (upd u JOIN told t ON t.account = u.account) ON true",
        )
        .bind(&m.ids)
        .bind(&m.tokens)
        .bind(&m.counts)
        .bind(&m.states)
        .bind(&m.next_at)
        .bind(&m.ladder)
        .bind(&m.finished)
        .bind(&m.last_errors)
        .bind(&a.ids)
        .bind(&a.numbers)
        .bind(&a.started)
        .bind(&a.finished)
        .bind(&a.durations)
        .bind(&a.outcomes)
        .bind(&a.codes)
        .bind(&a.errors)
        .bind(&a.bodies)
        .bind(now)
        .bind(&a.tokens)
        .bind(&a.waits)
        .bind(&TOLD_PATTERNS[..])
        .persistent(false)
    }
}

/// The pattern texts that name events about messages, as bound.
const TOLD_PATTERNS: [&str; 5] = crate::domain::told::MESSAGE_PATTERNS;

/// A row of `record`'s answer: how many attempts it wrote, and (where the
/// account subscribes to Dispatch's own events) a message it changed.
#[derive(sqlx::FromRow)]
struct ToldRow {
    written: i64,
    id: Option<Uuid>,
    account: Option<String>,
    target_id: Option<String>,
    event_id: Option<Uuid>,
    event_type: Option<String>,
    ordering_key: Option<String>,
    last_error: Option<String>,
}

impl ResultColumns {
    fn with_capacity(n: usize) -> Self {
        ResultColumns {
            ids: Vec::with_capacity(n),
            tokens: Vec::with_capacity(n),
            counts: Vec::with_capacity(n),
            states: Vec::with_capacity(n),
            next_at: Vec::with_capacity(n),
            ladder: Vec::with_capacity(n),
            finished: Vec::with_capacity(n),
            last_errors: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, r: &Recorded) {
        let last = r.last();
        self.ids.push(r.id.0);
        self.tokens.push(r.lease_token);
        self.counts.push(last.attempt as i32);
        let (state, at) = state_after(&r.next);
        self.states.push(state);
        self.next_at.push(at);
        self.ladder.push(r.ladder_attempts as i32);
        self.finished.push(last.finished_at);
        self.last_errors.push(last_error(r));
    }
}

impl<'a> AttemptColumns<'a> {
    fn with_capacity(n: usize) -> Self {
        AttemptColumns {
            ids: Vec::with_capacity(n),
            tokens: Vec::with_capacity(n),
            numbers: Vec::with_capacity(n),
            started: Vec::with_capacity(n),
            finished: Vec::with_capacity(n),
            durations: Vec::with_capacity(n),
            outcomes: Vec::with_capacity(n),
            codes: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            bodies: Vec::with_capacity(n),
            waits: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, r: &Recorded, a: &'a Attempt) {
        self.ids.push(r.id.0);
        self.tokens.push(r.lease_token);
        self.numbers.push(a.attempt as i32);
        self.started.push(a.started_at);
        self.finished.push(a.finished_at);
        self.durations.push(a.duration_ms as i64);
        self.outcomes.push(a.outcome.as_str());
        self.codes.push(a.status_code.map(i32::from));
        self.errors.push(a.error.as_deref().map(storable_text));
        self.bodies
            .push(a.response_body.as_deref().map(storable_text));
        self.waits.push(a.retry_after_ms.map(|ms| ms as i64));
    }
}
