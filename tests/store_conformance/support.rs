//! What the checks share: fixed accounts and times, targets, messages,
//! attempts and claims as the API and the sweeper build them, and the small
//! steps (schedule, claim, deliver, dead-letter) most checks start from.

pub(crate) use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{Arc, LazyLock},
    time::Duration,
};

pub(crate) use chrono::{DateTime, TimeDelta, Utc};
pub(crate) use dispatch::{
    domain::{
        ids::{AccountId, MessageId, TargetId},
        message::{Attempt, Message, OrderingKey, State},
        payload::{Payload, MAX_PAYLOAD_CHARS},
        retry::{AttemptOutcome, Next},
        scope::Scope,
        target::{gate::Health, SqsConfig, Target, TargetConfig, WebhookConfig},
    },
    store::{
        portal::{EventKind, MessageEvent, Overview, Role, SessionRecord, UserRecord},
        postgres::PgStore,
        prelude::*,
        BatchItem, Bulk, BulkAction, ClaimShares, Claimed, ClientRecord, Cutoffs, DeleteTarget,
        IdempotencyInput, InsertOutcome, MessageFilter, Purged, RangeOn, Recorded, SaveSchedule,
        StoreResult, TargetCursor, Transition,
    },
};
pub(crate) use serde_json::json;

/// The wall clock's "now", for the checks that need a real one (most pass
/// their own instants).
pub(crate) mod time {
    pub(crate) fn now() -> chrono::DateTime<chrono::Utc> {
        use dispatch::clock::Clock;
        dispatch::clock::SystemClock.now()
    }
}
pub(crate) use uuid::Uuid;

/// Two accounts: what one holds, the other never sees.
pub(crate) static ACME: LazyLock<AccountId> = LazyLock::new(|| AccountId::parse("acme").unwrap());
pub(crate) static GLOBEX: LazyLock<AccountId> =
    LazyLock::new(|| AccountId::parse("globex").unwrap());
/// An account by its name.
pub(crate) fn account_id(name: &str) -> AccountId {
    AccountId::parse(name).unwrap()
}

pub(crate) fn ordering_key(key: &str) -> OrderingKey {
    OrderingKey::parse(key.into()).unwrap()
}

pub(crate) const DAY: Duration = Duration::from_secs(24 * 3600);
pub(crate) const LEASE: Duration = Duration::from_secs(30);

pub(crate) fn ms(n: i64) -> TimeDelta {
    TimeDelta::milliseconds(n)
}

pub(crate) fn secs(n: i64) -> TimeDelta {
    TimeDelta::seconds(n)
}

pub(crate) fn hours(n: i64) -> TimeDelta {
    TimeDelta::hours(n)
}

pub(crate) fn days(n: i64) -> TimeDelta {
    TimeDelta::days(n)
}

pub(crate) fn webhook(url: &str) -> TargetConfig {
    TargetConfig::Webhook(WebhookConfig {
        url: url.into(),
        headers: BTreeMap::from([("X-Api-Key".to_string(), "key-123".to_string())]),
        timeout_ms: Some(5_000),
        signing_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        auth: None,
        previous_signing_secret: None,
        format: Default::default(),
        content_type: None,
        limits: Default::default(),
    })
}

pub(crate) fn target_value(account: &AccountId, name: &str, created_at: DateTime<Utc>) -> Target {
    Target {
        id: TargetId::new(),
        account: account.clone(),
        name: name.into(),
        enabled: true,
        config: webhook("https://example.com/hook"),
        created_at,
        updated_at: created_at,
        health: Health::closed(None),
    }
}

pub(crate) async fn insert_target(store: &dyn Store, t: &Target) {
    store.ensure_account(&t.account).await.unwrap();
    assert!(
        store.insert_target(t).await.unwrap(),
        "a target with a new id is inserted"
    );
}

/// An enabled webhook target of `account`, stored.
pub(crate) async fn add_target(store: &dyn Store, account: &AccountId) -> Target {
    let t = target_value(account, "orders", time::now());
    insert_target(store, &t).await;
    t
}

/// A Scheduled message as the API builds it (not yet stored).
pub(crate) fn message_value(
    target: &Target,
    delivery_time: DateTime<Utc>,
    created_at: DateTime<Utc>,
) -> Message {
    let id = MessageId::at(created_at);
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
        ordering_key: None,
        schedule_id: None,
        event_id: None,
        event_type: None,
        created_at,
        updated_at: created_at,
        payload: Payload::parse(format!("{{\"order\": \"{id}\", \"note\": \"héllo ✓\"}}")).unwrap(),
    }
}

