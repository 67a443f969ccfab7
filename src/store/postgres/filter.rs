//! The WHERE clause of a message filter with only the conditions it sets, so
//! that each combination is planned for itself (an `(? IS NULL OR …)` form
//! gets one plan for all, and it scans the account's every message).

use sqlx::{Postgres, QueryBuilder};

use crate::{
    domain::{ids::MessageId, message::State},
    store::MessageFilter,
};

/// `head` (a SELECT … FROM messages) and the filter's conditions.
pub(super) fn filtered<'a>(
    head: &str,
    account: &'a str,
    f: &'a MessageFilter,
) -> QueryBuilder<'a, Postgres> {
    let mut q = QueryBuilder::new(head);
    conditions(&mut q, account, f);
    if let Some(s) = f.state {
        q.push(" AND state = ").push_bind(s.as_str());
    }
    q
}

/// The filter's conditions but its state.
fn conditions<'a>(q: &mut QueryBuilder<'a, Postgres>, account: &'a str, f: &'a MessageFilter) {
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
    if let Some(t) = f.delivery_from {
        q.push(" AND delivery_time >= ").push_bind(t);
    }
    if let Some(t) = f.delivery_to {
        q.push(" AND delivery_time < ").push_bind(t);
    }
}

/// The messages that pass the filter, lie below `before` (the cursor of a
/// page) and pass `more` (which pushes its own ` AND …`), newest (highest
/// id) first: `SELECT columns … ORDER BY id DESC OFFSET offset LIMIT limit`.
///
/// This reads an index that ends in the id backward: an account's
/// `(account, state, id)` or a target's `(target_id, state, id)`. A filter
/// without a state reads each state's part of it on its own, the first
/// `offset + limit` of each, as a UNION ALL that PostgreSQL merges in id
/// order (a Merge Append that stops at the limit), so that no index of all
/// an account's ids has to be kept up to date on every insert. (Without
/// the LIMIT in each part PostgreSQL 15 does not merge them: it sorts all
/// the account's messages.) A filter on an ordering key or a schedule
/// reads that one's index and needs no union.
pub(super) fn newest_first<'a>(
    columns: &str,
    account: &'a str,
    f: &'a MessageFilter,
    before: Option<&MessageId>,
    more: impl Fn(&mut QueryBuilder<'a, Postgres>),
    offset: i64,
    limit: i64,
) -> QueryBuilder<'a, Postgres> {
    let before = before.map(|m| m.0);
    let more = |q: &mut QueryBuilder<'a, Postgres>| {
        if let Some(id) = before {
            q.push(" AND id < ").push_bind(id);
        }
        more(q);
    };
    let mut q;
    if f.state.is_some() || f.ordering_key.is_some() || f.schedule_id.is_some() {
        q = filtered(&format!("SELECT {columns} FROM messages"), account, f);
        more(&mut q);
    } else {
        q = QueryBuilder::new("SELECT * FROM (");
        for (i, state) in State::ALL.iter().enumerate() {
            if i > 0 {
                q.push(" UNION ALL ");
            }
            q.push(format!("(SELECT {columns} FROM messages"));
            conditions(&mut q, account, f);
            // A constant: each part reads its state's part of the index.
            q.push(format!(" AND state = '{}'", state.as_str()));
            more(&mut q);
            q.push(" ORDER BY id DESC LIMIT ")
                .push_bind(offset.saturating_add(limit))
                .push(")");
        }
        q.push(") m");
    }
    q.push(" ORDER BY id DESC OFFSET ")
        .push_bind(offset)
        .push(" LIMIT ")
        .push_bind(limit);
    q
}
