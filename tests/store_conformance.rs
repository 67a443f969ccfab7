//! Store conformance: one suite, written once against the store's
//! capability traits (`Arc<dyn Store>`), run on every backend.
//!
//! One module per capability under `store_conformance/`. Each check is an
//! `async fn name(store: Arc<dyn Store>)` that speaks to the store through
//! the traits only (no SQL). A module registers its checks with `checks!`,
//! at its top: one `#[tokio::test]` per check and backend, named
//! `module::postgres::name` and `module::sqlite::name`. The backends are
//! listed once, in that macro. A check left out of its module's `checks!` is
//! never called, and this crate denies dead code: it does not compile. A
//! check named there but not defined does not compile either.
//!
//! Both backends run in one binary, whatever `DISPATCH_TEST_STORE` says:
//! `scripts/test` runs this suite once, in its PostgreSQL half; when it
//! runs only its embedded half, `--skip postgres::` leaves the SQLite checks.
//!
//! Each test gets a fresh store: the factory's future yields `(guard,
//! Arc<dyn Store>)`, and the guard (a database, a temporary directory) lives
//! until the test ends.
//!
//! Every time is passed explicitly (`now` arguments, `created_at`, attempt
//! times), so the checks control the clock: "the lease expired" is a `now`
//! past the lease, not a sleep.

// A check that is not registered is dead code: see above.
#![deny(dead_code)]

mod common;

use std::{sync::Arc, time::Duration};

use dispatch::store::{postgres::PgStore, sqlite::SqliteStore, Store};

/// `checks!(check, …)`: each check of the module, an `async fn(Arc<dyn
/// Store>)`, as a test on each backend. `checks!(sealed: check, …)`: each
/// check an `async fn(sealing::Db)`, in `mod sealed`.
macro_rules! checks {
    (sealed: $($check:ident),* $(,)?) => {
        mod sealed {
            use super::*;
            checks!(@on crate::sealing::postgres_db, crate::sealing::sqlite_db; $($check),*);
        }
    };
    (@on $postgres:path, $sqlite:path; $($check:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let (_guard, store) = $postgres().await;
                    super::$check(store).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let (_guard, store) = $sqlite().await;
                    super::$check(store).await;
                }
            )*
        }
    };
    ($($check:ident),* $(,)?) => {
        checks!(@on crate::postgres_store, crate::sqlite_store; $($check),*);
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

/// An embedded store in a fresh temporary directory; removed with the guard.
async fn sqlite_store() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(&dir.path().join("dispatch.db"))
        .await
        .expect("open the SQLite store");
    (dir, Arc::new(store))
}

#[path = "store_conformance/support.rs"]
mod support;

#[path = "store_conformance/sealing.rs"]
mod sealing;

// The capabilities, in the order of the store's traits.
#[path = "store_conformance/actions.rs"]
mod actions;
#[path = "store_conformance/activity.rs"]
mod activity;
#[path = "store_conformance/batch.rs"]
mod batch;
#[path = "store_conformance/batch_keys.rs"]
mod batch_keys;
#[path = "store_conformance/bulk.rs"]
mod bulk;
#[path = "store_conformance/claim_ahead.rs"]
mod claim_ahead;
#[path = "store_conformance/claims.rs"]
mod claims;
#[path = "store_conformance/clients.rs"]
mod clients;
#[path = "store_conformance/counts.rs"]
mod counts;
#[path = "store_conformance/events.rs"]
mod events;
#[path = "store_conformance/gates.rs"]
mod gates;
#[path = "store_conformance/history.rs"]
mod history;
#[path = "store_conformance/idempotency.rs"]
mod idempotency;
#[path = "store_conformance/messages.rs"]
mod messages;
#[path = "store_conformance/people.rs"]
mod people;
#[path = "store_conformance/portal.rs"]
mod portal;
#[path = "store_conformance/pull.rs"]
mod pull;
#[path = "store_conformance/recording.rs"]
mod recording;
#[path = "store_conformance/redrive.rs"]
mod redrive;
#[path = "store_conformance/retention.rs"]
mod retention;
#[path = "store_conformance/schedule_changes.rs"]
mod schedule_changes;
#[path = "store_conformance/schedules.rs"]
mod schedules;
#[path = "store_conformance/search.rs"]
mod search;
#[path = "store_conformance/secrets.rs"]
mod secrets;
#[path = "store_conformance/targets.rs"]
mod targets;
#[path = "store_conformance/users.rs"]
mod users;
