//! The row an account's first target, client or person writes.

use chrono::{DateTime, Utc};

use super::{At, Stmt};

/// Makes sure the account `name` exists, by the statement `on` makes of the
/// SQL (a pool's or a transaction's). PostgreSQL's `created_at` is the
/// database's `now()` (the column's default); SQLite's integer column has
/// no default and takes `at`.
pub(in crate::store) fn insert_account<'q, 'a>(
    on: impl FnOnce(&'static str) -> Stmt<'q, 'a>,
    postgres: bool,
    name: &'q str,
    at: DateTime<Utc>,
) -> Stmt<'q, 'a> {
    if postgres {
        on("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING").bind(name)
    } else {
        on("INSERT INTO accounts (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind(name)
            .bind(At(at))
    }
}