pub(crate) fn created(outcome: InsertOutcome) -> Message {
    match outcome {
        InsertOutcome::Created(m) => *m,
        other => panic!("expected Created, got {other:?}"),
    }
}

pub(crate) async fn insert(store: &dyn Store, m: &Message) -> Message {
    created(store.insert_message(m, None).await.unwrap())
}

/// Schedules a message for `target` at `delivery_time`, created `created_at`.
pub(crate) async fn schedule_at(
    store: &dyn Store,
    target: &Target,
    delivery_time: DateTime<Utc>,
    created_at: DateTime<Utc>,
) -> Message {
    insert(store, &message_value(target, delivery_time, created_at)).await
}

/// Schedules a message for `target` at `delivery_time`, created now.
pub(crate) async fn schedule(
    store: &dyn Store,
    target: &Target,
    delivery_time: DateTime<Utc>,
) -> Message {
    schedule_at(store, target, delivery_time, time::now()).await
}

pub(crate) async fn get(store: &dyn Store, m: &Message) -> Message {
    store
        .get_message(&m.account, &m.id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("message {} should exist", m.id))
}

pub(crate) fn attempt(n: u32, outcome: AttemptOutcome, finished_at: DateTime<Utc>) -> Attempt {
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
        AttemptOutcome::Received => (None, None, None),
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
        retry_after_ms: None,
    }
}

/// The result of `attempts` made under claim `c`, then `next`.
pub(crate) fn recorded(c: &Claimed, attempts: Vec<Attempt>, next: Next) -> Recorded {
    Recorded {
        id: c.id,
        lease_token: c.lease_token,
        ladder_attempts: c.ladder_attempts + attempts.len() as u32,
        attempts,
        next,
        key: c
            .ordering_key
            .as_ref()
            .map(|k| (c.target_id.clone(), k.clone())),
        told: false,
    }
}

/// Attempts numbered after what `c` has already made, one per outcome, finishing at `at`.
pub(crate) fn attempts_after(
    c: &Claimed,
    outcomes: &[AttemptOutcome],
    at: DateTime<Utc>,
) -> Vec<Attempt> {
    outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| attempt(c.attempt_count + i as u32 + 1, *o, at))
        .collect()
}

pub(crate) fn claimed_ids(claimed: &[Claimed]) -> Vec<MessageId> {
    claimed.iter().map(|c| c.id).collect()
}

pub(crate) fn set(ids: impl IntoIterator<Item = MessageId>) -> HashSet<MessageId> {
    ids.into_iter().collect()
}

pub(crate) fn message_ids(messages: &[Message]) -> Vec<MessageId> {
    messages.iter().map(|m| m.id).collect()
}

/// Ids newest first: UUIDv7 ids descending.
pub(crate) fn newest_first(mut ids: Vec<MessageId>) -> Vec<MessageId> {
    ids.sort_by(|a, b| b.cmp(a));
    ids
}

