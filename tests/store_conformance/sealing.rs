//! The harness of the checks that read the database raw (the secrets at
//! rest, in `secrets`; what a purge leaves, in `events`): one database,
//! opened several times with different keys, whose raw columns show what
//! the database really holds; and the targets and keys those checks use.

pub(crate) use dispatch::{
    domain::target::{AwsCredentials, OAuthClientCredentials, PreviousSecret},
    sealing::{Sealer, SealingKey},
    store::{reseal_all, ResealPage, StoreError},
};
use sqlx::{Connection, PgConnection, SqliteConnection};

use crate::support::*;

/// One database, opened with whichever keys a check needs, and read raw.
pub(crate) enum Db {
    Postgres(crate::common::TestDb),
    Sqlite(tempfile::TempDir),
}

/// A target row's stored columns.
pub(crate) struct RawTarget {
    pub(crate) config: String,
    pub(crate) key_id: Option<String>,
    pub(crate) sealed: Option<Vec<u8>>,
}

impl RawTarget {
    pub(crate) fn holds(&self, secret: &str) -> bool {
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
    pub(crate) async fn postgres() -> Self {
        let db = crate::common::TestDb::postgres().await;
        let store = PgStore::connect(&db.url, 2, Duration::from_secs(5))
            .await
            .expect("connect to the test database");
        store.migrate().await.expect("migrate the test database");
        Db::Postgres(db)
    }

    pub(crate) fn sqlite() -> Self {
        Db::Sqlite(tempfile::tempdir().expect("a temporary directory"))
    }

    pub(crate) fn sqlite_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("dispatch.db")
    }

    /// The store on this database with `sealer`. The embedded store admits
    /// one at a time: drop the last one first.
    pub(crate) async fn open(&self, sealer: Option<Sealer>) -> Arc<dyn Store> {
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

    pub(crate) async fn raw_target(&self, id: &TargetId) -> RawTarget {
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
    pub(crate) async fn raw_signing_keys(&self) -> Vec<(String, Vec<u8>, Option<String>)> {
        self.raw_rows("SELECT kid, secret, key_id FROM signing_keys ORDER BY kid")
            .await
    }

    /// What a query of one count answers, read beside the store.
    pub(crate) async fn raw_count(&self, sql: &str) -> i64 {
        let rows: Vec<(i64,)> = self.raw_rows(sql).await;
        rows[0].0
    }

    /// The rows a query reads, beside the store.
    async fn raw_rows<R>(&self, sql: &str) -> Vec<R>
    where
        R: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
            + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + Send
            + Unpin,
    {
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
    pub(crate) async fn copy_sealed_secrets(&self, from: &TargetId, to: &TargetId) {
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

    pub(crate) async fn sqlite_connection(&self, dir: &tempfile::TempDir) -> SqliteConnection {
        let url = format!("sqlite://{}", Self::sqlite_path(dir).display());
        SqliteConnection::connect(&url).await.unwrap()
    }
}

pub(crate) fn key(n: u8) -> SealingKey {
    SealingKey::new(&[n; 32])
}

/// A sealer whose current key is `key(current)`, with `key(p)` for each previous `p`.
pub(crate) fn sealer(current: u8, previous: &[u8]) -> Option<Sealer> {
    Some(Sealer::new(
        key(current),
        previous.iter().map(|p| key(*p)).collect(),
    ))
}

pub(crate) const SECRETS: [&str; 6] = [
    "hdr-secret-1111",
    "hdr-secret-2222",
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "oauth-client-secret-3333",
    "aws-secret-access-key-4444",
    // The secret a rotation replaced, signing until its overlap ends.
    "whsec_cHJldmlvdXMtc2VjcmV0LWtleQ==",
];

/// A webhook target holding every kind of webhook secret.
pub(crate) fn webhook_with_secrets(account: &AccountId, name: &str) -> Target {
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
        previous_signing_secret: Some(PreviousSecret {
            secret: SECRETS[5].into(),
            until: time::now() + chrono::TimeDelta::hours(1),
        }),
        format: Default::default(),
        content_type: None,
        limits: Default::default(),
    });
    t
}

pub(crate) fn sqs_with_secret(account: &AccountId) -> Target {
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
        format: Default::default(),
        limits: Default::default(),
    });
    t
}

pub(crate) async fn assert_sealed_under(db: &Db, t: &Target, key_id: &str) {
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

pub(crate) async fn assert_reads_back(store: &dyn Store, t: &Target) {
    assert_target_eq(
        &store.get_target(&t.account, &t.id).await.unwrap().unwrap(),
        t,
    );
}

/// Every signing key's secret column is sealed under `key_id`, and what the
/// store answers is not what the column holds.
pub(crate) async fn assert_keys_sealed_under(db: &Db, store: &dyn Store, key_id: &str) {
    let keys = store.signing_keys().await.unwrap();
    let raw = db.raw_signing_keys().await;
    assert!(!keys.is_empty(), "a signing key was made");
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
pub(crate) fn shown(e: &StoreError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A fresh PostgreSQL database for a check (`checks!(sealed: …)`).
pub(crate) async fn postgres_db() -> ((), Db) {
    ((), Db::postgres().await)
}

/// A fresh embedded store's directory for a check (`checks!(sealed: …)`).
pub(crate) async fn sqlite_db() -> ((), Db) {
    ((), Db::sqlite())
}
