//! Events as they are kept: published, read, counted, replayed, forgotten.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::publish::{list_made, make_messages, publish_in, PUBLISH_TRIES};
use crate::store::sql::{
    own::Own,
    rows::payload,
    table::{Col, Table},
    At, Db, Stmt, Text, Uid,
};
use crate::{
    domain::{
        event::{Event, EventType, Pattern, Reached, OWN_PREFIX},
        ids::{AccountId, EventId, MessageId, TargetId},
        message::{OrderingKey, State},
    },
    store::{
        ordering::distinct_keys, EventCursor, EventQuery, EventRange, EventStore, EventView,
        PublishItem, Published, Render, ReplayBatch, StoreError, StoreResult,
    },
};

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

#[async_trait]
impl<B: Own> EventStore for B {
    async fn publish_events(
        &self,
        items: &[PublishItem],
        render: &Render,
    ) -> StoreResult<Vec<Published>> {
        for _ in 0..PUBLISH_TRIES {
            let mut tx = self.db().begin().await?;
            if let Some(answers) = publish_in(self, &mut tx, items, render).await? {
                tx.commit().await?;
                return Ok(answers);
            }
            // Another request with one of the keys committed first: this
            // transaction made nothing; the next one reads its answer.
        }
        Err(StoreError::Corrupt(
            "an idempotency key of a publish kept changing hands".into(),
        ))
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
        let made = make_messages(&mut tx, account, &pairs, Some(at), now).await?;
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
        let purged: Vec<(Uid,)> = tx
            .sql(
                "DELETE FROM events WHERE id IN \
                 (SELECT id FROM events WHERE created_at < $1 ORDER BY created_at LIMIT $2) \
                 RETURNING id",
            )
            .bind(At(before))
            .bind(i64::from(limit))
            .fetch_all()
            .await?;
        // Their lists of messages go with them (no foreign key does it: it
        // checked each listed message's event again, row by row, as a
        // publish wrote the list).
        if !purged.is_empty() {
            let ids = Table::new(vec![(
                "id",
                Col::Uuid(purged.iter().map(|(id,)| id.0).collect()),
            )]);
            let mut stmt = tx.sql("DELETE FROM event_messages WHERE event_id IN (SELECT id FROM ");
            ids.push_from(&mut stmt, "p");
            stmt.push(")");
            stmt.execute().await?;
        }
        tx.commit().await?;
        Ok(purged.len() as u64)
    }
}
