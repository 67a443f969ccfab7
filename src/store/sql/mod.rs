//! One body for both databases: what a capability does is written once,
//! against this layer, and runs on PostgreSQL or SQLite.
//!
//! - SQL text uses `$1`, `$2`… on both: the SQLite driver binds `$n` to the
//!   n-th value, in any order and as often as it appears, as PostgreSQL does.
//! - A value is bound once, whatever the database (`Value`); a row type
//!   reads from either (`Row`). Times go through `At`: `timestamptz` in
//!   PostgreSQL, integer milliseconds in SQLite.
//! - Where the databases truly differ, the layer says so by name: SQLite
//!   reads beside its one writer (`Db::read` and `Db::write`), and only
//!   PostgreSQL needs rows locked to decide changes one at a time
//!   (`Tx::locks_rows`, `Tx::for_update`).
//! - What a backend keeps beside its database (the sealer, the wake-up of
//!   other instances) is `Keeps`.
//!
//! - A statement with optional parts is put together piece by piece
//!   (`Stmt::push`, `Stmt::push_bind`, in `build`), and a value only one
//!   database's form of a statement takes is bound by name (`bind_pg`,
//!   `bind_sqlite`: arrays, JSON lists); SQL that only one database has is
//!   named in `dialect` (`Dialect::indexed_by`, `Dialect::is_false`);
//!   `Stmt::replanned` is PostgreSQL's plan at each execution.
//!
//! - Each driver's errors are mapped once, here (`pg_err`, `sqlite_err`),
//!   for the shared bodies and the backends alike: the backends depend on
//!   this layer, never the other way.
//!
//! What differs beyond that (the claim with `SKIP LOCKED` against the
//! single writer, bulk inserts, LISTEN/NOTIFY, opening) stays in
//! `postgres/` and `sqlite/`.

mod accounts;
mod actions;
mod activity;
mod build;
pub(crate) mod dead;
mod dialect;
pub(crate) mod events;
pub(super) mod filter;
pub(super) mod gates;
mod identities;
pub(crate) mod keeps;
pub(crate) mod limits;
pub(super) mod ordering;
pub(crate) mod own;
pub(super) mod people;
mod portal;
mod pull;
pub(crate) mod rows;
mod schedules;
mod secrets;
pub(crate) mod table;
mod targets;
mod values;

pub(crate) use keeps::Keeps;

pub(crate) use values::{At, Text, Uid};

use std::borrow::Cow;

use sqlx::{
    error::BoxDynError,
    postgres::{PgArguments, PgRow},
    sqlite::{SqliteArguments, SqliteRow},
    Arguments, Encode, FromRow, PgConnection, PgPool, Postgres, Sqlite, SqliteConnection,
    SqlitePool, Transaction, Type,
};

use super::{StoreError, StoreResult};

/// A backend whose capabilities are written once (in this module's
/// children): it hands out its database.
pub(crate) trait Backend: Send + Sync + 'static {
    fn db(&self) -> Db<'_>;
}

/// A store's database, by backend.
#[derive(Clone, Copy)]
pub(crate) enum Db<'a> {
    Postgres(&'a PgPool),
    /// One writing connection, and reading ones beside it.
    Sqlite {
        writer: &'a SqlitePool,
        reader: &'a SqlitePool,
    },
}

impl<'a> Db<'a> {
    /// A statement that only reads; on SQLite it does not wait for the writer.
    pub fn read<'q>(self, sql: impl Into<Cow<'q, str>>) -> Stmt<'q, 'a> {
        match self {
            Db::Postgres(pool) => Stmt::postgres(sql.into(), On::Pool(pool)),
            Db::Sqlite { reader, .. } => Stmt::sqlite(sql.into(), On::Pool(reader)),
        }
    }

    /// A statement that writes, in a transaction of its own.
    pub fn write<'q>(self, sql: impl Into<Cow<'q, str>>) -> Stmt<'q, 'a> {
        match self {
            Db::Postgres(pool) => Stmt::postgres(sql.into(), On::Pool(pool)),
            Db::Sqlite { writer, .. } => Stmt::sqlite(sql.into(), On::Pool(writer)),
        }
    }

    pub async fn begin(self) -> StoreResult<Tx> {
        Ok(match self {
            Db::Postgres(pool) => Tx::Postgres(pool.begin().await.map_err(pg_err)?),
            Db::Sqlite { writer, .. } => Tx::Sqlite(writer.begin().await.map_err(sqlite_err)?),
        })
    }
}

