//! Store conformance: one suite, written once against the `Store` trait
//! (`Arc<dyn Store>`), run on every backend.
//!
//! Each check is an `async fn name(store: Arc<dyn Store>)` that speaks to the
//! store through the trait only (no SQL). `conformance!(module, factory)`
//! generates one `#[tokio::test]` per check inside `mod module`; the factory
//! is an expression evaluated once per test, whose future yields
//! `(guard, Arc<dyn Store>)`. The guard (a database, a temporary directory)
//! lives until the test ends.
//!
//! Every time is passed explicitly (`now` arguments, `created_at`, attempt
//! times), so the checks control the clock: "the lease expired" is a `now`
//! past the lease, not a sleep.

mod common;

#[path = "store_conformance/clients.rs"]
mod clients;
use clients::*;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use chrono::{DateTime, TimeDelta, Utc};
use dispatch::{
    domain::{
        ids::{MessageId, TargetId},
        message::{Attempt, Message, State},
        payload::{Payload, MAX_PAYLOAD_CHARS},
        retry::{AttemptOutcome, Next},
        target::{SqsConfig, Target, TargetConfig, WebhookConfig},
        time,
    },
    store::{
        portal::{EventKind, MessageEvent, Overview, SessionRecord, UserRecord},
        postgres::PgStore,
        BatchItem, Claimed, ClientRecord, Cutoffs, DeleteTarget, IdempotencyInput, InsertOutcome,
        MessageFilter, Purged, Recorded, Store, TargetCursor, Transition,
    },
};
use serde_json::json;
use uuid::Uuid;

// ---------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------

/// `conformance!(backend, factory)`: one `#[tokio::test]` per check, in `mod backend`.
macro_rules! conformance {
    ($backend:ident, $factory:expr) => {
        conformance!(@tests $backend, $factory;
            ping_answers_while_the_store_is_reachable,
            a_created_client_is_found_by_id_and_an_unknown_id_answers_none,
            a_secret_hash_is_replaced_only_while_it_is_the_stored_one,
            clients_are_listed_per_account_oldest_first_with_their_revocation,
            a_revoked_client_is_not_found_and_revoking_again_keeps_the_first_time,
            clients_revoked_since_a_time_are_those_revoked_at_or_after_it,
            signing_keys_are_created_once_and_stay_the_same_across_calls,
            an_inserted_target_reads_back_unchanged_and_a_duplicate_id_is_refused,
            a_target_is_invisible_to_another_account,
            targets_are_listed_newest_first_and_paged_with_the_after_cursor,
            target_paging_goes_on_when_the_cursors_target_was_deleted,
            updating_a_target_changes_its_name_and_config_in_its_own_account_only,
            disabling_and_enabling_a_target_flips_enabled_in_its_own_account_only,
            deleting_a_target_answers_deleted_then_not_found,
            a_target_with_a_scheduled_message_cannot_be_deleted,
            a_target_with_a_dead_letter_cannot_be_deleted,
            a_target_whose_messages_are_all_finished_can_be_deleted,
            a_message_for_a_missing_or_foreign_target_answers_unknown_target,
            an_inserted_message_reads_back_as_scheduled_with_its_fields,
            the_largest_payload_reads_back_exactly,
            a_payload_with_a_nul_character_reads_back_exactly,
            the_same_idempotency_key_and_request_replay_the_first_response,
            the_same_idempotency_key_with_another_request_is_a_key_conflict,
            an_expired_idempotency_key_is_treated_as_new,
            idempotency_keys_are_scoped_to_their_account,
            an_idempotency_key_sent_with_an_unknown_target_is_not_remembered,
            concurrent_inserts_with_one_idempotency_key_create_one_message,
            a_batch_insert_returns_the_inserted_ids_and_skips_unknown_and_foreign_targets,
            a_batch_answers_each_item_in_order_and_creates_only_the_messages_whose_target_exists,
            a_batch_of_over_a_thousand_with_keys_among_them_answers_each_in_order,
            an_empty_batch_answers_an_empty_list,
            a_batch_may_hold_messages_of_several_accounts,
            a_batch_item_with_an_unknown_target_answers_unknown_target_and_its_key_is_not_kept,
            a_batch_items_key_is_new_replayed_or_in_conflict_as_with_insert_message,
            a_batch_item_takes_over_an_expired_key_but_not_one_within_its_ttl,
            each_batch_item_is_judged_by_its_own_key_ttl,
            a_key_repeated_within_a_batch_replays_the_first_items_response_or_conflicts,
            a_key_repeated_within_a_batch_after_an_unknown_target_answers_unknown_target_or_conflicts,
            the_same_key_for_two_accounts_in_one_batch_is_two_keys,
            a_batch_item_for_a_disabled_target_is_inserted_paused,
            batch_inserted_messages_are_claimable_when_due,
            a_batch_that_fails_part_way_leaves_nothing_behind,
            concurrent_batches_with_the_same_keys_in_another_order_each_create_a_message_once,
            messages_are_listed_newest_first_and_paged_with_the_before_cursor,
            listing_messages_filters_by_state_and_by_target,
            another_accounts_messages_are_invisible,
            claim_due_hands_out_only_due_scheduled_messages_oldest_due_first,
            claim_due_honours_its_limit,
            a_claimed_message_is_not_claimed_again_until_its_lease_expires,
            a_disabled_targets_messages_are_not_claimed_until_it_is_enabled,
            next_due_is_the_earliest_claimable_time_and_ignores_paused_messages,
            recording_a_success_marks_the_message_delivered,
            recording_a_retry_schedules_the_next_attempt_at_the_given_time,
            recording_a_dead_letter_sets_dead_lettered_at_and_stops_claims,
            several_attempts_in_one_record_are_all_stored_in_order,
            attempt_texts_with_a_nul_character_are_stored_with_it_replaced,
            a_record_with_a_stale_lease_token_is_dropped_whole,
            a_record_batch_applies_each_result_under_its_own_lease,
            a_record_after_a_cancel_or_reschedule_is_dropped,
            attempts_are_listed_oldest_first_and_paged_with_the_after_cursor,
            attempts_of_an_unknown_or_foreign_message_answer_none,
            cancelling_a_scheduled_message_makes_it_cancelled_and_unclaimable,
            cancelling_a_dead_letter_makes_it_cancelled,
            cancel_and_reschedule_of_a_delivered_message_answer_wrong_state,
            cancel_and_reschedule_of_a_cancelled_message_answer_wrong_state,
            cancel_and_reschedule_of_an_unknown_or_foreign_message_answer_not_found,
            cancel_and_reschedule_answer_in_flight_while_a_lease_holds_and_succeed_after_it_expired,
            rescheduling_resets_the_ladder_and_sets_delivery_and_next_attempt_times,
            rescheduling_a_dead_letter_makes_it_scheduled_again,
            purging_deletes_expired_finished_messages_with_their_attempts_and_keeps_the_rest,
            purging_deletes_old_failed_attempts_but_keeps_their_message_and_successes,
            purging_deletes_idempotency_keys_older_than_the_cutoff,
            purging_honours_the_batch_size_and_repeated_calls_delete_everything_expired,
            two_concurrent_claimers_hand_out_all_200_messages_exactly_once,
            a_created_user_is_found_by_email_and_a_duplicate_email_is_refused,
            a_session_is_found_until_it_expires_and_not_after_it_is_deleted,
            creating_a_session_forgets_the_sessions_that_have_expired,
            the_overview_counts_by_target_and_state_and_what_happened_since_the_cutoff,
            count_messages_counts_what_each_filter_field_selects,
            listing_messages_by_delivery_time_gives_the_range_newest_first_and_pages_within_it,
            cancel_and_reschedule_are_recorded_in_the_messages_history,
            redrive_moves_the_accounts_dead_letters_to_scheduled_with_a_fresh_ladder,
            redrive_moves_only_the_dead_letters_that_match_the_target_ids_and_delivery_range,
            redriven_dead_letters_of_a_disabled_target_are_held_until_it_is_enabled,
        );
    };
    (@tests $backend:ident, $factory:expr; $($check:ident),* $(,)?) => {
        mod $backend {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let (_guard, store) = $factory.await;
                    super::$check(store).await;
                }
            )*
        }
    };
}

/// A fresh, migrated PostgreSQL database per test; dropped with the guard.
async fn postgres_store() -> (common::TestDb, Arc<dyn Store>) {
    let db = common::TestDb::postgres().await;
    let store = PgStore::connect(&db.url, 5, Duration::from_secs(5))
        .await
        .expect("connect to the test database");
    store.migrate().await.expect("migrate the test database");
    (db, Arc::new(store))
}

conformance!(postgres, postgres_store());

/// An embedded store in a fresh temporary directory; removed with the guard.
async fn sqlite_store() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dispatch::store::sqlite::SqliteStore::open(&dir.path().join("dispatch.db"))
        .await
        .expect("open the SQLite store");
    (dir, Arc::new(store))
}

conformance!(sqlite, sqlite_store());

/// Secrets at rest: checks that open one database with several keys.
#[path = "store_conformance/sealing.rs"]
mod sealing;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

const ACME: &str = "acme";
const GLOBEX: &str = "globex";
const LEASE: Duration = Duration::from_secs(30);

fn ms(n: i64) -> TimeDelta {
    TimeDelta::milliseconds(n)
}

fn secs(n: i64) -> TimeDelta {
    TimeDelta::seconds(n)
}

fn hours(n: i64) -> TimeDelta {
    TimeDelta::hours(n)
}

fn days(n: i64) -> TimeDelta {
    TimeDelta::days(n)
}

fn webhook(url: &str) -> TargetConfig {
    TargetConfig::Webhook(WebhookConfig {
        url: url.into(),
        headers: BTreeMap::from([("X-Api-Key".to_string(), "key-123".to_string())]),
        timeout_ms: Some(5_000),
        signing_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        auth: None,
    })
}

fn target_value(account: &str, name: &str, created_at: DateTime<Utc>) -> Target {
    Target {
        id: TargetId::new(),
        account: account.into(),
        name: name.into(),
        enabled: true,
        config: webhook("https://example.com/hook"),
        created_at,
        updated_at: created_at,
    }
}

async fn insert_target(store: &dyn Store, t: &Target) {
    store.ensure_account(&t.account).await.unwrap();
    assert!(
        store.insert_target(t).await.unwrap(),
        "a target with a new id is inserted"
    );
}

/// An enabled webhook target of `account`, stored.
async fn add_target(store: &dyn Store, account: &str) -> Target {
    let t = target_value(account, "orders", time::now());
    insert_target(store, &t).await;
    t
}

/// A Scheduled message as the API builds it (not yet stored).
fn message_value(
    target: &Target,
    delivery_time: DateTime<Utc>,
    created_at: DateTime<Utc>,
) -> Message {
    let id = MessageId::new();
    Message {
        id,
        account: target.account.clone(),
        target_id: target.id.clone(),
        state: State::Scheduled,
        delivery_time,
        next_attempt_at: Some(delivery_time),
        attempt_count: 0,
        delivered_at: None,
        cancelled_at: None,
        dead_lettered_at: None,
        last_error: None,
        created_at,
        updated_at: created_at,
        payload: Payload::parse(format!("{{\"order\": \"{id}\", \"note\": \"héllo ✓\"}}")).unwrap(),
    }
}

fn created(outcome: InsertOutcome) -> Message {
    match outcome {
        InsertOutcome::Created(m) => *m,
        other => panic!("expected Created, got {other:?}"),
    }
}

async fn insert(store: &dyn Store, m: &Message) -> Message {
    created(store.insert_message(m, None).await.unwrap())
}

/// Schedules a message for `target` at `delivery_time`, created `created_at`.
async fn schedule_at(
    store: &dyn Store,
    target: &Target,
    delivery_time: DateTime<Utc>,
    created_at: DateTime<Utc>,
) -> Message {
    insert(store, &message_value(target, delivery_time, created_at)).await
}

/// Schedules a message for `target` at `delivery_time`, created now.
async fn schedule(store: &dyn Store, target: &Target, delivery_time: DateTime<Utc>) -> Message {
    schedule_at(store, target, delivery_time, time::now()).await
}

async fn get(store: &dyn Store, m: &Message) -> Message {
    store
        .get_message(&m.account, &m.id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("message {} should exist", m.id))
}

fn attempt(n: u32, outcome: AttemptOutcome, finished_at: DateTime<Utc>) -> Attempt {
    let (status_code, error, response_body) = match outcome {
        AttemptOutcome::Success => (Some(200), None, Some("accepted".to_string())),
        AttemptOutcome::RetryableFailure => (
            Some(503),
            Some(format!("HTTP 503 on attempt {n}")),
            Some("try later".to_string()),
        ),
        AttemptOutcome::NonRetryableFailure => {
            (Some(404), Some(format!("HTTP 404 on attempt {n}")), None)
        }
    };
    Attempt {
        attempt: n,
        started_at: finished_at - ms(12),
        finished_at,
        duration_ms: 12,
        outcome,
        status_code,
        error,
        response_body,
    }
}

/// The result of `attempts` made under claim `c`, then `next`.
fn recorded(c: &Claimed, attempts: Vec<Attempt>, next: Next) -> Recorded {
    Recorded {
        id: c.id,
        lease_token: c.lease_token,
        ladder_attempts: c.ladder_attempts + attempts.len() as u32,
        attempts,
        next,
    }
}

/// Attempts numbered after what `c` has already made, one per outcome, finishing at `at`.
fn attempts_after(c: &Claimed, outcomes: &[AttemptOutcome], at: DateTime<Utc>) -> Vec<Attempt> {
    outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| attempt(c.attempt_count + i as u32 + 1, *o, at))
        .collect()
}

fn claimed_ids(claimed: &[Claimed]) -> Vec<MessageId> {
    claimed.iter().map(|c| c.id).collect()
}

fn set(ids: impl IntoIterator<Item = MessageId>) -> HashSet<MessageId> {
    ids.into_iter().collect()
}

fn message_ids(messages: &[Message]) -> Vec<MessageId> {
    messages.iter().map(|m| m.id).collect()
}

/// Ids newest first: UUIDv7 ids descending.
fn newest_first(mut ids: Vec<MessageId>) -> Vec<MessageId> {
    ids.sort_by(|a, b| b.cmp(a));
    ids
}

/// Claims at `now` and expects exactly `m` to be handed out (a test's setup).
async fn claim_only(
    store: &dyn Store,
    m: &Message,
    now: DateTime<Utc>,
    lease: Duration,
) -> Claimed {
    let claimed = store.claim_due(now, 100, lease).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![m.id],
        "exactly message {} is due at {now}",
        m.id
    );
    claimed.into_iter().next().unwrap()
}

/// Claims `m` at `at` and records one attempt per outcome (all finishing at
/// `at`), then `next`. Returns the claim.
async fn attempt_and_record(
    store: &dyn Store,
    m: &Message,
    at: DateTime<Utc>,
    outcomes: &[AttemptOutcome],
    next: Next,
) -> Claimed {
    let c = claim_only(store, m, at, LEASE).await;
    let r = recorded(&c, attempts_after(&c, outcomes, at), next);
    let written = store.record(&[r], at).await.unwrap();
    assert_eq!(written, outcomes.len() as u64, "attempt rows written");
    c
}

async fn deliver(store: &dyn Store, m: &Message, at: DateTime<Utc>) {
    attempt_and_record(store, m, at, &[AttemptOutcome::Success], Next::Delivered).await;
}

async fn dead_letter(store: &dyn Store, m: &Message, at: DateTime<Utc>) {
    attempt_and_record(
        store,
        m,
        at,
        &[AttemptOutcome::NonRetryableFailure],
        Next::DeadLetter,
    )
    .await;
}

fn done(t: Transition) -> Message {
    match t {
        Transition::Done(m) => *m,
        other => panic!("expected Done, got {other:?}"),
    }
}

fn assert_target_eq(actual: &Target, expected: &Target) {
    assert_eq!(actual.id, expected.id, "id");
    assert_eq!(actual.account, expected.account, "account");
    assert_eq!(actual.name, expected.name, "name");
    assert_eq!(actual.enabled, expected.enabled, "enabled");
    assert_eq!(actual.config, expected.config, "config");
    assert_eq!(actual.created_at, expected.created_at, "created_at");
    assert_eq!(actual.updated_at, expected.updated_at, "updated_at");
}

fn assert_attempt_eq(actual: &Attempt, expected: &Attempt) {
    assert_eq!(actual.attempt, expected.attempt, "attempt number");
    assert_eq!(actual.started_at, expected.started_at, "started_at");
    assert_eq!(actual.finished_at, expected.finished_at, "finished_at");
    assert_eq!(actual.duration_ms, expected.duration_ms, "duration_ms");
    assert_eq!(actual.outcome, expected.outcome, "outcome");
    assert_eq!(actual.status_code, expected.status_code, "status_code");
    assert_eq!(actual.error, expected.error, "error");
    assert_eq!(
        actual.response_body, expected.response_body,
        "response_body"
    );
}

fn attempt_numbers(attempts: &[Attempt]) -> Vec<u32> {
    attempts.iter().map(|a| a.attempt).collect()
}

async fn attempts_of(store: &dyn Store, m: &Message) -> Vec<Attempt> {
    store
        .list_attempts(&m.account, &m.id, None, 1000)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("message {} should exist", m.id))
}

fn idem(key: &str, hash: &[u8], ttl: Duration, response: serde_json::Value) -> IdempotencyInput {
    IdempotencyInput {
        key: key.into(),
        request_hash: hash.to_vec(),
        status: 201,
        response,
        ttl,
    }
}

/// Cutoffs that expire nothing (everything is younger than 30 years).
fn cutoffs_keeping_everything(now: DateTime<Utc>) -> Cutoffs {
    let long_ago = now - days(365 * 30);
    Cutoffs {
        delivered_before: long_ago,
        cancelled_before: long_ago,
        dead_letters_before: long_ago,
        failed_attempts_before: long_ago,
        idempotency_before: long_ago,
    }
}

// ---------------------------------------------------------------------------
// Clients and signing keys
// ---------------------------------------------------------------------------

async fn ping_answers_while_the_store_is_reachable(store: Arc<dyn Store>) {
    store.ping().await.expect("ping answers");
}

