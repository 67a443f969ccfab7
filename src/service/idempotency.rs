//! Idempotency keys: one rule for the `Idempotency-Key` header and a batch
//! item's `idempotencyKey`, and one rule, above the store, for a key that
//! comes twice in one transaction (a batch, or a group commit).

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::{
    domain::{ids::AccountId, message::Message, time},
    retention::IDEMPOTENCY_TTL,
    store::{BatchItem, IdempotencyInput, InsertOutcome, StoreResult},
};

pub const MAX_KEY_CHARS: usize = 255;

/// 1 to 255 characters, none of them a control character. Keys are
/// remembered 24 hours per account.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const RULE: &'static str = "must be 1 to 255 characters, none of them a control character";

    pub fn parse(s: &str) -> Result<Self, &'static str> {
        let n = s.chars().count();
        if n == 0 || n > MAX_KEY_CHARS || s.chars().any(char::is_control) {
            return Err(Self::RULE);
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a key remembers: which request it named (target, instant and
/// payload) and the answer to give that request again.
pub(super) fn remember(
    key: IdempotencyKey,
    message: &Message,
    response: crate::store::ResponseJson,
) -> IdempotencyInput {
    let mut hash = Sha256::new();
    for part in [
        message.target_id.as_str(),
        &time::format(&message.delivery_time),
        message.payload.as_str(),
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    IdempotencyInput {
        key: key.0,
        request_hash: hash.finalize().to_vec(),
        status: 201,
        response,
        ttl: IDEMPOTENCY_TTL,
    }
}

/// Inserts items in one transaction, where a key that comes again (same
/// account) names the request it came with first: the store sees each key
/// once, and a later item with that key gets the first item's answer when it
/// is the same request (a replay of it, if it was created), else 409.
pub async fn insert_once(
    store: &dyn crate::store::Store,
    items: Vec<BatchItem>,
) -> StoreResult<Vec<InsertOutcome>> {
    enum Step {
        /// Sent to the store, at this place.
        Sent(usize),
        /// Repeats the key of the item at this place of the batch.
        Repeats(usize, Box<BatchItem>),
    }
    let mut first: HashMap<(AccountId, String), usize> = HashMap::new();
    let mut steps = Vec::with_capacity(items.len());
    let mut unique: Vec<BatchItem> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let key = item
            .idempotency
            .as_ref()
            .map(|k| (item.message.account.clone(), k.key.clone()));
        match key.as_ref().and_then(|k| first.get(k)) {
            Some(&j) => steps.push(Step::Repeats(j, Box::new(item))),
            None => {
                if let Some(k) = key {
                    first.insert(k, i);
                }
                steps.push(Step::Sent(unique.len()));
                unique.push(item);
            }
        }
    }
    let mut answered: Vec<Option<InsertOutcome>> = store
        .insert_batch(&unique)
        .await?
        .into_iter()
        .map(Some)
        .collect();
    let mut out: Vec<InsertOutcome> = Vec::with_capacity(steps.len());
    let mut sent_at: Vec<Option<usize>> = Vec::with_capacity(steps.len());
    for step in steps {
        match step {
            Step::Sent(u) => {
                sent_at.push(Some(u));
                out.push(answered[u].take().expect("the store answers every item"));
            }
            Step::Repeats(j, again) => {
                sent_at.push(None);
                let first = &unique[sent_at[j].expect("a first item is sent")];
                let answer = repeat(first, &again, &out[j]);
                out.push(answer);
            }
        }
    }
    Ok(out)
}

/// The answer to an item whose key an earlier item of the same transaction
/// carried, given the answer that item got.
fn repeat(first: &BatchItem, again: &BatchItem, answer: &InsertOutcome) -> InsertOutcome {
    let (Some(a), Some(b)) = (&first.idempotency, &again.idempotency) else {
        unreachable!("repeats carry keys");
    };
    if a.request_hash != b.request_hash {
        return InsertOutcome::KeyConflict;
    }
    match answer {
        InsertOutcome::Created(_) => InsertOutcome::Replayed {
            status: a.status,
            response: a.response.clone(),
        },
        InsertOutcome::Replayed { status, response } => InsertOutcome::Replayed {
            status: *status,
            response: response.clone(),
        },
        InsertOutcome::KeyConflict => InsertOutcome::KeyConflict,
        InsertOutcome::UnknownTarget => InsertOutcome::UnknownTarget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_to_255_characters_without_controls() {
        assert!(IdempotencyKey::parse("order-42").is_ok());
        assert!(IdempotencyKey::parse("ordre-é-42").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse(&"é".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(256)).is_err());
        assert!(IdempotencyKey::parse("a\nb").is_err());
        assert!(IdempotencyKey::parse("a\u{7f}b").is_err());
    }
}
