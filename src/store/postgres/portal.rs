//! The portal's users, sessions, overview, message history and redrive on PostgreSQL.

use chrono::{DateTime, Utc};

use super::{map_err, PgStore};
use crate::{
    domain::{
        ids::{MessageId, TargetId},
        message::State,
    },
    store::{portal::*, state_from_str, MessageFilter, StoreError, StoreResult},
};

type SessionRow = (
    Vec<u8>,
    String,
    String,
    String,
    String,
    DateTime<Utc>,
    DateTime<Utc>,
);
type UserRow = (String, String, String, String, DateTime<Utc>);
type EventRow = (DateTime<Utc>, String, String, Option<DateTime<Utc>>);

impl PgStore {
    pub(super) async fn insert_user(&self, u: &UserRecord) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO accounts (name) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(&u.account)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let n = sqlx::query(
            "INSERT INTO portal_users (id, account, email, password_hash, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (email) DO NOTHING",
        )
        .bind(&u.id)
        .bind(&u.account)
        .bind(&u.email)
        .bind(&u.password_hash)
        .bind(u.created_at)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        tx.commit().await.map_err(map_err)?;
        Ok(n == 1)
    }

    pub(super) async fn select_user(&self, email: &str) -> StoreResult<Option<UserRecord>> {
        let row: Option<UserRow> = sqlx::query_as(
            "SELECT id, account, email, password_hash, created_at FROM portal_users WHERE email = $1",
        )
        .bind(email)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(
            |(id, account, email, password_hash, created_at)| UserRecord {
                id,
                account,
                email,
                password_hash,
                created_at,
            },
        ))
    }

    pub(super) async fn insert_session(&self, s: &SessionRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM portal_sessions WHERE expires_at < $1")
            .bind(s.created_at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query(
            "INSERT INTO portal_sessions (token_hash, user_id, account, email, csrf, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&s.token_hash)
        .bind(&s.user_id)
        .bind(&s.account)
        .bind(&s.email)
        .bind(&s.csrf)
        .bind(s.created_at)
        .bind(s.expires_at)
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
             FROM portal_sessions WHERE token_hash = $1 AND expires_at > $2",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        Ok(row.map(session_from_row))
    }

    pub(super) async fn remove_session(&self, token_hash: &[u8]) -> StoreResult<()> {
        sqlx::query("DELETE FROM portal_sessions WHERE token_hash = $1")
            .bind(token_hash)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// Five small queries at once, each answered from an index: counts per
    /// target and state (index-only, per target), the window's deliveries,
    /// dead letters and failed attempts, and the oldest due message.
    pub(super) async fn select_overview(
        &self,
        account: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<Overview> {
        let counts = sqlx::query_as::<_, (String, String, i64)>(
            "SELECT t.id, s.state, (SELECT count(*) FROM messages m WHERE m.target_id = t.id AND m.state = s.state) \
             FROM targets t CROSS JOIN (VALUES ('Scheduled'), ('Delivered'), ('Cancelled'), ('DeadLetter')) AS s(state) \
             WHERE t.account = $1",
        )
        .bind(account)
        .persistent(false)
        .fetch_all(&self.pool);
        let window = |sql: &'static str| {
            sqlx::query_as::<_, (i64,)>(sql)
                .bind(account)
                .bind(since)
                .persistent(false)
                .fetch_one(&self.pool)
        };
        let delivered = window(
            "SELECT count(*) FROM messages WHERE state = 'Delivered' AND delivered_at >= $2 AND account = $1",
        );
        let dead = window(
            "SELECT count(*) FROM messages WHERE state = 'DeadLetter' AND dead_lettered_at >= $2 AND account = $1",
        );
        let failed = window(
            "SELECT count(*) FROM attempts WHERE account = $1 AND outcome <> 'Success' AND finished_at >= $2",
        );
        let oldest = sqlx::query_as::<_, (uuid::Uuid, DateTime<Utc>)>(
            "SELECT id, next_attempt_at FROM messages \
             WHERE state = 'Scheduled' AND NOT paused AND claim_at <= $2 AND account = $1 \
             ORDER BY claim_at LIMIT 1",
        )
        .bind(account)
        .bind(now)
        .persistent(false)
        .fetch_optional(&self.pool);
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
            .map(|(id, at)| Ok::<_, StoreError>((MessageId(id), at)))
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
            .persistent(false)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(n as u64)
    }

    pub(super) async fn select_events(
        &self,
        account: &str,
        id: &MessageId,
    ) -> StoreResult<Vec<MessageEvent>> {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT e.at, e.kind, e.from_state, e.delivery_time FROM message_events e \
             JOIN messages m ON m.id = e.message_id \
             WHERE e.message_id = $1 AND m.account = $2 ORDER BY e.at, e.seq",
        )
        .bind(id.0)
        .bind(account)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.into_iter()
            .map(|(at, kind, from, delivery_time)| {
                Ok(MessageEvent {
                    at,
                    kind: EventKind::parse(&kind)
                        .ok_or_else(|| StoreError::Corrupt(format!("unknown event {kind}")))?,
                    from: state_from_str(&from)?,
                    delivery_time,
                })
            })
            .collect()
    }

    /// Reschedules the dead letters that match, all in one statement.
    pub(super) async fn redrive_dead_letters(
        &self,
        account: &str,
        f: &MessageFilter,
        ids: Option<&[MessageId]>,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let ids: Option<Vec<uuid::Uuid>> = ids.map(|ids| ids.iter().map(|m| m.0).collect());
        let mut tx = self.begin().await?;
        // As in reschedule: KEY SHARE orders this against enable/disable, so `paused` is right.
        sqlx::query(
            "SELECT 1 FROM targets WHERE account = $1 AND ($2::text IS NULL OR id = $2) FOR KEY SHARE",
        )
        .bind(account)
        .bind(f.target_id.as_ref().map(|t| t.as_str()))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        let moved = sqlx::query(
            "WITH moved AS ( \
               UPDATE messages m SET state = 'Scheduled', delivery_time = $6, next_attempt_at = $6, \
                 claim_at = $6, lease_token = NULL, ladder_attempts = 0, dead_lettered_at = NULL, \
                 updated_at = $7, paused = NOT t.enabled \
               FROM targets t \
               WHERE t.id = m.target_id AND m.account = $1 AND m.state = 'DeadLetter' \
                 AND ($2::text IS NULL OR m.target_id = $2) \
                 AND ($3::uuid[] IS NULL OR m.id = ANY($3)) \
                 AND ($4::timestamptz IS NULL OR m.delivery_time >= $4) \
                 AND ($5::timestamptz IS NULL OR m.delivery_time < $5) \
               RETURNING m.id) \
             INSERT INTO message_events (message_id, at, kind, from_state, delivery_time) \
             SELECT id, $7, 'Rescheduled', 'DeadLetter', $6 FROM moved",
        )
        .bind(account)
        .bind(f.target_id.as_ref().map(|t| t.as_str()))
        .bind(ids)
        .bind(f.delivery_from)
        .bind(f.delivery_to)
        .bind(at)
        .bind(now)
        .persistent(false)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
        if moved > 0 {
            self.notify_if_soon(&mut tx, at, now).await?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(moved)
    }
}

fn session_from_row(r: SessionRow) -> SessionRecord {
    let (token_hash, user_id, account, email, csrf, created_at, expires_at) = r;
    SessionRecord {
        token_hash,
        user_id,
        account,
        email,
        csrf,
        created_at,
        expires_at,
    }
}

/// Records a manual action in the message's history, inside the action's transaction.
pub(super) async fn insert_event(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    id: &MessageId,
    kind: EventKind,
    from: State,
    delivery_time: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO message_events (message_id, at, kind, from_state, delivery_time) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id.0)
    .bind(now)
    .bind(kind.as_str())
    .bind(from.as_str())
    .bind(delivery_time)
    .execute(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(())
}