async fn a_created_client_is_found_by_id_and_an_unknown_id_answers_none(store: Arc<dyn Store>) {
    // The CLI creates clients for accounts that do not exist yet.
    let client = ClientRecord {
        client_id: "di_client_0001".into(),
        account: "brand-new-account".into(),
        name: "ci".into(),
        secret_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
        scopes: vec!["messages:write".into(), "targets:read".into()],
    };
    store.create_client(&client).await.unwrap();
    let other = ClientRecord {
        client_id: "di_client_0002".into(),
        account: ACME.into(),
        name: "portal".into(),
        secret_hash: "hash-2".into(),
        scopes: vec![],
    };
    store.create_client(&other).await.unwrap();

    let found = store
        .find_client("di_client_0001")
        .await
        .unwrap()
        .expect("the client is found");
    assert_eq!(found.client_id, client.client_id);
    assert_eq!(found.account, client.account);
    assert_eq!(found.name, client.name);
    assert_eq!(found.secret_hash, client.secret_hash);
    assert_eq!(found.scopes, client.scopes, "scopes, in order");

    let found = store.find_client("di_client_0002").await.unwrap().unwrap();
    assert_eq!(found.account, ACME);
    assert!(found.scopes.is_empty());

    assert!(store.find_client("di_client_9999").await.unwrap().is_none());
    assert!(store.find_client("").await.unwrap().is_none());

    // Ensuring an existing account again is harmless.
    store.ensure_account(ACME).await.unwrap();
    store.ensure_account(ACME).await.unwrap();
}

async fn signing_keys_are_created_once_and_stay_the_same_across_calls(store: Arc<dyn Store>) {
    let first = store.signing_keys().await.unwrap();
    assert!(!first.is_empty(), "a key is created when there is none");
    for key in &first {
        assert!(!key.kid.is_empty(), "a key has a kid");
        assert!(
            key.secret.len() >= 32,
            "an HS256 key has at least 256 bits, got {} bytes",
            key.secret.len()
        );
    }
    for _ in 0..3 {
        let again = store.signing_keys().await.unwrap();
        assert_eq!(
            again
                .iter()
                .map(|k| (&k.kid, &k.secret))
                .collect::<Vec<_>>(),
            first
                .iter()
                .map(|k| (&k.kid, &k.secret))
                .collect::<Vec<_>>(),
            "the keys are stable across calls"
        );
    }
}

// ---------------------------------------------------------------------------
// Targets
// ---------------------------------------------------------------------------

async fn an_inserted_target_reads_back_unchanged_and_a_duplicate_id_is_refused(
    store: Arc<dyn Store>,
) {
    let now = time::now();
    let mut t = target_value(ACME, "orders", now - secs(5));
    t.updated_at = now;
    t.config = TargetConfig::Sqs(SqsConfig {
        queue_url: "https://sqs.eu-north-1.amazonaws.com/123456789012/orders.fifo".into(),
        region: "eu-north-1".into(),
        endpoint_url: Some("http://127.0.0.1:5000".into()),
        credentials: None,
        message_group_id: Some("group-1".into()),
    });
    insert_target(&*store, &t).await;
    let read = store.get_target(ACME, &t.id).await.unwrap().unwrap();
    assert_target_eq(&read, &t);

    let mut w = target_value(ACME, "hooks", now);
    w.enabled = false;
    insert_target(&*store, &w).await;
    assert_target_eq(&store.get_target(ACME, &w.id).await.unwrap().unwrap(), &w);

    // The same id again, even with other fields: refused, the first is kept.
    let mut dup = w.clone();
    dup.name = "impostor".into();
    dup.enabled = true;
    assert!(!store.insert_target(&dup).await.unwrap());
    assert_target_eq(&store.get_target(ACME, &w.id).await.unwrap().unwrap(), &w);

    assert!(store
        .get_target(ACME, &TargetId::new())
        .await
        .unwrap()
        .is_none());
}

async fn a_target_is_invisible_to_another_account(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    store.ensure_account(GLOBEX).await.unwrap();
    assert!(store.get_target(GLOBEX, &t.id).await.unwrap().is_none());
    assert!(store
        .list_targets(GLOBEX, None, 100)
        .await
        .unwrap()
        .is_empty());
    // Nor can the other account take the id.
    let mut dup = target_value(GLOBEX, "mine", time::now());
    dup.id = t.id.clone();
    assert!(!store.insert_target(&dup).await.unwrap());
    assert!(store.get_target(GLOBEX, &t.id).await.unwrap().is_none());
    assert_eq!(
        store.get_target(ACME, &t.id).await.unwrap().unwrap().name,
        "orders"
    );
}

async fn target_paging_goes_on_when_the_cursors_target_was_deleted(store: Arc<dyn Store>) {
    let t0 = time::now() - secs(60);
    let mut targets = Vec::new();
    for i in 0..3 {
        let t = target_value(ACME, &format!("t{i}"), t0 + ms(i * 1_000));
        insert_target(&*store, &t).await;
        targets.push(t);
    }
    let first = store.list_targets(ACME, None, 1).await.unwrap();
    assert_eq!(first[0].id, targets[2].id);
    let cursor = TargetCursor::after(&first[0]);
    assert!(matches!(
        store.delete_target(ACME, &first[0].id).await.unwrap(),
        DeleteTarget::Deleted
    ));
    let rest = store.list_targets(ACME, Some(&cursor), 10).await.unwrap();
    let ids: Vec<_> = rest.iter().map(|t| t.id.clone()).collect();
    assert_eq!(ids, vec![targets[1].id.clone(), targets[0].id.clone()]);
    assert_eq!(TargetCursor::decode(&cursor.encode()), Some(cursor));
}

async fn targets_are_listed_newest_first_and_paged_with_the_after_cursor(store: Arc<dyn Store>) {
    let t0 = time::now() - secs(60);
    // Six targets; two share a creation time, so the order must break ties
    // and the cursor must neither skip nor repeat them.
    let offsets = [0, 1_000, 2_000, 2_000, 3_000, 4_000];
    let mut targets = Vec::new();
    for (i, off) in offsets.iter().enumerate() {
        let t = target_value(ACME, &format!("t{i}"), t0 + ms(*off));
        insert_target(&*store, &t).await;
        targets.push(t);
    }
    insert_target(&*store, &target_value(GLOBEX, "theirs", t0 + ms(5_000))).await;

    let all = store.list_targets(ACME, None, 100).await.unwrap();
    assert_eq!(all.len(), 6, "only the account's targets");
    for pair in all.windows(2) {
        assert!(
            pair[0].created_at >= pair[1].created_at,
            "newest first: {} then {}",
            pair[0].created_at,
            pair[1].created_at
        );
    }
    assert_eq!(all[0].id, targets[5].id);
    assert_eq!(all[5].id, targets[0].id);
    assert_target_eq(&all[0], &targets[5]);

    // Pages of 2 and of 1 give the same sequence.
    for page_size in [1u32, 2, 4] {
        let mut paged = Vec::new();
        let mut after: Option<TargetCursor> = None;
        loop {
            let page = store
                .list_targets(ACME, after.as_ref(), page_size)
                .await
                .unwrap();
            assert!(page.len() <= page_size as usize, "the limit is honoured");
            if page.is_empty() {
                break;
            }
            after = Some(TargetCursor::after(page.last().unwrap()));
            paged.extend(page.into_iter().map(|t| t.id));
            assert!(paged.len() <= 6, "paging terminates");
        }
        assert_eq!(
            paged,
            all.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
            "paging by {page_size} matches the full list"
        );
    }
}

async fn updating_a_target_changes_its_name_and_config_in_its_own_account_only(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let later = t.updated_at + secs(10);
    let changed = Target {
        name: "renamed".into(),
        config: webhook("https://example.org/other"),
        updated_at: later,
        ..t.clone()
    };
    let updated = store
        .update_target(&changed)
        .await
        .unwrap()
        .expect("the target is updated");
    assert_target_eq(&updated, &changed);
    assert_target_eq(
        &store.get_target(ACME, &t.id).await.unwrap().unwrap(),
        &changed,
    );

    // Another account cannot update it, and an unknown id updates nothing.
    store.ensure_account(GLOBEX).await.unwrap();
    let foreign = Target {
        account: GLOBEX.into(),
        name: "hijacked".into(),
        updated_at: later + secs(1),
        ..changed.clone()
    };
    assert!(store.update_target(&foreign).await.unwrap().is_none());
    let unknown = Target {
        id: TargetId::new(),
        ..changed.clone()
    };
    assert!(store.update_target(&unknown).await.unwrap().is_none());
    assert!(store.get_target(ACME, &unknown.id).await.unwrap().is_none());
    assert_target_eq(
        &store.get_target(ACME, &t.id).await.unwrap().unwrap(),
        &changed,
    );
}

async fn disabling_and_enabling_a_target_flips_enabled_in_its_own_account_only(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let t1 = t.updated_at + secs(1);
    let disabled = store
        .set_target_enabled(ACME, &t.id, false, t1)
        .await
        .unwrap()
        .expect("the target is disabled");
    assert!(!disabled.enabled);
    assert_eq!(disabled.updated_at, t1, "a change bumps updated_at");
    assert_eq!(disabled.name, t.name);
    assert_eq!(disabled.config, t.config);
    assert!(
        !store
            .get_target(ACME, &t.id)
            .await
            .unwrap()
            .unwrap()
            .enabled
    );

    store.ensure_account(GLOBEX).await.unwrap();
    assert!(store
        .set_target_enabled(GLOBEX, &t.id, true, t1 + secs(1))
        .await
        .unwrap()
        .is_none());
    assert!(
        !store
            .get_target(ACME, &t.id)
            .await
            .unwrap()
            .unwrap()
            .enabled
    );
    assert!(store
        .set_target_enabled(ACME, &TargetId::new(), true, t1)
        .await
        .unwrap()
        .is_none());

    let t2 = t1 + secs(2);
    let enabled = store
        .set_target_enabled(ACME, &t.id, true, t2)
        .await
        .unwrap()
        .expect("the target is enabled");
    assert!(enabled.enabled);
    assert_eq!(enabled.updated_at, t2);
    assert!(
        store
            .get_target(ACME, &t.id)
            .await
            .unwrap()
            .unwrap()
            .enabled
    );
}

async fn deleting_a_target_answers_deleted_then_not_found(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let kept = add_target(&*store, ACME).await;
    store.ensure_account(GLOBEX).await.unwrap();

    assert!(matches!(
        store.delete_target(GLOBEX, &t.id).await.unwrap(),
        DeleteTarget::NotFound
    ));
    assert!(
        store.get_target(ACME, &t.id).await.unwrap().is_some(),
        "another account's delete leaves it"
    );

    assert!(matches!(
        store.delete_target(ACME, &t.id).await.unwrap(),
        DeleteTarget::Deleted
    ));
    assert!(store.get_target(ACME, &t.id).await.unwrap().is_none());
    assert!(matches!(
        store.delete_target(ACME, &t.id).await.unwrap(),
        DeleteTarget::NotFound
    ));
    assert!(matches!(
        store.delete_target(ACME, &TargetId::new()).await.unwrap(),
        DeleteTarget::NotFound
    ));
    let left = store.list_targets(ACME, None, 100).await.unwrap();
    assert_eq!(
        left.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        vec![kept.id]
    );
}

async fn a_target_with_a_scheduled_message_cannot_be_deleted(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    assert!(matches!(
        store.delete_target(ACME, &t.id).await.unwrap(),
        DeleteTarget::HasPending
    ));
    assert!(store.get_target(ACME, &t.id).await.unwrap().is_some());
    assert_eq!(get(&*store, &m).await.state, State::Scheduled);

    done(store.cancel(ACME, &m.id, now).await.unwrap());
    assert!(matches!(
        store.delete_target(ACME, &t.id).await.unwrap(),
        DeleteTarget::Deleted
    ));
}

async fn a_target_with_a_dead_letter_cannot_be_deleted(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &m, now).await;
    assert_eq!(get(&*store, &m).await.state, State::DeadLetter);
    assert!(matches!(
        store.delete_target(ACME, &t.id).await.unwrap(),
        DeleteTarget::HasPending
    ));
    assert!(store.get_target(ACME, &t.id).await.unwrap().is_some());

    done(store.cancel(ACME, &m.id, now + secs(1)).await.unwrap());
    assert!(matches!(
        store.delete_target(ACME, &t.id).await.unwrap(),
        DeleteTarget::Deleted
    ));
}

async fn a_target_whose_messages_are_all_finished_can_be_deleted(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let delivered = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &delivered, now).await;
    let cancelled = schedule(&*store, &t, now + hours(1)).await;
    done(store.cancel(ACME, &cancelled.id, now).await.unwrap());
    assert!(matches!(
        store.delete_target(ACME, &t.id).await.unwrap(),
        DeleteTarget::Deleted
    ));
    assert!(store.get_target(ACME, &t.id).await.unwrap().is_none());
}

// ---------------------------------------------------------------------------
// Inserting messages
// ---------------------------------------------------------------------------

async fn a_message_for_a_missing_or_foreign_target_answers_unknown_target(store: Arc<dyn Store>) {
    let theirs = add_target(&*store, GLOBEX).await;
    store.ensure_account(ACME).await.unwrap();
    let now = time::now();

    let missing = target_value(ACME, "never stored", now);
    let m = message_value(&missing, now, now);
    assert!(matches!(
        store.insert_message(&m, None).await.unwrap(),
        InsertOutcome::UnknownTarget
    ));
    assert!(store.get_message(ACME, &m.id).await.unwrap().is_none());

    // GLOBEX's target, used by ACME.
    let mut foreign = message_value(&theirs, now, now);
    foreign.account = ACME.into();
    assert!(matches!(
        store.insert_message(&foreign, None).await.unwrap(),
        InsertOutcome::UnknownTarget
    ));
    assert!(store
        .get_message(ACME, &foreign.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_message(GLOBEX, &foreign.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .claim_due(now + secs(1), 100, LEASE)
        .await
        .unwrap()
        .is_empty());
}

async fn an_inserted_message_reads_back_as_scheduled_with_its_fields(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let value = message_value(&t, now + hours(2), now);
    let returned = insert(&*store, &value).await;
    assert_eq!(returned.id, value.id);
    assert_eq!(returned.state, State::Scheduled);

    let m = get(&*store, &value).await;
    assert_eq!(m.id, value.id);
    assert_eq!(m.account, ACME);
    assert_eq!(m.target_id, t.id);
    assert_eq!(m.state, State::Scheduled);
    assert_eq!(m.delivery_time, now + hours(2));
    assert_eq!(
        m.next_attempt_at,
        Some(now + hours(2)),
        "a Scheduled message's next attempt is its delivery time"
    );
    assert_eq!(m.attempt_count, 0);
    assert_eq!(m.delivered_at, None);
    assert_eq!(m.cancelled_at, None);
    assert_eq!(m.dead_lettered_at, None);
    assert_eq!(m.last_error, None);
    assert_eq!(m.created_at, now);
    assert_eq!(m.updated_at, now);
    assert_eq!(m.payload, value.payload);
    assert_eq!(attempts_of(&*store, &m).await.len(), 0, "no attempts yet");

    // The fields the API answers with come from Created as well.
    assert_eq!(returned.target_id, m.target_id);
    assert_eq!(returned.delivery_time, m.delivery_time);
    assert_eq!(returned.next_attempt_at, m.next_attempt_at);
    assert_eq!(returned.created_at, m.created_at);
    assert_eq!(returned.payload, m.payload);
}

async fn the_largest_payload_reads_back_exactly(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    // 61,440 four-byte characters (245,760 bytes), with quotes, backslashes
    // and a newline on the way.
    let mut text: String = "𝄞".repeat(MAX_PAYLOAD_CHARS - 8);
    text.push_str("\"\\\n'\t€é");
    assert_eq!(text.chars().count(), MAX_PAYLOAD_CHARS - 1);
    text.push('x');
    let mut value = message_value(&t, now + hours(1), now);
    value.payload = Payload::parse(text.clone()).unwrap();
    insert(&*store, &value).await;
    assert_eq!(get(&*store, &value).await.payload.as_str(), text);
}

async fn a_payload_with_a_nul_character_reads_back_exactly(store: Arc<dyn Store>) {
    // API.md §4: `payload` is any JSON-embeddable string; "\u0000" is one.
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let text = "before\u{0}after \u{1f} \u{7f}".to_string();
    let mut value = message_value(&t, now + hours(1), now);
    value.payload = Payload::parse(text.clone()).unwrap();
    let outcome = store.insert_message(&value, None).await;
    assert!(
        matches!(outcome, Ok(InsertOutcome::Created(_))),
        "a payload with U+0000 is stored, got {outcome:?}"
    );
    assert_eq!(get(&*store, &value).await.payload.as_str(), text);
    let claimed = store
        .claim_due(now + hours(1) + ms(1), 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].payload, text);
}

// ---------------------------------------------------------------------------
// Idempotency keys
// ---------------------------------------------------------------------------

const DAY: Duration = Duration::from_secs(24 * 3600);

async fn the_same_idempotency_key_and_request_replay_the_first_response(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let first = message_value(&t, now + hours(1), now);
    let response = json!({"messageId": first.id.to_string(), "state": "Scheduled"});
    let key = idem("order-42", b"hash-of-body-1", DAY, response.clone());
    created(store.insert_message(&first, Some(&key)).await.unwrap());

    // A retry of the request: the API has built a new message and a new
    // response, but the first response is what comes back.
    let retry = message_value(&t, now + hours(1), now + secs(5));
    let retry_key = idem(
        "order-42",
        b"hash-of-body-1",
        DAY,
        json!({"messageId": retry.id.to_string()}),
    );
    match store
        .insert_message(&retry, Some(&retry_key))
        .await
        .unwrap()
    {
        InsertOutcome::Replayed {
            status,
            response: replayed,
        } => {
            assert_eq!(status, 201);
            assert_eq!(replayed, response);
        }
        other => panic!("expected Replayed, got {other:?}"),
    }
    assert!(
        store.get_message(ACME, &retry.id).await.unwrap().is_none(),
        "a replay creates no message"
    );
    let all = store
        .list_messages(ACME, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&all), vec![first.id]);
}

async fn the_same_idempotency_key_with_another_request_is_a_key_conflict(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let first = message_value(&t, now + hours(1), now);
    let key = idem("order-42", b"hash-of-body-1", DAY, json!({"n": 1}));
    created(store.insert_message(&first, Some(&key)).await.unwrap());

    let other = message_value(&t, now + hours(3), now + secs(5));
    let other_key = idem("order-42", b"hash-of-body-2", DAY, json!({"n": 2}));
    assert!(matches!(
        store
            .insert_message(&other, Some(&other_key))
            .await
            .unwrap(),
        InsertOutcome::KeyConflict
    ));
    assert!(store.get_message(ACME, &other.id).await.unwrap().is_none());

    // The conflict did not replace the stored request: the first still replays.
    let again = message_value(&t, now + hours(1), now + secs(6));
    assert!(matches!(
        store.insert_message(&again, Some(&key)).await.unwrap(),
        InsertOutcome::Replayed { .. }
    ));
}

