use super::*;

fn t(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000 + ms).expect("in range")
}

fn gate(flow: Option<FlowControl>, breaker: Option<CircuitBreaker>) -> Gate {
    Gate {
        limits: Limits { flow, breaker },
        health: Health::closed(breaker.as_ref()),
        starts: Vec::new(),
    }
}

fn flow(parallelism: Option<u32>, rate: Option<u32>, period_ms: u64) -> Option<FlowControl> {
    Some(FlowControl {
        parallelism,
        rate,
        period_ms,
    })
}

fn breaker(failures: u32, cooldown_ms: u64) -> Option<CircuitBreaker> {
    Some(CircuitBreaker {
        failures,
        cooldown_ms,
    })
}

#[test]
fn parallelism_counts_what_is_in_flight_anywhere() {
    let g = gate(flow(Some(5), None, 1000), None);
    assert_eq!(g.admit(t(0), 0).n, 5);
    assert_eq!(g.admit(t(0), 3).n, 2);
    assert_eq!(g.admit(t(0), 5).n, 0);
    assert_eq!(g.admit(t(0), 9).n, 0, "lowered below what runs");
    assert_eq!(g.reopens_at(t(0), 5), None, "when an attempt ends");
}

#[test]
fn rate_holds_in_every_window_of_one_period_not_per_aligned_window() {
    let mut g = gate(flow(None, Some(2), 1000), None);
    assert_eq!(g.admit(t(900), 0).n, 2);
    g.started(t(900), 2, false);
    // An aligned window would start over at t(1000); a sliding one waits
    // until the first two are a period old.
    assert_eq!(g.admit(t(1000), 0).n, 0);
    assert_eq!(g.reopens_at(t(1000), 0), Some(t(1900)));
    assert_eq!(g.admit(t(1899), 0).n, 0);
    assert_eq!(g.admit(t(1900), 0).n, 2);
    g.started(t(1900), 1, false);
    assert_eq!(g.admit(t(2000), 0).n, 1);
    g.started(t(2000), 1, false);
    // Each start leaves the window on its own.
    assert_eq!(g.reopens_at(t(2100), 0), Some(t(2900)));
    assert_eq!(g.admit(t(2900), 0).n, 1);
    assert_eq!(
        g.starts.len(),
        2,
        "starts older than a period are forgotten"
    );
}

#[test]
fn the_start_log_stays_bounded_and_merges_towards_later() {
    let mut g = gate(flow(None, Some(100_000), 60_000), None);
    for i in 0..1000 {
        g.started(t(i), 1, false);
    }
    assert!(g.starts.len() <= MAX_LOG);
    let total: u32 = g.starts.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 1000, "no start is lost");
    assert_eq!(g.admit(t(1000), 0).n, 99_000);
}

#[test]
fn the_tighter_limit_wins() {
    let mut g = gate(flow(Some(3), Some(10), 1000), None);
    assert_eq!(g.admit(t(0), 0).n, 3);
    g.started(t(0), 9, false);
    assert_eq!(g.admit(t(0), 0).n, 1);
}

#[test]
fn the_breaker_opens_after_consecutive_retryable_failures_only() {
    let mut g = gate(None, breaker(3, 1000));
    assert!(g.ended(t(0), &[Some(false), Some(false)]).is_empty());
    // A receiver that answers for good is reachable: the count starts over.
    g.ended(t(1), &[None]);
    assert_eq!(g.health.consecutive_failures, 0);
    g.ended(t(2), &[Some(false), Some(false)]);
    assert_eq!(g.admit(t(2), 0).n, u32::MAX);
    let changes = g.ended(t(3), &[Some(false)]);
    assert_eq!(
        changes,
        vec![BreakerChange {
            from: BreakerState::Closed,
            to: BreakerState::Open
        }]
    );
    assert_eq!(g.health.open_until, Some(t(1003)));
    assert_eq!(g.admit(t(500), 0).n, 0, "open: nothing is attempted");
    assert_eq!(g.reopens_at(t(500), 0), Some(t(1003)));
}

#[test]
fn after_the_cooldown_one_probe_then_closed_or_doubled() {
    let mut g = gate(None, breaker(1, 1000));
    g.ended(t(0), &[Some(false)]);
    assert_eq!(g.admit(t(1000), 0), Admit { n: 1, probe: true });
    assert_eq!(g.admit(t(1000), 1).n, 0, "an attempt still runs");
    assert_eq!(
        g.started(t(1000), 1, true).map(|c| c.to),
        Some(BreakerState::HalfOpen)
    );
    assert_eq!(g.admit(t(1001), 1).n, 0, "one probe at a time");
    assert_eq!(
        g.admit(t(1001), 0),
        Admit { n: 1, probe: true },
        "a probe whose lease ended is made again"
    );
    // The probe fails: open for twice the cooldown.
    g.ended(t(1100), &[Some(false)]);
    assert_eq!(g.health.state, BreakerState::Open);
    assert_eq!(g.health.open_until, Some(t(3100)));
    // Doubling stops at an hour.
    for _ in 0..20 {
        g.started(t(0), 1, true);
        g.ended(t(0), &[Some(false)]);
    }
    assert_eq!(g.health.cooldown_ms, MAX_COOLDOWN_MS);
    // A success closes it and the cooldown starts over.
    g.started(t(0), 1, true);
    let changes = g.ended(t(0), &[Some(true)]);
    assert_eq!(changes[0].to, BreakerState::Closed);
    assert_eq!(g.health, Health::closed(g.limits.breaker.as_ref()));
}

#[test]
fn limits_apply_to_a_probe_too() {
    let mut g = gate(flow(None, Some(1), 1000), breaker(1, 10));
    g.started(t(0), 1, false);
    g.ended(t(5), &[Some(false)]);
    assert_eq!(g.admit(t(20), 0).n, 0, "the rate still holds the probe");
    assert_eq!(g.admit(t(1000), 0), Admit { n: 1, probe: true });
}

#[test]
fn periods_read_and_write_as_the_api_shows_them() {
    assert_eq!(period::parse("1s"), Some(1000));
    assert_eq!(period::parse("250ms"), Some(250));
    assert_eq!(period::parse("1h"), Some(3_600_000));
    for bad in [
        "1m 30s",
        "soon",
        "0s",
        "01s",
        "1",
        "1d",
        "1S",
        "1234567ms",
        " 1s",
        "-1s",
    ] {
        assert_eq!(period::parse(bad), None, "{bad}");
    }
    assert_eq!(period::format(1000), "1s");
    assert_eq!(period::format(90_000), "90s");
    assert_eq!(period::format(3_600_000), "1h");
    assert_eq!(period::format(1500), "1500ms");
}

#[test]
fn each_change_of_one_batch_comes_with_the_health_it_left() {
    // An attempt that began before the breaker opened succeeds late, in
    // the same batch: it opened, then closed.
    let mut g = gate(None, breaker(2, 1000));
    let each = g.ended_each(t(0), &[Some(false), Some(false), Some(true)]);
    assert_eq!(each.len(), 2);
    let (opened, open) = each[0];
    assert_eq!(opened.to, BreakerState::Open);
    assert_eq!(open.state, BreakerState::Open);
    assert_eq!(open.consecutive_failures, 2);
    assert_eq!(open.open_until, Some(t(1000)));
    let (closed, after) = each[1];
    assert_eq!(closed.to, BreakerState::Closed);
    assert_eq!(after.consecutive_failures, 0);
    assert_eq!(after.open_until, None);
    assert_eq!(g.health, after, "the last change left the gate's health");
}
