//! Ordering keys (docs/api.md#ordering-keys) on the SQLite store's own
//! connections: the bodies are written once for both databases
//! (`store::sql::ordering`); these take the driver's connection that this
//! store's writers hold, and its ids as text.

use sqlx::SqliteConnection;

use super::rows::parse_id;
use crate::store::{
    ordering::Key,
    sql::{ordering, Conn, Uid},
    StoreResult,
};

/// The keys of these messages (those that have one).
pub(super) async fn keys_of(conn: &mut SqliteConnection, ids: &[String]) -> StoreResult<Vec<Key>> {
    let ids = ids
        .iter()
        .map(|id| parse_id(id).map(|id| Uid(id.0)))
        .collect::<StoreResult<Vec<_>>>()?;
    ordering::keys_of(Conn::from(conn), &ids).await
}

/// Makes each key's head the first of its order (see `ordering::settle`).
pub(super) async fn settle_keys(conn: &mut SqliteConnection, keys: &[Key]) -> StoreResult<()> {
    ordering::settle_keys(Conn::from(conn), keys).await
}
