//! Subscriptions and events (docs/api.md#events-and-subscriptions), once for
//! both databases.
//!
//! Matching is a lookup, not a scan: each distinct pattern of a subscription
//! is a row of `subscription_patterns`, and an event of type `a.b.c` looks up
//! the few texts that match it (`a.b.c`, `a.*`, `a.b.*`, `*`) in the index
//! on (account, pattern). The publish's cost grows with the targets it
//! reaches, not with the subscriptions it does not.
//!
//! A publish is one transaction: its idempotency key, the event, one message
//! per matching target (each target once, however many of its subscriptions
//! match), and the event's list of them. Its messages are made as every
//! message is: under their ordering key's lock, the target's row KEY SHARE
//! locked on PostgreSQL against a concurrent enable or disable (so `paused`
//! is right), other instances told when one falls due soon.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::{own::Own, rows::payload, At, Db, Stmt, Text, Tx, Uid};
use crate::{
    domain::{
        event::{
            pattern_texts, patterns_matching, Event, EventType, Pattern, Reached, Subscription,
            OWN_PREFIX,
        },
        ids::{AccountId, EventId, MessageId, SubscriptionId, TargetId},
        message::{OrderingKey, State},
    },
    store::{
        ordering::distinct_keys, EventCursor, EventQuery, EventRange, EventStore, EventView,
        IdempotencyInput, Published, ReplayBatch, ResponseJson, StoreError, StoreResult,
        SubscriptionCursor, SubscriptionStore,
    },
};

const SUBSCRIPTION_COLUMNS: &str =
    "id, account, target_id, name, types, enabled, created_at, updated_at";

#[derive(sqlx::FromRow)]
struct SubscriptionRow {
    id: String,
    account: String,
    target_id: String,
    name: String,
    types: Json<Vec<String>>,
    enabled: bool,
    created_at: At,
    updated_at: At,
}

impl TryFrom<SubscriptionRow> for Subscription {
    type Error = StoreError;

    fn try_from(r: SubscriptionRow) -> StoreResult<Subscription> {
        let types = r
            .types
            .0
            .iter()
            .map(|t| {
                Pattern::parse(t)
                    .map_err(|_| StoreError::Corrupt(format!("subscription {}: pattern {t}", r.id)))
            })
            .collect::<StoreResult<_>>()?;
        Ok(Subscription {
            id: SubscriptionId::from_trusted(r.id),
            account: AccountId::from_trusted(r.account),
            target_id: TargetId::from_trusted(r.target_id),
            name: r.name,
            types,
            enabled: r.enabled,
            created_at: r.created_at.into(),
            updated_at: r.updated_at.into(),
        })
    }
}

/// Replaces the subscription's rows of `subscription_patterns` with its
/// patterns, each distinct text once.
async fn save_patterns(tx: &mut Tx, s: &Subscription) -> StoreResult<()> {
    tx.sql("DELETE FROM subscription_patterns WHERE subscription_id = $1")
        .bind(s.id.as_str())
        .execute()
        .await?;
    let mut texts = pattern_texts(&s.types);
    texts.sort();
    texts.dedup();
    let mut stmt =
        tx.sql("INSERT INTO subscription_patterns (subscription_id, account, pattern) VALUES ");
    for (i, text) in texts.into_iter().enumerate() {
        stmt.push(if i == 0 { "(" } else { ", (" })
            .push_bind(s.id.as_str().to_string())
            .push(", ")
            .push_bind(s.account.clone())
            .push(", ")
            .push_bind(text)
            .push(")");
    }
    stmt.execute().await?;
    Ok(())
}

