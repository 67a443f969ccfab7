//! Scheduling (one, a batch, the portal's test send), cancel, reschedule
//! and redrive.

use chrono::{DateTime, Utc};

use super::{
    access::{Actor, Permission},
    idempotency::{insert_once, remember},
    Conflict, IdempotencyKey, Service, ServiceError, ServiceResult,
};
use crate::{
    domain::{
        ids::{AccountId, MessageId, TargetId},
        message::{Message, OrderingKey},
        payload::Payload,
        target::FieldError,
        time,
    },
    metrics as m,
    store::{
        BatchItem, Bulk, BulkAction, InsertOutcome, MessageFilter, RangeOn, ResponseJson,
        StoreResult, Transition,
    },
    wire::MessageOut,
};

/// A message to schedule, as parsed by a door.
#[derive(Debug, Clone)]
pub struct ScheduleRequest {
    pub target_id: TargetId,
    pub delivery_time: DateTime<Utc>,
    pub payload: Payload,
    pub idempotency_key: Option<IdempotencyKey>,
    /// docs/api.md#ordering-keys: one at a time, in order, with the other messages of the
    /// target that carry the same key.
    pub ordering_key: Option<OrderingKey>,
}

/// A schedule request's answer: the message (its 201 body is
/// `MessageOut` of it), or (for a key seen with the same request) the
/// answer first given.
#[derive(Debug)]
pub enum Scheduled {
    Created { message: Box<Message> },
    Replayed { status: u16, response: ResponseJson },
}

impl Service {
    fn new_item(&self, account: &AccountId, req: ScheduleRequest, now: DateTime<Utc>) -> BatchItem {
        let mut message =
            Message::scheduled(account, req.target_id, req.delivery_time, req.payload, now);
        message.ordering_key = req.ordering_key;
        // The answer is kept with the key, to be given again; without a
        // key it is written only once, into the response.
        let idempotency = req
            .idempotency_key
            .map(|key| remember(key, &message, MessageOut::text(&message)));
        BatchItem {
            message,
            idempotency,
        }
    }

    /// Schedules one message (through the group commit, when there is one).
    pub async fn schedule(&self, actor: &Actor, req: ScheduleRequest) -> ServiceResult<Scheduled> {
        let account = actor.allow(Permission::ChangeMessages)?;
        self.schedule_in(account, req).await
    }

    async fn schedule_in(
        &self,
        account: &AccountId,
        req: ScheduleRequest,
    ) -> ServiceResult<Scheduled> {
        self.room_for_scheduled(account, 1).await?;
        let item = self.new_item(account, req, self.now());
        let outcome = match &self.commits {
            Some(commits) => commits.inserts.submit(item).await?,
            None => insert_once(self.store.as_ref(), vec![item])
                .await?
                .pop()
                .expect("one answer"),
        };
        let answer = answer(outcome);
        if let Ok(Scheduled::Created { message, .. }) = &answer {
            metrics::counter!(m::SCHEDULED).increment(1);
            self.wake.due(message.delivery_time);
        }
        answer
    }

    /// Schedules many messages in one transaction; each answered on its own,
    /// in order. Items that failed parsing are answered with their errors.
    pub async fn schedule_batch(
        &self,
        actor: &Actor,
        requests: Vec<Result<ScheduleRequest, Vec<FieldError>>>,
    ) -> ServiceResult<Vec<ServiceResult<Scheduled>>> {
        let account = actor.allow(Permission::ChangeMessages)?;
        let now = self.now();
        let mut answers: Vec<Option<ServiceResult<Scheduled>>> = Vec::new();
        let mut items = Vec::new();
        let mut places = Vec::new();
        for (i, req) in requests.into_iter().enumerate() {
            match req {
                Ok(req) => {
                    let item = self.new_item(account, req, now);
                    answers.push(None);
                    places.push(i);
                    items.push(item);
                }
                Err(errors) => answers.push(Some(Err(ServiceError::Invalid(errors)))),
            }
        }
        // Refused whole when the batch would pass the account's limit.
        self.room_for_scheduled(account, items.len() as u64).await?;
        let outcomes = insert_once(self.store.as_ref(), items).await?;
        let mut created = 0;
        let mut earliest: Option<DateTime<Utc>> = None;
        for (i, outcome) in places.into_iter().zip(outcomes) {
            let a = answer(outcome);
            if let Ok(Scheduled::Created { message, .. }) = &a {
                created += 1;
                earliest =
                    Some(earliest.map_or(message.delivery_time, |e| e.min(message.delivery_time)));
            }
            answers[i] = Some(a);
        }
        if let Some(at) = earliest {
            metrics::counter!(m::SCHEDULED).increment(created);
            self.wake.due(at);
        }
        Ok(answers.into_iter().map(|a| a.expect("answered")).collect())
    }

    /// A small message due now, to see a target work. It names no person:
    /// the receiver is another party.
    /// A message due now for `target`: `payload`, or a small one saying it
    /// is a test.
    pub async fn send_test(
        &self,
        actor: &Actor,
        target: &TargetId,
        payload: Option<String>,
    ) -> ServiceResult<Message> {
        let account = actor.allow(Permission::OperateTargets)?;
        self.room_for_scheduled(account, 1).await?;
        let now = self.now();
        let payload = match payload {
            Some(p) => Payload::parse(p).map_err(|e| ServiceError::field("payload", e.to_string()))?,
            None => Payload::parse(
                serde_json::json!({"test": true, "sentFrom": "the Dispatch portal", "at": time::format(&now)})
                    .to_string(),
            )
            .expect("a small payload"),
        };
        let req = ScheduleRequest {
            target_id: target.clone(),
            delivery_time: now,
            payload,
            idempotency_key: None,
            ordering_key: None,
        };
        match self.schedule_in(account, req).await {
            Ok(Scheduled::Created { message, .. }) => Ok(*message),
            Ok(Scheduled::Replayed { .. }) => unreachable!("no key, no replay"),
            Err(ServiceError::Invalid(_)) => Err(ServiceError::NotFound),
            Err(e) => Err(e),
        }
    }

