//! Secrets at rest (API.md §2), on both stores. Unlike the checks above,
//! these open one database several times with different keys, and read the
//! raw columns to see what the database really holds.

use dispatch::{
    auth::sealing::{Sealer, SealingKey},
    domain::target::{AwsCredentials, OAuthClientCredentials},
    store::{reseal_all, ResealPage, StoreError},
};
use sqlx::{Connection, PgConnection, SqliteConnection};

use super::*;

/// `sealing_checks!(check, …)`: each check on PostgreSQL and on SQLite.
macro_rules! sealing_checks {
    ($($check:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::Db::postgres().await).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::Db::sqlite()).await;
                }
            )*
        }
    };
}

sealing_checks!(
    sealed_secrets_are_not_in_the_database_and_every_read_gets_them_back,
    without_a_key_secrets_are_stored_as_they_are,
    a_previous_key_still_reads_what_it_sealed_and_writes_use_the_current_key,
    rotation_seals_plain_and_previous_key_rows_under_the_current_key,
    a_row_sealed_under_a_key_not_configured_fails_cleanly_and_its_messages_wait,
    sealed_secrets_moved_onto_another_target_do_not_read,
    rotation_without_a_key_is_refused,
);

/// One database, opened with whichever keys a check needs, and read raw.
enum Db {
    Postgres(common::TestDb),
    Sqlite(tempfile::TempDir),
}

/// A target row's stored columns.
struct RawTarget {
    config: String,
    key_id: Option<String>,
    sealed: Option<Vec<u8>>,
}

impl RawTarget {
    fn holds(&self, secret: &str) -> bool {
        let secret = secret.as_bytes();
        let bytes = [
            self.config.as_bytes(),
            self.sealed.as_deref().unwrap_or(&[]),
        ];
        bytes
            .iter()
            .any(|b| b.windows(secret.len()).any(|w| w == secret))
    }
}

impl Db {
    async fn postgres() -> Self {
        let db = common::TestDb::postgres().await;
        let store = PgStore::connect(&db.url, 2, Duration::from_secs(5))
            .await
            .expect("connect to the test database");
        store.migrate().await.expect("migrate the test database");
        Db::Postgres(db)
    }

    fn sqlite() -> Self {
        Db::Sqlite(tempfile::tempdir().expect("a temporary directory"))
    }

    fn sqlite_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("dispatch.db")
    }

    /// The store on this database with `sealer`. The embedded store admits
    /// one at a time: drop the last one first.
    async fn open(&self, sealer: Option<Sealer>) -> Arc<dyn Store> {
        match self {
            Db::Postgres(db) => {
                let store = PgStore::connect(&db.url, 3, Duration::from_secs(5))
                    .await
                    .unwrap();
                Arc::new(match sealer {
                    Some(s) => store.with_sealer(s),
                    None => store,
                })
            }
            Db::Sqlite(dir) => {
                let store = dispatch::store::sqlite::SqliteStore::open(&Self::sqlite_path(dir))
                    .await
                    .expect("open the SQLite store (is another one still open?)");
                Arc::new(match sealer {
                    Some(s) => store.with_sealer(s),
                    None => store,
                })
            }
        }
    }

    async fn raw_target(&self, id: &TargetId) -> RawTarget {
        let row: (String, Option<String>, Option<Vec<u8>>) = match self {
            Db::Postgres(db) => {
                let mut c = PgConnection::connect(&db.url).await.unwrap();
                sqlx::query_as("SELECT config::text, secrets_key_id, sealed_secrets FROM targets WHERE id = $1")
                    .bind(id.as_str())
                    .fetch_one(&mut c)
                    .await
                    .unwrap()
            }
            Db::Sqlite(dir) => {
                let mut c = self.sqlite_connection(dir).await;
                sqlx::query_as(
                    "SELECT config, secrets_key_id, sealed_secrets FROM targets WHERE id = ?",
                )
                .bind(id.as_str())
                .fetch_one(&mut c)
                .await
                .unwrap()
            }
        };
        RawTarget {
            config: row.0,
            key_id: row.1,
            sealed: row.2,
        }
    }

    /// (kid, secret column, key_id column) of every signing key.
    async fn raw_signing_keys(&self) -> Vec<(String, Vec<u8>, Option<String>)> {
        let sql = "SELECT kid, secret, key_id FROM signing_keys ORDER BY kid";
        match self {
            Db::Postgres(db) => {
                let mut c = PgConnection::connect(&db.url).await.unwrap();
                sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
            }
            Db::Sqlite(dir) => {
                let mut c = self.sqlite_connection(dir).await;
                sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
            }
        }
    }

    /// Puts one target's sealed secrets onto another, as someone with write
    /// access to the database but not the key might.
    async fn copy_sealed_secrets(&self, from: &TargetId, to: &TargetId) {
        let raw = self.raw_target(from).await;
        match self {
            Db::Postgres(db) => {
                let mut c = PgConnection::connect(&db.url).await.unwrap();
                sqlx::query(
                    "UPDATE targets SET secrets_key_id = $2, sealed_secrets = $3 WHERE id = $1",
                )
                .bind(to.as_str())
                .bind(raw.key_id)
                .bind(raw.sealed)
                .execute(&mut c)
                .await
                .unwrap();
            }
            Db::Sqlite(dir) => {
                let mut c = self.sqlite_connection(dir).await;
                sqlx::query(
                    "UPDATE targets SET secrets_key_id = ?2, sealed_secrets = ?3 WHERE id = ?1",
                )
                .bind(to.as_str())
                .bind(raw.key_id)
                .bind(raw.sealed)
                .execute(&mut c)
                .await
                .unwrap();
            }
        }
    }

    async fn sqlite_connection(&self, dir: &tempfile::TempDir) -> SqliteConnection {
        let url = format!("sqlite://{}", Self::sqlite_path(dir).display());
        SqliteConnection::connect(&url).await.unwrap()
    }
}