async fn an_expired_idempotency_key_is_treated_as_new(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let tiny = Duration::from_millis(1);
    let old = message_value(&t, now + hours(1), now - hours(1));
    let old_key = idem("order-42", b"hash-old", tiny, json!({"n": "old"}));
    created(store.insert_message(&old, Some(&old_key)).await.unwrap());

    // An hour later the key has expired: another request with it is new.
    let fresh = message_value(&t, now + hours(2), now);
    let fresh_key = idem("order-42", b"hash-new", tiny, json!({"n": "fresh"}));
    let m = created(
        store
            .insert_message(&fresh, Some(&fresh_key))
            .await
            .unwrap(),
    );
    assert_eq!(m.id, fresh.id);
    assert!(store.get_message(ACME, &old.id).await.unwrap().is_some());
    assert!(store.get_message(ACME, &fresh.id).await.unwrap().is_some());

    // The key now belongs to the new request: it replays the new response.
    let replay = message_value(&t, now + hours(2), now);
    let replay_key = idem("order-42", b"hash-new", DAY, json!({"n": "ignored"}));
    match store
        .insert_message(&replay, Some(&replay_key))
        .await
        .unwrap()
    {
        InsertOutcome::Replayed { response, .. } => assert_eq!(response, json!({"n": "fresh"})),
        other => panic!("expected Replayed, got {other:?}"),
    }
}

async fn idempotency_keys_are_scoped_to_their_account(store: Arc<dyn Store>) {
    let ours = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let now = time::now();
    let a = message_value(&ours, now + hours(1), now);
    created(
        store
            .insert_message(&a, Some(&idem("k", b"acme-body", DAY, json!({"a": 1}))))
            .await
            .unwrap(),
    );
    // The same key in another account, with the same or another body: new.
    let b = message_value(&theirs, now + hours(1), now);
    created(
        store
            .insert_message(&b, Some(&idem("k", b"acme-body", DAY, json!({"b": 1}))))
            .await
            .unwrap(),
    );
    let c = message_value(&theirs, now + hours(1), now);
    assert!(matches!(
        store
            .insert_message(&c, Some(&idem("k", b"other", DAY, json!({"c": 1}))))
            .await
            .unwrap(),
        InsertOutcome::KeyConflict
    ));
    // And each account replays its own response.
    let again = message_value(&ours, now + hours(1), now);
    match store
        .insert_message(&again, Some(&idem("k", b"acme-body", DAY, json!({}))))
        .await
        .unwrap()
    {
        InsertOutcome::Replayed { response, .. } => assert_eq!(response, json!({"a": 1})),
        other => panic!("expected Replayed, got {other:?}"),
    }
}

async fn an_idempotency_key_sent_with_an_unknown_target_is_not_remembered(store: Arc<dyn Store>) {
    store.ensure_account(ACME).await.unwrap();
    let now = time::now();
    // A target that does not exist yet…
    let t = target_value(ACME, "later", now);
    let m = message_value(&t, now + hours(1), now);
    let key = idem(
        "order-7",
        b"body",
        DAY,
        json!({"messageId": m.id.to_string()}),
    );
    assert!(matches!(
        store.insert_message(&m, Some(&key)).await.unwrap(),
        InsertOutcome::UnknownTarget
    ));
    // …is created; the same request again creates the message rather than
    // replaying a response for a message that was never stored.
    insert_target(&*store, &t).await;
    let retry = message_value(&t, now + hours(1), now + secs(1));
    let got = created(store.insert_message(&retry, Some(&key)).await.unwrap());
    assert_eq!(got.id, retry.id);
    assert!(store.get_message(ACME, &retry.id).await.unwrap().is_some());
}

async fn concurrent_inserts_with_one_idempotency_key_create_one_message(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let barrier = barrier.clone();
        let m = message_value(&t, now + hours(1), now);
        tasks.push(tokio::spawn(async move {
            let key = idem("same-key", b"same-body", DAY, json!({"task": i}));
            barrier.wait().await;
            store.insert_message(&m, Some(&key)).await.unwrap()
        }));
    }
    let mut created_ids = Vec::new();
    let mut replays = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            InsertOutcome::Created(m) => created_ids.push(m.id),
            InsertOutcome::Replayed { response, .. } => replays.push(response),
            other => panic!("expected Created or Replayed, got {other:?}"),
        }
    }
    assert_eq!(created_ids.len(), 1, "exactly one request creates");
    assert_eq!(replays.len(), 7);
    assert!(
        replays.windows(2).all(|w| w[0] == w[1]),
        "every replay is the same first response"
    );
    let all = store
        .list_messages(ACME, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&all), created_ids);
}

async fn a_batch_insert_returns_the_inserted_ids_and_skips_unknown_and_foreign_targets(
    store: Arc<dyn Store>,
) {
    let ours = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let now = time::now();
    let a = message_value(&ours, now + hours(1), now);
    let b = message_value(&ours, now - secs(1), now);
    let missing = message_value(&target_value(ACME, "missing", now), now, now);
    let mut foreign = message_value(&theirs, now, now);
    foreign.account = ACME.into();
    let batch = [a.clone(), missing.clone(), b.clone(), foreign.clone()];

    let ids = store.insert_messages(ACME, &batch).await.unwrap();
    assert_eq!(set(ids.clone()), set([a.id, b.id]));
    assert_eq!(ids.len(), 2, "each inserted id once");

    let read = get(&*store, &a).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.target_id, ours.id);
    assert_eq!(read.delivery_time, now + hours(1));
    assert_eq!(read.next_attempt_at, Some(now + hours(1)));
    assert_eq!(read.payload, a.payload);
    assert!(store
        .get_message(ACME, &missing.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_message(ACME, &foreign.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_message(GLOBEX, &foreign.id)
        .await
        .unwrap()
        .is_none());

    // The batch's due message is claimable like any other.
    let claimed = store.claim_due(now, 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&claimed), vec![b.id]);

    assert!(store.insert_messages(ACME, &[]).await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------
// Reading messages
// ---------------------------------------------------------------------------

async fn messages_are_listed_newest_first_and_paged_with_the_before_cursor(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let now = time::now();
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(schedule(&*store, &t, now + hours(1 + i)).await.id);
    }
    let their = schedule(&*store, &theirs, now + hours(1)).await;
    let expected = newest_first(ids);

    let all = store
        .list_messages(ACME, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&all), expected, "newest (highest id) first");

    for page_size in [1u32, 3] {
        let mut paged = Vec::new();
        let mut before: Option<MessageId> = None;
        loop {
            let page = store
                .list_messages(ACME, &MessageFilter::default(), before.as_ref(), page_size)
                .await
                .unwrap();
            assert!(page.len() <= page_size as usize, "the limit is honoured");
            if page.is_empty() {
                break;
            }
            before = Some(page.last().unwrap().id);
            paged.extend(message_ids(&page));
            assert!(paged.len() <= expected.len(), "paging terminates");
        }
        assert_eq!(paged, expected, "paging by {page_size}");
    }

    let theirs_listed = store
        .list_messages(GLOBEX, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&theirs_listed), vec![their.id]);
}

async fn listing_messages_filters_by_state_and_by_target(store: Arc<dyn Store>) {
    let t1 = add_target(&*store, ACME).await;
    let t2 = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let now = time::now();

    // Finished ones first, each driven to its state while it is the only one due.
    let delivered = schedule(&*store, &t1, now - secs(1)).await;
    deliver(&*store, &delivered, now).await;
    let dead = schedule(&*store, &t1, now - secs(1)).await;
    dead_letter(&*store, &dead, now).await;
    let s1 = schedule(&*store, &t1, now + hours(1)).await;
    let c1 = schedule(&*store, &t1, now + hours(1)).await;
    done(store.cancel(ACME, &c1.id, now).await.unwrap());
    let s2 = schedule(&*store, &t2, now + hours(1)).await;
    let c2 = schedule(&*store, &t2, now + hours(1)).await;
    done(store.cancel(ACME, &c2.id, now).await.unwrap());
    schedule(&*store, &theirs, now + hours(1)).await;

    let list = |target: Option<&Target>, state: Option<State>| {
        let store = store.clone();
        let filter = MessageFilter {
            target_id: target.map(|t| t.id.clone()),
            state,
            ..MessageFilter::default()
        };
        async move {
            let page = store.list_messages(ACME, &filter, None, 100).await.unwrap();
            for m in &page {
                if let Some(state) = filter.state {
                    assert_eq!(m.state, state, "only {state:?} messages");
                }
            }
            message_ids(&page)
        }
    };
    assert_eq!(
        list(None, Some(State::Scheduled)).await,
        newest_first(vec![s1.id, s2.id])
    );
    assert_eq!(
        list(None, Some(State::Cancelled)).await,
        newest_first(vec![c1.id, c2.id])
    );
    assert_eq!(list(None, Some(State::Delivered)).await, vec![delivered.id]);
    assert_eq!(list(None, Some(State::DeadLetter)).await, vec![dead.id]);
    assert_eq!(
        list(Some(&t2), None).await,
        newest_first(vec![s2.id, c2.id])
    );
    assert_eq!(
        list(Some(&t1), None).await,
        newest_first(vec![delivered.id, dead.id, s1.id, c1.id])
    );
    assert_eq!(list(Some(&t1), Some(State::Cancelled)).await, vec![c1.id]);
    assert_eq!(list(Some(&t2), Some(State::Delivered)).await, vec![]);
    assert_eq!(
        list(Some(&theirs), None).await,
        vec![],
        "another account's target filters to nothing"
    );

    // Paging within a filter.
    let cancelled = MessageFilter {
        target_id: None,
        state: Some(State::Cancelled),
        ..MessageFilter::default()
    };
    let first = store
        .list_messages(ACME, &cancelled, None, 1)
        .await
        .unwrap();
    let second = store
        .list_messages(ACME, &cancelled, Some(&first[0].id), 1)
        .await
        .unwrap();
    let third = store
        .list_messages(ACME, &cancelled, Some(&second[0].id), 1)
        .await
        .unwrap();
    assert_eq!(
        [message_ids(&first), message_ids(&second)].concat(),
        newest_first(vec![c1.id, c2.id])
    );
    assert!(third.is_empty());
}

async fn another_accounts_messages_are_invisible(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    store.ensure_account(GLOBEX).await.unwrap();
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &m, now).await;

    assert!(store.get_message(GLOBEX, &m.id).await.unwrap().is_none());
    assert!(store
        .list_attempts(GLOBEX, &m.id, None, 100)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .list_messages(GLOBEX, &MessageFilter::default(), None, 100)
        .await
        .unwrap()
        .is_empty());
    let by_target = MessageFilter {
        target_id: Some(t.id.clone()),
        state: None,
        ..MessageFilter::default()
    };
    assert!(store
        .list_messages(GLOBEX, &by_target, None, 100)
        .await
        .unwrap()
        .is_empty());
    // Still there for its own account.
    assert_eq!(get(&*store, &m).await.state, State::Delivered);
    assert_eq!(attempts_of(&*store, &m).await.len(), 1);
}

// ---------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------

async fn claim_due_hands_out_only_due_scheduled_messages_oldest_due_first(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    // Not claimable: delivered, dead letter, cancelled (all due long ago).
    let delivered = schedule(&*store, &t, now - secs(60)).await;
    deliver(&*store, &delivered, now - secs(50)).await;
    let dead = schedule(&*store, &t, now - secs(60)).await;
    dead_letter(&*store, &dead, now - secs(50)).await;
    let cancelled = schedule(&*store, &t, now - secs(60)).await;
    done(
        store
            .cancel(ACME, &cancelled.id, now - secs(55))
            .await
            .unwrap(),
    );
    let future = schedule(&*store, &t, now + hours(1)).await;
    // Due, in an order unlike their creation order.
    let d_mid = schedule(&*store, &t, now - secs(2)).await;
    let d_new = schedule(&*store, &t, now - secs(1)).await;
    let d_old = schedule(&*store, &t, now - secs(3)).await;

    // A lease longer than the wait for `future` below keeps these out of it.
    let long = Duration::from_secs(3 * 3600);
    let mut order = Vec::new();
    for _ in 0..3 {
        let claimed = store.claim_due(now, 1, long).await.unwrap();
        assert_eq!(claimed.len(), 1, "one due message per claim of one");
        order.push(claimed[0].id);
    }
    assert_eq!(
        order,
        vec![d_old.id, d_mid.id, d_new.id],
        "the oldest due is handed out first"
    );
    assert!(store.claim_due(now, 10, LEASE).await.unwrap().is_empty());

    // What a claim carries.
    let claimed = store
        .claim_due(now + hours(1) + ms(1), 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed_ids(&claimed), vec![future.id]);
    let c = &claimed[0];
    assert_eq!(c.target_id, t.id);
    assert_eq!(c.target, t.config);
    assert_eq!(c.payload, future.payload.as_str());
    assert_eq!(c.delivery_time, now + hours(1));
    assert_eq!(c.attempt_count, 0);
    assert_eq!(c.ladder_attempts, 0);
    assert!(!c.lease_token.is_nil());

    // Claiming changes no visible state.
    let m = get(&*store, &future).await;
    assert_eq!(m.state, State::Scheduled);
    assert_eq!(m.attempt_count, 0);
}

async fn claim_due_honours_its_limit(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(schedule(&*store, &t, now - secs(10 - i)).await.id);
    }
    let mut seen = Vec::new();
    for expected in [2, 2, 1, 0] {
        let claimed = store.claim_due(now, 2, LEASE).await.unwrap();
        assert_eq!(claimed.len(), expected, "a claim of 2 hands out at most 2");
        seen.extend(claimed_ids(&claimed));
    }
    assert_eq!(seen.len(), 5);
    assert_eq!(set(seen), set(ids));
}

async fn a_claimed_message_is_not_claimed_again_until_its_lease_expires(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let first = claim_only(&*store, &m, now, LEASE).await;

    for later in [now, now + secs(1), now + secs(29)] {
        assert!(
            store.claim_due(later, 10, LEASE).await.unwrap().is_empty(),
            "the lease holds at {later}"
        );
    }
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(now + secs(30)),
        "a leased message falls due again when its lease ends"
    );

    let second = claim_only(&*store, &m, now + secs(30) + ms(1), LEASE).await;
    assert_ne!(
        second.lease_token, first.lease_token,
        "a new claim has a new lease token"
    );
    assert_eq!(second.attempt_count, 0);
    assert_eq!(second.ladder_attempts, 0);
    assert!(store
        .claim_due(now + secs(31), 10, LEASE)
        .await
        .unwrap()
        .is_empty());

    // A short lease (a few ms) also expires.
    let short = schedule(&*store, &t, now - secs(1)).await;
    let a = claim_only(&*store, &short, now + secs(40), Duration::from_millis(5)).await;
    let b = claim_only(&*store, &short, now + secs(40) + ms(6), LEASE).await;
    assert_ne!(a.lease_token, b.lease_token);
}

async fn a_disabled_targets_messages_are_not_claimed_until_it_is_enabled(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let before = schedule(&*store, &t, now - secs(3)).await;
    store
        .set_target_enabled(ACME, &t.id, false, now)
        .await
        .unwrap()
        .unwrap();
    assert!(store.claim_due(now, 100, LEASE).await.unwrap().is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);

    // Scheduled, batch-inserted or rescheduled while disabled: held too.
    let during = schedule(&*store, &t, now - secs(2)).await;
    let batched = message_value(&t, now - secs(1), now);
    store
        .insert_messages(ACME, std::slice::from_ref(&batched))
        .await
        .unwrap();
    let moved = schedule(&*store, &t, now + hours(5)).await;
    done(
        store
            .reschedule(ACME, &moved.id, now - secs(4), now)
            .await
            .unwrap(),
    );
    // A target created disabled holds its messages from the start.
    let mut off = target_value(ACME, "off", now);
    off.enabled = false;
    insert_target(&*store, &off).await;
    let held = schedule(&*store, &off, now - secs(10)).await;

    assert!(store
        .claim_due(now + hours(1), 100, LEASE)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);
    for m in [&before, &during, &moved, &held] {
        assert_eq!(get(&*store, m).await.state, State::Scheduled);
    }

    store
        .set_target_enabled(ACME, &t.id, true, now + secs(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(now - secs(4)),
        "the earliest of the released messages"
    );
    // Delivered oldest first once enabled.
    let first = store.claim_due(now + secs(2), 1, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&first), vec![moved.id]);
    let rest = store.claim_due(now + secs(2), 100, LEASE).await.unwrap();
    assert_eq!(
        set(claimed_ids(&rest)),
        set([before.id, during.id, batched.id]),
        "the disabled target's messages stay held"
    );
    let rest_ids = claimed_ids(&rest);
    assert_eq!(rest_ids.len(), 3);

    store
        .set_target_enabled(ACME, &off.id, true, now + secs(3))
        .await
        .unwrap()
        .unwrap();
    let claimed = store.claim_due(now + secs(3), 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&claimed), vec![held.id]);
}

async fn next_due_is_the_earliest_claimable_time_and_ignores_paused_messages(
    store: Arc<dyn Store>,
) {
    assert_eq!(store.next_due().await.unwrap(), None, "nothing scheduled");
    let on = add_target(&*store, ACME).await;
    let now = time::now();
    // Finished messages do not count.
    let delivered = schedule(&*store, &on, now - secs(100)).await;
    deliver(&*store, &delivered, now - secs(90)).await;
    let dead = schedule(&*store, &on, now - secs(100)).await;
    dead_letter(&*store, &dead, now - secs(90)).await;
    let cancelled = schedule(&*store, &on, now + secs(1)).await;
    done(store.cancel(ACME, &cancelled.id, now).await.unwrap());
    assert_eq!(store.next_due().await.unwrap(), None);

    schedule(&*store, &on, now + secs(10)).await;
    schedule(&*store, &on, now + secs(5)).await;
    let off = add_target(&*store, ACME).await;
    schedule(&*store, &off, now + secs(1)).await;
    store
        .set_target_enabled(ACME, &off.id, false, now)
        .await
        .unwrap()
        .unwrap();
    schedule(&*store, &off, now + secs(2)).await;

    assert_eq!(store.next_due().await.unwrap(), Some(now + secs(5)));
    store
        .set_target_enabled(ACME, &off.id, true, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.next_due().await.unwrap(), Some(now + secs(1)));
}

// ---------------------------------------------------------------------------
// Recording attempts
// ---------------------------------------------------------------------------

async fn recording_a_success_marks_the_message_delivered(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let finished = now + ms(250);
    let recorded_at = now + ms(300);
    let a = attempt(1, AttemptOutcome::Success, finished);
    let written = store
        .record(
            &[recorded(&c, vec![a.clone()], Next::Delivered)],
            recorded_at,
        )
        .await
        .unwrap();
    assert_eq!(written, 1);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Delivered);
    assert_eq!(read.attempt_count, 1);
    assert_eq!(
        read.next_attempt_at, None,
        "only a Scheduled message has one"
    );
    let delivered_at = read.delivered_at.expect("delivered_at is set");
    assert!(
        finished <= delivered_at && delivered_at <= recorded_at,
        "delivered_at {delivered_at} is when the attempt finished or was recorded"
    );
    assert_eq!(read.last_error, None);
    assert_eq!(read.cancelled_at, None);
    assert_eq!(read.dead_lettered_at, None);
    assert_eq!(read.delivery_time, m.delivery_time);
    assert!(read.updated_at > m.updated_at, "updated_at moves");

    let attempts = attempts_of(&*store, &m).await;
    assert_eq!(attempts.len(), 1);
    assert_attempt_eq(&attempts[0], &a);

    assert!(store
        .claim_due(now + days(30), 100, LEASE)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);
}