    pub async fn cancel(&self, actor: &Actor, id: &MessageId) -> ServiceResult<Message> {
        let account = actor.allow(Permission::ChangeMessages)?;
        let t = self.cancel_one(account, id, self.now()).await?;
        let m = transition(t, "cancelled")?;
        if m.ordering_key.is_some() {
            // The next message of its key may be due: it goes now.
            self.wake.now();
        }
        Ok(m)
    }

    /// Delivery at `at`; the retry ladder starts over.
    pub async fn reschedule(
        &self,
        actor: &Actor,
        id: &MessageId,
        at: DateTime<Utc>,
    ) -> ServiceResult<Message> {
        let account = actor.allow(Permission::ChangeMessages)?;
        // A message this instance claimed ahead of its time is taken back
        // first: the reschedule wins over an attempt not yet started.
        let held = self.held.withdraw(id);
        let t = self
            .store
            .reschedule_held(account, id, at, self.now(), held)
            .await;
        self.settle_withdrawn(id, held, &t).await;
        let m = transition(t?, "rescheduled")?;
        if m.ordering_key.is_some() {
            // Another message of its key may now be first, and due.
            self.wake.now();
        }
        self.wake.due(at);
        Ok(m)
    }

    /// Cancels each message it can; how many it cancelled.
    pub async fn cancel_many(&self, actor: &Actor, ids: &[MessageId]) -> ServiceResult<u64> {
        let account = actor.allow(Permission::ChangeMessages)?;
        let now = self.now();
        let mut n = 0;
        for id in ids {
            if matches!(
                self.cancel_one(account, id, now).await?,
                Transition::Done(_)
            ) {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Cancels one message; one this instance claimed ahead of its time is
    /// taken back first, so the cancel wins over an attempt not yet started.
    async fn cancel_one(
        &self,
        account: &AccountId,
        id: &MessageId,
        now: DateTime<Utc>,
    ) -> StoreResult<Transition> {
        let held = self.held.withdraw(id);
        let t = self.store.cancel_held(account, id, now, held).await;
        self.settle_withdrawn(id, held, &t).await;
        t
    }

    /// A message taken back from the sweeper that the action did not
    /// change (another account's id, a failed statement) goes back to the
    /// store, due as before; should that fail too, its lease ends on its own.
    async fn settle_withdrawn(
        &self,
        id: &MessageId,
        held: Option<uuid::Uuid>,
        t: &StoreResult<Transition>,
    ) {
        let Some(token) = held else { return };
        if matches!(t, Ok(Transition::Done(_))) {
            return;
        }
        if let Err(e) = self.give_back(&[(*id, token)]).await {
            tracing::warn!(error = %e, message_id = %id, "giving back a held message failed; its lease ends on its own");
        }
    }

    /// Gives messages this instance took back from the sweeper's held ones
    /// to the store, due as before (for any instance), and wakes the
    /// sweeper for them.
    pub(super) async fn give_back(&self, leases: &[(MessageId, uuid::Uuid)]) -> StoreResult<()> {
        if leases.is_empty() {
            return Ok(());
        }
        self.store.release(leases).await?;
        self.wake.now();
        Ok(())
    }

    /// Reschedules, at `at`, the dead letters that match (and are among
    /// `ids`, when given); how many.
    pub async fn redrive(
        &self,
        actor: &Actor,
        filter: &MessageFilter,
        ids: Option<&[MessageId]>,
        at: DateTime<Utc>,
    ) -> ServiceResult<u64> {
        self.bulk(
            actor,
            &Bulk {
                action: BulkAction::Redrive { at },
                target_id: filter.target_id.clone(),
                ids: ids.map(<[MessageId]>::to_vec),
                range_on: RangeOn::DeliveryTime,
                from: filter.delivery_from,
                to: filter.delivery_to,
            },
        )
        .await
    }
}

fn answer(outcome: InsertOutcome) -> ServiceResult<Scheduled> {
    match outcome {
        InsertOutcome::Created(message) => Ok(Scheduled::Created { message }),
        InsertOutcome::Replayed { status, response } => {
            Ok(Scheduled::Replayed { status, response })
        }
        InsertOutcome::KeyConflict => Err(ServiceError::Conflict(Conflict::KeyReused)),
        InsertOutcome::UnknownTarget => {
            Err(ServiceError::field("targetId", "is not a known target"))
        }
    }
}

fn transition(t: Transition, action: &'static str) -> ServiceResult<Message> {
    match t {
        Transition::Done(m) => Ok(*m),
        Transition::NotFound => Err(ServiceError::NotFound),
        Transition::WrongState(state) => Err(ServiceError::Conflict(Conflict::WrongState {
            state,
            action,
        })),
        Transition::InFlight => Err(ServiceError::Conflict(Conflict::InFlight { action })),
    }
}
