//! What both backends share about gated targets
//! (docs/api.md#flow-control-and-fairness): how a gate's row reads into the
//! domain's `Gate`, and how a claim across gates is planned. The locking and
//! the SQL are each backend's own.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use super::ClaimShares;
use crate::domain::{
    ids::{AccountId, TargetId},
    target::gate::{
        Admit, BreakerChange, BreakerState, CircuitBreaker, Gate, Health, Limits, StartLog,
    },
};

/// A breaker's state as its row holds it.
pub(crate) fn health_from_row(
    breaker: Option<&CircuitBreaker>,
    state: &str,
    consecutive_failures: i64,
    open_until: Option<DateTime<Utc>>,
    cooldown_ms: Option<i64>,
) -> Health {
    let closed = Health::closed(breaker);
    if breaker.is_none() {
        return closed;
    }
    Health {
        state: BreakerState::parse(state),
        consecutive_failures: u32::try_from(consecutive_failures.max(0)).unwrap_or(u32::MAX),
        open_until,
        cooldown_ms: cooldown_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or(closed.cooldown_ms),
    }
}

/// The start log as stored: `[[epoch ms, count], …]`; unreadable text reads
/// as empty (a log is at most one period of history).
pub(crate) fn starts_from_text(text: &str) -> StartLog {
    serde_json::from_str::<Vec<(i64, u32)>>(text)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(ms, n)| DateTime::from_timestamp_millis(ms).map(|at| (at, n)))
        .collect()
}

pub(crate) fn starts_to_text(starts: &StartLog) -> String {
    let pairs: Vec<(i64, u32)> = starts
        .iter()
        .map(|(at, n)| (at.timestamp_millis(), *n))
        .collect();
    serde_json::to_string(&pairs).expect("pairs serialize")
}

/// The limits in a stored config (the part without secrets): only
/// `flowControl` and `circuitBreaker` are read.
pub(crate) fn limits_from_json(config: &serde_json::Value) -> Limits {
    serde_json::from_value(config.clone()).unwrap_or_default()
}

/// A gated target's row as a claim reads it: its stored config (without
/// secrets), the breaker's columns, the start log.
#[derive(sqlx::FromRow)]
pub(crate) struct GateRow<C, T> {
    pub id: String,
    pub account: String,
    pub config: C,
    pub breaker_state: String,
    pub consecutive_failures: i64,
    pub open_until: Option<T>,
    pub cooldown_ms: Option<i64>,
    pub flow_starts: String,
}

impl<C, T> GateRow<C, T> {
    pub(crate) fn into_gate(
        self,
        config: impl FnOnce(C) -> serde_json::Value,
        time: impl Fn(T) -> Option<DateTime<Utc>>,
    ) -> (TargetId, Gate) {
        let limits = limits_from_json(&config(self.config));
        let health = health_from_row(
            limits.breaker.as_ref(),
            &self.breaker_state,
            self.consecutive_failures,
            self.open_until.and_then(time),
            self.cooldown_ms,
        );
        (
            TargetId::from_trusted(self.id),
            Gate {
                limits,
                health,
                starts: starts_from_text(&self.flow_starts),
            },
        )
    }
}

/// Ended attempts' outcomes by target, in the order they ended; targets in
/// id order (the order rows are locked in).
pub(crate) fn outcomes_by_target(
    ended: &[(TargetId, Option<bool>)],
) -> BTreeMap<&str, Vec<Option<bool>>> {
    let mut by_target: BTreeMap<&str, Vec<Option<bool>>> = BTreeMap::new();
    for (t, outcome) in ended {
        by_target.entry(t.as_str()).or_default().push(*outcome);
    }
    by_target
}

/// What a target's breaker learns from `outcomes`: its changes go into
/// `changes`, and the health each left into `left` (one for one); true
/// when its health must be written.
pub(crate) fn learn(
    id: &TargetId,
    gate: &mut Gate,
    outcomes: &[Option<bool>],
    now: DateTime<Utc>,
    changes: &mut Vec<(TargetId, BreakerChange)>,
    left: &mut Vec<Health>,
) -> bool {
    if gate.limits.breaker.is_none() {
        return false;
    }
    let before = gate.health;
    for (c, h) in gate.ended_each(now, outcomes) {
        changes.push((id.clone(), c));
        left.push(h);
    }
    gate.health != before
}

/// Closes a breaker by hand, in the statement both stores run: a null
/// cooldown reads as the target's setting (`health_from_row`).
pub(crate) const RESET_HEALTH: &str = "UPDATE targets SET breaker_state = 'closed', \
     consecutive_failures = 0, open_until = NULL, cooldown_ms = NULL";

/// The change a reset makes to a breaker that was in `was`, if any.
pub(crate) fn closed_from(was: &str) -> Option<BreakerChange> {
    let from = BreakerState::parse(was);
    (from != BreakerState::Closed).then_some(BreakerChange {
        from,
        to: BreakerState::Closed,
    })
}

/// One locked gate and what a claim decided for it.
pub(crate) struct Planned {
    pub target_id: TargetId,
    pub gate: Gate,
    pub in_flight: u32,
    pub admit: Admit,
}

/// What each locked gate may take now: its gate's admission, within the
/// instance's share of the target and of its account, and the claim's
/// `limit` (targets in the order given, which the backends make oldest due
/// first).
pub(crate) fn plan(
    gates: Vec<(TargetId, AccountId, Gate, u32)>,
    now: DateTime<Utc>,
    limit: u32,
    shares: &ClaimShares,
) -> Vec<Planned> {
    let mut left = limit;
    let mut account_left: HashMap<AccountId, u32> = shares.accounts.iter().cloned().collect();
    gates
        .into_iter()
        .map(|(target_id, account, gate, in_flight)| {
            let mut admit = gate.admit(now, in_flight);
            let share = shares
                .room
                .iter()
                .find(|(t, _)| *t == target_id)
                .map_or(shares.per_target, |(_, n)| *n);
            let account_share = account_left.entry(account).or_insert(shares.per_account);
            admit.n = admit.n.min(share).min(left).min(*account_share);
            if admit.n == 0 {
                admit.probe = false;
            }
            left -= admit.n;
            *account_share -= admit.n;
            Planned {
                target_id,
                gate,
                in_flight,
                admit,
            }
        })
        .collect()
}

/// When the sweeper should look at the gates again, from what a claim saw:
/// the earliest time a gate that admitted nothing reopens, and whether one
/// waits for an attempt to end instead.
pub(crate) fn reopening(planned: &[Planned], now: DateTime<Utc>) -> (Option<DateTime<Utc>>, bool) {
    let mut next: Option<DateTime<Utc>> = None;
    let mut waits = false;
    for p in planned.iter().filter(|p| p.admit.n == 0) {
        // Held by the instance's share alone: its own attempts free it.
        if p.gate.admit(now, p.in_flight).n > 0 {
            continue;
        }
        match p.gate.reopens_at(now, p.in_flight) {
            Some(at) => next = Some(next.map_or(at, |n| n.min(at))),
            None => waits = true,
        }
    }
    (next, waits)
}
