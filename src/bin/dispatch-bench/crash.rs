//! What the `crash` and `crash2` scenarios say of the arrivals after their
//! kill: lost, duplicates, which duplicates no interrupted attempt explains,
//! and how long until the last arrival.

use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, TimeDelta, Utc};

use crate::Arrival;

/// The note of a run killed at `at`, when `done` of `n` had arrived;
/// `restarted_in` is how long the instance took to serve again (`crash`),
/// none when a second instance went on (`crash2`).
pub(crate) fn notes(
    seen: &[Arrival],
    n: usize,
    at: DateTime<Utc>,
    done: usize,
    restarted_in: Option<Duration>,
) -> String {
    // Each message's first arrival and its sends.
    let mut firsts: HashMap<&str, (DateTime<Utc>, usize)> = HashMap::new();
    for (id, a, _) in seen {
        let f = firsts.entry(id.as_str()).or_insert((*a, 0));
        f.0 = f.0.min(*a);
        f.1 += 1;
    }
    let last = seen.iter().map(|(_, a, _)| *a).max().unwrap_or(at);
    let lost = n.saturating_sub(firsts.len());
    let resent = || firsts.values().filter(|(_, sends)| *sends > 1);
    // A message first sent after the kill and sent again: no attempt
    // interrupted by the kill explains it.
    let unexplained: usize = resent()
        .filter(|(first, _)| *first > at)
        .map(|(_, sends)| sends - 1)
        .sum();
    // A message sent again though its first arrival came well before the
    // kill: its answer was not recorded within 100 ms of it.
    let unrecorded = resent()
        .filter(|(first, _)| *first < at - TimeDelta::milliseconds(110))
        .count();
    let oldest = resent()
        .map(|(first, _)| *first)
        .min()
        .map_or(0, |f| (at - f).num_milliseconds());
    format!(
        "killed (SIGKILL) after {done} of {n} had arrived{restart}; lost {lost}, \
         duplicates {dups} (of messages first sent after the kill: {unexplained}; \
         first sent over 110 ms before it: {unrecorded}, the earliest {oldest} ms \
         before it); the last arrival came {after:.2} s after the kill",
        restart = restarted_in.map_or_else(
            || ", the second instance went on".to_string(),
            |d| format!(", started again (ready in {:.2} s)", d.as_secs_f64())
        ),
        dups = seen.len() - firsts.len(),
        after = (last - at).num_milliseconds() as f64 / 1000.0,
    )
}
