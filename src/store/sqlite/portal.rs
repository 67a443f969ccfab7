//! The portal's users, sessions, overview, message history and redrive on SQLite.

use chrono::{DateTime, Utc};

use super::{map_err, rows::*, SqliteStore};
use crate::{
    domain::{
        ids::{MessageId, TargetId},
        message::State,
    },
    store::{portal::*, state_from_str, MessageFilter, StoreError, StoreResult},
};

type SessionRow = (Vec<u8>, String, String, String, String, i64, i64);
type UserRow = (String, String, String, String, i64);

impl SqliteStore {
    pub(super) async fn insert_user(&self, u: &UserRecord) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO accounts (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING")
            .bind(&u.account)
            .bind(ms(u.created_at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let n = sqlx::query(
            "INSERT INTO portal_users (id, account, email, password_hash, created_at) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (email) DO NOTHING",
        )
        .bind(&u.id)
        .bind(&u.account)
        .bind(&u.email)
        .bind(&u.password_hash)
        .bind(ms(u.created_at))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        tx.commit().await.map_err(map_err)?;
        Ok(n == 1)
    }

    pub(super) async fn select_user(&self, email: &str) -> StoreResult<Option<UserRecord>> {
        let row: Option<UserRow> = sqlx::query_as(
            "SELECT id, account, email, password_hash, created_at FROM portal_users WHERE email = ?",
        )
        .bind(email)
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        Ok(row.map(
            |(id, account, email, password_hash, created_at)| UserRecord {
                id,
                account,
                email,
                password_hash,
                created_at: from_ms(created_at),
            },
        ))
    }

    pub(super) async fn insert_session(&self, s: &SessionRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM portal_sessions WHERE expires_at < ?")
            .bind(ms(s.created_at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query(
            "INSERT INTO portal_sessions (token_hash, user_id, account, email, csrf, created_at, expires_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.token_hash)
        .bind(&s.user_id)
        .bind(&s.account)
        .bind(&s.email)
        .bind(&s.csrf)
        .bind(ms(s.created_at))
        .bind(ms(s.expires_at))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)
    }

    pub(super) async fn select_session(
        &self,
        token_hash: &[u8],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<SessionRecord>> {
        let row: Option<SessionRow> = sqlx::query_as(
            "SELECT token_hash, user_id, account, email, csrf, created_at, expires_at \
             FROM portal_sessions WHERE token_hash = ? AND expires_at > ?",
        )
        .bind(token_hash)
        .bind(ms(now))
        .fetch_optional(&self.reader)
        .await
        .map_err(map_err)?;
        Ok(row.map(
            |(token_hash, user_id, account, email, csrf, created_at, expires_at)| SessionRecord {
                token_hash,
                user_id,
                account,
                email,
                csrf,
                created_at: from_ms(created_at),
                expires_at: from_ms(expires_at),
            },
        ))
    }

    pub(super) async fn remove_session(&self, token_hash: &[u8]) -> StoreResult<()> {
        sqlx::query("DELETE FROM portal_sessions WHERE token_hash = ?")
            .bind(token_hash)
            .execute(&self.writer)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// Five small queries at once, each answered from an index: counts per
    /// target and state (index-only, per target), the window's deliveries,
    /// dead letters and failed attempts, and the oldest due message. (SQLite
    /// would rather walk the account's messages by state than the window's
    /// partial index; `INDEXED BY` tells it which is smaller.)
    pub(super) async fn select_overview(
        &self,
        account: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Overview> {
        let counts = sqlx::query_as::<_, (String, String, i64)>(
            "SELECT t.id, s.state, (SELECT count(*) FROM messages m WHERE m.target_id = t.id AND m.state = s.state) \
             FROM targets t CROSS JOIN (SELECT 'Scheduled' AS state UNION ALL SELECT 'Delivered' \
               UNION ALL SELECT 'Cancelled' UNION ALL SELECT 'DeadLetter') AS s \
             WHERE t.account = ?1",
        )
        .bind(account)
        .fetch_all(&self.reader);
        let window = |sql: &'static str| {
            sqlx::query_as::<_, (i64,)>(sql)
                .bind(account)
                .bind(ms(since))
                .fetch_one(&self.reader)
        };
        let delivered = window(
            "SELECT count(*) FROM messages INDEXED BY messages_delivered WHERE state = 'Delivered' AND delivered_at >= ?2 AND account = ?1",
        );
        let dead = window(
            "SELECT count(*) FROM messages INDEXED BY messages_dead WHERE state = 'DeadLetter' AND dead_lettered_at >= ?2 AND account = ?1",
        );
        let failed = window(
            "SELECT count(*) FROM attempts WHERE account = ?1 AND outcome <> 'Success' AND finished_at >= ?2",
        );
        let oldest = sqlx::query_as::<_, (String, i64)>(
            "SELECT id, next_attempt_at FROM messages \
             WHERE state = 'Scheduled' AND NOT paused AND claim_at <= ?2 AND account = ?1 \
             ORDER BY claim_at LIMIT 1",
        )
        .bind(account)
        .bind(ms(now))
        .fetch_optional(&self.reader);
        let (counts, (delivered,), (dead,), (failed,), oldest) =
            tokio::try_join!(counts, delivered, dead, failed, oldest).map_err(map_err)?;
        let mut overview = Overview {
            delivered: delivered as u64,
            dead_lettered: dead as u64,
            failed_attempts: failed as u64,
            ..Overview::default()
        };
        for (target, state, count) in counts.into_iter().filter(|c| c.2 > 0) {
            overview.counts.push(StateCount {
                target_id: TargetId::from_trusted(target),
                state: state_from_str(&state)?,
                count: count as u64,
            });
        }
        overview.oldest_due = oldest
            .map(|(id, at)| Ok::<_, StoreError>((parse_id(&id)?, from_ms(at))))
            .transpose()?;
        Ok(overview)
    }

    pub(super) async fn count_filtered(
        &self,
        account: &str,
        f: &MessageFilter,
    ) -> StoreResult<u64> {
        let (n,): (i64,) = super::filter::filtered("SELECT count(*) FROM messages", account, f)
            .build_query_as()
            .fetch_one(&self.reader)
            .await
            .map_err(map_err)?;
        Ok(n as u64)
    }

    pub(super) async fn select_events(
        &self,
        account: &str,
        id: &MessageId,
    ) -> StoreResult<Vec<MessageEvent>> {
        let rows: Vec<(i64, String, String, Option<i64>)> = sqlx::query_as(
            "SELECT e.at, e.kind, e.from_state, e.delivery_time FROM message_events e \
             JOIN messages m ON m.id = e.message_id \
             WHERE e.message_id = ? AND m.account = ? ORDER BY e.at, e.seq",
        )
        .bind(id_text(id))
        .bind(account)
        .fetch_all(&self.reader)
        .await
        .map_err(map_err)?;
        rows.into_iter()
            .map(|(at, kind, from, delivery_time)| {
                Ok(MessageEvent {
                    at: from_ms(at),
                    kind: EventKind::parse(&kind)
                        .ok_or_else(|| StoreError::Corrupt(format!("unknown event {kind}")))?,
                    from: state_from_str(&from)?,
                    delivery_time: opt_from_ms(delivery_time),
                })
            })
            .collect()
    }

    /// Reschedules the dead letters that match in one transaction.
    pub(super) async fn redrive_dead_letters(
        &self,
        account: &str,
        f: &MessageFilter,
        ids: Option<&[MessageId]>,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let ids = ids.map(|ids| {
            serde_json::Value::from(ids.iter().map(id_text).collect::<Vec<_>>()).to_string()
        });
        let mut tx = self.begin().await?;
        let moved: Vec<(String,)> = sqlx::query_as(
            "UPDATE messages SET state = 'Scheduled', delivery_time = ?6, next_attempt_at = ?6, \
               claim_at = ?6, lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, \
               updated_at = ?7, paused = NOT (SELECT enabled FROM targets t WHERE t.id = messages.target_id) \
             WHERE account = ?1 AND state = 'DeadLetter' \
               AND (?2 IS NULL OR target_id = ?2) \
               AND (?3 IS NULL OR id IN (SELECT value FROM json_each(?3))) \
               AND (?4 IS NULL OR delivery_time >= ?4) AND (?5 IS NULL OR delivery_time < ?5) \
             RETURNING id",
        )
        .bind(account)
        .bind(f.target_id.as_ref().map(|t| t.as_str()))
        .bind(ids)
        .bind(f.delivery_from.map(ms))
        .bind(f.delivery_to.map(ms))
        .bind(ms(at))
        .bind(ms(now))
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        for (id,) in &moved {
            sqlx::query(
                "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time) \
                 VALUES (?, ?, 'Rescheduled', 'DeadLetter', ?)",
            )
            .bind(id)
            .bind(ms(now))
            .bind(ms(at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(moved.len() as u64)
    }
}

/// Records a manual action in the message's history, inside the action's transaction.
pub(super) async fn insert_event(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    id: &MessageId,
    kind: EventKind,
    from: State,
    delivery_time: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time) VALUES (?, ?, ?, ?, ?)",
    )
    .bind(id_text(id))
    .bind(ms(now))
    .bind(kind.as_str())
    .bind(from.as_str())
    .bind(delivery_time.map(ms))
    .execute(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(())
}
