//! Ordering keys (docs/api.md#ordering-keys) once for both databases: the
//! keys of messages, and settling each key's head (what to flip is
//! `ordering::settle`). What differs is named: how a list is bound
//! (`key_rows`, a `Table`; `Ids`), and that only PostgreSQL locks.
//!
//! In PostgreSQL a key's head changes only under a transaction-level
//! advisory lock on the key, which every writer takes before it touches a
//! row of the key (so two writers never wait for each other's rows in
//! opposite orders). Claims take no such lock: they only ever see the head.
//! The one race left, a claim taking the head while a writer moves the head
//! to an earlier message, is closed by reading the current head `FOR
//! UPDATE`: the writer waits for the claim and then sees the lease, and
//! keeps the head where it is. SQLite has one writer connection, so a key's
//! head changes inside each writing transaction with no further lock.

use uuid::Uuid;

use super::{
    dialect::Dialect,
    table::{Col, Table},
    Conn, Stmt, Uid,
};
use crate::store::{
    ordering::{settle, Current, Key},
    StoreResult,
};

/// The advisory locks' class ("DISP"), beside the key's hash.
const LOCK_CLASS: i32 = 0x4449_5350;

/// The keys as rows `u(t, k)` of a statement (`Table`: arrays on
/// PostgreSQL, JSON text on SQLite).
fn key_rows(keys: &[Key]) -> Table {
    Table::new(vec![
        (
            "t",
            Col::Text(keys.iter().map(|(t, _)| t.clone()).collect()),
        ),
        (
            "k",
            Col::Text(keys.iter().map(|(_, k)| k.clone()).collect()),
        ),
    ])
}

/// A list of message ids as a statement takes it, the n-th value:
/// PostgreSQL binds an array, SQLite JSON text.
enum Ids {
    Array(Vec<Uuid>),
    Json(String),
}

impl Ids {
    fn new(dialect: Dialect, ids: &[Uid]) -> Self {
        match dialect {
            Dialect::Postgres => Ids::Array(ids.iter().map(|id| id.0).collect()),
            Dialect::Sqlite => Ids::Json(
                serde_json::Value::from(
                    ids.iter()
                        .map(|id| id.0.hyphenated().to_string())
                        .collect::<Vec<_>>(),
                )
                .to_string(),
            ),
        }
    }

    /// `id` is in the list bound as `$n`: ` = ANY($n)` or
    /// ` IN (SELECT value FROM json_each($n))`.
    fn holds(&self, n: usize) -> String {
        match self {
            Ids::Array(_) => format!(" = ANY(${n})"),
            Ids::Json(_) => format!(" IN (SELECT value FROM json_each(${n}))"),
        }
    }

    fn bind<'q, 'c>(&'q self, stmt: Stmt<'q, 'c>) -> Stmt<'q, 'c> {
        match self {
            Ids::Array(ids) => stmt.bind_pg(ids),
            Ids::Json(json) => stmt.bind_sqlite(json.as_str()),
        }
    }
}

/// Locks the keys for the rest of the transaction where writers run side by
/// side (PostgreSQL; SQLite's one writer needs no lock), in one order for
/// every caller (by hash), so that writers with several keys never deadlock.
pub(in crate::store) async fn lock_keys(conn: Conn<'_>, keys: &[Key]) -> StoreResult<()> {
    if keys.is_empty() || conn.dialect() == Dialect::Sqlite {
        return Ok(());
    }
    let mut stmt = conn.sql("SELECT pg_advisory_xact_lock(");
    stmt.push_bind(LOCK_CLASS)
        .push(", h) FROM (SELECT DISTINCT hashtext(t || chr(31) || k) AS h FROM ");
    key_rows(keys).push_from(&mut stmt, "u");
    stmt.push(" ORDER BY 1) s");
    stmt.execute().await?;
    Ok(())
}

/// The keys of these messages (those that have one).
pub(in crate::store) async fn keys_of(conn: Conn<'_>, ids: &[Uid]) -> StoreResult<Vec<Key>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids = Ids::new(conn.dialect(), ids);
    ids.bind(conn.sql(format!(
        "SELECT DISTINCT target_id, ordering_key FROM messages \
         WHERE id{} AND ordering_key IS NOT NULL",
        ids.holds(1)
    )))
    .fetch_all()
    .await
}

/// Makes each key's head the first of its order (see `ordering::settle`).
/// The keys must be locked (`lock_keys`) in this transaction.
pub(in crate::store) async fn settle_keys(mut conn: Conn<'_>, keys: &[Key]) -> StoreResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let dialect = conn.dialect();
    // Where writers run side by side, the head is read locked (see above).
    let lock = match dialect {
        Dialect::Postgres => " FOR UPDATE OF m",
        Dialect::Sqlite => "",
    };
    let mut stmt = conn
        .reborrow()
        .sql("SELECT m.target_id, m.ordering_key, m.id, m.lease_token IS NOT NULL FROM ");
    key_rows(keys).push_from(&mut stmt, "u");
    stmt.push(&format!(
        " JOIN messages m ON m.target_id = u.t AND m.ordering_key = u.k \
         WHERE m.state = 'Scheduled' AND m.ordering_key IS NOT NULL AND {}{lock}",
        dialect.is_false("m.held"),
    ));
    let current: Vec<(String, String, Uid, bool)> = stmt.fetch_all().await?;
    // Each key's first message: PostgreSQL joins it LATERAL, which SQLite
    // lacks; SQLite asks a subquery per key (NULL where the key has none).
    let first_of = "(SELECT m.id FROM messages m \
       WHERE m.target_id = u.t AND m.ordering_key = u.k AND m.state = 'Scheduled' \
       ORDER BY m.delivery_time, m.id LIMIT 1)";
    let stmt = match dialect {
        Dialect::Postgres => {
            let mut stmt = conn.reborrow().sql("SELECT u.t, u.k, w.id FROM ");
            key_rows(keys).push_from(&mut stmt, "u");
            stmt.push(&format!(" CROSS JOIN LATERAL {first_of} w"));
            stmt
        }
        Dialect::Sqlite => {
            let mut stmt = conn
                .reborrow()
                .sql(format!("SELECT u.t, u.k, {first_of} FROM "));
            key_rows(keys).push_from(&mut stmt, "u");
            stmt
        }
    };
    let wanted: Vec<(String, String, Option<Uid>)> = stmt.replanned().fetch_all().await?;
    let current: Vec<Current<Uid>> = current
        .into_iter()
        .map(|(t, k, id, leased)| Current {
            key: (t, k),
            id,
            leased,
        })
        .collect();
    let wanted: Vec<(Key, Uid)> = wanted
        .into_iter()
        .filter_map(|(t, k, id)| id.map(|id| ((t, k), id)))
        .collect();
    let (release, hold) = settle(&current, &wanted);
    if release.is_empty() && hold.is_empty() {
        return Ok(());
    }
    let (release, hold) = (Ids::new(dialect, &release), Ids::new(dialect, &hold));
    let stmt = conn.sql(format!(
        "UPDATE messages SET held = NOT (id{released}) WHERE id{released} OR id{held}",
        released = release.holds(1),
        held = hold.holds(2),
    ));
    hold.bind(release.bind(stmt)).execute().await?;
    Ok(())
}

impl Conn<'_> {
    /// The same connection, for one more statement.
    fn reborrow(&mut self) -> Conn<'_> {
        match self {
            Conn::Postgres(c) => Conn::Postgres(c),
            Conn::Sqlite(c) => Conn::Sqlite(c),
        }
    }
}
