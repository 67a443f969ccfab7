//! Subscriptions and events (docs/api.md#events-and-subscriptions):
//! subscriptions are a target's configuration (the target permissions);
//! events are messages (the message permissions).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{
    access::{Actor, Permission},
    IdempotencyKey, Service, ServiceError, ServiceResult,
};
use crate::{
    domain::{
        event::{Event, EventType, Pattern, Subscription},
        ids::{AccountId, EventId, SubscriptionId, TargetId},
        message::OrderingKey,
        payload::Payload,
        time,
    },
    metrics as m,
    retention::IDEMPOTENCY_TTL,
    store::{
        EventRange, EventView, IdempotencyInput, PublishItem, Published, ResponseJson,
        SubscriptionCursor,
    },
    wire::event::{self as wire, EventReplaySpec, SubscriptionSpec},
};

/// An event to publish, as parsed by a door.
#[derive(Debug, Clone)]
pub struct PublishRequest {
    pub ty: EventType,
    pub payload: Payload,
    /// None: now.
    pub delivery_time: Option<DateTime<Utc>>,
    pub ordering_key: Option<OrderingKey>,
    pub idempotency_key: Option<IdempotencyKey>,
}

/// A publish's answer: the event and its messages, or (for a key seen with
/// the same request) the answer first given.
#[derive(Debug)]
pub enum PublishOutcome {
    Created(Box<EventView>),
    Replayed { status: u16, response: ResponseJson },
}

impl Service {
    pub async fn create_subscription(
        &self,
        actor: &Actor,
        spec: SubscriptionSpec,
    ) -> ServiceResult<Subscription> {
        let account = actor.allow(Permission::ConfigureTargets)?;
        let now = time::truncate_ms(self.now());
        let s = Subscription {
            id: SubscriptionId::new(),
            account: account.clone(),
            target_id: spec.target_id,
            name: spec.name,
            types: spec.types,
            enabled: spec.enabled,
            created_at: now,
            updated_at: now,
        };
        if !self.store.insert_subscription(&s).await? {
            return Err(ServiceError::field("targetId", "is not a known target"));
        }
        Ok(s)
    }

    /// A JSON merge patch (RFC 7396) on the subscription's document; its
    /// `targetId` cannot change.
    pub async fn update_subscription(
        &self,
        actor: &Actor,
        id: &SubscriptionId,
        patch: &Value,
    ) -> ServiceResult<Subscription> {
        let account = actor.allow(Permission::ConfigureTargets)?;
        let current = self
            .store
            .get_subscription(account, id)
            .await?
            .ok_or(ServiceError::NotFound)?;
        let spec = wire::parse_subscription(&wire::merge(&current, patch))
            .map_err(ServiceError::Invalid)?;
        if spec.target_id != current.target_id {
            return Err(ServiceError::field("targetId", "cannot be changed"));
        }
        let changed = Subscription {
            name: spec.name,
            types: spec.types,
            enabled: spec.enabled,
            updated_at: time::truncate_ms(self.now()).max(current.updated_at),
            ..current
        };
        if !self.store.update_subscription(&changed).await? {
            return Err(ServiceError::NotFound);
        }
        Ok(changed)
    }

    pub async fn delete_subscription(
        &self,
        actor: &Actor,
        id: &SubscriptionId,
    ) -> ServiceResult<()> {
        let account = actor.allow(Permission::ConfigureTargets)?;
        if !self.store.delete_subscription(account, id).await? {
            return Err(ServiceError::NotFound);
        }
        Ok(())
    }

    /// Publishes an event: one message to each target whose enabled
    /// subscriptions match its type, in one transaction.
    pub async fn publish(
        &self,
        actor: &Actor,
        req: PublishRequest,
    ) -> ServiceResult<PublishOutcome> {
        let account = actor.allow(Permission::ChangeMessages)?;
        if req.ty.is_own() {
            return Err(ServiceError::field(
                "type",
                "is one of Dispatch's own (types under 'dispatch.' are not published by clients)",
            ));
        }
        let now = self.now();
        let request_hash = request_hash(&req);
        let event = Event {
            id: EventId::at(now),
            account: account.clone(),
            ty: req.ty,
            payload: req.payload,
            delivery_time: time::truncate_ms(req.delivery_time.unwrap_or(now)),
            ordering_key: req.ordering_key,
            created_at: now,
        };
        let key = req.idempotency_key.map(|k| IdempotencyInput {
            key: k.as_str().to_string(),
            request_hash,
            status: 201,
            response: ResponseJson::default(),
            ttl: IDEMPOTENCY_TTL,
        });
        // Refused whole when its fan-out would pass the account's limit.
        // A fan-out reaches each target once: far below the limit by more
        // than the account may have targets, nothing is read.
        let counted = !self.scheduled_far_below(account, self.config.limits.targets);
        if counted {
            let reaching = self.store.reaching(account, event.ty.as_str()).await?;
            self.room_for_scheduled(account, reaching).await?;
        }
        let item = PublishItem { event, key };
        let published = match &self.commits {
            Some(commits) => commits.publishes.submit(item).await?,
            None => self
                .store
                .publish_events(&[item], &render)
                .await?
                .pop()
                .expect("one answer per item"),
        };
        match published {
            Published::Created(view) => {
                if !counted {
                    self.scheduled_added(account, view.messages.len() as u64);
                }
                if !view.messages.is_empty() {
                    metrics::counter!(m::SCHEDULED).increment(view.messages.len() as u64);
                    self.wake.due(view.event.delivery_time);
                }
                Ok(PublishOutcome::Created(Box::new(view)))
            }
            Published::Replayed { status, response } => {
                Ok(PublishOutcome::Replayed { status, response })
            }
            Published::KeyConflict => Err(ServiceError::Conflict(super::Conflict::KeyReused)),
        }
    }
}

