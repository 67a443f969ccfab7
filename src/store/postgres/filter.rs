//! The WHERE clause of a message filter with only the conditions it sets, so
//! that each combination is planned for itself (an `(? IS NULL OR …)` form
//! gets one plan for all, and it scans the account's every message).

use sqlx::{Postgres, QueryBuilder};

use crate::store::MessageFilter;

/// `head` (a SELECT … FROM messages) and the filter's conditions.
pub(super) fn filtered<'a>(
    head: &str,
    account: &'a str,
    f: &'a MessageFilter,
) -> QueryBuilder<'a, Postgres> {
    let mut q = QueryBuilder::new(head);
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
    if let Some(s) = f.state {
        q.push(" AND state = ").push_bind(s.as_str());
    }
    if let Some(t) = f.delivery_from {
        q.push(" AND delivery_time >= ").push_bind(t);
    }
    if let Some(t) = f.delivery_to {
        q.push(" AND delivery_time < ").push_bind(t);
    }
    q
}
