//! The steps of a publish: the messages it makes, the list of them, the
//! idempotency key it holds.

use std::collections::{hash_map::Entry, HashMap};

use chrono::{DateTime, Utc};

use super::subscriptions::matching_targets;
use crate::store::sql::{
    own::Own,
    table::{Col, Table},
    At, Tx, Uid,
};
use crate::{
    domain::{
        event::{Event, Reached},
        ids::{AccountId, EventId, MessageId, TargetId},
        message::State,
    },
    store::{
        ordering::distinct_keys, EventView, IdempotencyInput, PublishItem, Published, Render,
        ResponseJson, StoreError, StoreResult,
    },
};

/// One transaction's work for `EventStore::publish_events`: the answers in
/// the items' order, or None when another transaction took one of the keys
/// meanwhile (the caller rolls back and tries again, and then reads that
/// request's answer).
pub(super) async fn publish_in<B: Own>(
    store: &B,
    tx: &mut Tx,
    items: &[PublishItem],
    render: &Render,
) -> StoreResult<Option<Vec<Published>>> {
    let mut answers: Vec<Option<Published>> = items.iter().map(|_| None).collect();
    let (fresh, repeats) = sort_by_key_held(tx, items, &mut answers).await?;
    // Whom each type reaches, looked up once per account and type.
    let mut reach: HashMap<(&AccountId, &str), Vec<String>> = HashMap::new();
    for &i in &fresh {
        let e = &items[i].event;
        if let Entry::Vacant(v) = reach.entry((&e.account, e.ty.as_str())) {
            v.insert(matching_targets(tx, &e.account, e.ty.as_str()).await?);
        }
    }
    let targets = |i: usize| &reach[&(&items[i].event.account, items[i].event.ty.as_str())];
    insert_events(tx, fresh.iter().map(|&i| &items[i].event)).await?;
    let keys = distinct_keys(fresh.iter().flat_map(|&i| {
        let key = items[i].event.ordering_key.as_deref();
        key.into_iter()
            .flat_map(move |k| targets(i).iter().map(move |t| (t.as_str(), k)))
    }));
    store.lock_keys(tx, &keys).await?;
    // One statement per account, the pairs in the items' order: a key's
    // messages take ids in the order their events came.
    let ids_at = fresh
        .iter()
        .map(|&i| items[i].event.created_at)
        .max()
        .unwrap_or_else(Utc::now);
    let mut made = Vec::new();
    let mut accounts: Vec<&AccountId> = Vec::new();
    for &i in &fresh {
        if !accounts.contains(&&items[i].event.account) {
            accounts.push(&items[i].event.account);
        }
    }
    for account in accounts {
        let pairs: Vec<(EventId, &str)> = fresh
            .iter()
            .filter(|&&i| &items[i].event.account == account)
            .flat_map(|&i| {
                targets(i)
                    .iter()
                    .map(move |t| (items[i].event.id, t.as_str()))
            })
            .collect();
        made.extend(make_messages(tx, account, &pairs, None, ids_at).await?);
    }
    store.settle_keys(tx, &keys).await?;
    list_made(tx, &made).await?;
    let mut reached: HashMap<EventId, Vec<Reached>> = HashMap::new();
    for (id, event, target) in made {
        reached.entry(event).or_default().push(Reached {
            message_id: id,
            target_id: TargetId::from_trusted(target),
            state: Some(State::Scheduled),
        });
    }
    let mut views: HashMap<usize, EventView> = fresh
        .iter()
        .map(|&i| {
            let event = items[i].event.clone();
            let messages = reached.remove(&event.id).unwrap_or_default();
            (i, EventView { event, messages })
        })
        .collect();
    // The keys, in one order for every transaction: two never wait on each
    // other's.
    let mut keyed: Vec<(usize, &IdempotencyInput)> = fresh
        .iter()
        .filter_map(|&i| items[i].key.as_ref().map(|k| (i, k)))
        .collect();
    keyed.sort_by(|(a, ka), (b, kb)| {
        (&items[*a].event.account, &ka.key).cmp(&(&items[*b].event.account, &kb.key))
    });
    let mut rendered: HashMap<usize, ResponseJson> = HashMap::new();
    for (i, key) in keyed {
        let e = &items[i].event;
        let answer = render(&views[&i]);
        if !keep_key(tx, &e.account, key, &answer, e.created_at).await? {
            return Ok(None);
        }
        rendered.insert(i, answer);
    }
    if let Some(soonest) = views
        .values()
        .filter(|v| !v.messages.is_empty())
        .map(|v| &v.event)
        .min_by_key(|e| e.delivery_time)
    {
        store
            .notify_if_soon(tx, soonest.delivery_time, soonest.created_at)
            .await?;
    }
    // An item whose key an earlier item of this call took answers as a
    // later request with that key would.
    for (i, first) in repeats {
        let (mine, theirs) = (&items[i].key, &items[first].key);
        answers[i] = Some(match (mine, theirs, rendered.get(&first)) {
            (Some(m), Some(t), Some(response)) if m.request_hash == t.request_hash => {
                Published::Replayed {
                    status: t.status,
                    response: response.clone(),
                }
            }
            _ => Published::KeyConflict,
        });
    }
    for i in fresh {
        answers[i] = views.remove(&i).map(Published::Created);
    }
    Ok(Some(
        answers
            .into_iter()
            .map(|a| a.expect("every item answered"))
            .collect(),
    ))
}