#[async_trait]
impl<B: Own> SubscriptionStore for B {
    async fn insert_subscription(&self, s: &Subscription) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        let lock = if tx.locks_rows() {
            " FOR KEY SHARE"
        } else {
            ""
        };
        // The target's row, KEY SHARE locked where rows are, so that a
        // delete of the target waits for this subscription and takes it
        // with it.
        let target: Option<(String,)> = tx
            .sql(format!(
                "SELECT id FROM targets WHERE id = $1 AND account = $2{lock}"
            ))
            .bind(s.target_id.as_str())
            .bind(&s.account)
            .fetch_optional()
            .await?;
        if target.is_none() {
            return Ok(false);
        }
        tx.sql(
            "INSERT INTO subscriptions (id, account, target_id, name, types, enabled, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(s.id.as_str())
        .bind(&s.account)
        .bind(s.target_id.as_str())
        .bind(&s.name)
        .bind(Json(pattern_texts(&s.types)))
        .bind(s.enabled)
        .bind(At(s.created_at))
        .bind(At(s.updated_at))
        .execute()
        .await?;
        save_patterns(&mut tx, s).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn get_subscription(
        &self,
        account: &AccountId,
        id: &SubscriptionId,
    ) -> StoreResult<Option<Subscription>> {
        let row: Option<SubscriptionRow> = self
            .db()
            .read(format!(
                "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE id = $1 AND account = $2"
            ))
            .bind(id.as_str())
            .bind(account)
            .fetch_optional()
            .await?;
        row.map(Subscription::try_from).transpose()
    }

    async fn list_subscriptions(
        &self,
        account: &AccountId,
        target: Option<&TargetId>,
        after: Option<&SubscriptionCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Subscription>> {
        let mut stmt = self.db().read(format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE account = "
        ));
        stmt.push_bind(account.to_string());
        if let Some(t) = target {
            stmt.push(" AND target_id = ")
                .push_bind(t.as_str().to_string());
        }
        if let Some(c) = after {
            stmt.push(" AND (created_at, id) < (")
                .push_bind(At(c.created_at))
                .push(", ")
                .push_bind(c.id.as_str().to_string())
                .push(")");
        }
        stmt.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_bind(i64::from(limit));
        let rows: Vec<SubscriptionRow> = stmt.fetch_all().await?;
        rows.into_iter().map(Subscription::try_from).collect()
    }

    async fn update_subscription(&self, s: &Subscription) -> StoreResult<bool> {
        let mut tx = self.db().begin().await?;
        let changed = tx
            .sql(
                "UPDATE subscriptions SET name = $3, types = $4, enabled = $5, updated_at = $6 \
                 WHERE id = $1 AND account = $2",
            )
            .bind(s.id.as_str())
            .bind(&s.account)
            .bind(&s.name)
            .bind(Json(pattern_texts(&s.types)))
            .bind(s.enabled)
            .bind(At(s.updated_at))
            .execute()
            .await?
            == 1;
        if changed {
            save_patterns(&mut tx, s).await?;
        }
        tx.commit().await?;
        Ok(changed)
    }

    async fn delete_subscription(
        &self,
        account: &AccountId,
        id: &SubscriptionId,
    ) -> StoreResult<bool> {
        // Its patterns go with it (ON DELETE CASCADE).
        Ok(self
            .db()
            .write("DELETE FROM subscriptions WHERE id = $1 AND account = $2")
            .bind(id.as_str())
            .bind(account)
            .execute()
            .await?
            == 1)
    }
}

const EVENT_COLUMNS: &str = "id, account, type, payload, delivery_time, ordering_key, created_at";

#[derive(sqlx::FromRow)]
struct EventRow {
    id: Uid,
    account: String,
    #[sqlx(rename = "type")]
    ty: String,
    payload: Text,
    delivery_time: At,
    ordering_key: Option<String>,
    created_at: At,
}

impl TryFrom<EventRow> for Event {
    type Error = StoreError;

