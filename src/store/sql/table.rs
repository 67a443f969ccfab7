//! Many rows as one value per column: a statement's source of rows whose
//! text does not change with the number of rows, so that PostgreSQL
//! prepares and plans it once per connection. A `VALUES` list of n rows is
//! a new statement for every n, parsed, planned and prepared again (and
//! pushes others out of the connection's cache of prepared statements).
//! With publishes writing their rows this way, planning is 0.2 % of
//! PostgreSQL's time in the publish benchmark.
//!
//! PostgreSQL binds one array per column and reads them with `unnest`;
//! SQLite binds one JSON text, an array of rows, and reads it with
//! `json_each`. Each column is stored as the shared bodies store it
//! elsewhere (`Uid`, `At`, `Text`): ids as `uuid` or hyphenated text, times
//! as `timestamptz` or milliseconds, payloads as `bytea` or text.

use chrono::{DateTime, Utc};
use serde_json::Value as Json;
use uuid::Uuid;

use super::{dialect::Dialect, Stmt};

/// One column's values, by kind.
pub(crate) enum Col {
    Uuid(Vec<Uuid>),
    Text(Vec<String>),
    OptText(Vec<Option<String>>),
    At(Vec<DateTime<Utc>>),
    /// Text stored as its UTF-8 bytes in PostgreSQL (`Text`).
    Payload(Vec<String>),
}

impl Col {
    fn len(&self) -> usize {
        match self {
            Col::Uuid(v) => v.len(),
            Col::Text(v) | Col::Payload(v) => v.len(),
            Col::OptText(v) => v.len(),
            Col::At(v) => v.len(),
        }
    }

    fn pg_type(&self) -> &'static str {
        match self {
            Col::Uuid(_) => "uuid[]",
            Col::Text(_) | Col::OptText(_) => "text[]",
            Col::At(_) => "timestamptz[]",
            Col::Payload(_) => "bytea[]",
        }
    }

    /// Row `i` as JSON, as SQLite stores the column.
    fn json(&self, i: usize) -> Json {
        match self {
            Col::Uuid(v) => Json::from(v[i].hyphenated().to_string()),
            Col::Text(v) | Col::Payload(v) => Json::from(v[i].as_str()),
            Col::OptText(v) => v[i].as_deref().map_or(Json::Null, Json::from),
            Col::At(v) => Json::from(v[i].timestamp_millis()),
        }
    }
}

/// Rows given column by column: `(name, values)`, every column as long.
pub(crate) struct Table {
    cols: Vec<(&'static str, Col)>,
}

impl Table {
    pub fn new(cols: Vec<(&'static str, Col)>) -> Self {
        debug_assert!(
            cols.windows(2).all(|w| w[0].1.len() == w[1].1.len()),
            "every column as long"
        );
        Self { cols }
    }

    /// Appends the rows as a FROM item named `alias`, its columns named as
    /// given, and binds them.
    pub fn push_from(self, stmt: &mut Stmt<'_, '_>, alias: &str) {
        let names: Vec<&str> = self.cols.iter().map(|(n, _)| *n).collect();
        match stmt.dialect() {
            Dialect::Postgres => {
                stmt.push("unnest(");
                for (i, (_, col)) in self.cols.into_iter().enumerate() {
                    if i > 0 {
                        stmt.push(", ");
                    }
                    let ty = col.pg_type();
                    match col {
                        Col::Uuid(v) => stmt.push_bind_pg(v),
                        Col::Text(v) => stmt.push_bind_pg(v),
                        Col::OptText(v) => stmt.push_bind_pg(v),
                        Col::At(v) => stmt.push_bind_pg(v),
                        Col::Payload(v) => stmt.push_bind_pg(
                            v.into_iter().map(String::into_bytes).collect::<Vec<_>>(),
                        ),
                    };
                    stmt.push("::").push(ty);
                }
                stmt.push(") AS ")
                    .push(alias)
                    .push(" (")
                    .push(&names.join(", "))
                    .push(")");
            }
            Dialect::Sqlite => {
                let rows = self.cols.first().map_or(0, |(_, c)| c.len());
                let json: Vec<Json> = (0..rows)
                    .map(|i| Json::from_iter(self.cols.iter().map(|(_, c)| c.json(i))))
                    .collect();
                stmt.push("(SELECT ");
                for (i, name) in names.iter().enumerate() {
                    if i > 0 {
                        stmt.push(", ");
                    }
                    stmt.push(&format!("json_extract(value, '$[{i}]') AS {name}"));
                }
                stmt.push(" FROM json_each(")
                    .push_bind_sqlite(Json::from(json).to_string())
                    .push(") ORDER BY key) ")
                    .push(alias);
            }
        }
    }
}