/// Answers the items whose key an earlier request holds; of the rest,
/// which to publish (`fresh`) and which repeat the key of an earlier item
/// of the call (`(item, that earlier item)`).
async fn sort_by_key_held(
    tx: &mut Tx,
    items: &[PublishItem],
    answers: &mut [Option<Published>],
) -> StoreResult<(Vec<usize>, Vec<(usize, usize)>)> {
    let mut first: HashMap<(&AccountId, &str), usize> = HashMap::new();
    let mut fresh = Vec::with_capacity(items.len());
    let mut repeats = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(key) = &item.key {
            let e = &item.event;
            if let Some(earlier) = held_key(tx, &e.account, key, e.created_at).await? {
                answers[i] = Some(earlier);
                continue;
            }
            match first.entry((&e.account, key.key.as_str())) {
                Entry::Occupied(taken) => {
                    repeats.push((i, *taken.get()));
                    continue;
                }
                Entry::Vacant(v) => {
                    v.insert(i);
                }
            }
        }
        fresh.push(i);
    }
    Ok((fresh, repeats))
}

/// Inserts the events, many to a statement.
async fn insert_events<'e>(
    tx: &mut Tx,
    events: impl Iterator<Item = &'e Event>,
) -> StoreResult<()> {
    let events: Vec<&Event> = events.collect();
    for chunk in events.chunks(ROWS_PER_INSERT) {
        let rows = Table::new(vec![
            ("id", Col::Uuid(chunk.iter().map(|e| e.id.0).collect())),
            (
                "account",
                Col::Text(chunk.iter().map(|e| e.account.to_string()).collect()),
            ),
            (
                "type",
                Col::Text(chunk.iter().map(|e| e.ty.as_str().to_string()).collect()),
            ),
            (
                "payload",
                Col::Payload(
                    chunk
                        .iter()
                        .map(|e| e.payload.as_str().to_string())
                        .collect(),
                ),
            ),
            (
                "delivery_time",
                Col::At(chunk.iter().map(|e| e.delivery_time).collect()),
            ),
            (
                "ordering_key",
                Col::OptText(
                    chunk
                        .iter()
                        .map(|e| e.ordering_key.as_deref().map(str::to_string))
                        .collect(),
                ),
            ),
            (
                "created_at",
                Col::At(chunk.iter().map(|e| e.created_at).collect()),
            ),
        ]);
        let mut stmt = tx.sql(
            "INSERT INTO events (id, account, type, payload, delivery_time, ordering_key, created_at) \
             SELECT v.id, v.account, v.type, v.payload, v.delivery_time, v.ordering_key, v.created_at FROM ",
        );
        rows.push_from(&mut stmt, "v");
        stmt.execute().await?;
    }
    Ok(())
}