    fn try_from(r: EventRow) -> StoreResult<Event> {
        Ok(Event {
            id: EventId(r.id.0),
            account: AccountId::from_trusted(r.account),
            ty: EventType::from_trusted(r.ty),
            payload: payload(r.payload)?,
            delivery_time: r.delivery_time.into(),
            ordering_key: r.ordering_key.map(OrderingKey::from_trusted),
            created_at: r.created_at.into(),
        })
    }
}

/// A message an event made: its id, target and state (none once the
/// message is gone).
#[derive(sqlx::FromRow)]
struct ReachedRow {
    event_id: Uid,
    message_id: Uid,
    target_id: String,
    state: Option<String>,
}

/// The messages the events made, by event, each event's in target order.
async fn reached_by(
    db: Db<'_>,
    events: &[EventId],
) -> StoreResult<BTreeMap<EventId, Vec<Reached>>> {
    let mut by: BTreeMap<EventId, Vec<Reached>> = BTreeMap::new();
    if events.is_empty() {
        return Ok(by);
    }
    let mut stmt = db.read(
        "SELECT em.event_id, em.message_id, em.target_id, m.state FROM event_messages em \
         LEFT JOIN messages m ON m.id = em.message_id WHERE em.event_id IN (",
    );
    for (i, id) in events.iter().enumerate() {
        if i > 0 {
            stmt.push(", ");
        }
        stmt.push_bind(Uid(id.0));
    }
    stmt.push(") ORDER BY em.event_id, em.target_id, em.message_id");
    let rows: Vec<ReachedRow> = stmt.fetch_all().await?;
    for r in rows {
        let state = match r.state {
            Some(s) => Some(
                State::parse(&s)
                    .ok_or_else(|| StoreError::Corrupt(format!("message state {s}")))?,
            ),
            None => None,
        };
        by.entry(EventId(r.event_id.0)).or_default().push(Reached {
            message_id: MessageId(r.message_id.0),
            target_id: TargetId::from_trusted(r.target_id),
            state,
        });
    }
    Ok(by)
}

/// The targets whose enabled subscriptions match `ty`, each once, in order.
async fn matching_targets(tx: &mut Tx, account: &AccountId, ty: &str) -> StoreResult<Vec<String>> {
    let mut stmt = tx.sql(
        "SELECT DISTINCT s.target_id FROM subscription_patterns p \
         JOIN subscriptions s ON s.id = p.subscription_id \
         WHERE s.enabled AND p.account = ",
    );
    stmt.push_bind(account.to_string())
        .push(" AND p.pattern IN (");
    for (i, text) in patterns_matching(ty).into_iter().enumerate() {
        if i > 0 {
            stmt.push(", ");
        }
        stmt.push_bind(text);
    }
    stmt.push(") ORDER BY s.target_id");
    let rows: Vec<(String,)> = stmt.fetch_all().await?;
    Ok(rows.into_iter().map(|r| r.0).collect())
}

/// Rows per INSERT: well within SQLite's 32,766 bound values.
const ROWS_PER_INSERT: usize = 1000;

/// A message made of an event: its new id, the event and the target.
type Made = (MessageId, EventId, String);

/// Makes one message per (event, target) pair, Scheduled for `at`, of the
/// event's payload, orderingKey and type (read from its row); a target that
/// is no longer the account's gets none. Returns the messages made. The
/// caller holds their ordering keys' locks, and made the pairs in the order
/// their messages are to keep (ids rise with it).
async fn make_messages(
    tx: &mut Tx,
    account: &AccountId,
    pairs: &[(EventId, &str)],
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<Made>> {
    let lock = if tx.locks_rows() {
        " FOR KEY SHARE OF t"
    } else {
        ""
    };
    let mut out = Vec::with_capacity(pairs.len());
    for chunk in pairs.chunks(ROWS_PER_INSERT) {
        // The new rows' ids, events and targets as a list of values, named
        // by a common table expression both databases read.
        let mut stmt = tx.sql("WITH v (id, event_id, target_id) AS (VALUES ");
        for (i, (event, target)) in chunk.iter().enumerate() {
            stmt.push(if i == 0 { "(" } else { ", (" })
                .push_bind(Uid(MessageId::at(now).0))
                .push(", ")
                .push_bind(Uid(event.0))
                .push(", ")
                .push_bind(target.to_string())
                .push(")");
        }
        stmt.push(
            ") INSERT INTO messages (id, account, target_id, state, payload, delivery_time, \
               next_attempt_at, claim_at, paused, gated, created_at, updated_at, ordering_key, held, \
               event_id, event_type) \
             SELECT v.id, t.account, t.id, 'Scheduled', e.payload, ",
        )
        .push_bind(At(at))
        .push(", ")
        .push_bind(At(at))
        .push(", ")
        .push_bind(At(at))
        .push(", NOT t.enabled, t.gated, ")
        .push_bind(At(now))
        .push(", ")
        .push_bind(At(now))
        .push(
            ", e.ordering_key, e.ordering_key IS NOT NULL, e.id, e.type \
             FROM v JOIN events e ON e.id = v.event_id \
             JOIN targets t ON t.id = v.target_id AND t.account = ",
        )
        .push_bind(account.to_string())
        .push(" ORDER BY v.id")
        .push(lock)
        .push(" RETURNING id, event_id, target_id");
        let rows: Vec<(Uid, Uid, String)> = stmt.fetch_all().await?;
        out.extend(
            rows.into_iter()
                .map(|(id, event, t)| (MessageId(id.0), EventId(event.0), t)),
        );
    }
    out.sort_by_key(|m| m.0);
    Ok(out)
}

/// Remembers which message each target got of which event.
async fn list_made(tx: &mut Tx, made: &[Made]) -> StoreResult<()> {
    for chunk in made.chunks(ROWS_PER_INSERT) {
        let mut stmt =
            tx.sql("INSERT INTO event_messages (event_id, message_id, target_id) VALUES ");
        for (i, (id, event, target)) in chunk.iter().enumerate() {
            stmt.push(if i == 0 { "(" } else { ", (" })
                .push_bind(Uid(event.0))
                .push(", ")
                .push_bind(Uid(id.0))
                .push(", ")
                .push_bind(target.clone())
                .push(")");
        }
        stmt.execute().await?;
    }
    Ok(())
}

/// ` WHERE …` for the account's events of `range`: created in [from, to),
/// of a type one of its patterns matches (a family by the prefix it names:
/// `substr`, as LIKE would read `_` in a type as a wildcard).
fn in_range<'q>(stmt: &mut Stmt<'q, '_>, account: &AccountId, range: &EventRange) {
    stmt.push(" WHERE account = ")
        .push_bind(account.to_string())
        .push(" AND created_at >= ")
        .push_bind(At(range.from))
        .push(" AND created_at < ")
        .push_bind(At(range.to))
        .push(" AND (");
    for (i, p) in range.patterns.iter().enumerate() {
        if i > 0 {
            stmt.push(" OR ");
        }
        let (prefix, equal) = match p {
            Pattern::Exact(t) => {
                stmt.push("type = ").push_bind(t.clone());
                continue;
            }
            Pattern::Family(prefix) => (prefix.as_str(), true),
            Pattern::All => (OWN_PREFIX, false),
        };
        let len = i32::try_from(prefix.len()).unwrap_or(i32::MAX);
        stmt.push("substr(type, 1, ")
            .push_bind(len)
            .push(if equal { ") = " } else { ") <> " })
            .push_bind(prefix.to_string());
    }
    stmt.push(")");
}

/// A key held by an earlier request, if one is (and not yet forgotten).
async fn held_key(
    tx: &mut Tx,
    account: &AccountId,
    key: &IdempotencyInput,
    now: DateTime<Utc>,
) -> StoreResult<Option<Published>> {
    let live_since = now - chrono::TimeDelta::from_std(key.ttl).unwrap_or_default();
    let held: Option<(Vec<u8>, i32, String)> = tx
        .sql(
            "SELECT request_hash, status, response FROM idempotency_keys \
             WHERE account = $1 AND key = $2 AND created_at >= $3",
        )
        .bind(account)
        .bind(&key.key)
        .bind(At(live_since))
        .fetch_optional()
        .await?;
    let Some((hash, status, response)) = held else {
        return Ok(None);
    };
    if hash != key.request_hash {
        return Ok(Some(Published::KeyConflict));
    }
    Ok(Some(Published::Replayed {
        status: u16::try_from(status).unwrap_or(201),
        response: serde_json::value::RawValue::from_string(response)
            .map_err(|e| StoreError::Corrupt(format!("idempotent response: {e}")))?,
    }))
}

/// Keeps the key with its answer; false when another request took it
/// meanwhile (the caller rolls back and answers as that request did).
async fn keep_key(
    tx: &mut Tx,
    account: &AccountId,
    key: &IdempotencyInput,
    response: &ResponseJson,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let live_since = now - chrono::TimeDelta::from_std(key.ttl).unwrap_or_default();
    let kept: Option<(bool,)> = tx
        .sql(
            "INSERT INTO idempotency_keys (account, key, request_hash, status, response, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (account, key) DO UPDATE SET request_hash = excluded.request_hash, \
               status = excluded.status, response = excluded.response, created_at = excluded.created_at \
             WHERE idempotency_keys.created_at < $7 \
             RETURNING true",
        )
        .bind(account)
        .bind(&key.key)
        .bind(key.request_hash.clone())
        .bind(i32::from(key.status))
        .bind(response.get().to_string())
        .bind(At(now))
        .bind(At(live_since))
        .fetch_optional()
        .await?;
    Ok(kept.is_some())
}

/// How many times a publish is tried again when a concurrent request with
/// its key won the race.
const PUBLISH_TRIES: usize = 3;

#[async_trait]
impl<B: Own> EventStore for B {
    async fn publish_event(
        &self,
        event: &Event,
        key: Option<&IdempotencyInput>,
        render: &(dyn for<'v> Fn(&'v EventView) -> ResponseJson + Send + Sync),
    ) -> StoreResult<Published> {
        for _ in 0..PUBLISH_TRIES {
            let mut tx = self.db().begin().await?;
            if let Some(key) = key {
                if let Some(earlier) =
                    held_key(&mut tx, &event.account, key, event.created_at).await?
                {
                    return Ok(earlier);
                }
            }
            let targets = matching_targets(&mut tx, &event.account, event.ty.as_str()).await?;
            tx.sql(
                "INSERT INTO events (id, account, type, payload, delivery_time, ordering_key, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(Uid(event.id.0))
            .bind(&event.account)
            .bind(event.ty.as_str())
            .bind(Text(event.payload.as_str().to_string()))
            .bind(At(event.delivery_time))
            .bind(event.ordering_key.as_deref())
            .bind(At(event.created_at))
            .execute()
            .await?;
            let keys = distinct_keys(
                event
                    .ordering_key
                    .as_deref()
                    .into_iter()
                    .flat_map(|k| targets.iter().map(move |t| (t.as_str(), k))),
            );
            self.lock_keys(&mut tx, &keys).await?;
            let pairs: Vec<(EventId, &str)> =
                targets.iter().map(|t| (event.id, t.as_str())).collect();
            let made = make_messages(
                &mut tx,
                &event.account,
                &pairs,
                event.delivery_time,
                event.created_at,
            )
            .await?;
            self.settle_keys(&mut tx, &keys).await?;
            list_made(&mut tx, &made).await?;
            let view = EventView {
                event: event.clone(),
                messages: made
                    .into_iter()
                    .map(|(id, _, target)| Reached {
                        message_id: id,
                        target_id: TargetId::from_trusted(target),
                        state: Some(State::Scheduled),
                    })
                    .collect(),
            };
            if let Some(key) = key {
                if !keep_key(
                    &mut tx,
                    &event.account,
                    key,
                    &render(&view),
                    event.created_at,
                )
                .await?
                {
                    // Another request with this key committed first: this
                    // one made nothing; read its answer afresh.
                    drop(tx);
                    continue;
                }
            }
            if !view.messages.is_empty() {
                self.notify_if_soon(&mut tx, event.delivery_time, event.created_at)
                    .await?;
            }
            tx.commit().await?;
            return Ok(Published::Created(view));
        }
        Err(StoreError::Corrupt(format!(
            "idempotency key of event {} kept changing hands",
            event.id
        )))
    }

    async fn get_event(&self, account: &AccountId, id: &EventId) -> StoreResult<Option<EventView>> {
        let row: Option<EventRow> = self
            .db()
            .read(format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE id = $1 AND account = $2"
            ))
            .bind(Uid(id.0))
            .bind(account)
            .fetch_optional()
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let event = Event::try_from(row)?;
        let mut reached = reached_by(self.db(), &[event.id]).await?;
        Ok(Some(EventView {
            messages: reached.remove(&event.id).unwrap_or_default(),
            event,
        }))
    }

