//! Rules every backend follows that are not SQL: what a refused transition
//! answers, how an idempotency key's lifetime and replay read, what state a
//! recorded result leaves a message in, how texts and enums are stored. The
//! backends read and write rows; the decisions live here, once.

use std::borrow::Cow;

use chrono::{DateTime, Utc};

use super::{
    prelude::*, IdempotencyInput, InsertOutcome, Recorded, StoreError, StoreResult, Transition,
};
use crate::domain::{
    ids::{AccountId, TargetId},
    message::{Message, State},
    retry::{AttemptOutcome, Next},
    target::{gate::Health, Target, TargetSpec},
};

/// Stores a new target of `account` under a fresh id (a few tries, should
/// ids ever collide); None when every try collided.
pub async fn insert_new_target(
    store: &dyn Store,
    account: &AccountId,
    spec: &TargetSpec,
    now: DateTime<Utc>,
) -> StoreResult<Option<Target>> {
    for _ in 0..5 {
        let t = Target {
            id: TargetId::new(),
            account: account.clone(),
            name: spec.name.clone(),
            enabled: spec.enabled,
            config: spec.config.clone(),
            created_at: now,
            updated_at: now,
            health: Health::closed(spec.config.limits().breaker.as_ref()),
        };
        if store.insert_target(&t).await? {
            return Ok(Some(t));
        }
    }
    Ok(None)
}

/// What a cancel or reschedule that changed nothing answers, from the
/// message as it is now: its state, and until when a lease holds it (None
/// when no lease token is set). NotFound when there is no such message in
/// the account; InFlight while an attempt's lease holds a message the action
/// applies to; else the state it is in (it may have changed since the
/// action's statement ran: what it is now is reported).
pub(crate) fn refused_transition(
    found: Option<(State, Option<DateTime<Utc>>)>,
    now: DateTime<Utc>,
) -> Transition {
    match found {
        None => Transition::NotFound,
        Some((state, leased_until)) => {
            if state.can_cancel_or_reschedule() && leased_until.is_some_and(|c| c > now) {
                Transition::InFlight
            } else {
                Transition::WrongState(state)
            }
        }
    }
}

/// A key stored at or after this time is live for a message created at
/// `m.created_at`; an older one has expired and is taken over.
pub(crate) fn key_live_since(m: &Message, idem: &IdempotencyInput) -> DateTime<Utc> {
    m.created_at - chrono::TimeDelta::from_std(idem.ttl).unwrap_or_default()
}

/// The answer to a request whose key holds this stored response.
pub(crate) fn replayed(status: i64, response: &str) -> StoreResult<InsertOutcome> {
    Ok(InsertOutcome::Replayed {
        status: u16::try_from(status).unwrap_or(201),
        response: serde_json::value::RawValue::from_string(response.to_string())
            .map_err(|e| StoreError::Corrupt(format!("idempotent response: {e}")))?,
    })
}

/// The state a recorded result leaves its message in, and when it is next
/// claimable (a retry only).
pub(crate) fn state_after(next: &Next) -> (&'static str, Option<DateTime<Utc>>) {
    match *next {
        Next::Delivered => ("Delivered", None),
        Next::Retry(at) => ("Scheduled", Some(at)),
        Next::DeadLetter => ("DeadLetter", None),
    }
}

/// The message's last error after a recorded result: the latest attempt
/// error among its attempts (None keeps the one it had).
pub(crate) fn last_error(r: &Recorded) -> Option<String> {
    r.attempts
        .iter()
        .rev()
        .find_map(|a| a.error.as_deref().map(|e| storable_text(e).into_owned()))
}

/// What a recorded result tells, in order: each failed attempt, then the
/// message's delivery or dead letter (`last_error` as the message keeps it).
pub(crate) fn happenings(
    r: &Recorded,
    about: &crate::domain::told::About,
    last_error: Option<String>,
) -> Vec<(crate::domain::told::About, crate::domain::told::Happening)> {
    use crate::domain::{retry::AttemptOutcome, told::Happening};
    let mut told = Vec::new();
    for (i, a) in r.attempts.iter().enumerate() {
        if matches!(
            a.outcome,
            AttemptOutcome::Success | AttemptOutcome::Received
        ) {
            continue;
        }
        let next_attempt_at = match r.attempts.get(i + 1) {
            Some(next) => Some(next.started_at),
            None => match r.next {
                Next::Retry(at) => Some(at),
                _ => None,
            },
        };
        told.push((
            about.clone(),
            Happening::AttemptFailed {
                attempt_count: a.attempt,
                last_error: a.error.as_deref().map(|e| storable_text(e).into_owned()),
                next_attempt_at,
            },
        ));
    }
    let last = r.last();
    match r.next {
        Next::Delivered => told.push((
            about.clone(),
            Happening::Delivered {
                attempt_count: last.attempt,
                at: last.finished_at,
            },
        )),
        Next::DeadLetter => told.push((
            about.clone(),
            Happening::DeadLettered {
                attempt_count: last.attempt,
                last_error,
                at: last.finished_at,
            },
        )),
        Next::Retry(_) => {}
    }
    told
}

/// A claim leaves leased the messages whose targets' secrets are sealed
/// under a key this instance lacks (for an instance that has it, once the
/// lease ends): says so once a claim, naming the targets.
pub(crate) fn report_left_leased(mut targets: Vec<String>) {
    if targets.is_empty() {
        return;
    }
    targets.sort_unstable();
    targets.dedup();
    tracing::error!(
        count = targets.len(),
        targets = %targets.join(","),
        "messages left leased: their targets' secrets are sealed under a key this instance \
         is not configured with (secrets.encryption_key, secrets.previous_keys)"
    );
}

/// An error and its sources, as one line (for a dead letter's reason).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Attempt texts (errors, response excerpts) are kept with U+0000 replaced
/// by U+FFFD on every backend: PostgreSQL text cannot hold it.
pub(crate) fn storable_text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

pub(crate) fn outcome_from_str(s: &str) -> StoreResult<AttemptOutcome> {
    AttemptOutcome::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown outcome {s}")))
}

pub(crate) fn state_from_str(s: &str) -> StoreResult<State> {
    State::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown state {s}")))
}