/// Claims at `now` and expects exactly `m` to be handed out (a test's setup).
pub(crate) async fn claim_only(
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
pub(crate) async fn attempt_and_record(
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

pub(crate) async fn deliver(store: &dyn Store, m: &Message, at: DateTime<Utc>) {
    attempt_and_record(store, m, at, &[AttemptOutcome::Success], Next::Delivered).await;
}

pub(crate) async fn dead_letter(store: &dyn Store, m: &Message, at: DateTime<Utc>) {
    attempt_and_record(
        store,
        m,
        at,
        &[AttemptOutcome::NonRetryableFailure],
        Next::DeadLetter,
    )
    .await;
}

pub(crate) fn done(t: Transition) -> Message {
    match t {
        Transition::Done(m) => *m,
        other => panic!("expected Done, got {other:?}"),
    }
}

pub(crate) fn assert_target_eq(actual: &Target, expected: &Target) {
    assert_eq!(actual.id, expected.id, "id");
    assert_eq!(actual.account, expected.account, "account");
    assert_eq!(actual.name, expected.name, "name");
    assert_eq!(actual.enabled, expected.enabled, "enabled");
    assert_eq!(actual.config, expected.config, "config");
    assert_eq!(actual.created_at, expected.created_at, "created_at");
    assert_eq!(actual.updated_at, expected.updated_at, "updated_at");
}

pub(crate) fn assert_attempt_eq(actual: &Attempt, expected: &Attempt) {
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

pub(crate) fn attempt_numbers(attempts: &[Attempt]) -> Vec<u32> {
    attempts.iter().map(|a| a.attempt).collect()
}

pub(crate) async fn attempts_of(store: &dyn Store, m: &Message) -> Vec<Attempt> {
    store
        .list_attempts(&m.account, &m.id, None, 1000)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("message {} should exist", m.id))
}

pub(crate) fn idem(
    key: &str,
    hash: &[u8],
    ttl: Duration,
    response: serde_json::Value,
) -> IdempotencyInput {
    IdempotencyInput {
        key: key.into(),
        request_hash: hash.to_vec(),
        status: 201,
        response: serde_json::value::to_raw_value(&response).unwrap(),
        ttl,
    }
}

/// Cutoffs that expire nothing (everything is younger than 30 years).
pub(crate) fn cutoffs_keeping_everything(now: DateTime<Utc>) -> Cutoffs {
    let long_ago = now - days(365 * 30);
    Cutoffs {
        delivered_before: long_ago,
        cancelled_before: long_ago,
        dead_letters_before: long_ago,
        failed_attempts_before: long_ago,
        idempotency_before: long_ago,
    }
}

pub(crate) fn minutes(n: i64) -> TimeDelta {
    TimeDelta::minutes(n)
}

// in one transaction

/// The response a key remembers for `m` (what the API would answer).
pub(crate) fn response_for(m: &Message) -> serde_json::Value {
    json!({"messageId": m.id.to_string(), "payload": m.payload.as_str()})
}

pub(crate) fn plain(m: &Message) -> BatchItem {
    BatchItem {
        message: m.clone(),
        idempotency: None,
    }
}

/// `m` with key `key` for the request `hash`, remembering `m`'s response.
pub(crate) fn keyed(m: &Message, key: &str, hash: &[u8], ttl: Duration) -> BatchItem {
    BatchItem {
        message: m.clone(),
        idempotency: Some(idem(key, hash, ttl, response_for(m))),
    }
}

/// Runs the batch and asserts one outcome per item.
pub(crate) async fn batch(store: &dyn Store, items: &[BatchItem]) -> Vec<InsertOutcome> {
    let outcomes = store.insert_batch(items).await.unwrap();
    assert_eq!(
        outcomes.len(),
        items.len(),
        "one outcome per item: {outcomes:?}"
    );
    outcomes
}

pub(crate) fn kinds(outcomes: &[InsertOutcome]) -> Vec<&'static str> {
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
pub(crate) fn created_ref(o: &InsertOutcome) -> &Message {
    match o {
        InsertOutcome::Created(m) => m,
        other => panic!("expected Created, got {other:?}"),
    }
}

/// The response of a Replayed outcome (whose status must be 201).
pub(crate) fn replayed_response(o: &InsertOutcome) -> serde_json::Value {
    match o {
        InsertOutcome::Replayed { status, response } => {
            assert_eq!(*status, 201);
            serde_json::from_str(response.get()).unwrap()
        }
        other => panic!("expected Replayed, got {other:?}"),
    }
}

pub(crate) async fn exists(store: &dyn Store, m: &Message) -> bool {
    store
        .get_message(&m.account, &m.id)
        .await
        .unwrap()
        .is_some()
}

pub(crate) async fn ids_of(store: &dyn Store, account: &AccountId) -> HashSet<MessageId> {
    let all = store
        .list_messages(account, &MessageFilter::default(), None, 1000)
        .await
        .unwrap();
    set(message_ids(&all))
}

/// What `insert_message` answers now for `key` and `hash` (a fresh message
/// for `target`): Replayed(response), KeyConflict, or Created when the key
/// is not held.
pub(crate) async fn probe_key(
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

pub(crate) fn filter(
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
        ordering_key: None,
        schedule_id: None,
        event_id: None,
        event_type: None,
    }
}

pub(crate) async fn events_of(store: &dyn Store, m: &Message) -> Vec<MessageEvent> {
    store.list_events(&m.account, &m.id).await.unwrap()
}

pub(crate) fn event(
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
        detail: None,
    }
}

/// Redrives, as the service does, one batch of 1,000 at a time: the dead
/// letters of the filter (delivery time range) and ids.
pub(crate) async fn redrive_all(
    store: &dyn Store,
    account: &AccountId,
    f: &MessageFilter,
    ids: Option<&[MessageId]>,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    let bulk = Bulk {
        action: BulkAction::Redrive { at },
        target_id: f.target_id.clone(),
        ids: ids.map(<[MessageId]>::to_vec),
        range_on: RangeOn::DeliveryTime,
        from: f.delivery_from,
        to: f.delivery_to,
    };
    let (mut changed, mut after) = (0, None);
    loop {
        let batch = store
            .bulk_batch(account, &bulk, after.as_ref(), 1000, now)
            .await?;
        changed += batch.changed;
        if batch.scanned < 1000 {
            return Ok(changed);
        }
        after = batch.last;
    }
}