/// The answer a publish's idempotency key keeps: the event as `POST /events`
/// answers it.
pub fn render(view: &EventView) -> ResponseJson {
    wire::EventOut::text(view)
}

/// What an idempotency key remembers of a publish: the request as given
/// (its type, instant if any, orderingKey and payload). A key is the
/// account's, across messages and events: a message's request and an
/// event's never hash alike.
fn request_hash(req: &PublishRequest) -> Vec<u8> {
    let at = req.delivery_time.map(|t| time::format(&t));
    let mut hash = Sha256::new();
    for part in [
        Some("event"),
        Some(req.ty.as_str()),
        at.as_deref(),
        req.ordering_key.as_deref(),
        Some(req.payload.as_str()),
    ] {
        match part {
            Some(p) => {
                hash.update([1]);
                hash.update((p.len() as u64).to_be_bytes());
                hash.update(p.as_bytes());
            }
            None => hash.update([0]),
        }
    }
    hash.finalize().to_vec()
}

/// Events per replay transaction: deliveries never wait long behind one.
pub const REPLAY_BATCH: u32 = 1000;

impl Service {
    /// Makes each event of the account published in [`from`, `to`) whose
    /// type matches `types` (by default the target's enabled subscriptions'
    /// patterns) into a new message to the target, due at `delivery_time`
    /// (default now); how many it made. More than `bulk.max` events answer
    /// 400 and make nothing.
    pub async fn replay_events(&self, actor: &Actor, spec: EventReplaySpec) -> ServiceResult<u64> {
        let account = actor.allow(Permission::ChangeMessages)?;
        let range = self.replay_range(account, &spec).await?;
        let max = self.config.bulk.max;
        let matched = self
            .store
            .count_events(account, &range, max.saturating_add(1))
            .await?;
        if matched > max {
            return Err(ServiceError::field(
                "",
                format!("more than {max} events match (bulk.max); narrow the range (from, to)"),
            ));
        }
        self.room_for_scheduled(account, matched).await?;
        let at = time::truncate_ms(spec.delivery_time.unwrap_or_else(|| self.now()));
        let mut made = 0;
        let mut after = None;
        loop {
            let batch = self
                .store
                .replay_batch(
                    account,
                    &spec.target_id,
                    &range,
                    after.as_ref(),
                    REPLAY_BATCH,
                    at,
                    self.now(),
                )
                .await?;
            made += batch.made;
            if batch.made > 0 {
                self.wake.due(at);
            }
            if batch.scanned < REPLAY_BATCH {
                break;
            }
            after = batch.last;
        }
        metrics::counter!(m::SCHEDULED).increment(made);
        Ok(made)
    }

    /// How many events a replay of `spec` would deliver, counted up to `cap`
    /// (a page asks before it replays).
    pub async fn count_replay(
        &self,
        actor: &Actor,
        spec: &EventReplaySpec,
        cap: u64,
    ) -> ServiceResult<u64> {
        let account = actor.allow(Permission::ChangeMessages)?;
        let range = self.replay_range(account, spec).await?;
        Ok(self.store.count_events(account, &range, cap).await?)
    }

    /// The events a replay takes: the target must be the account's, and
    /// the patterns default to its enabled subscriptions'.
    async fn replay_range(
        &self,
        account: &AccountId,
        spec: &EventReplaySpec,
    ) -> ServiceResult<EventRange> {
        if self
            .store
            .get_target(account, &spec.target_id)
            .await?
            .is_none()
        {
            return Err(ServiceError::field("targetId", "is not a known target"));
        }
        let patterns = match &spec.types {
            Some(p) => p.clone(),
            None => self.subscribed(account, &spec.target_id).await?,
        };
        Ok(EventRange {
            from: spec.from,
            to: spec.to,
            patterns,
        })
    }

    /// The patterns of the target's enabled subscriptions.
    async fn subscribed(
        &self,
        account: &AccountId,
        target: &TargetId,
    ) -> ServiceResult<Vec<Pattern>> {
        let mut patterns = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .store
                .list_subscriptions(account, Some(target), after.as_ref(), 1000)
                .await?;
            patterns.extend(
                page.iter()
                    .filter(|s| s.enabled)
                    .flat_map(|s| s.types.iter().cloned()),
            );
            match page.last() {
                Some(last) if page.len() == 1000 => after = Some(SubscriptionCursor::after(last)),
                _ => return Ok(patterns),
            }
        }
    }
}