async fn recording_a_retry_schedules_the_next_attempt_at_the_given_time(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let mut second = attempt(2, AttemptOutcome::RetryableFailure, now + ms(40));
    second.error = Some("timed out after 10s".into());
    second.status_code = None;
    second.response_body = None;
    let attempts = vec![
        attempt(1, AttemptOutcome::RetryableFailure, now + ms(20)),
        second,
    ];
    let retry_at = now + secs(60);
    let written = store
        .record(
            &[recorded(&c, attempts, Next::Retry(retry_at))],
            now + ms(50),
        )
        .await
        .unwrap();
    assert_eq!(written, 2);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.next_attempt_at, Some(retry_at));
    assert_eq!(read.attempt_count, 2);
    assert_eq!(
        read.last_error.as_deref(),
        Some("timed out after 10s"),
        "the last attempt's error"
    );
    assert_eq!(read.delivered_at, None);
    assert_eq!(read.dead_lettered_at, None);
    assert_eq!(
        read.delivery_time, m.delivery_time,
        "a retry keeps the requested delivery time"
    );

    assert_eq!(store.next_due().await.unwrap(), Some(retry_at));
    assert!(store
        .claim_due(retry_at - ms(1), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
    let again = claim_only(&*store, &m, retry_at + ms(1), LEASE).await;
    assert_eq!(again.attempt_count, 2, "attempts so far");
    assert_eq!(again.ladder_attempts, 2, "the ladder position recorded");
    assert_eq!(again.delivery_time, m.delivery_time);
    assert_ne!(again.lease_token, c.lease_token);
}

async fn recording_a_dead_letter_sets_dead_lettered_at_and_stops_claims(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let finished = now + secs(1);
    let a = attempt(1, AttemptOutcome::NonRetryableFailure, finished);
    let written = store
        .record(&[recorded(&c, vec![a], Next::DeadLetter)], now + secs(2))
        .await
        .unwrap();
    assert_eq!(written, 1);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::DeadLetter);
    let at = read.dead_lettered_at.expect("dead_lettered_at is set");
    assert!(
        finished <= at && at <= now + secs(2),
        "dead_lettered_at {at}"
    );
    assert_eq!(read.next_attempt_at, None);
    assert_eq!(read.attempt_count, 1);
    assert_eq!(read.last_error.as_deref(), Some("HTTP 404 on attempt 1"));
    assert_eq!(read.delivered_at, None);
    assert!(store
        .claim_due(now + days(30), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);
}

async fn several_attempts_in_one_record_are_all_stored_in_order(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let attempts = vec![
        attempt(1, AttemptOutcome::RetryableFailure, now + ms(10)),
        attempt(2, AttemptOutcome::RetryableFailure, now + ms(20)),
        attempt(3, AttemptOutcome::Success, now + ms(30)),
    ];
    let written = store
        .record(
            &[recorded(&c, attempts.clone(), Next::Delivered)],
            now + ms(40),
        )
        .await
        .unwrap();
    assert_eq!(written, 3);
    let stored = attempts_of(&*store, &m).await;
    assert_eq!(attempt_numbers(&stored), vec![1, 2, 3]);
    for (s, a) in stored.iter().zip(&attempts) {
        assert_attempt_eq(s, a);
    }
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Delivered);
    assert_eq!(read.attempt_count, 3);
}

async fn attempt_texts_with_a_nul_character_are_stored_with_it_replaced(store: Arc<dyn Store>) {
    // A receiver's body is decoded lossily as UTF-8 (API.md §6), and U+0000
    // is valid UTF-8: a body with a NUL byte must not make the record fail.
    // Every store keeps attempt texts with U+0000 replaced by U+FFFD (text
    // columns of PostgreSQL cannot hold it), the same on every backend.
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    let mut a = attempt(1, AttemptOutcome::RetryableFailure, now + ms(10));
    a.response_body = Some("bad\u{0}gateway".into());
    a.error = Some("HTTP 502: bad\u{0}gateway".into());
    let written = store
        .record(
            &[recorded(&c, vec![a.clone()], Next::Retry(now + secs(60)))],
            now + ms(20),
        )
        .await;
    assert!(
        matches!(written, Ok(1)),
        "the attempt is recorded, got {written:?}"
    );
    let stored = attempts_of(&*store, &m).await;
    assert_eq!(stored.len(), 1);
    let mut expected = a.clone();
    expected.response_body = Some("bad\u{FFFD}gateway".into());
    expected.error = Some("HTTP 502: bad\u{FFFD}gateway".into());
    assert_attempt_eq(&stored[0], &expected);
    assert_eq!(get(&*store, &m).await.last_error, expected.error);
}

async fn a_record_with_a_stale_lease_token_is_dropped_whole(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let stale = claim_only(&*store, &m, now, Duration::from_secs(1)).await;
    // The lease expired and another claim took the message.
    let current = claim_only(&*store, &m, now + secs(2), LEASE).await;
    assert_ne!(stale.lease_token, current.lease_token);

    let late = recorded(
        &stale,
        attempts_after(
            &stale,
            &[
                AttemptOutcome::RetryableFailure,
                AttemptOutcome::RetryableFailure,
            ],
            now + secs(3),
        ),
        Next::Retry(now + secs(60)),
    );
    assert_eq!(store.record(&[late], now + secs(3)).await.unwrap(), 0);
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.attempt_count, 0);
    assert_eq!(read.last_error, None);
    assert_eq!(read.next_attempt_at, m.next_attempt_at);
    assert!(attempts_of(&*store, &m).await.is_empty(), "no attempt rows");
    assert!(
        store
            .claim_due(now + secs(10), 10, LEASE)
            .await
            .unwrap()
            .is_empty(),
        "the stale record did not release the current lease"
    );

    // A token nobody issued is stale too.
    let forged = Recorded {
        lease_token: Uuid::new_v4(),
        ..recorded(
            &current,
            attempts_after(&current, &[AttemptOutcome::Success], now + secs(4)),
            Next::Delivered,
        )
    };
    assert_eq!(store.record(&[forged], now + secs(4)).await.unwrap(), 0);
    assert_eq!(get(&*store, &m).await.state, State::Scheduled);

    // The current claim's result applies.
    let good = recorded(
        &current,
        attempts_after(&current, &[AttemptOutcome::Success], now + secs(5)),
        Next::Delivered,
    );
    assert_eq!(
        store
            .record(std::slice::from_ref(&good), now + secs(5))
            .await
            .unwrap(),
        1
    );
    assert_eq!(get(&*store, &m).await.state, State::Delivered);
    // Recording it again changes nothing: its lease is gone.
    assert_eq!(store.record(&[good], now + secs(6)).await.unwrap(), 0);
    assert_eq!(attempts_of(&*store, &m).await.len(), 1);
}

async fn a_record_batch_applies_each_result_under_its_own_lease(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m1 = schedule(&*store, &t, now - secs(2)).await;
    let m2 = schedule(&*store, &t, now - secs(1)).await;
    let old = store
        .claim_due(now, 10, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(set(claimed_ids(&old)), set([m1.id, m2.id]));
    let new = store.claim_due(now + secs(2), 10, LEASE).await.unwrap();
    assert_eq!(set(claimed_ids(&new)), set([m1.id, m2.id]));
    let pick = |v: &[Claimed], id: MessageId| v.iter().find(|c| c.id == id).unwrap().clone();

    // m1 under its current lease, m2 under its expired one.
    let c1 = pick(&new, m1.id);
    let c2 = pick(&old, m2.id);
    let batch = [
        recorded(
            &c1,
            attempts_after(
                &c1,
                &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
                now + secs(3),
            ),
            Next::Delivered,
        ),
        recorded(
            &c2,
            attempts_after(&c2, &[AttemptOutcome::Success], now + secs(3)),
            Next::Delivered,
        ),
    ];
    assert_eq!(store.record(&batch, now + secs(3)).await.unwrap(), 2);
    assert_eq!(get(&*store, &m1).await.state, State::Delivered);
    assert_eq!(attempts_of(&*store, &m1).await.len(), 2);
    assert_eq!(get(&*store, &m2).await.state, State::Scheduled);
    assert!(attempts_of(&*store, &m2).await.is_empty());
    assert_eq!(store.record(&[], now + secs(4)).await.unwrap(), 0);
}

async fn a_record_after_a_cancel_or_reschedule_is_dropped(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let lease = Duration::from_secs(1);

    let cancelled = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &cancelled, now, lease).await;
    done(
        store
            .cancel(ACME, &cancelled.id, now + secs(2))
            .await
            .unwrap(),
    );
    let late = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::Success], now + secs(3)),
        Next::Delivered,
    );
    assert_eq!(store.record(&[late], now + secs(3)).await.unwrap(), 0);
    let read = get(&*store, &cancelled).await;
    assert_eq!(
        read.state,
        State::Cancelled,
        "never both cancelled and delivered"
    );
    assert_eq!(read.delivered_at, None);
    assert!(attempts_of(&*store, &cancelled).await.is_empty());

    let moved = schedule(&*store, &t, now + secs(5)).await;
    let c = claim_only(&*store, &moved, now + secs(6), lease).await;
    let new_time = now + hours(1);
    done(
        store
            .reschedule(ACME, &moved.id, new_time, now + secs(8))
            .await
            .unwrap(),
    );
    let late = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::NonRetryableFailure], now + secs(9)),
        Next::DeadLetter,
    );
    assert_eq!(store.record(&[late], now + secs(9)).await.unwrap(), 0);
    let read = get(&*store, &moved).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.next_attempt_at, Some(new_time));
    assert_eq!(read.attempt_count, 0);
    assert!(attempts_of(&*store, &moved).await.is_empty());
}

async fn attempts_are_listed_oldest_first_and_paged_with_the_after_cursor(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let retry_at = now + secs(60);
    attempt_and_record(
        &*store,
        &m,
        now,
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
        ],
        Next::Retry(retry_at),
    )
    .await;
    let c = attempt_and_record(
        &*store,
        &m,
        retry_at + ms(1),
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::Success,
        ],
        Next::Delivered,
    )
    .await;
    assert_eq!(c.attempt_count, 2, "the second claim knows of two attempts");

    let all = attempts_of(&*store, &m).await;
    assert_eq!(attempt_numbers(&all), vec![1, 2, 3, 4, 5], "oldest first");
    assert_eq!(all[0].finished_at, now);
    assert_eq!(all[4].outcome, AttemptOutcome::Success);
    assert_eq!(get(&*store, &m).await.attempt_count, 5);

    let page = |after: Option<u32>| {
        let store = store.clone();
        let (account, id) = (m.account.clone(), m.id);
        async move {
            attempt_numbers(
                &store
                    .list_attempts(&account, &id, after, 2)
                    .await
                    .unwrap()
                    .unwrap(),
            )
        }
    };
    assert_eq!(page(None).await, vec![1, 2]);
    assert_eq!(page(Some(2)).await, vec![3, 4]);
    assert_eq!(page(Some(4)).await, vec![5]);
    assert_eq!(page(Some(5)).await, Vec::<u32>::new());
}

async fn attempts_of_an_unknown_or_foreign_message_answer_none(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    store.ensure_account(GLOBEX).await.unwrap();
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    assert_eq!(
        store
            .list_attempts(ACME, &m.id, None, 10)
            .await
            .unwrap()
            .map(|a| a.len()),
        Some(0),
        "a known message without attempts answers an empty list"
    );
    assert!(store
        .list_attempts(ACME, &MessageId::new(), None, 10)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .list_attempts(GLOBEX, &m.id, None, 10)
        .await
        .unwrap()
        .is_none());
}

// ---------------------------------------------------------------------------
// Cancel and reschedule
// ---------------------------------------------------------------------------

async fn cancelling_a_scheduled_message_makes_it_cancelled_and_unclaimable(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    let at = now + secs(1);
    let cancelled = done(store.cancel(ACME, &m.id, at).await.unwrap());
    assert_eq!(cancelled.id, m.id);
    assert_eq!(cancelled.state, State::Cancelled);
    assert_eq!(cancelled.cancelled_at, Some(at));
    assert_eq!(cancelled.next_attempt_at, None);
    assert_eq!(cancelled.updated_at, at);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Cancelled);
    assert_eq!(read.cancelled_at, Some(at));
    assert_eq!(read.next_attempt_at, None);
    assert_eq!(read.delivery_time, m.delivery_time);
    assert!(store
        .claim_due(now + hours(2), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_due().await.unwrap(), None);
}

async fn cancelling_a_dead_letter_makes_it_cancelled(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &m, now).await;
    let cancelled = done(store.cancel(ACME, &m.id, now + secs(1)).await.unwrap());
    assert_eq!(cancelled.state, State::Cancelled);
    assert_eq!(cancelled.cancelled_at, Some(now + secs(1)));
    assert_eq!(get(&*store, &m).await.state, State::Cancelled);
    assert_eq!(
        attempts_of(&*store, &m).await.len(),
        1,
        "its attempts are kept"
    );
}

async fn cancel_and_reschedule_of_a_delivered_message_answer_wrong_state(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &m, now).await;
    assert!(matches!(
        store.cancel(ACME, &m.id, now + secs(1)).await.unwrap(),
        Transition::WrongState(State::Delivered)
    ));
    assert!(matches!(
        store
            .reschedule(ACME, &m.id, now + hours(1), now + secs(1))
            .await
            .unwrap(),
        Transition::WrongState(State::Delivered)
    ));
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Delivered);
    assert_eq!(read.cancelled_at, None);
    assert_eq!(read.next_attempt_at, None);
    assert_eq!(read.delivery_time, m.delivery_time);
    assert!(store
        .claim_due(now + hours(2), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
}

async fn cancel_and_reschedule_of_a_cancelled_message_answer_wrong_state(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    done(store.cancel(ACME, &m.id, now).await.unwrap());
    assert!(matches!(
        store.cancel(ACME, &m.id, now + secs(1)).await.unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    assert!(matches!(
        store
            .reschedule(ACME, &m.id, now + hours(2), now + secs(1))
            .await
            .unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Cancelled);
    assert_eq!(
        read.cancelled_at,
        Some(now),
        "the first cancel's time stays"
    );
    assert!(store
        .claim_due(now + hours(3), 10, LEASE)
        .await
        .unwrap()
        .is_empty());
}

async fn cancel_and_reschedule_of_an_unknown_or_foreign_message_answer_not_found(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    store.ensure_account(GLOBEX).await.unwrap();
    let now = time::now();
    let m = schedule(&*store, &t, now + hours(1)).await;
    let unknown = MessageId::new();
    for (account, id) in [(ACME, unknown), (GLOBEX, m.id)] {
        assert!(
            matches!(
                store.cancel(account, &id, now).await.unwrap(),
                Transition::NotFound
            ),
            "cancel {account} {id}"
        );
        assert!(
            matches!(
                store
                    .reschedule(account, &id, now + hours(2), now)
                    .await
                    .unwrap(),
                Transition::NotFound
            ),
            "reschedule {account} {id}"
        );
    }
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.next_attempt_at, Some(now + hours(1)));
}

async fn cancel_and_reschedule_answer_in_flight_while_a_lease_holds_and_succeed_after_it_expired(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let c = claim_only(&*store, &m, now, LEASE).await;
    assert!(matches!(
        store.cancel(ACME, &m.id, now + secs(1)).await.unwrap(),
        Transition::InFlight
    ));
    assert!(matches!(
        store
            .reschedule(ACME, &m.id, now + hours(1), now + secs(1))
            .await
            .unwrap(),
        Transition::InFlight
    ));
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.cancelled_at, None);
    assert_eq!(read.delivery_time, m.delivery_time);

    // The attempt finishes within its lease: it is recorded.
    let result = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::RetryableFailure], now + secs(2)),
        Next::Retry(now + secs(3)),
    );
    assert_eq!(store.record(&[result], now + secs(2)).await.unwrap(), 1);
    // No lease now: cancel applies.
    let cancelled = done(store.cancel(ACME, &m.id, now + secs(2)).await.unwrap());
    assert_eq!(cancelled.state, State::Cancelled);

    // A claim whose lease expired without a record: both apply again.
    let m2 = schedule(&*store, &t, now - secs(1)).await;
    let c2 = claim_only(&*store, &m2, now + secs(3), LEASE).await;
    let after = now + secs(3) + secs(31);
    let moved = done(
        store
            .reschedule(ACME, &m2.id, now + hours(1), after)
            .await
            .unwrap(),
    );
    assert_eq!(moved.state, State::Scheduled);
    assert_eq!(moved.next_attempt_at, Some(now + hours(1)));
    let late = recorded(
        &c2,
        attempts_after(&c2, &[AttemptOutcome::Success], after),
        Next::Delivered,
    );
    assert_eq!(
        store.record(&[late], after).await.unwrap(),
        0,
        "the expired claim's result is stale"
    );
    let cancelled = done(store.cancel(ACME, &m2.id, after + secs(1)).await.unwrap());
    assert_eq!(cancelled.state, State::Cancelled);
}

async fn rescheduling_resets_the_ladder_and_sets_delivery_and_next_attempt_times(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    let first_retry = now + secs(60);
    attempt_and_record(
        &*store,
        &m,
        now,
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
        ],
        Next::Retry(first_retry),
    )
    .await;
    let c = attempt_and_record(
        &*store,
        &m,
        first_retry + ms(1),
        &[AttemptOutcome::RetryableFailure],
        Next::Retry(first_retry + secs(60)),
    )
    .await;
    assert_eq!(c.ladder_attempts, 2);

    let new_time = now + hours(1);
    let at = first_retry + secs(1);
    let moved = done(store.reschedule(ACME, &m.id, new_time, at).await.unwrap());
    assert_eq!(moved.state, State::Scheduled);
    assert_eq!(
        moved.delivery_time, new_time,
        "the requested time is the new delivery time"
    );
    assert_eq!(moved.next_attempt_at, Some(new_time));
    assert_eq!(moved.updated_at, at);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.delivery_time, new_time);
    assert_eq!(read.next_attempt_at, Some(new_time));
    assert_eq!(
        read.attempt_count, 3,
        "attempts made before the reschedule still count"
    );
    assert_eq!(store.next_due().await.unwrap(), Some(new_time));
    assert!(store
        .claim_due(first_retry + secs(60), 10, LEASE)
        .await
        .unwrap()
        .is_empty());

    let c = claim_only(&*store, &m, new_time + ms(1), LEASE).await;
    assert_eq!(c.ladder_attempts, 0, "the ladder starts over");
    assert_eq!(c.attempt_count, 3, "attempt numbers continue");
    assert_eq!(c.delivery_time, new_time);

    // A reschedule into the past makes it due at once.
    let r = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::RetryableFailure], new_time),
        Next::Retry(new_time + secs(60)),
    );
    assert_eq!(store.record(&[r], new_time).await.unwrap(), 1);
    done(
        store
            .reschedule(ACME, &m.id, now - hours(1), new_time + secs(1))
            .await
            .unwrap(),
    );
    let c = claim_only(&*store, &m, new_time + secs(1), LEASE).await;
    assert_eq!(c.ladder_attempts, 0);
    assert_eq!(c.attempt_count, 4);
    assert_eq!(c.delivery_time, now - hours(1));
}

