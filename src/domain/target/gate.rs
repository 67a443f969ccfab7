//! A target's gate (docs/api.md#flow-control-and-fairness): the limits its
//! owner set (`flowControl`, `circuitBreaker`) and what they admit now. Pure:
//! the stores keep a target's gate in one row, lock it while they claim, and
//! ask this module how many of its due messages may start.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

/// The longest an open breaker waits before its probe, however often it
/// doubled.
pub const MAX_COOLDOWN_MS: u64 = 3_600_000;
/// `flowControl.period` when left out.
pub const DEFAULT_PERIOD_MS: u64 = 1_000;
/// `circuitBreaker.failures` and `.cooldown` when left out.
pub const DEFAULT_FAILURES: u32 = 20;
pub const DEFAULT_COOLDOWN_MS: u64 = 60_000;
/// Bounds of the limits. Periods and cooldowns are what `period::parse`
/// reads; a cooldown above an hour waits an hour.
pub const MAX_PARALLELISM: u32 = 10_000;
pub const MAX_RATE: u32 = 1_000_000;
pub const FAILURES: std::ops::RangeInclusive<u32> = 1..=10_000;
/// The start log keeps at most this many entries; older ones are merged
/// into later ones, which only ever holds back more, never less.
const MAX_LOG: usize = 256;

/// `flowControl`: attempts in flight across all instances, and attempts
/// started per period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowControl {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<u32>,
    #[serde(with = "period", rename = "period", default = "default_period")]
    pub period_ms: u64,
}

/// `circuitBreaker`: open after `failures` consecutive retryable failures,
/// probe after the cooldown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CircuitBreaker {
    pub failures: u32,
    #[serde(with = "period", rename = "cooldown")]
    pub cooldown_ms: u64,
}

fn default_period() -> u64 {
    DEFAULT_PERIOD_MS
}

/// A duration as the API writes it: `1s`, `500ms`, `1m`, `1h`.
pub mod period {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn format(ms: u64) -> String {
        match ms {
            0 => "0ms".into(),
            ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
            ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
            ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
            ms => format!("{ms}ms"),
        }
    }

    /// What `parse` accepts, for the document.
    pub const PATTERN: &str = "^[1-9][0-9]{0,5}(ms|s|m|h)$";

    /// Milliseconds of a string like `500ms`, `1s`, `5m`, `1h`: a whole
    /// number from 1 to 999999 and a unit, exactly as `PATTERN` says.
    pub fn parse(s: &str) -> Option<u64> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (n, unit) = s.split_at(digits);
        if !(1..=6).contains(&digits) || n.starts_with('0') {
            return None;
        }
        let n: u64 = n.parse().ok()?;
        let per = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return None,
        };
        Some(n * per)
    }

    pub fn serialize<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*ms))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).ok_or_else(|| serde::de::Error::custom(format!("`{s}` is not a duration")))
    }
}

/// What a target's owner limited, as its config holds them: a target with
/// neither is not gated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Limits {
    #[serde(
        rename = "flowControl",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub flow: Option<FlowControl>,
    #[serde(
        rename = "circuitBreaker",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub breaker: Option<CircuitBreaker>,
}

impl Limits {
    /// Whether its messages are claimed through the gate.
    pub fn gated(&self) -> bool {
        self.flow
            .is_some_and(|f| f.parallelism.is_some() || f.rate.is_some())
            || self.breaker.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "halfOpen",
        }
    }

    pub fn parse(s: &str) -> Self {
        match s {
            "open" => BreakerState::Open,
            "halfOpen" => BreakerState::HalfOpen,
            _ => BreakerState::Closed,
        }
    }
}

/// A breaker's state (`health` on the target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    pub state: BreakerState,
    pub consecutive_failures: u32,
    pub open_until: Option<DateTime<Utc>>,
    /// The cooldown the next opening waits: the configured one, doubled by
    /// each failed probe up to an hour.
    pub cooldown_ms: u64,
}

impl Health {
    pub fn closed(breaker: Option<&CircuitBreaker>) -> Self {
        Self {
            state: BreakerState::Closed,
            consecutive_failures: 0,
            open_until: None,
            cooldown_ms: breaker.map_or(DEFAULT_COOLDOWN_MS, |b| b.cooldown_ms),
        }
    }
}

/// The attempts a target started lately: `(when, how many)`, oldest first.
pub type StartLog = Vec<(DateTime<Utc>, u32)>;

/// A target's gate as a claim reads it, locked.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub limits: Limits,
    pub health: Health,
    pub starts: StartLog,
}

/// What a gate admits now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admit {
    pub n: u32,
    /// The one attempt is the open breaker's probe.
    pub probe: bool,
}

/// A breaker changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerChange {
    pub from: BreakerState,
    pub to: BreakerState,
}

fn after_ms(t: DateTime<Utc>, ms: u64) -> DateTime<Utc> {
    t + TimeDelta::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX / 4))
}

impl Gate {
    fn started_within(&self, now: DateTime<Utc>, period_ms: u64) -> u64 {
        self.starts
            .iter()
            .filter(|(at, _)| after_ms(*at, period_ms) > now)
            .map(|(_, n)| u64::from(*n))
            .sum()
    }

