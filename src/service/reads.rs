//! What the doors read: the actor's own account, each read behind the
//! permission it needs (`access`), and nothing that changes anything.

use chrono::{DateTime, Utc};

use super::{
    access::{Actor, Permission},
    ServiceResult,
};
use crate::{
    domain::{
        event::Subscription,
        ids::{AccountId, EventId, MessageId, ScheduleId, SubscriptionId, TargetId},
        message::{Attempt, Message, OrderingKey},
        schedule::Schedule,
        target::Target,
    },
    store::{
        portal::{Activity, InvitationRecord, MessageEvent, Overview, Searched, UserRecord},
        Bulk, EventCursor, EventQuery, EventView, MessageFilter, ScheduleCursor, Store,
        SubscriptionCursor, TargetCursor,
    },
};

/// The account's data, read for an actor. A copy reads as the original.
#[derive(Clone, Copy)]
pub struct Reads<'a> {
    store: &'a dyn Store,
    actor: &'a Actor,
}

impl<'a> Reads<'a> {
    pub(super) fn new(store: &'a dyn Store, actor: &'a Actor) -> Self {
        Self { store, actor }
    }

    fn account(self, permission: Permission) -> ServiceResult<&'a AccountId> {
        self.actor.allow(permission)
    }

    pub async fn target(self, id: &TargetId) -> ServiceResult<Option<Target>> {
        let account = self.account(Permission::ReadTargets)?;
        Ok(self.store.get_target(account, id).await?)
    }

    pub async fn targets(
        self,
        after: Option<&TargetCursor>,
        limit: u32,
    ) -> ServiceResult<Vec<Target>> {
        let account = self.account(Permission::ReadTargets)?;
        Ok(self.store.list_targets(account, after, limit).await?)
    }

    pub async fn subscription(self, id: &SubscriptionId) -> ServiceResult<Option<Subscription>> {
        let account = self.account(Permission::ReadTargets)?;
        Ok(self.store.get_subscription(account, id).await?)
    }

    /// Newest first; of one target when `target` is given.
    pub async fn subscriptions(
        self,
        target: Option<&TargetId>,
        after: Option<&SubscriptionCursor>,
        limit: u32,
    ) -> ServiceResult<Vec<Subscription>> {
        let account = self.account(Permission::ReadTargets)?;
        Ok(self
            .store
            .list_subscriptions(account, target, after, limit)
            .await?)
    }

    pub async fn published_event(self, id: &EventId) -> ServiceResult<Option<EventView>> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.get_event(account, id).await?)
    }

    /// Newest first.
    pub async fn published_events(
        self,
        query: &EventQuery,
        after: Option<&EventCursor>,
        limit: u32,
    ) -> ServiceResult<Vec<EventView>> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self
            .store
            .list_published_events(account, query, after, limit)
            .await?)
    }

    pub async fn message(self, id: &MessageId) -> ServiceResult<Option<Message>> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.get_message(account, id).await?)
    }

    pub async fn messages(
        self,
        filter: &MessageFilter,
        before: Option<&MessageId>,
        limit: u32,
    ) -> ServiceResult<Vec<Message>> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self
            .store
            .list_messages(account, filter, before, limit)
            .await?)
    }

    /// None when the message is unknown in this account.
    pub async fn attempts(
        self,
        id: &MessageId,
        after: Option<u32>,
        limit: u32,
    ) -> ServiceResult<Option<Vec<Attempt>>> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.list_attempts(account, id, after, limit).await?)
    }

    pub async fn events(self, id: &MessageId) -> ServiceResult<Vec<MessageEvent>> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.list_events(account, id).await?)
    }

    pub async fn key_head(
        self,
        target: &TargetId,
        key: &OrderingKey,
    ) -> ServiceResult<Option<MessageId>> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.key_head(account, target, key).await?)
    }

    pub async fn count_messages(self, filter: &MessageFilter) -> ServiceResult<u64> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.count_messages(account, filter).await?)
    }

    pub async fn count_messages_upto(self, filter: &MessageFilter, cap: u64) -> ServiceResult<u64> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.count_messages_upto(account, filter, cap).await?)
    }

    pub async fn search_payloads(
        self,
        filter: &MessageFilter,
        before: Option<&MessageId>,
        text: &str,
        scan: u32,
        limit: u32,
    ) -> ServiceResult<Searched> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self
            .store
            .search_payloads(account, filter, before, text, scan, limit)
            .await?)
    }

    /// How many messages a bulk action would match now, counting up to `cap`.
    pub async fn bulk_count(self, bulk: &Bulk, cap: u64, now: DateTime<Utc>) -> ServiceResult<u64> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.bulk_count(account, bulk, cap, now).await?)
    }

    pub async fn overview(
        self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> ServiceResult<Overview> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.overview(account, since, now).await?)
    }

    pub async fn activity(self, since: DateTime<Utc>) -> ServiceResult<Activity> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.activity(account, since).await?)
    }

    pub async fn schedule(
        self,
        id: &ScheduleId,
        now: DateTime<Utc>,
    ) -> ServiceResult<Option<Schedule>> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self.store.get_schedule(account, id, now).await?)
    }

    pub async fn schedules(
        self,
        target: Option<&TargetId>,
        after: Option<&ScheduleCursor>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> ServiceResult<Vec<Schedule>> {
        let account = self.account(Permission::ReadMessages)?;
        Ok(self
            .store
            .list_schedules(account, target, after, limit, now)
            .await?)
    }

    pub async fn people(self) -> ServiceResult<Vec<UserRecord>> {
        let account = self.account(Permission::ManagePeople)?;
        Ok(self.store.list_users(account).await?)
    }

    pub async fn invitations(self, now: DateTime<Utc>) -> ServiceResult<Vec<InvitationRecord>> {
        let account = self.account(Permission::ManagePeople)?;
        Ok(self.store.list_invitations(account, now).await?)
    }
}
