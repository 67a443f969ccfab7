//! What a backend keeps beside its database, for the bodies written once
//! that need it: the sealer of secrets, and the wake-up of other instances.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Backend, Tx};
use crate::{domain::limits::Limits, sealing::Sealer, store::StoreResult};

#[async_trait]
pub(crate) trait Keeps: Backend {
    /// Seals target secrets and signing keys when an encryption key is set.
    fn sealer(&self) -> Option<&Sealer>;

    /// What one account may hold (`sql::limits` counts against it).
    fn limits(&self) -> &Limits;

    /// This instance: the first half of every lease token it takes (see
    /// `lease_token`), so that what a dead instance held can be found.
    fn instance(&self) -> Uuid;

    /// Inside `tx`: tells the sweepers of other instances that something
    /// falls due at `at`, when that is soon after `now`. Only PostgreSQL
    /// is shared by instances (its `NOTIFY`, sent at commit); SQLite's one
    /// process wakes its own sweeper, so by default nothing is sent.
    async fn notify_if_soon(
        &self,
        _tx: &mut Tx,
        _at: DateTime<Utc>,
        _now: DateTime<Utc>,
    ) -> StoreResult<()> {
        Ok(())
    }
}

/// A new instance's id: random, but of UUID version 8 where a random UUID
/// is of version 4. Its lease tokens start with its first eight bytes, the
/// version among them, so they tell themselves apart from those of earlier
/// versions of Dispatch (random, naming no instance): an instance that
/// gives back the leases of instances no longer serving leaves those alone
/// (`NAMED_TOKEN`), and a rolling upgrade resends nothing the earlier
/// instances hold.
pub(crate) fn new_instance() -> Uuid {
    uuid::Builder::from_custom_bytes(*Uuid::new_v4().as_bytes()).into_uuid()
}

/// SQL: the lease token names its instance (its text's version digit, the
/// 15th character, is 8; see `new_instance`).
pub(crate) const NAMED_TOKEN: &str = "substr(CAST(lease_token AS TEXT), 15, 1) = '8'";

/// A lease token of `instance`: its first eight bytes, then eight random
/// ones. `OWNER_CHARS` characters of the token's text name the instance.
pub(crate) fn lease_token(instance: Uuid) -> Uuid {
    let mut bytes = *Uuid::new_v4().as_bytes();
    bytes[..8].copy_from_slice(&instance.as_bytes()[..8]);
    Uuid::from_bytes(bytes)
}

/// The characters of a token's text (`xxxxxxxx-xxxx-xxxx`) that name the
/// instance that took it.
pub(crate) const OWNER_CHARS: usize = 18;

/// The owner part of `instance`'s tokens, as their text starts.
#[cfg(test)]
fn owner_prefix(instance: Uuid) -> String {
    instance.to_string()[..OWNER_CHARS].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_token_names_its_instance_and_no_other() {
        let (a, b) = (new_instance(), new_instance());
        let t1 = lease_token(a);
        let t2 = lease_token(a);
        assert_ne!(t1, t2);
        assert!(t1.to_string().starts_with(&owner_prefix(a)));
        assert!(t2.to_string().starts_with(&owner_prefix(a)));
        assert!(!lease_token(b).to_string().starts_with(&owner_prefix(a)));
    }

    #[test]
    fn a_named_token_tells_itself_apart_from_a_random_one_by_its_15th_character() {
        let named = lease_token(new_instance()).to_string();
        assert_eq!(&named[14..15], "8", "{named}");
        let random = Uuid::new_v4().to_string();
        assert_eq!(&random[14..15], "4", "{random}");
        assert!(NAMED_TOKEN.contains("15, 1) = '8'"));
    }
}
