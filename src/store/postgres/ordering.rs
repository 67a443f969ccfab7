//! Ordering keys (docs/api.md#ordering-keys) on the PostgreSQL store's own
//! transactions: the bodies are written once for both databases
//! (`store::sql::ordering`); these take the driver's transaction that this
//! store's writers hold.

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::store::{
    ordering::Key,
    sql::{ordering, Conn, Uid},
    StoreResult,
};

/// Locks the keys for the rest of the transaction (`sql::ordering::lock_keys`).
pub(super) async fn lock_keys(
    tx: &mut Transaction<'static, Postgres>,
    keys: &[Key],
) -> StoreResult<()> {
    ordering::lock_keys(Conn::from(&mut **tx), keys).await
}

/// The keys of these messages (those that have one).
pub(super) async fn keys_of(
    tx: &mut Transaction<'static, Postgres>,
    ids: &[Uuid],
) -> StoreResult<Vec<Key>> {
    let ids: Vec<Uid> = ids.iter().copied().map(Uid).collect();
    ordering::keys_of(Conn::from(&mut **tx), &ids).await
}

/// Makes each key's head the first of its order; the keys must be locked
/// (`lock_keys`) in this transaction.
pub(super) async fn settle_keys(
    tx: &mut Transaction<'static, Postgres>,
    keys: &[Key],
) -> StoreResult<()> {
    ordering::settle_keys(Conn::from(&mut **tx), keys).await
}
