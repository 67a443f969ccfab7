//! Prometheus metrics: one recorder per process, rendered at `/metrics`.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const SCHEDULED: &str = "dispatch_messages_scheduled_total";
pub const DELIVERED: &str = "dispatch_messages_delivered_total";
pub const FAILED: &str = "dispatch_attempts_failed_total";
pub const DEAD_LETTERED: &str = "dispatch_messages_dead_lettered_total";
pub const DELIVERY_SECONDS: &str = "dispatch_delivery_duration_seconds";
pub const LATENESS: &str = "dispatch_delivery_lateness_seconds";
pub const CLAIM_BATCH: &str = "dispatch_claim_batch_size";
pub const PURGED: &str = "dispatch_retention_purged_total";
pub const BREAKER: &str = "dispatch_circuit_breaker_transitions_total";
pub const SCHEDULE_RUNS: &str = "dispatch_schedule_runs_total";
pub const GIVEN_BACK: &str = "dispatch_claims_given_back_total";
pub const PULL_RECEIVED: &str = "dispatch_pull_received_total";
pub const PULL_ACKED: &str = "dispatch_pull_acked_total";
pub const PULL_DEPTH: &str = "dispatch_pull_depth";
pub const CONNECTIONS_REFUSED: &str = "dispatch_connections_refused_total";
pub const STALE_RESULTS: &str = "dispatch_results_stale_total";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder once and returns its handle.
pub fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let seconds = [
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ];
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(CLAIM_BATCH.into()),
                        &[1.0, 5.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0],
                    )
                })
                .expect("bucket lists are non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may be installed already (embedding); then ours only renders zeros.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            handle
        })
        .clone()
}

fn describe() {
    metrics::describe_counter!(SCHEDULED, "Messages scheduled through the API");
    metrics::describe_counter!(DELIVERED, "Messages delivered");
    metrics::describe_counter!(
        STALE_RESULTS,
        "Attempts not recorded because another claim had taken their message's lease"
    );
    metrics::describe_counter!(
        CONNECTIONS_REFUSED,
        "Connections closed on accept: over server.max_connections and the few answered beyond it"
    );
    metrics::describe_counter!(
        SCHEDULE_RUNS,
        "Messages created for the runs of recurring schedules"
    );
    metrics::describe_counter!(FAILED, "Failed delivery attempts, by outcome");
    metrics::describe_counter!(DEAD_LETTERED, "Messages that became dead letters");
    metrics::describe_histogram!(DELIVERY_SECONDS, "Duration of delivery attempts");
    metrics::describe_histogram!(
        LATENESS,
        "First attempt start minus scheduled delivery time"
    );
    metrics::describe_histogram!(CLAIM_BATCH, "Messages claimed per claim statement");
    metrics::describe_counter!(PURGED, "Rows deleted by retention");
    metrics::describe_counter!(
        GIVEN_BACK,
        "Claimed messages given back unattempted: they waited for a slot of their target too long for their lease, or the instance stopped"
    );
    metrics::describe_counter!(
        BREAKER,
        "Circuit breaker state changes, by the state entered (open, halfOpen, closed)"
    );
    metrics::describe_counter!(
        PULL_RECEIVED,
        "Messages handed to consumers of pull targets"
    );
    metrics::describe_counter!(PULL_ACKED, "Messages of pull targets acknowledged");
    metrics::describe_gauge!(
        PULL_DEPTH,
        "Messages of pull targets receivable now (state=due) and received and hidden (state=hidden)"
    );
    // Make the counters visible at zero before the first event.
    metrics::counter!(SCHEDULED).increment(0);
    metrics::counter!(DELIVERED).increment(0);
    metrics::counter!(DEAD_LETTERED).increment(0);
    metrics::counter!(PULL_RECEIVED).increment(0);
    metrics::counter!(PULL_ACKED).increment(0);
}
