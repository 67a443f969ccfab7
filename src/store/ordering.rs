//! What both backends share about ordering keys (docs/api.md#ordering-keys): which message
//! of a key is its head. Of a key's Scheduled messages exactly one is not
//! `held`: the head, the only one any claim can take. After anything that
//! changes a key's Scheduled messages (a new one, a result, a cancel, a
//! reschedule, a redrive or replay), the backend reads the key's head as it
//! is and the one its order wants, and `settle` says what to flip. The SQL,
//! with PostgreSQL's locking (an advisory lock per key, taken before any
//! row), is written once for both databases in `sql::ordering`.

use std::collections::{BTreeSet, HashMap};

/// A target and an orderingKey.
pub type Key = (String, String);

/// The keys of `keys`, each once, in a stable order.
pub(crate) fn distinct_keys<'a>(keys: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<Key> {
    keys.into_iter()
        .map(|(t, k)| (t.to_string(), k.to_string()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// A key's head as it is: a Scheduled message that is not held, and
/// whether an attempt holds its lease.
#[derive(Debug, Clone)]
pub(crate) struct Current<Id> {
    pub key: Key,
    pub id: Id,
    pub leased: bool,
}

/// What to flip so that each key's head is the first message of its order
/// (`wanted`: by delivery time, then id), except where the head is in
/// flight: an attempt under way keeps its key until its result is recorded,
/// so no two messages of a key are ever attempted at once. Returns the
/// messages to release (held → head) and to hold (head → held).
pub(crate) fn settle<Id: Clone + Eq>(
    current: &[Current<Id>],
    wanted: &[(Key, Id)],
) -> (Vec<Id>, Vec<Id>) {
    let wanted_of: HashMap<&Key, &Id> = wanted.iter().map(|(k, id)| (k, id)).collect();
    let busy: BTreeSet<&Key> = current
        .iter()
        .filter(|c| c.leased)
        .map(|c| &c.key)
        .collect();
    let release = wanted
        .iter()
        .filter(|(k, id)| !busy.contains(k) && !current.iter().any(|c| &c.id == id))
        .map(|(_, id)| id.clone())
        .collect();
    let hold = current
        .iter()
        .filter(|c| !c.leased && (busy.contains(&c.key) || wanted_of.get(&c.key) != Some(&&c.id)))
        .map(|c| c.id.clone())
        .collect();
    (release, hold)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Key {
        ("DI-T-0000000001".into(), k.into())
    }

    fn cur(k: &str, id: u32, leased: bool) -> Current<u32> {
        Current {
            key: key(k),
            id,
            leased,
        }
    }

    #[test]
    fn a_key_without_a_head_gets_its_first_message() {
        assert_eq!(settle(&[], &[(key("a"), 1)]), (vec![1], vec![]));
    }

    #[test]
    fn an_earlier_message_takes_over_from_a_head_not_in_flight() {
        assert_eq!(
            settle(&[cur("a", 2, false)], &[(key("a"), 1)]),
            (vec![1], vec![2])
        );
    }

    #[test]
    fn a_head_in_flight_keeps_its_key() {
        assert_eq!(
            settle(&[cur("a", 2, true)], &[(key("a"), 1)]),
            (vec![], vec![])
        );
        // Two heads (never made so, but repaired): the one in flight stays.
        assert_eq!(
            settle(&[cur("a", 2, true), cur("a", 1, false)], &[(key("a"), 1)]),
            (vec![], vec![1])
        );
    }

    #[test]
    fn the_right_head_is_left_alone_and_keys_do_not_touch_each_other() {
        assert_eq!(
            settle(
                &[cur("a", 1, false), cur("b", 5, false)],
                &[(key("a"), 1), (key("b"), 4)]
            ),
            (vec![4], vec![5])
        );
    }

    #[test]
    fn keys_are_listed_once_in_order() {
        assert_eq!(
            distinct_keys([("t", "b"), ("t", "a"), ("t", "b")]),
            vec![
                ("t".to_string(), "a".to_string()),
                ("t".to_string(), "b".to_string())
            ]
        );
    }
}