async fn rescheduling_a_dead_letter_makes_it_scheduled_again(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &m, now).await;
    let new_time = now + secs(10);
    let moved = done(
        store
            .reschedule(ACME, &m.id, new_time, now + secs(1))
            .await
            .unwrap(),
    );
    assert_eq!(moved.state, State::Scheduled);
    assert_eq!(moved.dead_lettered_at, None);
    assert_eq!(moved.next_attempt_at, Some(new_time));
    assert_eq!(moved.delivery_time, new_time);

    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.dead_lettered_at, None);
    assert_eq!(read.next_attempt_at, Some(new_time));
    assert_eq!(store.next_due().await.unwrap(), Some(new_time));

    let c = claim_only(&*store, &m, new_time + ms(1), LEASE).await;
    assert_eq!(c.ladder_attempts, 0);
    assert_eq!(c.attempt_count, 1);
    let r = recorded(
        &c,
        attempts_after(&c, &[AttemptOutcome::Success], new_time + secs(1)),
        Next::Delivered,
    );
    assert_eq!(store.record(&[r], new_time + secs(1)).await.unwrap(), 1);
    let read = get(&*store, &m).await;
    assert_eq!(read.state, State::Delivered);
    assert_eq!(read.attempt_count, 2);
    let attempts = attempts_of(&*store, &m).await;
    assert_eq!(attempt_numbers(&attempts), vec![1, 2]);
    assert_eq!(attempts[0].outcome, AttemptOutcome::NonRetryableFailure);
    assert_eq!(attempts[1].outcome, AttemptOutcome::Success);
}

// ---------------------------------------------------------------------------
// Retention
// ---------------------------------------------------------------------------

async fn purging_deletes_expired_finished_messages_with_their_attempts_and_keeps_the_rest(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    // Each finished message is driven to its state while it is the only one due.
    let at = |ago: TimeDelta| now - ago;
    let old_delivered = schedule_at(&*store, &t, at(days(3)), at(days(3))).await;
    attempt_and_record(
        &*store,
        &old_delivered,
        at(days(2)),
        &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
        Next::Delivered,
    )
    .await;
    let new_delivered = schedule_at(&*store, &t, at(hours(2)), at(hours(2))).await;
    deliver(&*store, &new_delivered, at(hours(1))).await;
    let old_cancelled = schedule_at(&*store, &t, now + hours(1), at(days(3))).await;
    done(
        store
            .cancel(ACME, &old_cancelled.id, at(days(2)))
            .await
            .unwrap(),
    );
    let new_cancelled = schedule_at(&*store, &t, now + hours(1), at(hours(3))).await;
    done(
        store
            .cancel(ACME, &new_cancelled.id, at(hours(1)))
            .await
            .unwrap(),
    );
    let old_dead = schedule_at(&*store, &t, at(days(10)), at(days(10))).await;
    dead_letter(&*store, &old_dead, at(days(8))).await;
    // Dead for two days: past the delivered cutoff, not the dead-letter one.
    let new_dead = schedule_at(&*store, &t, at(days(3)), at(days(3))).await;
    dead_letter(&*store, &new_dead, at(days(2))).await;
    // Scheduled long ago and never attempted: Scheduled messages never expire.
    let old_scheduled = schedule_at(&*store, &t, at(days(30)), at(days(30))).await;

    let cutoffs = Cutoffs {
        delivered_before: at(hours(24)),
        cancelled_before: at(hours(24)),
        dead_letters_before: at(days(7)),
        failed_attempts_before: at(days(7)),
        idempotency_before: at(hours(24)),
    };
    let purged = store.purge_expired(&cutoffs, 100).await.unwrap();
    assert_eq!(purged.messages, 3, "{purged:?}");
    assert_eq!(purged.idempotency_keys, 0);

    for gone in [&old_delivered, &old_cancelled, &old_dead] {
        assert!(
            store.get_message(ACME, &gone.id).await.unwrap().is_none(),
            "{} is purged",
            gone.id
        );
        assert!(store
            .list_attempts(ACME, &gone.id, None, 10)
            .await
            .unwrap()
            .is_none());
    }
    assert_eq!(get(&*store, &new_delivered).await.state, State::Delivered);
    assert_eq!(attempts_of(&*store, &new_delivered).await.len(), 1);
    assert_eq!(get(&*store, &new_cancelled).await.state, State::Cancelled);
    assert_eq!(get(&*store, &new_dead).await.state, State::DeadLetter);
    assert_eq!(attempts_of(&*store, &new_dead).await.len(), 1);
    assert_eq!(get(&*store, &old_scheduled).await.state, State::Scheduled);

    // The purged message's attempts went with it: a message stored again
    // under the same id starts with none.
    let mut reborn = message_value(&t, now + hours(1), now);
    reborn.id = old_delivered.id;
    insert(&*store, &reborn).await;
    assert!(
        attempts_of(&*store, &reborn).await.is_empty(),
        "no attempt rows outlive their message"
    );

    // Nothing more is expired.
    let again = store.purge_expired(&cutoffs, 100).await.unwrap();
    assert_eq!(again, Purged::default());
}

async fn purging_deletes_old_failed_attempts_but_keeps_their_message_and_successes(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    // Still Scheduled: two failures nine days ago, one yesterday.
    let retrying = schedule_at(&*store, &t, now - days(10), now - days(10)).await;
    attempt_and_record(
        &*store,
        &retrying,
        now - days(9),
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
        ],
        Next::Retry(now - days(1)),
    )
    .await;
    attempt_and_record(
        &*store,
        &retrying,
        now - days(1) + ms(1),
        &[AttemptOutcome::RetryableFailure],
        Next::Retry(now + hours(1)),
    )
    .await;
    // Delivered nine days ago after a failure, kept by a long delivered retention.
    let delivered = schedule_at(&*store, &t, now - days(10), now - days(10)).await;
    attempt_and_record(
        &*store,
        &delivered,
        now - days(9),
        &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
        Next::Delivered,
    )
    .await;

    let cutoffs = Cutoffs {
        failed_attempts_before: now - days(7),
        ..cutoffs_keeping_everything(now)
    };
    let purged = store.purge_expired(&cutoffs, 100).await.unwrap();
    assert_eq!(
        purged,
        Purged {
            messages: 0,
            attempts: 3,
            idempotency_keys: 0
        }
    );

    let read = get(&*store, &retrying).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.attempt_count, 3, "the count is not the rows kept");
    assert_eq!(read.next_attempt_at, Some(now + hours(1)));
    assert_eq!(
        attempt_numbers(&attempts_of(&*store, &retrying).await),
        vec![3]
    );

    let read = get(&*store, &delivered).await;
    assert_eq!(read.state, State::Delivered);
    let kept = attempts_of(&*store, &delivered).await;
    assert_eq!(
        attempt_numbers(&kept),
        vec![2],
        "a success is not a failed attempt"
    );
    assert_eq!(kept[0].outcome, AttemptOutcome::Success);

    // The next attempt of the retrying message is numbered on.
    let c = claim_only(&*store, &retrying, now + hours(1) + ms(1), LEASE).await;
    assert_eq!(c.attempt_count, 3);
}

async fn purging_deletes_idempotency_keys_older_than_the_cutoff(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let old = message_value(&t, now + hours(1), now - days(2));
    created(
        store
            .insert_message(&old, Some(&idem("old-key", b"a", DAY, json!({"n": 1}))))
            .await
            .unwrap(),
    );
    let recent = message_value(&t, now + hours(1), now - hours(1));
    created(
        store
            .insert_message(&recent, Some(&idem("new-key", b"a", DAY, json!({"n": 2}))))
            .await
            .unwrap(),
    );

    let cutoffs = Cutoffs {
        idempotency_before: now - hours(24),
        ..cutoffs_keeping_everything(now)
    };
    let purged = store.purge_expired(&cutoffs, 100).await.unwrap();
    assert_eq!(
        purged,
        Purged {
            messages: 0,
            attempts: 0,
            idempotency_keys: 1
        }
    );
    // Both messages stay; only the key is forgotten.
    assert!(store.get_message(ACME, &old.id).await.unwrap().is_some());

    // Even with a year-long ttl, the purged key is unknown now…
    let year = Duration::from_secs(365 * 24 * 3600);
    let m = message_value(&t, now + hours(1), now);
    created(
        store
            .insert_message(&m, Some(&idem("old-key", b"b", year, json!({}))))
            .await
            .unwrap(),
    );
    // …while the recent one is still remembered.
    let m = message_value(&t, now + hours(1), now);
    assert!(matches!(
        store
            .insert_message(&m, Some(&idem("new-key", b"b", year, json!({}))))
            .await
            .unwrap(),
        InsertOutcome::KeyConflict
    ));
}

async fn purging_honours_the_batch_size_and_repeated_calls_delete_everything_expired(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    // Five delivered two days ago, each sent with an idempotency key three days ago.
    let mut expired = Vec::new();
    for i in 0..5 {
        let m = message_value(&t, now - days(3), now - days(3));
        let key = idem(&format!("key-{i}"), b"h", DAY, json!({"i": i}));
        created(store.insert_message(&m, Some(&key)).await.unwrap());
        deliver(&*store, &m, now - days(2)).await;
        expired.push(m);
    }
    // And one Scheduled message with five failed attempts eight days ago.
    let retrying = schedule_at(&*store, &t, now - days(9), now - days(9)).await;
    attempt_and_record(
        &*store,
        &retrying,
        now - days(8),
        &[AttemptOutcome::RetryableFailure; 5],
        Next::Retry(now + hours(1)),
    )
    .await;

    let cutoffs = Cutoffs {
        delivered_before: now - hours(24),
        cancelled_before: now - hours(24),
        dead_letters_before: now - days(7),
        failed_attempts_before: now - days(7),
        idempotency_before: now - hours(24),
    };
    let mut total = Purged::default();
    let mut calls = 0;
    loop {
        let p = store.purge_expired(&cutoffs, 2).await.unwrap();
        if p == Purged::default() {
            break;
        }
        calls += 1;
        assert!(
            p.messages <= 2 && p.attempts <= 2 && p.idempotency_keys <= 2,
            "one call deletes at most a batch of each: {p:?}"
        );
        total.messages += p.messages;
        total.attempts += p.attempts;
        total.idempotency_keys += p.idempotency_keys;
        assert!(calls <= 20, "purging terminates");
    }
    assert!(
        calls >= 3,
        "five rows in batches of two take three calls, took {calls}"
    );
    assert_eq!(
        total,
        Purged {
            messages: 5,
            attempts: 5,
            idempotency_keys: 5
        }
    );
    for m in &expired {
        assert!(store.get_message(ACME, &m.id).await.unwrap().is_none());
    }
    assert!(attempts_of(&*store, &retrying).await.is_empty());
    assert_eq!(get(&*store, &retrying).await.attempt_count, 5);
}

// ---------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------