/// Rows per INSERT: a bound on one statement's arrays.
pub(super) const ROWS_PER_INSERT: usize = 1000;

/// A message made of an event: its new id, the event and the target.
type Made = (MessageId, EventId, String);

/// Makes one message per (event, target) pair, Scheduled for `at` and made
/// `now` (without `at`: for its event's deliveryTime, made when its event
/// was), of the event's payload, orderingKey and type (read from its row);
/// a target that is no longer the account's gets none. Returns the
/// messages made. The caller holds their ordering keys' locks, and made
/// the pairs in the order their messages are to keep (ids, made for `now`,
/// rise with it).
pub(super) async fn make_messages(
    tx: &mut Tx,
    account: &AccountId,
    pairs: &[(EventId, &str)],
    at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<Made>> {
    let lock = if tx.locks_rows() {
        " FOR KEY SHARE OF t"
    } else {
        ""
    };
    let mut out = Vec::with_capacity(pairs.len());
    for chunk in pairs.chunks(ROWS_PER_INSERT) {
        // The new rows' ids, events and targets.
        let rows = Table::new(vec![
            (
                "id",
                Col::Uuid(chunk.iter().map(|_| MessageId::at(now).0).collect()),
            ),
            (
                "event_id",
                Col::Uuid(chunk.iter().map(|(e, _)| e.0).collect()),
            ),
            (
                "target_id",
                Col::Text(chunk.iter().map(|(_, t)| t.to_string()).collect()),
            ),
        ]);
        let mut stmt = tx.sql(
            "INSERT INTO messages (id, account, target_id, state, payload, delivery_time, \
               next_attempt_at, claim_at, paused, gated, pull, created_at, updated_at, ordering_key, held, \
               event_id, event_type) \
             SELECT v.id, t.account, t.id, 'Scheduled', e.payload, ",
        );
        match at {
            Some(at) => {
                for (i, t) in [at, at, at].into_iter().enumerate() {
                    if i > 0 {
                        stmt.push(", ");
                    }
                    stmt.push_bind(At(t));
                }
                stmt.push(", NOT t.enabled, t.gated, t.kind = 'pull', ")
                    .push_bind(At(now))
                    .push(", ")
                    .push_bind(At(now));
            }
            None => {
                stmt.push(
                    "e.delivery_time, e.delivery_time, e.delivery_time, NOT t.enabled, t.gated, t.kind = 'pull', \
                     e.created_at, e.created_at",
                );
            }
        }
        stmt.push(", e.ordering_key, e.ordering_key IS NOT NULL, e.id, e.type FROM ");
        rows.push_from(&mut stmt, "v");
        stmt.push(
            " JOIN events e ON e.id = v.event_id \
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
pub(super) async fn list_made(tx: &mut Tx, made: &[Made]) -> StoreResult<()> {
    for chunk in made.chunks(ROWS_PER_INSERT) {
        let rows = Table::new(vec![
            (
                "event_id",
                Col::Uuid(chunk.iter().map(|(_, e, _)| e.0).collect()),
            ),
            (
                "message_id",
                Col::Uuid(chunk.iter().map(|(m, _, _)| m.0).collect()),
            ),
            (
                "target_id",
                Col::Text(chunk.iter().map(|(_, _, t)| t.clone()).collect()),
            ),
        ]);
        let mut stmt = tx.sql(
            "INSERT INTO event_messages (event_id, message_id, target_id) \
             SELECT v.event_id, v.message_id, v.target_id FROM ",
        );
        rows.push_from(&mut stmt, "v");
        stmt.execute().await?;
    }
    Ok(())
}

/// A key held by an earlier request, if one is (and not yet forgotten).
pub(super) async fn held_key(
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
pub(super) async fn keep_key(
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
pub(super) const PUBLISH_TRIES: usize = 3;
