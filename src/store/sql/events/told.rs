//! Dispatch's own events about messages (docs/api.md#dispatchs-own-events),
//! published in the transaction that records what they tell.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{publish::publish_in, subscriptions::matching_targets};
use crate::{
    domain::{
        ids::AccountId,
        told::{About, Happening},
    },
    store::{
        sql::{own::Own, Tx},
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
    let mut reach: HashMap<(&AccountId, &'static str), bool> = HashMap::new();
    let mut items = Vec::new();
    for (about, happening) in told {
        if about.is_told() {
            continue;
        }
        let key = (&about.account, happening.ty());
        let reaches = match reach.get(&key) {
            Some(r) => *r,
            None => {
                let r = !matching_targets(tx, &about.account, happening.ty())
                    .await?
                    .is_empty();
                reach.insert(key, r);
                r
            }
        };
        if reaches {
            items.push(PublishItem {
                event: happening.event(about, now),
                key: None,
            });
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