async fn two_concurrent_claimers_hand_out_all_200_messages_exactly_once(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let messages: Vec<Message> = (0..200)
        .map(|i| message_value(&t, now - ms(1_000 - i), now))
        .collect();
    let inserted = store.insert_messages(ACME, &messages).await.unwrap();
    assert_eq!(inserted.len(), 200);

    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let claimer = |store: Arc<dyn Store>, barrier: Arc<tokio::sync::Barrier>| async move {
        barrier.wait().await;
        let mut got = Vec::new();
        loop {
            let claimed = store.claim_due(now, 7, LEASE).await.unwrap();
            if claimed.is_empty() {
                return got;
            }
            got.extend(claimed_ids(&claimed));
            tokio::task::yield_now().await;
        }
    };
    let a = tokio::spawn(claimer(store.clone(), barrier.clone()));
    let b = tokio::spawn(claimer(store.clone(), barrier));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());

    let mut seen = HashSet::new();
    for id in a.iter().chain(&b) {
        assert!(seen.insert(*id), "message {id} was handed out twice");
    }
    assert_eq!(
        seen,
        set(messages.iter().map(|m| m.id)),
        "every due message was handed out (a: {}, b: {})",
        a.len(),
        b.len()
    );
    assert!(store.claim_due(now, 1000, LEASE).await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------
// The portal: users and sessions
// ---------------------------------------------------------------------------

fn minutes(n: i64) -> TimeDelta {
    TimeDelta::minutes(n)
}

/// A portal user as `dispatch users create` builds it (not yet stored).
fn user_value(account: &str, email: &str, created_at: DateTime<Utc>) -> UserRecord {
    UserRecord {
        id: Uuid::now_v7().to_string(),
        account: account.into(),
        email: email.into(),
        password_hash: format!(
            "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA${}",
            Uuid::new_v4().simple()
        ),
        created_at,
    }
}

async fn add_user(
    store: &dyn Store,
    account: &str,
    email: &str,
    created_at: DateTime<Utc>,
) -> UserRecord {
    let u = user_value(account, email, created_at);
    assert!(
        store.create_user(&u).await.unwrap(),
        "a user with a new email is created"
    );
    u
}

fn assert_user_eq(actual: &UserRecord, expected: &UserRecord) {
    assert_eq!(actual.id, expected.id, "id");
    assert_eq!(actual.account, expected.account, "account");
    assert_eq!(actual.email, expected.email, "email");
    assert_eq!(
        actual.password_hash, expected.password_hash,
        "password_hash"
    );
    assert_eq!(actual.created_at, expected.created_at, "created_at");
}

/// A session of `user` (not yet stored). The token hash is 32 bytes, with a
/// NUL and a 0xFF among them.
fn session_value(
    user: &UserRecord,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> SessionRecord {
    let mut token_hash = vec![0x00, 0xff];
    token_hash.extend_from_slice(Uuid::new_v4().as_bytes());
    token_hash.extend_from_slice(&Uuid::new_v4().as_bytes()[..14]);
    SessionRecord {
        token_hash,
        user_id: user.id.clone(),
        account: user.account.clone(),
        email: user.email.clone(),
        csrf: Uuid::new_v4().simple().to_string(),
        created_at,
        expires_at,
    }
}

fn assert_session_eq(actual: &SessionRecord, expected: &SessionRecord) {
    assert_eq!(actual.token_hash, expected.token_hash, "token_hash");
    assert_eq!(actual.user_id, expected.user_id, "user_id");
    assert_eq!(actual.account, expected.account, "account");
    assert_eq!(actual.email, expected.email, "email");
    assert_eq!(actual.csrf, expected.csrf, "csrf");
    assert_eq!(actual.created_at, expected.created_at, "created_at");
    assert_eq!(actual.expires_at, expected.expires_at, "expires_at");
}

async fn find_session(
    store: &dyn Store,
    s: &SessionRecord,
    now: DateTime<Utc>,
) -> Option<SessionRecord> {
    store.find_session(&s.token_hash, now).await.unwrap()
}

async fn a_created_user_is_found_by_email_and_a_duplicate_email_is_refused(store: Arc<dyn Store>) {
    let now = time::now();
    // The CLI creates users for accounts that do not exist yet.
    let ops = add_user(
        &*store,
        "brand-new-account",
        "ops@example.com",
        now - secs(5),
    )
    .await;
    let found = store
        .find_user("ops@example.com")
        .await
        .unwrap()
        .expect("the user is found by email");
    assert_user_eq(&found, &ops);

    // The same email again, from the same or another account: refused, and
    // the first user is kept as it was.
    for account in ["brand-new-account", GLOBEX] {
        let dup = UserRecord {
            password_hash: "another-hash".into(),
            ..user_value(account, "ops@example.com", now)
        };
        assert!(
            !store.create_user(&dup).await.unwrap(),
            "the email is taken (creating in {account})"
        );
    }
    assert_user_eq(
        &store.find_user("ops@example.com").await.unwrap().unwrap(),
        &ops,
    );

    // Another email in the same account is another user; a user can join an
    // account that has targets already.
    let dev = add_user(&*store, "brand-new-account", "dev@example.com", now).await;
    let t = add_target(&*store, ACME).await;
    let admin = add_user(&*store, ACME, "admin@acme.test", now).await;
    assert_user_eq(
        &store.find_user("dev@example.com").await.unwrap().unwrap(),
        &dev,
    );
    assert_user_eq(
        &store.find_user("admin@acme.test").await.unwrap().unwrap(),
        &admin,
    );
    assert_user_eq(
        &store.find_user("ops@example.com").await.unwrap().unwrap(),
        &ops,
    );
    assert_target_eq(&store.get_target(ACME, &t.id).await.unwrap().unwrap(), &t);

    assert!(store
        .find_user("nobody@example.com")
        .await
        .unwrap()
        .is_none());
    assert!(store.find_user("").await.unwrap().is_none());
    assert!(store.find_user("ops@example").await.unwrap().is_none());

    // The store keeps and matches emails exactly as given: lower-casing is
    // the caller's (`portal::new_user`, the sign-in form), the same on every
    // backend.
    let mixed = add_user(&*store, ACME, "Mixed.Case@Example.COM", now).await;
    assert_user_eq(
        &store
            .find_user("Mixed.Case@Example.COM")
            .await
            .unwrap()
            .expect("found by the email as stored"),
        &mixed,
    );
    assert!(
        store
            .find_user("mixed.case@example.com")
            .await
            .unwrap()
            .is_none(),
        "lookups are exact"
    );
    assert!(store.find_user("OPS@EXAMPLE.COM").await.unwrap().is_none());
}

async fn a_session_is_found_until_it_expires_and_not_after_it_is_deleted(store: Arc<dyn Store>) {
    let now = time::now();
    let user = add_user(&*store, ACME, "ops@example.com", now - days(1)).await;
    let expires = now + hours(12);
    let s = session_value(&user, now, expires);
    store.create_session(&s).await.unwrap();
    let other = session_value(&user, now, expires);
    store.create_session(&other).await.unwrap();

    for at in [now, now + hours(6), expires - ms(1)] {
        let found = find_session(&*store, &s, at)
            .await
            .unwrap_or_else(|| panic!("the session is live at {at}"));
        assert_session_eq(&found, &s);
    }
    for at in [expires, expires + ms(1), expires + days(1)] {
        assert!(
            find_session(&*store, &s, at).await.is_none(),
            "the session has expired at {at}"
        );
    }
    assert!(store.find_session(&[0u8; 32], now).await.unwrap().is_none());
    assert!(
        store
            .find_session(&s.token_hash[..31], now)
            .await
            .unwrap()
            .is_none(),
        "a token hash matches whole"
    );

    store.delete_session(&s.token_hash).await.unwrap();
    assert!(
        find_session(&*store, &s, now).await.is_none(),
        "a deleted session is gone"
    );
    assert_session_eq(
        &find_session(&*store, &other, now)
            .await
            .expect("deleting one session leaves the others"),
        &other,
    );
    // Deleting again, or an unknown token, is harmless.
    store.delete_session(&s.token_hash).await.unwrap();
    store.delete_session(&[7u8; 32]).await.unwrap();
    assert!(find_session(&*store, &other, now).await.is_some());
}

async fn creating_a_session_forgets_the_sessions_that_have_expired(store: Arc<dyn Store>) {
    let now = time::now();
    let user = add_user(&*store, ACME, "ops@example.com", now - days(1)).await;
    let expired = session_value(&user, now - hours(3), now - hours(1));
    let live = session_value(&user, now - hours(3), now + hours(1));
    store.create_session(&expired).await.unwrap();
    store.create_session(&live).await.unwrap();
    // Both are stored: asked about a time before either expired, both answer.
    let before = now - hours(2);
    assert!(find_session(&*store, &expired, before).await.is_some());
    assert!(find_session(&*store, &live, before).await.is_some());

    let fresh = session_value(&user, now, now + hours(12));
    store.create_session(&fresh).await.unwrap();
    assert!(
        find_session(&*store, &expired, before).await.is_none(),
        "the session that had expired when another was created is forgotten"
    );
    assert_session_eq(
        &find_session(&*store, &live, before)
            .await
            .expect("a live session is kept"),
        &live,
    );
    assert_session_eq(&find_session(&*store, &fresh, now).await.unwrap(), &fresh);
}

// ---------------------------------------------------------------------------
// The portal: overview, counts and listing by delivery time
// ---------------------------------------------------------------------------

/// The overview's counts by (target, state); each pair appears once.
fn counts_of(o: &Overview) -> HashMap<(TargetId, State), u64> {
    let map: HashMap<_, _> = o
        .counts
        .iter()
        .map(|c| ((c.target_id.clone(), c.state), c.count))
        .collect();
    assert_eq!(
        map.len(),
        o.counts.len(),
        "one count per target and state: {:?}",
        o.counts
    );
    map
}

async fn the_overview_counts_by_target_and_state_and_what_happened_since_the_cutoff(
    store: Arc<dyn Store>,
) {
    let t1 = add_target(&*store, ACME).await;
    let t2 = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let now = time::now();
    let since = now - hours(1);

    // Finished ones first, each driven to its state while it is the only one due.
    let old_delivered = schedule(&*store, &t1, now - hours(3)).await;
    deliver(&*store, &old_delivered, now - hours(2)).await;
    let delivered = schedule(&*store, &t1, now - minutes(40)).await;
    attempt_and_record(
        &*store,
        &delivered,
        now - minutes(30),
        &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
        Next::Delivered,
    )
    .await;
    let delivered2 = schedule(&*store, &t2, now - minutes(20)).await;
    deliver(&*store, &delivered2, now - minutes(10)).await;
    let old_dead = schedule(&*store, &t1, now - hours(3)).await;
    dead_letter(&*store, &old_dead, now - hours(2)).await;
    // Two failures before the cutoff, a third after it and dead since.
    let dead = schedule(&*store, &t2, now - hours(3)).await;
    attempt_and_record(
        &*store,
        &dead,
        now - hours(2),
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::RetryableFailure,
        ],
        Next::Retry(now - minutes(30)),
    )
    .await;
    attempt_and_record(
        &*store,
        &dead,
        now - minutes(20),
        &[AttemptOutcome::NonRetryableFailure],
        Next::DeadLetter,
    )
    .await;
    let cancelled = schedule(&*store, &t1, now + hours(1)).await;
    done(
        store
            .cancel(ACME, &cancelled.id, now - minutes(5))
            .await
            .unwrap(),
    );
    // Another account's, in the window.
    let their_delivered = schedule(&*store, &theirs, now - minutes(20)).await;
    attempt_and_record(
        &*store,
        &their_delivered,
        now - minutes(10),
        &[AttemptOutcome::RetryableFailure, AttemptOutcome::Success],
        Next::Delivered,
    )
    .await;
    let their_dead = schedule(&*store, &theirs, now - minutes(20)).await;
    dead_letter(&*store, &their_dead, now - minutes(10)).await;

    // Scheduled ones last, some due. The oldest due is another account's or
    // paused; of the rest the later-created is the older due.
    let their_due = schedule(&*store, &theirs, now - hours(2)).await;
    schedule(&*store, &t1, now + hours(1)).await;
    schedule(&*store, &t2, now - minutes(1)).await;
    let due_old = schedule(&*store, &t1, now - minutes(5)).await;
    let mut off = target_value(ACME, "off", now);
    off.enabled = false;
    insert_target(&*store, &off).await;
    schedule(&*store, &off, now - minutes(30)).await;

    let o = store.overview(ACME, since, now).await.unwrap();
    let expected_counts = HashMap::from([
        ((t1.id.clone(), State::Delivered), 2),
        ((t1.id.clone(), State::DeadLetter), 1),
        ((t1.id.clone(), State::Cancelled), 1),
        ((t1.id.clone(), State::Scheduled), 2),
        ((t2.id.clone(), State::Delivered), 1),
        ((t2.id.clone(), State::DeadLetter), 1),
        ((t2.id.clone(), State::Scheduled), 1),
        ((off.id.clone(), State::Scheduled), 1),
    ]);
    assert_eq!(counts_of(&o), expected_counts);
    assert_eq!(o.total(State::Scheduled), 4);
    assert_eq!(o.total(State::Delivered), 3);
    assert_eq!(o.count(&t1.id, State::Cancelled), 1);
    assert_eq!(o.count(&theirs.id, State::Scheduled), 0);
    assert_eq!(
        o.delivered, 2,
        "delivered since the cutoff (not two hours ago, not another account's)"
    );
    assert_eq!(o.dead_lettered, 1, "dead-lettered since the cutoff");
    assert_eq!(
        o.failed_attempts, 2,
        "failed attempts since the cutoff (a success is not one)"
    );
    assert_eq!(
        o.oldest_due,
        Some((due_old.id, now - minutes(5))),
        "the oldest due, unpaused Scheduled message of the account"
    );

    // A window from before everything counts everything the account did.
    let wide = store.overview(ACME, now - hours(3), now).await.unwrap();
    assert_eq!(counts_of(&wide), expected_counts);
    assert_eq!(wide.delivered, 3);
    assert_eq!(wide.dead_lettered, 2);
    assert_eq!(wide.failed_attempts, 5);
    // A window starting now: nothing happened in it yet.
    let empty = store.overview(ACME, now, now).await.unwrap();
    assert_eq!(counts_of(&empty), expected_counts);
    assert_eq!(
        (empty.delivered, empty.dead_lettered, empty.failed_attempts),
        (0, 0, 0)
    );

    // Whether a message is due is a question of `now`.
    let earlier = store
        .overview(ACME, since, now - minutes(10))
        .await
        .unwrap();
    assert_eq!(
        earlier.oldest_due, None,
        "nothing unpaused of the account is due ten minutes ago"
    );
    let later = store.overview(ACME, since, now + hours(2)).await.unwrap();
    assert_eq!(later.oldest_due, Some((due_old.id, now - minutes(5))));

    // The other account sees its own only.
    let g = store.overview(GLOBEX, since, now).await.unwrap();
    assert_eq!(
        counts_of(&g),
        HashMap::from([
            ((theirs.id.clone(), State::Delivered), 1),
            ((theirs.id.clone(), State::DeadLetter), 1),
            ((theirs.id.clone(), State::Scheduled), 1),
        ])
    );
    assert_eq!(g.delivered, 1);
    assert_eq!(g.dead_lettered, 1);
    assert_eq!(g.failed_attempts, 2);
    assert_eq!(g.oldest_due, Some((their_due.id, now - hours(2))));

    // An account with nothing.
    store.ensure_account("initech").await.unwrap();
    let none = store.overview("initech", since, now).await.unwrap();
    assert!(none.counts.is_empty());
    assert_eq!(
        (
            none.delivered,
            none.dead_lettered,
            none.failed_attempts,
            none.oldest_due
        ),
        (0, 0, 0, None)
    );
}

/// Messages spread over targets, states and delivery times, around `base`:
/// `a` t1 base-2h Delivered, `b` t1 base-1h DeadLetter, `c` t2 base
/// Scheduled, `d` t2 base+1h Scheduled, `e` t1 base+1h Cancelled, `f` t1
/// base+2h Scheduled; and `g`, another account's, at base.
struct Spread {
    t1: Target,
    t2: Target,
    theirs: Target,
    base: DateTime<Utc>,
    a: Message,
    b: Message,
    c: Message,
    d: Message,
    e: Message,
    f: Message,
    g: Message,
}

async fn spread(store: &dyn Store) -> Spread {
    let t1 = add_target(store, ACME).await;
    let t2 = add_target(store, ACME).await;
    let theirs = add_target(store, GLOBEX).await;
    let base = time::now();
    let a = schedule(store, &t1, base - hours(2)).await;
    deliver(store, &a, base - hours(2) + secs(1)).await;
    let b = schedule(store, &t1, base - hours(1)).await;
    dead_letter(store, &b, base - hours(1) + secs(1)).await;
    let c = schedule(store, &t2, base).await;
    let d = schedule(store, &t2, base + hours(1)).await;
    let e = schedule(store, &t1, base + hours(1)).await;
    done(store.cancel(ACME, &e.id, base).await.unwrap());
    let f = schedule(store, &t1, base + hours(2)).await;
    let g = schedule(store, &theirs, base).await;
    Spread {
        t1,
        t2,
        theirs,
        base,
        a,
        b,
        c,
        d,
        e,
        f,
        g,
    }
}

fn filter(
    target: Option<&Target>,
    state: Option<State>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> MessageFilter {
    MessageFilter {
        target_id: target.map(|t| t.id.clone()),
        state,
        delivery_from: from,
        delivery_to: to,
    }
}

async fn count_messages_counts_what_each_filter_field_selects(store: Arc<dyn Store>) {
    let s = spread(&*store).await;
    let (t1, t2, base) = (&s.t1, &s.t2, s.base);
    let cases: Vec<(&str, MessageFilter, Vec<&Message>)> = vec![
        (
            "no filter",
            MessageFilter::default(),
            vec![&s.a, &s.b, &s.c, &s.d, &s.e, &s.f],
        ),
        (
            "target t1",
            filter(Some(t1), None, None, None),
            vec![&s.a, &s.b, &s.e, &s.f],
        ),
        (
            "target t2",
            filter(Some(t2), None, None, None),
            vec![&s.c, &s.d],
        ),
        (
            "another account's target",
            filter(Some(&s.theirs), None, None, None),
            vec![],
        ),
        (
            "Scheduled",
            filter(None, Some(State::Scheduled), None, None),
            vec![&s.c, &s.d, &s.f],
        ),
        (
            "Delivered",
            filter(None, Some(State::Delivered), None, None),
            vec![&s.a],
        ),
        (
            "DeadLetter",
            filter(None, Some(State::DeadLetter), None, None),
            vec![&s.b],
        ),
        (
            "Cancelled",
            filter(None, Some(State::Cancelled), None, None),
            vec![&s.e],
        ),
        (
            "from base (inclusive)",
            filter(None, None, Some(base), None),
            vec![&s.c, &s.d, &s.e, &s.f],
        ),
        (
            "from base + 1ms",
            filter(None, None, Some(base + ms(1)), None),
            vec![&s.d, &s.e, &s.f],
        ),
        (
            "to base (exclusive)",
            filter(None, None, None, Some(base)),
            vec![&s.a, &s.b],
        ),
        (
            "to base + 1ms",
            filter(None, None, None, Some(base + ms(1))),
            vec![&s.a, &s.b, &s.c],
        ),
        (
            "to the earliest delivery time",
            filter(None, None, None, Some(base - hours(2))),
            vec![],
        ),
        (
            "from after the latest delivery time",
            filter(None, None, Some(base + hours(2) + ms(1)), None),
            vec![],
        ),
        (
            "[base-1h, base+1h)",
            filter(None, None, Some(base - hours(1)), Some(base + hours(1))),
            vec![&s.b, &s.c],
        ),
        (
            "an empty range",
            filter(None, None, Some(base + hours(1)), Some(base + hours(1))),
            vec![],
        ),
        (
            "t1, Scheduled, from base",
            filter(Some(t1), Some(State::Scheduled), Some(base), None),
            vec![&s.f],
        ),
        (
            "t2 from base+1h",
            filter(Some(t2), None, Some(base + hours(1)), None),
            vec![&s.d],
        ),
        (
            "t1 in [base-1h, base+2h)",
            filter(Some(t1), None, Some(base - hours(1)), Some(base + hours(2))),
            vec![&s.b, &s.e],
        ),
        (
            "Cancelled to base+1h",
            filter(None, Some(State::Cancelled), None, Some(base + hours(1))),
            vec![],
        ),
        (
            "Cancelled to base+1h+1ms",
            filter(
                None,
                Some(State::Cancelled),
                None,
                Some(base + hours(1) + ms(1)),
            ),
            vec![&s.e],
        ),
    ];
    for (name, f, expected) in &cases {
        let n = store.count_messages(ACME, f).await.unwrap();
        assert_eq!(n, expected.len() as u64, "count with {name}");
        // The count is what listing with the same filter gives.
        let listed = store.list_messages(ACME, f, None, 100).await.unwrap();
        assert_eq!(
            set(message_ids(&listed)),
            set(expected.iter().map(|m| m.id)),
            "list with {name}"
        );
    }

    // The other account counts its own only.
    let theirs = |f: MessageFilter| {
        let store = store.clone();
        async move { store.count_messages(GLOBEX, &f).await.unwrap() }
    };
    assert_eq!(theirs(MessageFilter::default()).await, 1);
    assert_eq!(theirs(filter(Some(t1), None, None, None)).await, 0);
    assert_eq!(
        theirs(filter(None, None, Some(base), Some(base + ms(1)))).await,
        1
    );
    assert_eq!(
        theirs(filter(None, Some(State::Scheduled), None, Some(base))).await,
        0
    );
    store.ensure_account("initech").await.unwrap();
    assert_eq!(
        store
            .count_messages("initech", &MessageFilter::default())
            .await
            .unwrap(),
        0
    );
}

async fn listing_messages_by_delivery_time_gives_the_range_newest_first_and_pages_within_it(
    store: Arc<dyn Store>,
) {
    let s = spread(&*store).await;
    let base = s.base;
    let (from, to) = (base - hours(1), base + hours(2));
    let range = filter(None, None, Some(from), Some(to));
    let expected = newest_first(vec![s.b.id, s.c.id, s.d.id, s.e.id]);
    let all = store.list_messages(ACME, &range, None, 100).await.unwrap();
    assert_eq!(message_ids(&all), expected);
    for m in &all {
        assert!(
            from <= m.delivery_time && m.delivery_time < to,
            "{} is due {}, outside [{from}, {to})",
            m.id,
            m.delivery_time
        );
    }

    for page_size in [1u32, 3] {
        let mut paged = Vec::new();
        let mut before: Option<MessageId> = None;
        loop {
            let page = store
                .list_messages(ACME, &range, before.as_ref(), page_size)
                .await
                .unwrap();
            assert!(page.len() <= page_size as usize, "the limit is honoured");
            if page.is_empty() {
                break;
            }
            before = Some(page.last().unwrap().id);
            paged.extend(message_ids(&page));
            assert!(paged.len() <= expected.len(), "paging terminates");
        }
        assert_eq!(paged, expected, "paging by {page_size} within the range");
    }

    let list = |f: MessageFilter| {
        let store = store.clone();
        async move { message_ids(&store.list_messages(ACME, &f, None, 100).await.unwrap()) }
    };
    assert_eq!(
        list(filter(None, Some(State::Scheduled), Some(from), Some(to))).await,
        newest_first(vec![s.c.id, s.d.id])
    );
    assert_eq!(
        list(filter(Some(&s.t1), None, Some(from), Some(to))).await,
        newest_first(vec![s.b.id, s.e.id])
    );
    assert_eq!(
        list(filter(None, None, Some(base), None)).await,
        newest_first(vec![s.c.id, s.d.id, s.e.id, s.f.id])
    );
    assert_eq!(
        list(filter(None, None, None, Some(base))).await,
        newest_first(vec![s.a.id, s.b.id])
    );
    assert_eq!(
        list(filter(None, None, Some(base + hours(3)), None)).await,
        vec![]
    );
    let theirs = store
        .list_messages(GLOBEX, &filter(None, None, Some(from), Some(to)), None, 100)
        .await
        .unwrap();
    assert_eq!(message_ids(&theirs), vec![s.g.id]);
}

// ---------------------------------------------------------------------------
// The portal: each message's history of manual actions
// ---------------------------------------------------------------------------

async fn events_of(store: &dyn Store, m: &Message) -> Vec<MessageEvent> {
    store.list_events(&m.account, &m.id).await.unwrap()
}

fn event(
    at: DateTime<Utc>,
    kind: EventKind,
    from: State,
    delivery_time: Option<DateTime<Utc>>,
) -> MessageEvent {
    MessageEvent {
        at,
        kind,
        from,
        delivery_time,
    }
}

async fn cancel_and_reschedule_are_recorded_in_the_messages_history(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    store.ensure_account(GLOBEX).await.unwrap();
    let now = time::now();

    let m = schedule(&*store, &t, now + hours(1)).await;
    assert!(
        events_of(&*store, &m).await.is_empty(),
        "a new message has no history"
    );
    let new_time = now + hours(3);
    done(
        store
            .reschedule(ACME, &m.id, new_time, now + secs(1))
            .await
            .unwrap(),
    );
    done(store.cancel(ACME, &m.id, now + secs(2)).await.unwrap());
    let history = vec![
        event(
            now + secs(1),
            EventKind::Rescheduled,
            State::Scheduled,
            Some(new_time),
        ),
        event(now + secs(2), EventKind::Cancelled, State::Scheduled, None),
    ];
    assert_eq!(events_of(&*store, &m).await, history, "oldest first");

    // Refused actions leave no trace.
    assert!(matches!(
        store.cancel(ACME, &m.id, now + secs(3)).await.unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    assert!(matches!(
        store
            .reschedule(ACME, &m.id, now + hours(4), now + secs(3))
            .await
            .unwrap(),
        Transition::WrongState(State::Cancelled)
    ));
    assert!(matches!(
        store.cancel(GLOBEX, &m.id, now + secs(3)).await.unwrap(),
        Transition::NotFound
    ));
    assert_eq!(events_of(&*store, &m).await, history);

    // From DeadLetter.
    let dead_cancelled = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &dead_cancelled, now).await;
    done(
        store
            .cancel(ACME, &dead_cancelled.id, now + secs(4))
            .await
            .unwrap(),
    );
    assert_eq!(
        events_of(&*store, &dead_cancelled).await,
        vec![event(
            now + secs(4),
            EventKind::Cancelled,
            State::DeadLetter,
            None
        )]
    );
    let dead_moved = schedule(&*store, &t, now - secs(1)).await;
    dead_letter(&*store, &dead_moved, now + secs(5)).await;
    done(
        store
            .reschedule(ACME, &dead_moved.id, now + hours(1), now + secs(6))
            .await
            .unwrap(),
    );
    assert_eq!(
        events_of(&*store, &dead_moved).await,
        vec![event(
            now + secs(6),
            EventKind::Rescheduled,
            State::DeadLetter,
            Some(now + hours(1))
        )]
    );

    // Attempts are not manual actions; nor is a refused one in flight.
    let delivered = schedule(&*store, &t, now - secs(1)).await;
    deliver(&*store, &delivered, now + secs(7)).await;
    assert!(events_of(&*store, &delivered).await.is_empty());
    let in_flight = schedule(&*store, &t, now - secs(1)).await;
    claim_only(&*store, &in_flight, now + secs(8), LEASE).await;
    assert!(matches!(
        store
            .reschedule(ACME, &in_flight.id, now + hours(1), now + secs(9))
            .await
            .unwrap(),
        Transition::InFlight
    ));
    assert!(matches!(
        store
            .cancel(ACME, &in_flight.id, now + secs(9))
            .await
            .unwrap(),
        Transition::InFlight
    ));
    assert!(events_of(&*store, &in_flight).await.is_empty());

    // Another account gets an empty list, as for an unknown message.
    for id in [m.id, dead_cancelled.id, dead_moved.id] {
        assert!(
            store.list_events(GLOBEX, &id).await.unwrap().is_empty(),
            "{id} has no history in another account"
        );
    }
    assert!(store
        .list_events(ACME, &MessageId::new())
        .await
        .unwrap()
        .is_empty());
}

// ---------------------------------------------------------------------------
// The portal: redrive
// ---------------------------------------------------------------------------

async fn dead_letter_ids(store: &dyn Store, account: &str) -> HashSet<MessageId> {
    let dead = filter(None, Some(State::DeadLetter), None, None);
    set(message_ids(
        &store
            .list_messages(account, &dead, None, 1000)
            .await
            .unwrap(),
    ))
}

/// `m` was redriven by a call at `now` to deliver at `at`.
async fn assert_redriven(store: &dyn Store, m: &Message, at: DateTime<Utc>, now: DateTime<Utc>) {
    let read = get(store, m).await;
    assert_eq!(read.state, State::Scheduled, "{} is Scheduled", m.id);
    assert_eq!(read.delivery_time, at, "{}: the new delivery time", m.id);
    assert_eq!(read.next_attempt_at, Some(at), "{}: next attempt", m.id);
    assert_eq!(read.dead_lettered_at, None, "{}: dead_lettered_at", m.id);
    assert_eq!(read.updated_at, now, "{}: updated_at", m.id);
    assert_eq!(
        events_of(store, m).await,
        vec![event(
            now,
            EventKind::Rescheduled,
            State::DeadLetter,
            Some(at)
        )],
        "{}: the redrive is in its history",
        m.id
    );
}

async fn redrive_moves_the_accounts_dead_letters_to_scheduled_with_a_fresh_ladder(
    store: Arc<dyn Store>,
) {
    let t1 = add_target(&*store, ACME).await;
    let t2 = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let now = time::now();
    // A dead letter after three attempts on the ladder…
    let dead1 = schedule(&*store, &t1, now - hours(3)).await;
    attempt_and_record(
        &*store,
        &dead1,
        now - hours(3) + secs(1),
        &[AttemptOutcome::RetryableFailure],
        Next::Retry(now - hours(2)),
    )
    .await;
    let c = attempt_and_record(
        &*store,
        &dead1,
        now - hours(2) + secs(1),
        &[
            AttemptOutcome::RetryableFailure,
            AttemptOutcome::NonRetryableFailure,
        ],
        Next::DeadLetter,
    )
    .await;
    assert_eq!(c.ladder_attempts, 1, "the ladder had moved on");
    // …and one after one.
    let dead2 = schedule(&*store, &t2, now - hours(2)).await;
    dead_letter(&*store, &dead2, now - minutes(90)).await;
    let delivered = schedule(&*store, &t1, now - hours(1)).await;
    deliver(&*store, &delivered, now - minutes(50)).await;
    let cancelled = schedule(&*store, &t1, now + hours(1)).await;
    done(
        store
            .cancel(ACME, &cancelled.id, now - minutes(40))
            .await
            .unwrap(),
    );
    let their_dead = schedule(&*store, &theirs, now - hours(1)).await;
    dead_letter(&*store, &their_dead, now - minutes(30)).await;
    let scheduled = schedule(&*store, &t2, now + hours(2)).await;

    let at = now + minutes(10);
    let redriven_at = now + secs(1);
    let moved = store
        .redrive(ACME, &MessageFilter::default(), None, at, redriven_at)
        .await
        .unwrap();
    assert_eq!(moved, 2, "the account's two dead letters");
    assert_redriven(&*store, &dead1, at, redriven_at).await;
    assert_redriven(&*store, &dead2, at, redriven_at).await;

    // Nothing else moved.
    assert_eq!(get(&*store, &delivered).await.state, State::Delivered);
    assert_eq!(get(&*store, &cancelled).await.state, State::Cancelled);
    let read = get(&*store, &scheduled).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.delivery_time, now + hours(2));
    assert_eq!(read.updated_at, scheduled.updated_at);
    let read = get(&*store, &their_dead).await;
    assert_eq!(
        read.state,
        State::DeadLetter,
        "another account's dead letter"
    );
    assert!(read.dead_lettered_at.is_some());
    for m in [&delivered, &scheduled, &their_dead] {
        assert!(
            events_of(&*store, m).await.is_empty(),
            "{}: no redrive event",
            m.id
        );
    }
    assert_eq!(
        events_of(&*store, &cancelled).await.len(),
        1,
        "only the cancel"
    );

    // Claimable at `at`, not before; the ladder starts over and the attempt
    // numbers go on.
    assert_eq!(store.next_due().await.unwrap(), Some(at));
    assert!(store
        .claim_due(at - ms(1), 100, LEASE)
        .await
        .unwrap()
        .is_empty());
    let claimed = store.claim_due(at, 100, LEASE).await.unwrap();
    assert_eq!(set(claimed_ids(&claimed)), set([dead1.id, dead2.id]));
    for c in &claimed {
        assert_eq!(c.ladder_attempts, 0, "{}: a fresh ladder", c.id);
        assert_eq!(c.delivery_time, at);
        let expected_attempts = if c.id == dead1.id { 3 } else { 1 };
        assert_eq!(c.attempt_count, expected_attempts, "{}", c.id);
    }

    // Nothing of the account is dead any more.
    assert_eq!(
        store
            .redrive(ACME, &MessageFilter::default(), None, at, now + secs(2))
            .await
            .unwrap(),
        0
    );
    // The other account redrives its own.
    assert_eq!(
        store
            .redrive(GLOBEX, &MessageFilter::default(), None, at, now + secs(3))
            .await
            .unwrap(),
        1
    );
    assert_redriven(&*store, &their_dead, at, now + secs(3)).await;
}

async fn redrive_moves_only_the_dead_letters_that_match_the_target_ids_and_delivery_range(
    store: Arc<dyn Store>,
) {
    let t1 = add_target(&*store, ACME).await;
    let t2 = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let base = time::now();
    // Dead letters, each dead-lettered while it is the only one due.
    let mut n = 0;
    let mut dead = |target: Target, delivery: DateTime<Utc>| {
        n += 1;
        let store = store.clone();
        async move {
            let m = schedule(&*store, &target, delivery).await;
            dead_letter(&*store, &m, base + secs(n)).await;
            m
        }
    };
    let x1 = dead(t1.clone(), base - hours(3)).await;
    let x2 = dead(t1.clone(), base - hours(2)).await;
    let x3 = dead(t2.clone(), base - hours(2)).await;
    let x4 = dead(t2.clone(), base - hours(1)).await;
    let x5 = dead(t1.clone(), base - hours(1)).await;
    let their_dead = dead(theirs.clone(), base - hours(2)).await;
    let delivered = schedule(&*store, &t2, base - hours(2)).await;
    deliver(&*store, &delivered, base + secs(10)).await;
    // Scheduled and due within every range below.
    let pending = schedule(&*store, &t2, base - minutes(90)).await;
    let all = set([x1.id, x2.id, x3.id, x4.id, x5.id]);
    assert_eq!(dead_letter_ids(&*store, ACME).await, all);

    let mut left = all.clone();
    let mut step = 0;
    let mut redrive = |f: MessageFilter, ids: Option<Vec<MessageId>>, expected: Vec<&Message>| {
        step += 1;
        let store = store.clone();
        let at = base + hours(1) + minutes(step);
        let now = base + minutes(step);
        for m in &expected {
            left.remove(&m.id);
        }
        let left = left.clone();
        let expected: Vec<Message> = expected.into_iter().cloned().collect();
        async move {
            let moved = store
                .redrive(ACME, &f, ids.as_deref(), at, now)
                .await
                .unwrap();
            assert_eq!(
                moved,
                expected.len() as u64,
                "step {step}: {f:?} among {ids:?}"
            );
            for m in &expected {
                assert_redriven(&*store, m, at, now).await;
            }
            assert_eq!(
                dead_letter_ids(&*store, ACME).await,
                left,
                "step {step}: the dead letters left"
            );
        }
    };

    // By target and delivery range [base-2h, base-1h): x3 (x2 is t1's; x4 is at the range's end).
    redrive(
        filter(
            Some(&t2),
            None,
            Some(base - hours(2)),
            Some(base - hours(1)),
        ),
        None,
        vec![&x3],
    )
    .await;
    // By ids: only the account's dead letters among them.
    redrive(
        MessageFilter::default(),
        Some(vec![
            x4.id,
            their_dead.id,
            delivered.id,
            pending.id,
            x3.id,
            MessageId::new(),
        ]),
        vec![&x4],
    )
    .await;
    // Ids and a target: both must match.
    redrive(
        filter(Some(&t2), None, None, None),
        Some(vec![x1.id, x5.id]),
        vec![],
    )
    .await;
    // No ids at all is nothing, not everything.
    redrive(MessageFilter::default(), Some(vec![]), vec![]).await;
    // Up to base-2h, exclusive: x1 (x2 is at base-2h).
    redrive(
        filter(None, None, None, Some(base - hours(2))),
        None,
        vec![&x1],
    )
    .await;
    // From base-1h, inclusive: x5.
    redrive(
        filter(None, None, Some(base - hours(1)), None),
        None,
        vec![&x5],
    )
    .await;
    // Everything else.
    redrive(MessageFilter::default(), None, vec![&x2]).await;

    // x3 and x4 were moved once only.
    assert_eq!(events_of(&*store, &x3).await.len(), 1);
    assert_eq!(events_of(&*store, &x4).await.len(), 1);
    assert_eq!(
        get(&*store, &x3).await.delivery_time,
        base + hours(1) + minutes(1)
    );
    // What is not a dead letter of the account is untouched.
    assert_eq!(get(&*store, &their_dead).await.state, State::DeadLetter);
    assert!(events_of(&*store, &their_dead).await.is_empty());
    assert_eq!(get(&*store, &delivered).await.state, State::Delivered);
    let read = get(&*store, &pending).await;
    assert_eq!(read.state, State::Scheduled);
    assert_eq!(read.delivery_time, base - minutes(90));
    assert!(events_of(&*store, &pending).await.is_empty());
}

async fn redriven_dead_letters_of_a_disabled_target_are_held_until_it_is_enabled(
    store: Arc<dyn Store>,
) {
    let on = add_target(&*store, ACME).await;
    let off = add_target(&*store, ACME).await;
    let now = time::now();
    let a = schedule(&*store, &on, now - minutes(2)).await;
    dead_letter(&*store, &a, now - minutes(1)).await;
    let b = schedule(&*store, &off, now - minutes(2)).await;
    dead_letter(&*store, &b, now - secs(50)).await;
    store
        .set_target_enabled(ACME, &off.id, false, now - secs(10))
        .await
        .unwrap()
        .unwrap();

    let at = now + secs(10);
    let moved = store
        .redrive(ACME, &MessageFilter::default(), None, at, now)
        .await
        .unwrap();
    assert_eq!(moved, 2);
    assert_redriven(&*store, &a, at, now).await;
    assert_redriven(&*store, &b, at, now).await;

    let claimed = store.claim_due(at + hours(1), 100, LEASE).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![a.id],
        "the disabled target's message is held"
    );
    store
        .set_target_enabled(ACME, &off.id, true, now + secs(20))
        .await
        .unwrap()
        .unwrap();
    let claimed = store.claim_due(at + hours(1), 100, LEASE).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![b.id],
        "released once the target is enabled"
    );
    assert_eq!(claimed[0].ladder_attempts, 0);
}

