//! The WHERE clause of a message filter with only the conditions it sets, so
//! that each combination is planned for itself (an `(? IS NULL OR …)` form
//! gets one plan for all, and it scans the account's every message), and
//! the lists of messages newest first that read with it.

use super::{
    rows::{MessageRow, MESSAGE_COLUMNS},
    At, Db, Stmt, Uid,
};
use crate::{
    domain::{
        ids::{AccountId, MessageId},
        message::{Message, State},
    },
    store::{MessageFilter, StoreResult},
};

/// `head` (a SELECT … FROM messages) and the filter's conditions; planned
/// at each execution, for its values (`Stmt::replanned`).
pub(in crate::store) fn filtered<'q, 'a>(
    db: Db<'a>,
    head: &str,
    account: &'q AccountId,
    f: &'q MessageFilter,
) -> Stmt<'q, 'a> {
    let mut q = db.read(head.to_string()).replanned();
    conditions(&mut q, account, f);
    if let Some(s) = f.state {
        q.push(" AND state = ").push_bind(s.as_str());
    }
    q
}

/// The filter's conditions but its state.
fn conditions<'q>(q: &mut Stmt<'q, '_>, account: &'q AccountId, f: &'q MessageFilter) {
    q.push(" WHERE account = ").push_bind(account);
    if let Some(t) = &f.target_id {
        q.push(" AND target_id = ").push_bind(t.as_str());
    }
    if let Some(k) = &f.ordering_key {
        q.push(" AND ordering_key = ").push_bind(k.as_str());
    }
    if let Some(s) = &f.schedule_id {
        q.push(" AND schedule_id = ").push_bind(s.as_str());
    }
    if let Some(e) = &f.event_id {
        // The event's own list of the messages it made (its primary key
        // leads with the event): messages keep no index by event, one
        // fewer for every message a publish writes.
        q.push(" AND id IN (SELECT message_id FROM event_messages WHERE event_id = ")
            .push_bind(Uid(e.0))
            .push(")");
    }
    if let Some(t) = &f.event_type {
        q.push(" AND event_type = ").push_bind(t.as_str());
    }
    if let Some(t) = f.delivery_from {
        q.push(" AND delivery_time >= ").push_bind(At(t));
    }
    if let Some(t) = f.delivery_to {
        q.push(" AND delivery_time < ").push_bind(At(t));
    }
}

/// Whether the database keeps an index of each account's message ids to
/// read newest first: SQLite does (`messages_by_account`); PostgreSQL
/// dropped it (migration `no_account_id_index`: one index fewer to write
/// for every message) and merges the parts of another instead
/// (`newest_first`).
fn ids_by_account(db: Db<'_>) -> bool {
    match db {
        Db::Postgres(_) => false,
        Db::Sqlite { .. } => true,
    }
}

/// The messages that pass the filter, lie below `before` (the cursor of a
/// page) and pass `more` (which pushes its own ` AND …`), newest (highest
/// id) first: `SELECT columns … ORDER BY id DESC LIMIT limit OFFSET offset`.
///
/// This reads an index that ends in the id backward. SQLite reads the
/// account's `(account, id)`, or the narrower index the filter names.
/// PostgreSQL keeps no index of all an account's ids (`ids_by_account`): it
/// reads an account's `(account, state, id)` or a target's
/// `(target_id, state, id)`, and a filter without a state reads each
/// state's part of it on its own, the first `offset + limit` of each, as a
/// UNION ALL that PostgreSQL merges in id order (a Merge Append that stops
/// at the limit). (Without the LIMIT in each part PostgreSQL 15 does not
/// merge them: it sorts all the account's messages.) A filter on an
/// ordering key or a schedule reads that one's index and needs no union.
#[allow(clippy::too_many_arguments)]
pub(in crate::store) fn newest_first<'q, 'a>(
    db: Db<'a>,
    columns: &str,
    account: &'q AccountId,
    f: &'q MessageFilter,
    before: Option<&MessageId>,
    more: impl Fn(&mut Stmt<'q, 'a>),
    offset: i64,
    limit: i64,
) -> Stmt<'q, 'a> {
    let before = before.map(|m| Uid(m.0));
    let more = |q: &mut Stmt<'q, 'a>| {
        if let Some(id) = before {
            q.push(" AND id < ").push_bind(id);
        }
        more(q);
    };
    let mut q;
    if ids_by_account(db)
        || f.state.is_some()
        || f.ordering_key.is_some()
        || f.schedule_id.is_some()
        || f.event_id.is_some()
    {
        q = filtered(db, &format!("SELECT {columns} FROM messages"), account, f);
        more(&mut q);
    } else {
        q = db.read("SELECT * FROM (").replanned();
        for (i, state) in State::ALL.iter().enumerate() {
            if i > 0 {
                q.push(" UNION ALL ");
            }
            q.push(&format!("(SELECT {columns} FROM messages"));
            conditions(&mut q, account, f);
            // A constant: each part reads its state's part of the index.
            q.push(&format!(" AND state = '{}'", state.as_str()));
            more(&mut q);
            q.push(" ORDER BY id DESC LIMIT ")
                .push_bind(offset.saturating_add(limit))
                .push(")");
        }
        q.push(") m");
    }
    q.push(" ORDER BY id DESC LIMIT ").push_bind(limit);
    if offset > 0 {
        q.push(" OFFSET ").push_bind(offset);
    }
    q
}

/// A page of messages newest first (`MessageStore::list_messages`). UUIDv7
/// ids are creation-ordered, so "newest first" is "id descending".
pub(in crate::store) async fn list_messages(
    db: Db<'_>,
    account: &AccountId,
    filter: &MessageFilter,
    before: Option<&MessageId>,
    limit: u32,
) -> StoreResult<Vec<Message>> {
    let rows: Vec<MessageRow> = newest_first(
        db,
        MESSAGE_COLUMNS,
        account,
        filter,
        before,
        |_| {},
        0,
        i64::from(limit),
    )
    .fetch_all()
    .await?;
    rows.into_iter().map(Message::try_from).collect()
}