    /// How many attempts may start now, with `in_flight` attempts to the
    /// target running on any instance.
    pub fn admit(&self, now: DateTime<Utc>, in_flight: u32) -> Admit {
        let none = Admit { n: 0, probe: false };
        let mut n = u32::MAX;
        let mut probe = false;
        if self.limits.breaker.is_some() {
            match self.health.state {
                BreakerState::Closed => {}
                BreakerState::Open | BreakerState::HalfOpen => {
                    let waiting = self.health.open_until.is_some_and(|until| now < until);
                    // One probe at a time; a probe whose lease ended without
                    // a result is made again.
                    if waiting || in_flight > 0 {
                        return none;
                    }
                    n = 1;
                    probe = true;
                }
            }
        }
        if let Some(flow) = self.limits.flow {
            if let Some(p) = flow.parallelism {
                n = n.min(p.saturating_sub(in_flight));
            }
            if let Some(rate) = flow.rate {
                let used = self.started_within(now, flow.period_ms);
                n = n.min(u64::from(rate).saturating_sub(used) as u32);
            }
        }
        if n == 0 {
            none
        } else {
            Admit { n, probe }
        }
    }

    /// When a gate that admits nothing now may admit again, if time alone
    /// decides it (None: when an attempt in flight ends).
    pub fn reopens_at(&self, now: DateTime<Utc>, in_flight: u32) -> Option<DateTime<Utc>> {
        let mut at = now;
        if self.limits.breaker.is_some() && self.health.state != BreakerState::Closed {
            if let Some(until) = self.health.open_until.filter(|u| *u > now) {
                at = at.max(until);
            } else if in_flight > 0 {
                return None;
            }
        }
        if let Some(flow) = self.limits.flow {
            if flow.parallelism.is_some_and(|p| in_flight >= p) {
                return None;
            }
            if let Some(rate) = flow.rate {
                // The first instant at which fewer than `rate` starts lie
                // within the period before it.
                let mut used = self.started_within(at, flow.period_ms);
                for (start, n) in &self.starts {
                    if used < u64::from(rate) {
                        break;
                    }
                    let leaves = after_ms(*start, flow.period_ms);
                    if leaves > at {
                        at = leaves;
                        used -= u64::from(*n).min(used);
                    }
                }
            }
        }
        Some(at)
    }

    /// `n` attempts start now (one of them a probe when `probe`).
    pub fn started(&mut self, now: DateTime<Utc>, n: u32, probe: bool) -> Option<BreakerChange> {
        if n == 0 {
            return None;
        }
        if let Some(flow) = self.limits.flow.filter(|f| f.rate.is_some()) {
            self.starts
                .retain(|(at, _)| after_ms(*at, flow.period_ms) > now);
            match self.starts.last_mut() {
                Some((at, k)) if *at == now => *k += n,
                _ => self.starts.push((now, n)),
            }
            while self.starts.len() > MAX_LOG {
                // Merge the oldest into the next: counted later, never earlier.
                let (_, k) = self.starts.remove(0);
                self.starts[0].1 += k;
            }
        } else {
            self.starts.clear();
        }
        (probe && self.health.state != BreakerState::HalfOpen).then(|| {
            let from = self.health.state;
            self.health.state = BreakerState::HalfOpen;
            BreakerChange {
                from,
                to: BreakerState::HalfOpen,
            }
        })
    }

    /// Applies attempts' outcomes, in the order they ended: `Some(true)` a
    /// success, `Some(false)` a retryable failure, `None` a failure the
    /// receiver answered for good (it is reachable: the count starts over).
    pub fn ended(&mut self, now: DateTime<Utc>, outcomes: &[Option<bool>]) -> Vec<BreakerChange> {
        self.ended_each(now, outcomes)
            .into_iter()
            .map(|(c, _)| c)
            .collect()
    }

    /// `ended`, each change with the health it left (what an event about
    /// it tells, when several happen at once).
    pub fn ended_each(
        &mut self,
        now: DateTime<Utc>,
        outcomes: &[Option<bool>],
    ) -> Vec<(BreakerChange, Health)> {
        let Some(breaker) = self.limits.breaker else {
            return Vec::new();
        };
        let h = &mut self.health;
        let mut changes = Vec::new();
        let mut go = |h: &mut Health, to: BreakerState| {
            if h.state != to {
                let change = BreakerChange { from: h.state, to };
                h.state = to;
                changes.push((change, *h));
            }
        };
        for outcome in outcomes {
            match outcome {
                Some(false) => {
                    h.consecutive_failures = h.consecutive_failures.saturating_add(1);
                    match h.state {
                        BreakerState::Closed if h.consecutive_failures >= breaker.failures => {
                            h.cooldown_ms = breaker.cooldown_ms.min(MAX_COOLDOWN_MS);
                            h.open_until = Some(after_ms(now, h.cooldown_ms));
                            go(h, BreakerState::Open);
                        }
                        BreakerState::HalfOpen => {
                            // The probe failed: wait twice as long.
                            h.cooldown_ms = h.cooldown_ms.saturating_mul(2).min(MAX_COOLDOWN_MS);
                            h.open_until = Some(after_ms(now, h.cooldown_ms));
                            go(h, BreakerState::Open);
                        }
                        _ => {}
                    }
                }
                Some(true) | None => {
                    h.consecutive_failures = 0;
                    h.open_until = None;
                    h.cooldown_ms = breaker.cooldown_ms;
                    go(h, BreakerState::Closed);
                }
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests;