// ---------------------------------------------------------------------------
// Scheduling a batch (`insert_batch`): each item as `insert_message` would,
// in one transaction
// ---------------------------------------------------------------------------

/// The response a key remembers for `m` (what the API would answer).
fn response_for(m: &Message) -> serde_json::Value {
    json!({"messageId": m.id.to_string(), "payload": m.payload.as_str()})
}

fn plain(m: &Message) -> BatchItem {
    BatchItem {
        message: m.clone(),
        idempotency: None,
    }
}

/// `m` with key `key` for the request `hash`, remembering `m`'s response.
fn keyed(m: &Message, key: &str, hash: &[u8], ttl: Duration) -> BatchItem {
    BatchItem {
        message: m.clone(),
        idempotency: Some(idem(key, hash, ttl, response_for(m))),
    }
}

/// Runs the batch and asserts one outcome per item.
async fn batch(store: &dyn Store, items: &[BatchItem]) -> Vec<InsertOutcome> {
    let outcomes = store.insert_batch(items).await.unwrap();
    assert_eq!(
        outcomes.len(),
        items.len(),
        "one outcome per item: {outcomes:?}"
    );
    outcomes
}

fn kinds(outcomes: &[InsertOutcome]) -> Vec<&'static str> {
    outcomes
        .iter()
        .map(|o| match o {
            InsertOutcome::Created(_) => "Created",
            InsertOutcome::Replayed { .. } => "Replayed",
            InsertOutcome::KeyConflict => "KeyConflict",
            InsertOutcome::UnknownTarget => "UnknownTarget",
        })
        .collect()
}

/// The message of a Created outcome.
fn created_ref(o: &InsertOutcome) -> &Message {
    match o {
        InsertOutcome::Created(m) => m,
        other => panic!("expected Created, got {other:?}"),
    }
}

/// The response of a Replayed outcome (whose status must be 201).
fn replayed_response(o: &InsertOutcome) -> serde_json::Value {
    match o {
        InsertOutcome::Replayed { status, response } => {
            assert_eq!(*status, 201);
            response.clone()
        }
        other => panic!("expected Replayed, got {other:?}"),
    }
}

async fn exists(store: &dyn Store, m: &Message) -> bool {
    store
        .get_message(&m.account, &m.id)
        .await
        .unwrap()
        .is_some()
}

async fn ids_of(store: &dyn Store, account: &str) -> HashSet<MessageId> {
    let all = store
        .list_messages(account, &MessageFilter::default(), None, 1000)
        .await
        .unwrap();
    set(message_ids(&all))
}

/// What `insert_message` answers now for `key` and `hash` (a fresh message
/// for `target`): Replayed(response), KeyConflict, or Created when the key
/// is not held.
async fn probe_key(
    store: &dyn Store,
    target: &Target,
    key: &str,
    hash: &[u8],
    now: DateTime<Utc>,
) -> InsertOutcome {
    let m = message_value(target, now + hours(5), now);
    store
        .insert_message(&m, Some(&idem(key, hash, DAY, json!({"probe": true}))))
        .await
        .unwrap()
}

async fn a_batch_answers_each_item_in_order_and_creates_only_the_messages_whose_target_exists(
    store: Arc<dyn Store>,
) {
    let ours = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let now = time::now();
    let a = message_value(&ours, now + hours(1), now);
    let missing = message_value(&target_value(ACME, "never stored", now), now, now);
    let b = message_value(&ours, now - secs(1), now);
    let mut foreign = message_value(&theirs, now, now);
    foreign.account = ACME.into();
    let c = message_value(&ours, now + hours(2), now);
    let items = [
        plain(&a),
        plain(&missing),
        plain(&b),
        plain(&foreign),
        plain(&c),
    ];

    let outcomes = batch(&*store, &items).await;
    assert_eq!(
        kinds(&outcomes),
        [
            "Created",
            "UnknownTarget",
            "Created",
            "UnknownTarget",
            "Created"
        ]
    );
    for (i, expected) in [(0, &a), (2, &b), (4, &c)] {
        let returned = created_ref(&outcomes[i]);
        assert_eq!(returned.id, expected.id, "outcome {i} answers item {i}");
        assert_eq!(returned.delivery_time, expected.delivery_time);
        assert_eq!(returned.payload, expected.payload);

        let m = get(&*store, expected).await;
        assert_eq!(m.account, ACME);
        assert_eq!(m.target_id, ours.id);
        assert_eq!(m.state, State::Scheduled);
        assert_eq!(m.delivery_time, expected.delivery_time);
        assert_eq!(m.next_attempt_at, Some(expected.delivery_time));
        assert_eq!(m.attempt_count, 0);
        assert_eq!(m.created_at, now);
        assert_eq!(m.updated_at, now);
        assert_eq!(m.payload, expected.payload);
    }
    assert!(!exists(&*store, &missing).await);
    assert!(!exists(&*store, &foreign).await);
    assert!(store
        .get_message(GLOBEX, &foreign.id)
        .await
        .unwrap()
        .is_none());
    assert_eq!(ids_of(&*store, ACME).await, set([a.id, b.id, c.id]));
    assert!(ids_of(&*store, GLOBEX).await.is_empty());
}

