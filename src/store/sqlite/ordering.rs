//! Ordering keys in the SQLite store (docs/api.md#ordering-keys). The embedded store has
//! one writer connection, so a key's head changes inside each writing
//! transaction with no further lock; what to flip is `ordering::settle`.

use sqlx::SqliteConnection;

use super::map_err;
use crate::store::{
    ordering::{settle, Current, Key},
    StoreResult,
};

fn keys_json(keys: &[Key]) -> String {
    serde_json::Value::from(
        keys.iter()
            .map(|(t, k)| serde_json::json!([t, k]))
            .collect::<Vec<_>>(),
    )
    .to_string()
}

/// The keys of these messages (those that have one).
pub(super) async fn keys_of(conn: &mut SqliteConnection, ids: &[String]) -> StoreResult<Vec<Key>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "SELECT DISTINCT target_id, ordering_key FROM messages \
         WHERE id IN (SELECT value FROM json_each(?1)) AND ordering_key IS NOT NULL",
    )
    .bind(serde_json::Value::from(ids.to_vec()).to_string())
    .fetch_all(&mut *conn)
    .await
    .map_err(map_err)
}

/// Makes each key's head the first of its order (see `ordering::settle`).
pub(super) async fn settle_keys(conn: &mut SqliteConnection, keys: &[Key]) -> StoreResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let json = keys_json(keys);
    let current: Vec<(String, String, String, bool)> = sqlx::query_as(
        "SELECT m.target_id, m.ordering_key, m.id, m.lease_token IS NOT NULL \
         FROM (SELECT json_extract(value, '$[0]') AS t, json_extract(value, '$[1]') AS k FROM json_each(?1)) u \
         JOIN messages m ON m.target_id = u.t AND m.ordering_key = u.k \
         WHERE m.state = 'Scheduled' AND m.ordering_key IS NOT NULL AND m.held = 0",
    )
    .bind(&json)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_err)?;
    let wanted: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT u.t, u.k, (SELECT m.id FROM messages m \
           WHERE m.target_id = u.t AND m.ordering_key = u.k AND m.state = 'Scheduled' \
           ORDER BY m.delivery_time, m.id LIMIT 1) \
         FROM (SELECT json_extract(value, '$[0]') AS t, json_extract(value, '$[1]') AS k FROM json_each(?1)) u",
    )
    .bind(&json)
    .fetch_all(&mut *conn)
    .await
    .map_err(map_err)?;
    let current: Vec<Current<String>> = current
        .into_iter()
        .map(|(t, k, id, leased)| Current {
            key: (t, k),
            id,
            leased,
        })
        .collect();
    let wanted: Vec<(Key, String)> = wanted
        .into_iter()
        .filter_map(|(t, k, id)| id.map(|id| ((t, k), id)))
        .collect();
    let (release, hold) = settle(&current, &wanted);
    if release.is_empty() && hold.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE messages SET held = (id NOT IN (SELECT value FROM json_each(?1))) \
         WHERE id IN (SELECT value FROM json_each(?1)) OR id IN (SELECT value FROM json_each(?2))",
    )
    .bind(serde_json::Value::from(release).to_string())
    .bind(serde_json::Value::from(hold).to_string())
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(())
}
