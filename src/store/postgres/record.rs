//! Recording attempts on PostgreSQL (`DeliveryStore::record`): one
//! statement updates the messages still under their leases, enters dead
//! letters in their history, inserts the attempts and says which messages
//! of accounts that subscribe to Dispatch's own events changed; those are
//! told in the same transaction.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use sqlx::{postgres::PgArguments, query::QueryAs, Postgres};
use uuid::Uuid;

use super::{map_err, ordering, PgStore};
use crate::{
    domain::ids::{AccountId, MessageId, TargetId},
    store::{
        last_error, ordering::distinct_keys, state_after, storable_text, Attempt, Recorded,
        StoreResult,
    },
};

impl PgStore {
    /// `DeliveryStore::record` of results that go in one transaction.
    pub(super) async fn record_apart(
        &self,
        results: &[Recorded],
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
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