/// More items than one statement takes (stores may insert keyless items
/// many rows a statement): every 7th for an unknown target, every 5th with a
/// key, answered in order.
async fn a_batch_of_over_a_thousand_with_keys_among_them_answers_each_in_order(
    store: Arc<dyn Store>,
) {
    let ours = add_target(&*store, ACME).await;
    let missing = target_value(ACME, "never stored", time::now());
    let now = time::now();
    let messages: Vec<Message> = (0..1_203)
        .map(|i| {
            let target = if i % 7 == 3 { &missing } else { &ours };
            message_value(target, now + secs(i), now)
        })
        .collect();
    let items: Vec<BatchItem> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if i % 5 == 0 {
                keyed(m, &format!("key-{i}"), b"hash", DAY)
            } else {
                plain(m)
            }
        })
        .collect();
    let outcomes = batch(&*store, &items).await;
    let mut expected = HashSet::new();
    for (i, (m, o)) in messages.iter().zip(&outcomes).enumerate() {
        if i % 7 == 3 {
            assert_eq!(
                kinds(std::slice::from_ref(o)),
                ["UnknownTarget"],
                "item {i}"
            );
        } else {
            assert_eq!(created_ref(o).id, m.id, "item {i}");
            expected.insert(m.id);
        }
    }
    let all = store
        .list_messages(ACME, &MessageFilter::default(), None, 2_000)
        .await
        .unwrap();
    assert_eq!(set(message_ids(&all)), expected);
    for (i, m) in messages
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 7 != 3)
        .step_by(97)
    {
        let got = get(&*store, m).await;
        assert_eq!(got.delivery_time, m.delivery_time, "item {i}");
        assert_eq!(got.state, State::Scheduled);
    }
    // The key of an item for an unknown target is not kept; the others are.
    for i in [0usize, 5, 10, 45, 1_195, 1_200] {
        let o = probe_key(&*store, &ours, &format!("key-{i}"), b"hash", now).await;
        let want = if i % 7 == 3 { "Created" } else { "Replayed" };
        assert_eq!(kinds(std::slice::from_ref(&o)), [want], "key-{i}");
    }
}

async fn an_empty_batch_answers_an_empty_list(store: Arc<dyn Store>) {
    add_target(&*store, ACME).await;
    assert!(store.insert_batch(&[]).await.unwrap().is_empty());
    assert!(ids_of(&*store, ACME).await.is_empty());
}

async fn a_batch_may_hold_messages_of_several_accounts(store: Arc<dyn Store>) {
    let ours = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let now = time::now();
    let a1 = message_value(&ours, now + hours(1), now);
    let g1 = message_value(&theirs, now + hours(1), now);
    let a2 = message_value(&ours, now + hours(2), now);
    // ACME naming GLOBEX's target: unknown in ACME.
    let mut crossed = message_value(&theirs, now + hours(1), now);
    crossed.account = ACME.into();
    let outcomes = batch(
        &*store,
        &[plain(&a1), plain(&g1), plain(&a2), plain(&crossed)],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Created", "Created", "UnknownTarget"]
    );
    assert_eq!(created_ref(&outcomes[1]).account, GLOBEX);
    assert_eq!(ids_of(&*store, ACME).await, set([a1.id, a2.id]));
    assert_eq!(ids_of(&*store, GLOBEX).await, set([g1.id]));
    assert_eq!(get(&*store, &g1).await.target_id, theirs.id);
    assert!(store.get_message(GLOBEX, &a1.id).await.unwrap().is_none());
    assert!(store.get_message(ACME, &g1.id).await.unwrap().is_none());
}

async fn a_batch_item_with_an_unknown_target_answers_unknown_target_and_its_key_is_not_kept(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    // A target that does not exist yet.
    let later = target_value(ACME, "later", now);
    let lost = message_value(&later, now + hours(1), now);
    let good = message_value(&t, now + hours(1), now);
    let elsewhere = message_value(&later, now + hours(1), now);
    let outcomes = batch(
        &*store,
        &[
            keyed(&lost, "order-7", b"body-7", DAY),
            keyed(&good, "order-8", b"body-8", DAY),
            keyed(&elsewhere, "order-9", b"body-9", DAY),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["UnknownTarget", "Created", "UnknownTarget"]
    );
    assert!(!exists(&*store, &lost).await);
    assert_eq!(ids_of(&*store, ACME).await, set([good.id]));

    // Once the target exists, the same request is new (no replay of a
    // response for a message never stored); so is another request with the
    // key that went with the unknown target.
    insert_target(&*store, &later).await;
    let retry = message_value(&later, now + hours(1), now + secs(1));
    let fixed = message_value(&t, now + hours(1), now + secs(1));
    let outcomes = batch(
        &*store,
        &[
            keyed(&retry, "order-7", b"body-7", DAY),
            keyed(&fixed, "order-9", b"body-9-fixed", DAY),
            keyed(&good, "order-8", b"body-8", DAY),
        ],
    )
    .await;
    assert_eq!(kinds(&outcomes), ["Created", "Created", "Replayed"]);
    assert_eq!(created_ref(&outcomes[0]).id, retry.id);
    assert_eq!(created_ref(&outcomes[1]).id, fixed.id);
    assert_eq!(replayed_response(&outcomes[2]), response_for(&good));
    assert_eq!(
        ids_of(&*store, ACME).await,
        set([good.id, retry.id, fixed.id])
    );
}

async fn a_batch_items_key_is_new_replayed_or_in_conflict_as_with_insert_message(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let p1 = message_value(&t, now + hours(1), now - secs(10));
    let p2 = message_value(&t, now + hours(1), now - secs(10));
    created(
        store
            .insert_message(&p1, Some(&idem("held-1", b"h1", DAY, response_for(&p1))))
            .await
            .unwrap(),
    );
    created(
        store
            .insert_message(&p2, Some(&idem("held-2", b"h2", DAY, response_for(&p2))))
            .await
            .unwrap(),
    );

    let new = message_value(&t, now + hours(2), now);
    let same = message_value(&t, now + hours(1), now);
    let other = message_value(&t, now + hours(3), now);
    let same_again = message_value(&t, now + hours(1), now);
    let other_again = message_value(&t, now + hours(4), now);
    let outcomes = batch(
        &*store,
        &[
            keyed(&new, "new", b"hn", DAY),
            keyed(&same, "held-1", b"h1", DAY),
            keyed(&other, "held-2", b"h2-other", DAY),
            keyed(&same_again, "held-1", b"h1", DAY),
            keyed(&other_again, "held-1", b"h1-other", DAY),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        [
            "Created",
            "Replayed",
            "KeyConflict",
            "Replayed",
            "KeyConflict"
        ]
    );
    assert_eq!(created_ref(&outcomes[0]).id, new.id);
    assert_eq!(replayed_response(&outcomes[1]), response_for(&p1));
    assert_eq!(
        replayed_response(&outcomes[3]),
        response_for(&p1),
        "a key held before the batch replays what it holds, however often"
    );
    assert_eq!(ids_of(&*store, ACME).await, set([p1.id, p2.id, new.id]));

    // The new key is kept with its response; the held ones are unchanged.
    assert_eq!(
        replayed_response(&probe_key(&*store, &t, "new", b"hn", now).await),
        response_for(&new)
    );
    assert_eq!(
        replayed_response(&probe_key(&*store, &t, "held-2", b"h2", now).await),
        response_for(&p2),
        "a conflict does not replace the key's request"
    );
    assert!(matches!(
        probe_key(&*store, &t, "held-1", b"h1-other", now).await,
        InsertOutcome::KeyConflict
    ));
}

async fn a_batch_item_takes_over_an_expired_key_but_not_one_within_its_ttl(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let ttl = Duration::from_secs(3600);
    // Keys stored 2 h, 1 h + 1 ms, exactly 1 h and 30 min before `now`.
    let mut stored = Vec::new();
    for (key, age) in [
        ("old", hours(2)),
        ("just-expired", hours(1) + ms(1)),
        ("edge", hours(1)),
        ("recent", TimeDelta::minutes(30)),
    ] {
        let m = message_value(&t, now + hours(1), now - age);
        created(
            store
                .insert_message(&m, Some(&idem(key, b"first", ttl, response_for(&m))))
                .await
                .unwrap(),
        );
        stored.push(m);
    }

    let old = message_value(&t, now + hours(2), now);
    let just = message_value(&t, now + hours(2), now);
    let edge = message_value(&t, now + hours(2), now);
    let recent = message_value(&t, now + hours(2), now);
    let outcomes = batch(
        &*store,
        &[
            keyed(&old, "old", b"second", ttl),
            keyed(&just, "just-expired", b"second", ttl),
            keyed(&edge, "edge", b"second", ttl),
            keyed(&recent, "recent", b"second", ttl),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Created", "KeyConflict", "KeyConflict"],
        "keys older than the ttl are taken over; one exactly as old as the ttl is not yet"
    );
    assert_eq!(created_ref(&outcomes[0]).id, old.id);
    assert_eq!(created_ref(&outcomes[1]).id, just.id);
    assert!(!exists(&*store, &edge).await);
    assert!(!exists(&*store, &recent).await);

    // The taken keys now name the new requests.
    assert_eq!(
        replayed_response(&probe_key(&*store, &t, "old", b"second", now).await),
        response_for(&old)
    );
    assert!(matches!(
        probe_key(&*store, &t, "old", b"first", now).await,
        InsertOutcome::KeyConflict
    ));

    // Two hours on (a batch created in the future), "recent" has expired too.
    let later = message_value(&t, now + hours(3), now + hours(2));
    let outcomes = batch(&*store, &[keyed(&later, "recent", b"third", ttl)]).await;
    assert_eq!(created_ref(&outcomes[0]).id, later.id);
    let mut expected = set(message_ids(&stored));
    expected.extend([old.id, just.id, later.id]);
    assert_eq!(ids_of(&*store, ACME).await, expected);
}

async fn each_batch_item_is_judged_by_its_own_key_ttl(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let tiny = Duration::from_millis(1);
    let old = message_value(&t, now + hours(1), now - hours(1));
    created(
        store
            .insert_message(
                &old,
                Some(&idem("short", b"first", tiny, response_for(&old))),
            )
            .await
            .unwrap(),
    );
    // Item 1's key is remembered a day; item 2's a millisecond, so the hour-old
    // "short" has expired for item 2, as it would for insert_message.
    let long = message_value(&t, now + hours(1), now);
    let short = message_value(&t, now + hours(1), now);
    let outcomes = batch(
        &*store,
        &[
            keyed(&long, "long", b"x", DAY),
            keyed(&short, "short", b"second", tiny),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Created"],
        "item 2's expired key is taken over under item 2's own ttl"
    );
    assert_eq!(
        ids_of(&*store, ACME).await,
        set([old.id, long.id, short.id])
    );
}

async fn a_key_repeated_within_a_batch_replays_the_first_items_response_or_conflicts(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let m0 = message_value(&t, now + hours(1), now);
    let m1 = message_value(&t, now + hours(1), now);
    let m2 = message_value(&t, now + hours(2), now);
    let m3 = message_value(&t, now + hours(1), now);
    let m4 = message_value(&t, now + hours(1), now);
    let outcomes = batch(
        &*store,
        &[
            keyed(&m0, "k", b"h1", DAY),
            keyed(&m1, "k", b"h1", DAY),
            keyed(&m2, "k", b"h2", DAY),
            plain(&m3),
            keyed(&m4, "k", b"h1", DAY),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Replayed", "KeyConflict", "Created", "Replayed"]
    );
    assert_eq!(created_ref(&outcomes[0]).id, m0.id);
    assert_eq!(
        replayed_response(&outcomes[1]),
        response_for(&m0),
        "the first item's response, not the second's"
    );
    assert_eq!(replayed_response(&outcomes[4]), response_for(&m0));
    assert_eq!(created_ref(&outcomes[3]).id, m3.id);
    assert_eq!(ids_of(&*store, ACME).await, set([m0.id, m3.id]));

    // After the batch the key holds the first item's request.
    assert_eq!(
        replayed_response(&probe_key(&*store, &t, "k", b"h1", now).await),
        response_for(&m0)
    );
    assert!(matches!(
        probe_key(&*store, &t, "k", b"h2", now).await,
        InsertOutcome::KeyConflict
    ));
}

async fn a_key_repeated_within_a_batch_after_an_unknown_target_answers_unknown_target_or_conflicts(
    store: Arc<dyn Store>,
) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let nowhere = target_value(ACME, "never stored", now);
    let u0 = message_value(&nowhere, now + hours(1), now);
    let u1 = message_value(&nowhere, now + hours(1), now);
    let outcomes = batch(
        &*store,
        &[keyed(&u0, "k", b"h1", DAY), keyed(&u1, "k", b"h1", DAY)],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["UnknownTarget", "UnknownTarget"],
        "the same request again is answered like the first"
    );

    // Within one batch, another request with the key is a conflict, even
    // though the first item's target was unknown.
    let v0 = message_value(&nowhere, now + hours(1), now);
    let v1 = message_value(&t, now + hours(1), now);
    let outcomes = batch(
        &*store,
        &[keyed(&v0, "k2", b"h1", DAY), keyed(&v1, "k2", b"h2", DAY)],
    )
    .await;
    assert_eq!(kinds(&outcomes), ["UnknownTarget", "KeyConflict"]);
    assert!(ids_of(&*store, ACME).await.is_empty(), "nothing inserted");

    // Neither key is kept: later requests with them are new.
    for key in ["k", "k2"] {
        assert!(
            matches!(
                probe_key(&*store, &t, key, b"h3", now).await,
                InsertOutcome::Created(_)
            ),
            "{key} is not held"
        );
    }
}

async fn the_same_key_for_two_accounts_in_one_batch_is_two_keys(store: Arc<dyn Store>) {
    let ours = add_target(&*store, ACME).await;
    let theirs = add_target(&*store, GLOBEX).await;
    let now = time::now();
    let a = message_value(&ours, now + hours(1), now);
    let g = message_value(&theirs, now + hours(1), now);
    let g2 = message_value(&theirs, now + hours(1), now);
    let a2 = message_value(&ours, now + hours(2), now);
    let outcomes = batch(
        &*store,
        &[
            keyed(&a, "k", b"h1", DAY),
            keyed(&g, "k", b"h1", DAY),
            keyed(&g2, "k", b"h1", DAY),
            keyed(&a2, "k", b"h2", DAY),
        ],
    )
    .await;
    assert_eq!(
        kinds(&outcomes),
        ["Created", "Created", "Replayed", "KeyConflict"]
    );
    assert_eq!(created_ref(&outcomes[1]).id, g.id);
    assert_eq!(
        replayed_response(&outcomes[2]),
        response_for(&g),
        "GLOBEX replays its own first response"
    );
    assert_eq!(ids_of(&*store, ACME).await, set([a.id]));
    assert_eq!(ids_of(&*store, GLOBEX).await, set([g.id]));
}

async fn a_batch_item_for_a_disabled_target_is_inserted_paused(store: Arc<dyn Store>) {
    let on = add_target(&*store, ACME).await;
    let off = add_target(&*store, ACME).await;
    let now = time::now();
    store
        .set_target_enabled(ACME, &off.id, false, now)
        .await
        .unwrap()
        .unwrap();
    let held = message_value(&off, now - secs(10), now);
    let free = message_value(&on, now - secs(5), now);
    let outcomes = batch(&*store, &[plain(&held), plain(&free)]).await;
    assert_eq!(kinds(&outcomes), ["Created", "Created"]);
    assert_eq!(get(&*store, &held).await.state, State::Scheduled);
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(now - secs(5)),
        "the held message does not count"
    );
    let claimed = store.claim_due(now, 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&claimed), vec![free.id]);

    store
        .set_target_enabled(ACME, &off.id, true, now + secs(1))
        .await
        .unwrap()
        .unwrap();
    let claimed = store.claim_due(now + secs(1), 100, LEASE).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![held.id],
        "released when enabled"
    );
}

async fn batch_inserted_messages_are_claimable_when_due(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let late = message_value(&t, now - secs(1), now);
    let early = message_value(&t, now - secs(3), now);
    let future = message_value(&t, now + hours(1), now);
    batch(
        &*store,
        &[plain(&late), keyed(&early, "k", b"h", DAY), plain(&future)],
    )
    .await;
    assert_eq!(store.next_due().await.unwrap(), Some(now - secs(3)));

    let claimed = store.claim_due(now, 100, LEASE).await.unwrap();
    assert_eq!(
        claimed_ids(&claimed),
        vec![early.id, late.id],
        "oldest due first; the future one waits"
    );
    let c = &claimed[0];
    assert_eq!(c.target_id, t.id);
    assert_eq!(c.target, t.config);
    assert_eq!(c.payload, early.payload.as_str());
    assert_eq!(c.delivery_time, now - secs(3));
    assert_eq!(c.attempt_count, 0);
    assert_eq!(c.ladder_attempts, 0);
    let results: Vec<Recorded> = claimed
        .iter()
        .map(|c| {
            recorded(
                c,
                attempts_after(c, &[AttemptOutcome::Success], now),
                Next::Delivered,
            )
        })
        .collect();
    assert_eq!(store.record(&results, now).await.unwrap(), 2);
    assert_eq!(get(&*store, &early).await.state, State::Delivered);

    let claimed = store.claim_due(now + hours(1), 100, LEASE).await.unwrap();
    assert_eq!(claimed_ids(&claimed), vec![future.id]);
}

async fn a_batch_that_fails_part_way_leaves_nothing_behind(store: Arc<dyn Store>) {
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    let a = message_value(&t, now + hours(1), now);
    let b = message_value(&t, now + hours(1), now);
    // The third item repeats the first's message id: the batch cannot be stored.
    let result = store
        .insert_batch(&[
            keyed(&a, "k-a", b"ha", DAY),
            keyed(&b, "k-b", b"hb", DAY),
            plain(&a),
        ])
        .await;
    assert!(
        result.is_err(),
        "a duplicate message id fails the batch: {result:?}"
    );
    assert!(ids_of(&*store, ACME).await.is_empty(), "nothing committed");
    // Nor are the keys of its items kept.
    for key in ["k-a", "k-b"] {
        assert!(
            matches!(
                probe_key(&*store, &t, key, b"other", now).await,
                InsertOutcome::Created(_)
            ),
            "{key} is not held"
        );
    }
}

async fn concurrent_batches_with_the_same_keys_in_another_order_each_create_a_message_once(
    store: Arc<dyn Store>,
) {
    // Two requests with the same 1,000 keys, one listing them backwards, at
    // the same moment: each key creates one message and the other batch
    // replays it; neither fails. Several rounds, as the overlap is a race.
    let t = add_target(&*store, ACME).await;
    let now = time::now();
    for round in 0..5 {
        let keys: Vec<String> = (0..1000).map(|i| format!("r{round}-key-{i:04}")).collect();
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let mut tasks = Vec::new();
        for reversed in [false, true] {
            let mut order = keys.clone();
            if reversed {
                order.reverse();
            }
            let items: Vec<BatchItem> = order
                .iter()
                .map(|k| {
                    keyed(
                        &message_value(&t, now + hours(1), now),
                        k,
                        k.as_bytes(),
                        DAY,
                    )
                })
                .collect();
            let store = store.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                store.insert_batch(&items).await
            }));
        }
        let (mut created, mut replays) = (0, 0);
        for task in tasks {
            let outcomes = task
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: a concurrent batch failed: {e:?}"));
            for o in outcomes {
                match o {
                    InsertOutcome::Created(_) => created += 1,
                    InsertOutcome::Replayed { .. } => replays += 1,
                    other => panic!("expected Created or Replayed, got {other:?}"),
                }
            }
        }
        assert_eq!(created, 1000, "round {round}: each key creates one message");
        assert_eq!(replays, 1000, "round {round}");
        assert_eq!(
            store
                .count_messages(ACME, &MessageFilter::default())
                .await
                .unwrap(),
            1000 * (round + 1)
        );
    }
}