fn key(n: u8) -> SealingKey {
    SealingKey::new(&[n; 32])
}

/// A sealer whose current key is `key(current)`, with `key(p)` for each previous `p`.
fn sealer(current: u8, previous: &[u8]) -> Option<Sealer> {
    Some(Sealer::new(
        key(current),
        previous.iter().map(|p| key(*p)).collect(),
    ))
}

const SECRETS: [&str; 5] = [
    "hdr-secret-1111",
    "hdr-secret-2222",
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "oauth-client-secret-3333",
    "aws-secret-access-key-4444",
];

/// A webhook target holding every kind of webhook secret.
fn webhook_with_secrets(account: &str, name: &str) -> Target {
    let mut t = target_value(account, name, time::now());
    t.config = TargetConfig::Webhook(WebhookConfig {
        url: "https://example.com/hook".into(),
        headers: BTreeMap::from([
            ("X-Api-Key".to_string(), SECRETS[0].to_string()),
            ("X-Other".to_string(), SECRETS[1].to_string()),
        ]),
        timeout_ms: None,
        signing_secret: SECRETS[2].into(),
        auth: Some(OAuthClientCredentials {
            kind: "oauth2ClientCredentials".into(),
            token_url: "https://id.example.com/token".into(),
            client_id: "client-id".into(),
            client_secret: SECRETS[3].into(),
            scopes: vec!["a".into()],
        }),
    });
    t
}

fn sqs_with_secret(account: &str) -> Target {
    let mut t = target_value(account, "queue", time::now());
    t.config = TargetConfig::Sqs(SqsConfig {
        queue_url: "https://sqs.eu-north-1.amazonaws.com/123456789012/q".into(),
        region: "eu-north-1".into(),
        endpoint_url: None,
        credentials: Some(AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: SECRETS[4].into(),
        }),
        message_group_id: None,
    });
    t
}

async fn assert_sealed_under(db: &Db, t: &Target, key_id: &str) {
    let raw = db.raw_target(&t.id).await;
    assert_eq!(raw.key_id.as_deref(), Some(key_id), "sealed under {key_id}");
    for secret in SECRETS {
        assert!(
            !raw.holds(secret),
            "{secret} is stored readable: {}",
            raw.config
        );
    }
}

async fn assert_reads_back(store: &dyn Store, t: &Target) {
    assert_target_eq(
        &store.get_target(&t.account, &t.id).await.unwrap().unwrap(),
        t,
    );
}

/// Every signing key's secret column is sealed under `key_id`, and what the
/// store answers is not what the column holds.
async fn assert_keys_sealed_under(db: &Db, store: &dyn Store, key_id: &str) {
    let keys = store.signing_keys().await.unwrap();
    let raw = db.raw_signing_keys().await;
    assert_eq!(raw.len(), keys.len());
    for (kid, stored, stored_key_id) in raw {
        assert_eq!(stored_key_id.as_deref(), Some(key_id), "key {kid}");
        let key = keys.iter().find(|k| k.kid == kid).unwrap();
        assert!(
            !stored
                .windows(key.secret.len())
                .any(|w| w == key.secret.as_slice()),
            "key {kid} is stored readable"
        );
    }
}