/// A transaction; dropped without `commit`, it rolls back.
pub(crate) enum Tx {
    Postgres(Transaction<'static, Postgres>),
    Sqlite(Transaction<'static, Sqlite>),
}

impl Tx {
    pub fn sql<'q>(&mut self, sql: impl Into<Cow<'q, str>>) -> Stmt<'q, '_> {
        self.conn().sql(sql)
    }

    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Tx::Postgres(tx) => Conn::Postgres(tx),
            Tx::Sqlite(tx) => Conn::Sqlite(tx),
        }
    }

    pub async fn commit(self) -> StoreResult<()> {
        match self {
            Tx::Postgres(tx) => tx.commit().await.map_err(pg_err),
            Tx::Sqlite(tx) => tx.commit().await.map_err(sqlite_err),
        }
    }

    /// Whether a change decided on what the transaction read must lock
    /// those rows: PostgreSQL runs transactions side by side, SQLite's one
    /// writer runs them one after another.
    pub fn locks_rows(&self) -> bool {
        matches!(self, Tx::Postgres(_))
    }

    /// ` FOR UPDATE` where rows are locked (`locks_rows`), else nothing.
    pub fn for_update(&self) -> &'static str {
        if self.locks_rows() {
            " FOR UPDATE"
        } else {
            ""
        }
    }
}

/// A connection inside a transaction, for shared functions that a
/// backend's own transaction calls too (`Conn::from(&mut *tx)`).
pub(crate) enum Conn<'c> {
    Postgres(&'c mut PgConnection),
    Sqlite(&'c mut SqliteConnection),
}

impl<'c> From<&'c mut PgConnection> for Conn<'c> {
    fn from(c: &'c mut PgConnection) -> Self {
        Conn::Postgres(c)
    }
}

impl<'c> From<&'c mut SqliteConnection> for Conn<'c> {
    fn from(c: &'c mut SqliteConnection) -> Self {
        Conn::Sqlite(c)
    }
}

impl<'c> Conn<'c> {
    pub fn sql<'q>(self, sql: impl Into<Cow<'q, str>>) -> Stmt<'q, 'c> {
        match self {
            Conn::Postgres(c) => Stmt::postgres(sql.into(), On::Conn(c)),
            Conn::Sqlite(c) => Stmt::sqlite(sql.into(), On::Conn(c)),
        }
    }
}

