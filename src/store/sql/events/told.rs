//! Dispatch's own events about messages (docs/api.md#dispatchs-own-events),
//! published in the transaction that records what they tell.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{publish::publish_in, subscriptions::matching_targets};
use crate::{
    domain::{
        event::{Event, EventType, OWN_PREFIX},
        ids::{AccountId, EventId, MessageId, TargetId},
        told::{self, About, Happening},
    },
    store::{
        sql::{own::Own, Tx, Uid},
        EventView, PublishItem, ResponseJson, StoreResult,
    },
};

/// Publishes, inside `tx`, an event for each happening whose type some
/// enabled subscription of its account matches; a happening of a message
/// made from one of Dispatch's own events tells nothing. Returns how many
/// events were published. The caller reads only the happenings of accounts
/// that have such a subscription (`told::MESSAGE_PATTERNS`): the others pay
/// nothing here.
pub(crate) async fn tell<B: Own>(
    store: &B,
    tx: &mut Tx,
    told: &[(About, Happening)],
    now: DateTime<Utc>,
) -> StoreResult<usize> {
    let events = told
        .iter()
        .filter(|(about, _)| !about.is_told())
        .map(|(about, happening)| happening.event(about, now))
        .collect();
    publish_told(store, tx, events).await
}

/// Publishes, inside `tx`, those of Dispatch's own events that some enabled
/// subscription of their account matches; the others are not kept.
pub(crate) async fn publish_told<B: Own>(
    store: &B,
    tx: &mut Tx,
    events: Vec<Event>,
) -> StoreResult<usize> {
    let mut reach: HashMap<(AccountId, EventType), bool> = HashMap::new();
    let mut items = Vec::new();
    for event in events {
        let key = (event.account.clone(), event.ty.clone());
        let reaches = match reach.get(&key) {
            Some(r) => *r,
            None => {
                let r = !matching_targets(tx, &event.account, event.ty.as_str())
                    .await?
                    .is_empty();
                reach.insert(key, r);
                r
            }
        };
        if reaches {
            items.push(PublishItem { event, key: None });
        }
    }
    if items.is_empty() {
        return Ok(0);
    }
    // No item has an idempotency key: no answer is kept.
    let render = |_: &EventView| -> ResponseJson {
        serde_json::value::RawValue::from_string("null".into()).expect("valid JSON")
    };
    publish_in(store, tx, &items, &render).await?;
    Ok(items.len())
}

/// Whether some enabled subscription of the account `account` (an SQL
/// expression) names events about messages: one index lookup per pattern
/// text, the same on both databases.
pub(crate) fn subscribes(account: &str) -> String {
    subscribes_to(account, &told::MESSAGE_PATTERNS)
}

/// Whether some enabled subscription of the account `account` holds one of
/// these pattern texts.
pub(crate) fn subscribes_to(account: &str, patterns: &[&str]) -> String {
    let texts: Vec<String> = patterns.iter().map(|p| format!("'{p}'")).collect();
    format!(
        "EXISTS (SELECT 1 FROM subscription_patterns p JOIN subscriptions s ON s.id = p.subscription_id \
         WHERE p.account = {account} AND s.enabled = true AND p.pattern IN ({}))",
        texts.join(", ")
    )
}

/// The columns a statement that changes messages returns for what it may
/// tell (`ToldRow`): `told` is whether it tells anything at all (the
/// account subscribes, and the message was not made from a told event).
pub(crate) fn told_columns() -> String {
    format!(
        "id, account, target_id, event_id, event_type, ordering_key, attempt_count, last_error, \
         ((event_type IS NULL OR substr(event_type, 1, 9) <> '{OWN_PREFIX}') AND {}) AS told",
        subscribes("messages.account")
    )
}

/// A message a statement changed, as `told_columns` returns it.
#[derive(sqlx::FromRow)]
pub(crate) struct ToldRow {
    pub id: Uid,
    pub account: String,
    pub target_id: String,
    pub event_id: Option<Uid>,
    pub event_type: Option<String>,
    pub ordering_key: Option<String>,
    pub attempt_count: i32,
    pub last_error: Option<String>,
    pub told: bool,
}

impl ToldRow {
    /// The message, as the events about it name it; `None` when it tells
    /// nothing.
    pub fn about(&self) -> Option<About> {
        self.told.then(|| About {
            account: AccountId::from_trusted(self.account.clone()),
            message: MessageId(self.id.0),
            target: TargetId::from_trusted(self.target_id.clone()),
            event: self
                .event_id
                .map(|e| EventId(e.0))
                .zip(self.event_type.clone()),
            ordering_key: self.ordering_key.clone(),
        })
    }
}

/// Tells, inside `tx`, that these messages were acknowledged (`Delivered`)
/// or became dead letters at `now`.
pub(crate) async fn tell_rows<B: Own>(
    store: &B,
    tx: &mut Tx,
    rows: &[ToldRow],
    delivered: bool,
    now: DateTime<Utc>,
) -> StoreResult<usize> {
    let told: Vec<(About, Happening)> = rows
        .iter()
        .filter_map(|r| {
            let about = r.about()?;
            let attempt_count = r.attempt_count.max(0) as u32;
            Some((
                about,
                if delivered {
                    Happening::Delivered {
                        attempt_count,
                        at: now,
                    }
                } else {
                    Happening::DeadLettered {
                        attempt_count,
                        last_error: r.last_error.clone(),
                        at: now,
                    }
                },
            ))
        })
        .collect();
    if told.is_empty() {
        return Ok(0);
    }
    tell(store, tx, &told, now).await
}