    async fn list_published_events(
        &self,
        account: &AccountId,
        query: &EventQuery,
        after: Option<&EventCursor>,
        limit: u32,
    ) -> StoreResult<Vec<EventView>> {
        let mut stmt = self.db().read(format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE account = "
        ));
        stmt.push_bind(account.to_string());
        if let Some(ty) = &query.ty {
            stmt.push(" AND type = ").push_bind(ty.clone());
        }
        if let Some(from) = query.from {
            stmt.push(" AND created_at >= ").push_bind(At(from));
        }
        if let Some(to) = query.to {
            stmt.push(" AND created_at < ").push_bind(At(to));
        }
        if let Some(c) = after {
            stmt.push(" AND (created_at, id) < (")
                .push_bind(At(c.created_at))
                .push(", ")
                .push_bind(Uid(c.id.0))
                .push(")");
        }
        stmt.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_bind(i64::from(limit));
        let rows: Vec<EventRow> = stmt.fetch_all().await?;
        let events: Vec<Event> = rows
            .into_iter()
            .map(Event::try_from)
            .collect::<StoreResult<_>>()?;
        let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
        let mut reached = reached_by(self.db(), &ids).await?;
        Ok(events
            .into_iter()
            .map(|event| EventView {
                messages: reached.remove(&event.id).unwrap_or_default(),
                event,
            })
            .collect())
    }

    async fn count_events(
        &self,
        account: &AccountId,
        range: &EventRange,
        limit: u64,
    ) -> StoreResult<u64> {
        if range.patterns.is_empty() {
            return Ok(0);
        }
        let mut stmt = self.db().read("SELECT count(*) FROM (SELECT 1 FROM events");
        in_range(&mut stmt, account, range);
        stmt.push(" LIMIT ")
            .push_bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .push(") AS matched");
        let (n,): (i64,) = stmt.fetch_one().await?;
        Ok(n.max(0) as u64)
    }

    async fn replay_batch(
        &self,
        account: &AccountId,
        target: &TargetId,
        range: &EventRange,
        after: Option<&EventCursor>,
        limit: u32,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<ReplayBatch> {
        if range.patterns.is_empty() {
            return Ok(ReplayBatch::default());
        }
        let mut tx = self.db().begin().await?;
        let mut stmt = tx.sql("SELECT id, created_at, ordering_key FROM events");
        in_range(&mut stmt, account, range);
        if let Some(c) = after {
            stmt.push(" AND (created_at, id) > (")
                .push_bind(At(c.created_at))
                .push(", ")
                .push_bind(Uid(c.id.0))
                .push(")");
        }
        stmt.push(" ORDER BY created_at, id LIMIT ")
            .push_bind(i64::from(limit));
        let events: Vec<(Uid, At, Option<String>)> = stmt.fetch_all().await?;
        let Some((last_id, last_at, _)) = events.last() else {
            return Ok(ReplayBatch::default());
        };
        let last = EventCursor {
            created_at: last_at.0,
            id: EventId(last_id.0),
        };
        let keys = distinct_keys(
            events
                .iter()
                .filter_map(|(_, _, k)| k.as_deref().map(|k| (target.as_str(), k))),
        );
        self.lock_keys(&mut tx, &keys).await?;
        let pairs: Vec<(EventId, &str)> = events
            .iter()
            .map(|(id, _, _)| (EventId(id.0), target.as_str()))
            .collect();
        let made = make_messages(&mut tx, account, &pairs, at, now).await?;
        self.settle_keys(&mut tx, &keys).await?;
        list_made(&mut tx, &made).await?;
        if !made.is_empty() {
            self.notify_if_soon(&mut tx, at, now).await?;
        }
        tx.commit().await?;
        Ok(ReplayBatch {
            made: made.len() as u64,
            scanned: events.len() as u32,
            last: Some(last),
        })
    }

    async fn purge_events(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
        let mut tx = self.db().begin().await?;
        let purged = tx
            .sql(
                "DELETE FROM events WHERE id IN \
                 (SELECT id FROM events WHERE created_at < $1 ORDER BY created_at LIMIT $2)",
            )
            .bind(At(before))
            .bind(i64::from(limit))
            .execute()
            .await?;
        tx.commit().await?;
        Ok(purged)
    }
}