enum On<'a, P, C> {
    Pool(&'a P),
    Conn(&'a mut C),
}

enum Run<'q, 'a> {
    Postgres(
        On<'a, PgPool, PgConnection>,
        Result<PgArguments, BoxDynError>,
    ),
    Sqlite(
        On<'a, SqlitePool, SqliteConnection>,
        Result<SqliteArguments<'q>, BoxDynError>,
    ),
}

/// A statement with its values, and where it runs.
pub(crate) struct Stmt<'q, 'a> {
    sql: Cow<'q, str>,
    run: Run<'q, 'a>,
    /// Whether PostgreSQL keeps the statement's plan (`replanned`).
    persistent: bool,
}

/// Runs a sqlx query (built by `$query` from the SQL and the arguments) on
/// the statement's pool or connection with `$fetch`, then `$then` on what
/// it returns; errors, a value that did not encode among them, are mapped
/// the backend's way.
macro_rules! run {
    ($stmt:expr, |$sql:ident, $args:ident| $query:expr, $fetch:ident, $then:expr) => {{
        let Stmt {
            sql,
            run,
            persistent,
        } = $stmt;
        let $sql: &str = &sql;
        match run {
            Run::Postgres(on, args) => match args {
                Err(e) => Err(pg_err(sqlx::Error::Encode(e))),
                Ok($args) => {
                    let q = $query.persistent(persistent);
                    match on {
                        On::Pool(p) => q.$fetch(p).await,
                        On::Conn(c) => q.$fetch(&mut *c).await,
                    }
                    .map($then)
                    .map_err(pg_err)
                }
            },
            Run::Sqlite(on, args) => match args {
                Err(e) => Err(sqlite_err(sqlx::Error::Encode(e))),
                Ok($args) => {
                    let q = $query;
                    match on {
                        On::Pool(p) => q.$fetch(p).await,
                        On::Conn(c) => q.$fetch(&mut *c).await,
                    }
                    .map($then)
                    .map_err(sqlite_err)
                }
            },
        }
    }};
}

impl<'q, 'a> Stmt<'q, 'a> {
    fn postgres(sql: Cow<'q, str>, on: On<'a, PgPool, PgConnection>) -> Self {
        Self {
            sql,
            run: Run::Postgres(on, Ok(PgArguments::default())),
            persistent: true,
        }
    }

    fn sqlite(sql: Cow<'q, str>, on: On<'a, SqlitePool, SqliteConnection>) -> Self {
        Self {
            sql,
            run: Run::Sqlite(on, Ok(SqliteArguments::default())),
            persistent: true,
        }
    }

    /// Binds the next `$n`. A value that cannot be encoded fails the
    /// statement when it runs, as sqlx's own `bind` does.
    pub fn bind<T: Value<'q>>(mut self, value: T) -> Self {
        match &mut self.run {
            Run::Postgres(_, args) => add(args, value),
            Run::Sqlite(_, args) => add(args, value),
        }
        self
    }

    /// PostgreSQL plans it at each execution rather than keeping a plan
    /// (sqlx's `persistent(false)`): for statements that scan `messages`
    /// or `attempts` by anything but a key, whose cached plans outlive the
    /// tables' growth (see `store::postgres`). SQLite keeps its statements.
    pub fn replanned(mut self) -> Self {
        self.persistent = false;
        self
    }

    /// Runs it; the number of rows it changed.
    pub async fn execute(self) -> StoreResult<u64> {
        run!(
            self,
            |sql, args| sqlx::query_with(sql, args),
            execute,
            |r| r.rows_affected()
        )
    }

    pub async fn fetch_all<R: Row>(self) -> StoreResult<Vec<R>> {
        run!(
            self,
            |sql, args| sqlx::query_as_with::<_, R, _>(sql, args),
            fetch_all,
            |rows| rows
        )
    }

    pub async fn fetch_optional<R: Row>(self) -> StoreResult<Option<R>> {
        run!(
            self,
            |sql, args| sqlx::query_as_with::<_, R, _>(sql, args),
            fetch_optional,
            |row| row
        )
    }

    pub async fn fetch_one<R: Row>(self) -> StoreResult<R> {
        run!(
            self,
            |sql, args| sqlx::query_as_with::<_, R, _>(sql, args),
            fetch_one,
            |row| row
        )
    }
}

fn add<'q, A: Arguments<'q>, T>(args: &mut Result<A, BoxDynError>, value: T)
where
    T: 'q + Encode<'q, A::Database> + Type<A::Database>,
{
    if let Ok(a) = args {
        let n = a.len() + 1;
        if let Err(e) = a.add(value) {
            *args = Err(format!("encoding argument ${n} failed: {e}").into());
        }
    }
}

/// PostgreSQL's driver errors, mapped once: lost connections mean "not
/// ready", the rest is internal.
pub(crate) fn pg_err(e: sqlx::Error) -> StoreError {
    match &e {
        // A connection lost mid-conversation shows as I/O or as a protocol
        // error (the stream ended where a message was expected).
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e),
        sqlx::Error::Database(db)
            if db.code().is_some_and(|c| {
                c.starts_with("08") || c == "57P01" || c == "57P02" || c == "57P03"
            }) =>
        {
            StoreError::Unavailable(e)
        }
        // U+0000 in text (22021), or in JSON that becomes text (22P05).
        sqlx::Error::Database(db) if db.code().is_some_and(|c| c == "22021" || c == "22P05") => {
            StoreError::InvalidText(e)
        }
        _ => StoreError::Database(e),
    }
}

/// SQLite's driver errors, mapped once: an unusable file or pool means
/// "not ready", the rest is internal.
pub(crate) fn sqlite_err(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e),
        _ => StoreError::Database(e),
    }
}

/// A value either database binds.
pub(crate) trait Value<'q>:
    Encode<'q, Postgres> + Type<Postgres> + Encode<'q, Sqlite> + Type<Sqlite> + Send + 'q
{
}

impl<'q, T> Value<'q> for T where
    T: Encode<'q, Postgres> + Type<Postgres> + Encode<'q, Sqlite> + Type<Sqlite> + Send + 'q
{
}

/// A row type either database reads (tuples of `Value`s that decode, or
/// `#[derive(FromRow)]`).
pub(crate) trait Row:
    for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin
{
}

impl<T> Row for T where T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin
{}
