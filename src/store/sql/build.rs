//! Statements put together piece by piece: conditions that only some calls
//! set, each combination its own statement (an `($1 IS NULL OR …)` form
//! would get one plan for all). What sqlx's `QueryBuilder` does, once for
//! both databases: text is appended, and each value takes the next `$n`.
//! And the values only one database's form of a statement takes.

use std::fmt::Write;

use sqlx::{Encode, Postgres, Sqlite, Type};

use super::{add, dialect::Dialect, Run, Stmt, Value};

impl<'q> Stmt<'q, '_> {
    /// Appends SQL text.
    pub fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.to_mut().push_str(sql);
        self
    }

    /// Appends the next placeholder, `$n`, and binds `value` to it.
    pub fn push_bind<T: Value<'q>>(&mut self, value: T) -> &mut Self {
        self.push_placeholder();
        match &mut self.run {
            Run::Postgres(_, args) => add(args, value),
            Run::Sqlite(_, args) => add(args, value),
        }
        self
    }

    /// The database the statement runs on.
    pub fn dialect(&self) -> Dialect {
        match &self.run {
            Run::Postgres(..) => Dialect::Postgres,
            Run::Sqlite(..) => Dialect::Sqlite,
        }
    }

    /// Appends the next `$n` and binds a value that only PostgreSQL's form
    /// of the statement takes (`bind_pg`).
    pub fn push_bind_pg<T>(&mut self, value: T) -> &mut Self
    where
        T: 'q + Encode<'q, Postgres> + Type<Postgres> + Send,
    {
        self.push_placeholder();
        self.add_pg(value);
        self
    }

    /// Appends the next `$n` and binds a value that only SQLite's form of
    /// the statement takes (`bind_sqlite`).
    pub fn push_bind_sqlite<T>(&mut self, value: T) -> &mut Self
    where
        T: 'q + Encode<'q, Sqlite> + Type<Sqlite> + Send,
    {
        self.push_placeholder();
        self.add_sqlite(value);
        self
    }

    /// Appends `$n` for the value to be bound next.
    fn push_placeholder(&mut self) {
        // A value that failed to encode fails the statement: its numbers no
        // longer matter.
        let bound = match &self.run {
            Run::Postgres(_, Ok(args)) => sqlx::Arguments::len(args),
            Run::Sqlite(_, Ok(args)) => sqlx::Arguments::len(args),
            _ => 0,
        };
        let _ = write!(self.sql.to_mut(), "${}", bound + 1);
    }

    /// Binds the next `$n` of a statement written for PostgreSQL alone (its
    /// arrays, say): on SQLite the statement fails as it runs.
    pub fn bind_pg<T>(mut self, value: T) -> Self
    where
        T: 'q + Encode<'q, Postgres> + Type<Postgres> + Send,
    {
        self.add_pg(value);
        self
    }

    /// Binds the next `$n` of a statement written for SQLite alone: on
    /// PostgreSQL the statement fails as it runs.
    pub fn bind_sqlite<T>(mut self, value: T) -> Self
    where
        T: 'q + Encode<'q, Sqlite> + Type<Sqlite> + Send,
    {
        self.add_sqlite(value);
        self
    }

    /// Adds a value only PostgreSQL's form of the statement takes; on
    /// SQLite the statement fails as it runs.
    fn add_pg<T>(&mut self, value: T)
    where
        T: 'q + Encode<'q, Postgres> + Type<Postgres> + Send,
    {
        match &mut self.run {
            Run::Postgres(_, args) => add(args, value),
            Run::Sqlite(_, args) => *args = Err("a PostgreSQL value bound on SQLite".into()),
        }
    }

    /// Adds a value only SQLite's form of the statement takes; on
    /// PostgreSQL the statement fails as it runs.
    fn add_sqlite<T>(&mut self, value: T)
    where
        T: 'q + Encode<'q, Sqlite> + Type<Sqlite> + Send,
    {
        match &mut self.run {
            Run::Postgres(_, args) => *args = Err("a SQLite value bound on PostgreSQL".into()),
            Run::Sqlite(_, args) => add(args, value),
        }
    }
}