/// The error's text, sources included, as a log or the CLI would show it.
fn shown(e: &StoreError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

// ---------------------------------------------------------------------------

async fn sealed_secrets_are_not_in_the_database_and_every_read_gets_them_back(db: Db) {
    let store = db.open(sealer(1, &[])).await;
    let current = key(1).id().to_string();
    let hook = webhook_with_secrets(ACME, "hook");
    let queue = sqs_with_secret(ACME);
    insert_target(&*store, &hook).await;
    insert_target(&*store, &queue).await;
    for t in [&hook, &queue] {
        assert_sealed_under(&db, t, &current).await;
        assert_reads_back(&*store, t).await;
    }
    // The rest of the configuration stays readable in the database.
    assert!(db
        .raw_target(&hook.id)
        .await
        .config
        .contains("https://example.com/hook"));

    let listed = store.list_targets(ACME, None, 10).await.unwrap();
    assert_eq!(listed.len(), 2);
    for t in &listed {
        let expected = if t.id == hook.id { &hook } else { &queue };
        assert_target_eq(t, expected);
    }

    // An update seals the new secrets; enabling and disabling read them back.
    let mut changed = hook.clone();
    if let TargetConfig::Webhook(w) = &mut changed.config {
        w.headers.insert("X-Api-Key".into(), SECRETS[1].into());
    }
    changed.updated_at = hook.updated_at + secs(1);
    assert_target_eq(
        &store.update_target(&changed).await.unwrap().unwrap(),
        &changed,
    );
    assert_sealed_under(&db, &changed, &current).await;
    let off = store
        .set_target_enabled(ACME, &hook.id, false, time::now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(off.config, changed.config);
    store
        .set_target_enabled(ACME, &hook.id, true, time::now())
        .await
        .unwrap();

    // The claim hands the sweeper the secrets, for every message of a target.
    let now = time::now();
    let m1 = schedule(&*store, &changed, now - ms(20)).await;
    let m2 = schedule(&*store, &changed, now - ms(10)).await;
    let m3 = schedule(&*store, &queue, now - ms(5)).await;
    let claimed = store.claim_due(now, 10, LEASE).await.unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![m1.id, m2.id, m3.id]
    );
    assert_eq!(claimed[0].target, changed.config);
    assert_eq!(claimed[1].target, changed.config);
    assert_eq!(claimed[2].target, queue.config);

    assert_keys_sealed_under(&db, &*store, &current).await;
}

async fn without_a_key_secrets_are_stored_as_they_are(db: Db) {
    let store = db.open(None).await;
    let hook = webhook_with_secrets(ACME, "hook");
    insert_target(&*store, &hook).await;
    let raw = db.raw_target(&hook.id).await;
    assert_eq!((raw.key_id, raw.sealed), (None, None));
    assert!(raw.config.contains(SECRETS[0]) && raw.config.contains(SECRETS[3]));
    assert_reads_back(&*store, &hook).await;
    let keys = store.signing_keys().await.unwrap();
    let raw = db.raw_signing_keys().await;
    assert_eq!(raw.len(), 1);
    assert_eq!((&raw[0].1, &raw[0].2), (&keys[0].secret, &None));
}

async fn a_previous_key_still_reads_what_it_sealed_and_writes_use_the_current_key(db: Db) {
    let store = db.open(sealer(1, &[])).await;
    let hook = webhook_with_secrets(ACME, "hook");
    insert_target(&*store, &hook).await;
    let keys = store.signing_keys().await.unwrap();
    drop(store);

    let store = db.open(sealer(2, &[1])).await;
    assert_reads_back(&*store, &hook).await;
    let again = store.signing_keys().await.unwrap();
    assert_eq!(again[0].kid, keys[0].kid);
    assert_eq!(again[0].secret, keys[0].secret);
    assert_sealed_under(&db, &hook, key(1).id()).await;

    let mut changed = hook.clone();
    changed.name = "renamed".into();
    store.update_target(&changed).await.unwrap().unwrap();
    assert_sealed_under(&db, &changed, key(2).id()).await;
    let fresh = sqs_with_secret(ACME);
    insert_target(&*store, &fresh).await;
    assert_sealed_under(&db, &fresh, key(2).id()).await;
    assert_reads_back(&*store, &changed).await;
}

async fn rotation_seals_plain_and_previous_key_rows_under_the_current_key(db: Db) {
    // Written before any key: plain. One header value looks like sealed data.
    let store = db.open(None).await;
    let mut plain = webhook_with_secrets(ACME, "plain");
    if let TargetConfig::Webhook(w) = &mut plain.config {
        w.headers.insert(
            "X-Looks-Sealed".into(),
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into(),
        );
    }
    insert_target(&*store, &plain).await;
    let keys = store.signing_keys().await.unwrap();
    drop(store);
    // Written under the key before this one.
    let store = db.open(sealer(1, &[])).await;
    assert_reads_back(&*store, &plain).await;
    let old = sqs_with_secret(GLOBEX);
    insert_target(&*store, &old).await;
    drop(store);
    // Written under the current key: rotation leaves it alone.
    let store = db.open(sealer(2, &[1])).await;
    let current = webhook_with_secrets(ACME, "current");
    insert_target(&*store, &current).await;
    let before = db.raw_target(&current.id).await;

    let done = reseal_all(&*store, 1).await.unwrap();
    assert_eq!(
        (done.targets, done.signing_keys, done.unsettled),
        (2, 1, 0),
        "two targets and the signing key, a row a page"
    );
    assert_eq!(db.raw_target(&current.id).await.sealed, before.sealed);
    for t in [&plain, &old, &current] {
        assert_sealed_under(&db, t, key(2).id()).await;
        assert_reads_back(&*store, t).await;
    }
    assert!(!db.raw_target(&plain.id).await.holds("AAAAAAAAAAAAAAAAAAAA"));
    assert_keys_sealed_under(&db, &*store, key(2).id()).await;
    // Nothing is left to do.
    assert_eq!(
        store.reseal_targets(None, 100).await.unwrap(),
        ResealPage::default()
    );
    assert_eq!(reseal_all(&*store, 100).await.unwrap().targets, 0);
    drop(store);

    // The previous key can go.
    let store = db.open(sealer(2, &[])).await;
    for t in [&plain, &old, &current] {
        assert_reads_back(&*store, t).await;
    }
    let again = store.signing_keys().await.unwrap();
    assert_eq!(
        (&again[0].kid, &again[0].secret),
        (&keys[0].kid, &keys[0].secret)
    );
}

async fn a_row_sealed_under_a_key_not_configured_fails_cleanly_and_its_messages_wait(db: Db) {
    let store = db.open(sealer(1, &[])).await;
    let hook = webhook_with_secrets(ACME, "hook");
    insert_target(&*store, &hook).await;
    store.signing_keys().await.unwrap();
    let now = time::now();
    let m = schedule(&*store, &hook, now - ms(10)).await;
    drop(store);

    for wrong in [sealer(2, &[3]), None] {
        let store = db.open(wrong.clone()).await;
        let err = store.get_target(ACME, &hook.id).await.unwrap_err();
        assert!(err.is_unknown_key(), "{err:?}");
        let text = shown(&err);
        assert!(text.contains(hook.id.as_str()), "names the row: {text}");
        assert!(text.contains(key(1).id()), "names the key id: {text}");
        for secret in SECRETS {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(store.list_targets(ACME, None, 10).await.is_err());
        assert!(store.signing_keys().await.unwrap_err().is_unknown_key());
        // Its message is neither delivered nor dead-lettered: it waits for
        // an instance with the key.
        assert!(store.claim_due(now, 10, LEASE).await.unwrap().is_empty());
        assert_eq!(get(&*store, &m).await.state, State::Scheduled);
        if wrong.is_some() {
            let err = reseal_all(&*store, 10).await.unwrap_err();
            let text = shown(&err);
            assert!(
                text.contains(hook.id.as_str()),
                "rotate names the row: {text}"
            );
            for secret in SECRETS {
                assert!(!text.contains(secret), "{text}");
            }
            assert_sealed_under(&db, &hook, key(1).id()).await;
        }
        drop(store);
    }

    // With the key, once the lease taken above has ended, it is delivered.
    let store = db.open(sealer(1, &[])).await;
    let later = now + TimeDelta::from_std(LEASE).unwrap() * 2 + secs(1);
    let claimed = store.claim_due(later, 10, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, m.id);
    assert_eq!(claimed[0].target, hook.config);
}

async fn sealed_secrets_moved_onto_another_target_do_not_read(db: Db) {
    let store = db.open(sealer(1, &[])).await;
    let victim = webhook_with_secrets(ACME, "victim");
    let mut thief = webhook_with_secrets(GLOBEX, "thief");
    if let TargetConfig::Webhook(w) = &mut thief.config {
        w.url = "https://attacker.example/hook".into();
    }
    insert_target(&*store, &victim).await;
    insert_target(&*store, &thief).await;
    db.copy_sealed_secrets(&victim.id, &thief.id).await;
    let err = store.get_target(GLOBEX, &thief.id).await.unwrap_err();
    assert!(
        !err.is_unknown_key(),
        "the key is known, the value is not this row's: {err:?}"
    );
    assert!(shown(&err).contains(thief.id.as_str()), "{}", shown(&err));
    assert_reads_back(&*store, &victim).await;
}

async fn rotation_without_a_key_is_refused(db: Db) {
    let store = db.open(None).await;
    insert_target(&*store, &webhook_with_secrets(ACME, "hook")).await;
    assert!(matches!(
        store.reseal_targets(None, 10).await,
        Err(StoreError::NoEncryptionKey)
    ));
    assert!(matches!(
        store.reseal_signing_keys(None, 10).await,
        Err(StoreError::NoEncryptionKey)
    ));
}
