//! What a change to a schedule (a restart or its deletion) withdraws: the
//! runs made ahead of their instant.

use chrono::{DateTime, Utc};

use crate::store::{
    ordering::distinct_keys,
    sql::{own::Own, At, Tx},
    StoreResult,
};

/// Withdraws the schedule's runs made ahead of their instant: those after
/// `now` still Scheduled, never attempted and under no lease are cancelled
/// as a cancel does (`cancelled_at`, an entry in their history, their key's
/// order settled). They stay the schedule's messages, listed under it, but
/// give up their run's instant (their `schedule_run` is cleared), as do its
/// runs after `now` that were cancelled before: the schedule as it is now
/// makes its own message for each of its instants, one live message per
/// run. A run held under another instance's lease (claimed ahead) keeps its
/// instant and is delivered, as a cancel meeting that lease answers 409.
/// The stored last run goes back to the latest run left. The schedule's row
/// must be locked in `tx` where rows are locked; `key` is the target and
/// orderingKey its runs were made with.
pub(super) async fn withdraw_runs_ahead<B: Own>(
    store: &B,
    tx: &mut Tx,
    id: &str,
    key: Option<(&str, &str)>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let keys = distinct_keys(key);
    store.lock_keys(tx, &keys).await?;
    let withdraw: &[&str] = if tx.locks_rows() {
        // Side by side with claims, the messages cancelled and the entries
        // in their history are the same rows only if one statement both
        // changes them and records them.
        &["WITH withdrawn AS ( \
             UPDATE messages SET state = 'Cancelled', cancelled_at = $2, next_attempt_at = NULL, \
               claim_at = NULL, lease_token = NULL, held = false, updated_at = $2, schedule_run = NULL \
             WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Scheduled' AND attempt_count = 0 \
               AND (lease_token IS NULL OR claim_at <= $2) \
             RETURNING id, account) \
           INSERT INTO message_events (message_id, at, kind, from_state, account) \
           SELECT id, $2, 'Cancelled', 'Scheduled', account FROM withdrawn"]
    } else {
        // SQLite has no UPDATE inside WITH; under its one writer the same
        // condition read twice finds the same messages: their entries
        // first, then the change.
        &[
            "INSERT INTO message_events (message_id, at, kind, from_state, account) \
             SELECT id, $2, 'Cancelled', 'Scheduled', account FROM messages \
             WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Scheduled' \
               AND attempt_count = 0 AND (lease_token IS NULL OR claim_at <= $2)",
            "UPDATE messages SET state = 'Cancelled', cancelled_at = $2, next_attempt_at = NULL, \
               claim_at = NULL, lease_token = NULL, held = false, updated_at = $2, schedule_run = NULL \
             WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Scheduled' \
               AND attempt_count = 0 AND (lease_token IS NULL OR claim_at <= $2)",
        ]
    };
    let before = "UPDATE messages SET schedule_run = NULL \
         WHERE schedule_id = $1 AND schedule_run > $2 AND state = 'Cancelled'";
    let after = "UPDATE schedules AS s SET last_run_at = COALESCE( \
           (SELECT max(m.schedule_run) FROM messages m WHERE m.schedule_id = s.id AND m.schedule_run > $2), \
           CASE WHEN s.last_run_at <= $2 THEN s.last_run_at \
             ELSE (SELECT max(m.schedule_run) FROM messages m \
                   WHERE m.schedule_id = s.id AND m.schedule_run <= $2) END) \
         WHERE s.id = $1";
    let mut statements = vec![before];
    statements.extend(withdraw);
    statements.push(after);
    for statement in statements {
        tx.sql(statement).bind(id).bind(At(now)).execute().await?;
    }
    store.settle_keys(tx, &keys).await
}
