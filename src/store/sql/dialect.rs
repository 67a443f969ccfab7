//! Words of SQL that only one database has, named for what they do, for
//! the shared bodies' statements.

use super::{Conn, Db, Tx};

/// Which database a statement is written for, where its SQL must differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Postgres,
    Sqlite,
}

impl Db<'_> {
    pub fn dialect(self) -> Dialect {
        match self {
            Db::Postgres(_) => Dialect::Postgres,
            Db::Sqlite { .. } => Dialect::Sqlite,
        }
    }
}

impl Conn<'_> {
    pub fn dialect(&self) -> Dialect {
        match self {
            Conn::Postgres(_) => Dialect::Postgres,
            Conn::Sqlite(_) => Dialect::Sqlite,
        }
    }
}

impl Dialect {
    /// ` INDEXED BY index` on SQLite, whose planner would otherwise pick a
    /// worse index for the statement (it says which, beside the statement);
    /// nothing on PostgreSQL, which has no such hint and picks by itself.
    pub fn indexed_by(self, index: &str) -> String {
        match self {
            Dialect::Postgres => String::new(),
            Dialect::Sqlite => format!(" INDEXED BY {index}"),
        }
    }

    /// A boolean column tested false the way each database's partial
    /// indexes test it, so that a statement can use them: `NOT flag` in
    /// PostgreSQL (a boolean), `flag = 0` in SQLite (an integer).
    pub fn is_false(self, flag: &str) -> String {
        match self {
            Dialect::Postgres => format!("NOT {flag}"),
            Dialect::Sqlite => format!("{flag} = 0"),
        }
    }
}

impl Tx {
    /// ` FOR NO KEY UPDATE` where rows are locked (`Tx::locks_rows`), else
    /// nothing: PostgreSQL's lock for a change that leaves the row's key
    /// alone, which does not wait for (nor block) the `KEY SHARE` that
    /// inserting a message takes on its target.
    pub fn for_no_key_update(&self) -> &'static str {
        if self.locks_rows() {
            " FOR NO KEY UPDATE"
        } else {
            ""
        }
    }
}
